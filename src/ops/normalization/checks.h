// The normalization family's argument checks (checks.cpp): its own bridges' and the entry point for
// a family that builds on it (the quantization family's rms_norm_*_quant check their input here).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include <optional>

namespace xllm_kernel::normalization {

// Checks every argument of a normalization op (the error names the op, the argument, what was
// expected and what was given). `residual` is set for fused_add_rms_norm, `bias` may be set for
// layer_norm. `device` is the implementation's device.
void check_arguments(const char* op, const at::Tensor& input, const at::Tensor& weight,
                     const std::optional<at::Tensor>& bias, const at::Tensor* residual, double eps,
                     c10::DeviceType device);

}  // namespace xllm_kernel::normalization
