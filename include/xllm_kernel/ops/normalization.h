// Normalization operators: rms_norm, fused_add_rms_norm, layer_norm.
//
//   xllm_kernel::initialize("cpu");
//   at::Tensor y = xllm_kernel::ops::rms_norm(x, weight, 1e-6);      // [tokens, hidden]
//   xllm_kernel::ops::fused_add_rms_norm(x, residual, weight, 1e-6);  // in place
//
// Semantics (docs/operators.md): fp32 accumulation and one rounding to the input's dtype; dtypes
// float32, bfloat16, float16; weight and bias in the input's dtype or float32; any hidden size >= 1;
// any strides for the leading dimensions with a contiguous last dimension; zero rows allowed.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "xllm_kernel/catalog.h"

namespace xllm_kernel {

using RmsNormFn = at::Tensor(const at::Tensor& input, const at::Tensor& weight, double eps);
using FusedAddRmsNormFn = void(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps);
using LayerNormFn = at::Tensor(const at::Tensor& input, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias, double eps);

const OpContract& rms_norm_contract();
const OpContract& fused_add_rms_norm_contract();
const OpContract& layer_norm_contract();

const TypedOperation<RmsNormFn>& rms_norm_operation();
const TypedOperation<FusedAddRmsNormFn>& fused_add_rms_norm_operation();
const TypedOperation<LayerNormFn>& layer_norm_operation();

// The family's group (its operations and backend modules), registered in the catalog.
const Group& normalization_group();

namespace ops {

// out = input * rsqrt(mean(input^2, -1) + eps) * weight; out is contiguous, input's dtype.
at::Tensor rms_norm(const at::Tensor& input, const at::Tensor& weight, double eps);

// residual <- round(input + residual); input <- rms_norm(residual, weight, eps). Returns nothing.
void fused_add_rms_norm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps);

// out = (input - mean) * rsqrt(biased variance + eps) * weight (+ bias).
at::Tensor layer_norm(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                      double eps);

}  // namespace ops
}  // namespace xllm_kernel
