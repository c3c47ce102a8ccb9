// Shared by the activation group's bridges (not public).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include "csrc/common/activation.h"
#include "src/ops/common/bridge.h"
#include "src/ops/activation/checks.h"
#include "src/ops/common/family.h"
#include "xllm_kernel/catalog.h"

namespace xllm_kernel::activation {

// The output's shape: [..., d] for a gated input [..., 2d], the input's without the gate.
std::vector<int64_t> output_shape(const at::Tensor& input, bool gated = true);

// The kernel parameters from checked arguments, for the CPU and the CUDA kernels alike: input and
// out over input's leading dimensions, d the output's last dimension (from check_input, checks.h).
// stream_out stays false: the CPU bridges decide it.
inline kernels::ActivationParams kernel_params(const char* op, const at::Tensor& input, int64_t d,
                                               const at::Tensor& out) {
  kernels::ActivationParams p;
  p.dtype = bridge::kernel_dtype(input.scalar_type());
  p.d = d;
  bridge::describe_rows(op, input, {{&input, &p.input_strides}, {&out, &p.out_strides}}, p.shape);
  p.input = input.const_data_ptr();
  p.out = out.mutable_data_ptr();
  return p;
}

// The group's backend modules (src/ops/activation/activation.cpp).
const family::StandardModules& modules();

}  // namespace xllm_kernel::activation
