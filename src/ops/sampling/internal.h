// Shared by the sampling group's bridges (not public).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include "csrc/common/sampling.h"
#include "src/ops/common/bridge.h"
#include "src/ops/common/family.h"
#include "xllm_kernel/catalog.h"
#include "xllm_kernel/ops/sampling.h"

namespace xllm_kernel::sampling {

// The operation's name, from its contract, for messages.
inline const char* op_name() { return sample_operation().name().c_str(); }

// The per-row parameters, each contiguous (a strided argument copied once), in schema order.
struct RowParameters {
  at::Tensor temperature, top_k, top_p, min_p, seeds, offsets;
};

// One call's arguments as its bridge received them (the schema's tensors) and the implementation's
// device: what check_arguments checks.
//   check_arguments({.logits = logits, .temperature = temperature, .top_k = top_k, .top_p = top_p,
//                    .min_p = min_p, .seeds = seeds, .offsets = offsets, .device = kDevice});
struct Call {
  const at::Tensor& logits;
  const at::Tensor& temperature;
  const at::Tensor& top_k;
  const at::Tensor& top_p;
  const at::Tensor& min_p;
  const at::Tensor& seeds;
  const at::Tensor& offsets;
  c10::DeviceType device = c10::DeviceType::CPU;  // the implementation's
};

// Checks every argument of sample for an implementation on `call.device` (shapes, dtypes, devices,
// layouts; not values) and returns the per-row parameters contiguous. Errors name the operation,
// the argument, what was expected and what was given.
RowParameters check_arguments(const Call& call);

// The CPU implementations' check of the parameters' values (host tensors), before any compute:
// temperature >= 0 and finite, top_p in (0, 1], min_p in [0, 1). Errors name the row and the value.
void check_parameters_cpu(const RowParameters& r);

// The CPU implementations' check of the logits' values after the kernel ran: no row with a NaN
// (row_nan[r] != 0) and no row without a logit above -inf (tokens[r] == kInvalidRow, the only
// remaining reason once the parameters passed). Errors name the row.
void check_results_cpu(const at::Tensor& tokens, const at::Tensor& row_nan);

// A new int64 [batch] tensor on logits' device.
at::Tensor new_output(const at::Tensor& logits);

// The kernel parameters from checked arguments, for the CPU and the CUDA kernel alike.
inline kernels::SamplingParams kernel_params(const at::Tensor& logits, const RowParameters& r, at::Tensor& out,
                                             uint8_t* row_nan) {
  kernels::SamplingParams p;
  p.dtype = bridge::kernel_dtype(logits.scalar_type());
  p.batch = logits.size(0);
  p.vocab = logits.size(1);
  p.logits = logits.const_data_ptr();
  p.logits_row_stride = logits.size(0) <= 1 ? logits.size(1) : logits.stride(0);
  p.temperature = r.temperature.const_data_ptr<float>();
  p.top_k = r.top_k.const_data_ptr<int32_t>();
  p.top_p = r.top_p.const_data_ptr<float>();
  p.min_p = r.min_p.const_data_ptr<float>();
  p.seeds = r.seeds.const_data_ptr<int64_t>();
  p.offsets = r.offsets.const_data_ptr<int64_t>();
  p.out = out.mutable_data_ptr<int64_t>();
  p.row_nan = row_nan;
  return p;
}

// The group's backend modules (src/ops/sampling/sampling.cpp).
const family::StandardModules& modules();

}  // namespace xllm_kernel::sampling

namespace xllm_kernel::sampling {

// The uniforms u of csrc/common/sampling.h in torch operations, on any device, without a
// synchronization: u[r, j] = sampling_uniform(seeds[r], offsets[r], tokens[r, j]) for int64
// tokens [batch, n] and seeds, offsets [batch]; float32 [batch, n]. (The torch implementations'
// generator; tested against the header's.)
at::Tensor uniforms(const at::Tensor& seeds, const at::Tensor& offsets, const at::Tensor& tokens);

}  // namespace xllm_kernel::sampling
