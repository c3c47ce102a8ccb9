// Shared by the normalization group's bridges (not public).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include <optional>

#include "csrc/common/normalization.h"
#include "src/ops/common/bridge.h"
#include "src/ops/common/family.h"
#include "src/ops/normalization/checks.h"
#include "xllm_kernel/catalog.h"

namespace xllm_kernel::normalization {

// The kernel parameters from checked arguments, for the CPU and the CUDA kernels alike. `out` is
// set for rms_norm and layer_norm (written: the rows of input and out), null for fused_add_rms_norm
// (call.residual set: input and residual read, then written); call.bias may be set for layer_norm.
// stream_out stays false: the CPU bridges decide it.
inline kernels::NormParams kernel_params(const Call& call, const at::Tensor* out) {
  const char* op = call.op;
  const at::Tensor& input = call.input;
  const at::Tensor& weight = call.weight;
  const std::optional<at::Tensor>* bias = call.bias;
  const at::Tensor* residual = call.residual;
  kernels::NormParams p;
  p.dtype = bridge::kernel_dtype(input.scalar_type());
  p.weight_dtype = bridge::kernel_dtype(weight.scalar_type());
  p.hidden = input.size(-1);
  if (residual != nullptr) {
    p.row_ndim = bridge::describe_rows(op, input, {{&input, p.input_strides}, {residual, p.residual_strides}},
                                       kernels::kMaxRowDims, p.row_sizes, p.rows);
    p.input = input.mutable_data_ptr();
    p.residual = residual->mutable_data_ptr();
  } else {
    p.row_ndim = bridge::describe_rows(op, input, {{&input, p.input_strides}, {out, p.out_strides}},
                                       kernels::kMaxRowDims, p.row_sizes, p.rows);
    p.input = input.const_data_ptr();
    p.out = out->mutable_data_ptr();
  }
  p.weight = weight.const_data_ptr();
  p.bias = bias != nullptr && bias->has_value() && (*bias)->defined() ? (*bias)->const_data_ptr() : nullptr;
  p.eps = call.eps;
  return p;
}

// The group's backend modules: each declares its implementations once; the bridges register
// their functions against these declarations (XLLM_REGISTER_NAMED).
const family::StandardModules& modules();

}  // namespace xllm_kernel::normalization
