// The normalization family's argument checks (checks.cpp): its own bridges' and the entry point for
// a family that builds on it (the quantization family's rms_norm_*_quant check their input here,
// with a Call of their input, weight, residual and eps).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include <optional>

namespace xllm_kernel::normalization {

// One call's arguments as its bridge received them: what check_arguments checks and kernel_params
// reads. `bias` may be set for layer_norm (None allowed), `residual` is set for fused_add_rms_norm;
// null where the operation has none.
//   check_arguments({.op = op, .input = input, .weight = weight, .residual = &residual, .eps = eps,
//                    .device = kDevice});
struct Call {
  const char* op = "";
  const at::Tensor& input;
  const at::Tensor& weight;
  const std::optional<at::Tensor>* bias = nullptr;
  const at::Tensor* residual = nullptr;
  double eps = 0;
  c10::DeviceType device = c10::DeviceType::CPU;  // the implementation's
};

// Checks every argument of a normalization op for an implementation on `call.device` (the error
// names the op, the argument, what was expected and what was given).
void check_arguments(const Call& call);

}  // namespace xllm_kernel::normalization
