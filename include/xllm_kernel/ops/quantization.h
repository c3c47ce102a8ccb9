// Quantization operators: int8 and float8_e4m3fn activations with per-token (dynamic) or static
// scales, alone or fused with the normalization or activation that produces them.
//
//   xllm_kernel::initialize("cpu");
//   auto [q, scale] = xllm_kernel::ops::per_token_quant(x, at::kFloat8_e4m3fn, std::nullopt);
//   // q: float8_e4m3fn, x's shape; scale: float32 [..., 1]; x ~ q * scale
//   auto [q8, s8, azp] = xllm_kernel::ops::per_token_quant_int8_azp(x);   // x ~ (q8 - azp) * s8
//   at::Tensor qs = xllm_kernel::ops::static_quant(x, scale1, at::kChar, std::nullopt);
//   auto [qn, sn] = xllm_kernel::ops::rms_norm_per_token_quant(x, weight, 1e-6, at::kChar, std::nullopt);
//   auto [qr, sr] = xllm_kernel::ops::fused_add_rms_norm_per_token_quant(x, residual, weight, 1e-6,
//                                                                        at::kFloat8_e4m3fn, std::nullopt);
//   auto [qa, sa] = xllm_kernel::ops::silu_and_mul_per_token_quant(gate_up, at::kChar, std::nullopt);
//
// Semantics (docs/operators.md; the arithmetic and the non-finite rules in full in
// csrc/common/quantization.h): every operation computes in IEEE float32 in vLLM's order (a true
// division where vLLM divides, a reciprocal multiply where it multiplies), rounds to nearest even
// and saturates; a NaN in a row makes that row's scale NaN (never hidden). The fused operations
// equal their composition bit for bit: the normalized (activated) row rounded to the input's dtype,
// then quantized; fused_add_* update residual exactly as fused_add_rms_norm does.
//
// Arguments: input float32, bfloat16 or float16 [..., hidden] (silu_and_mul: [..., 2d]), any
// leading strides, a contiguous last dimension; dtype torch.int8 or torch.float8_e4m3fn; scale_ub
// (fp8 only) and the static scale: one float32 element; azp (int8 only): one int32 element; weight
// as rms_norm's. Results are new contiguous tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

#include "xllm_kernel/catalog.h"

namespace xllm_kernel {

using PerTokenQuantFn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor& input, at::ScalarType dtype,
                                                           const std::optional<at::Tensor>& scale_ub);
using PerTokenQuantInt8AzpFn = std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor& input);
using StaticQuantFn = at::Tensor(const at::Tensor& input, const at::Tensor& scale, at::ScalarType dtype,
                                 const std::optional<at::Tensor>& azp);
using RmsNormPerTokenQuantFn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor& input, const at::Tensor& weight,
                                                                  double eps, at::ScalarType dtype,
                                                                  const std::optional<at::Tensor>& scale_ub);
using FusedAddRmsNormPerTokenQuantFn = std::tuple<at::Tensor, at::Tensor>(
    const at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps, at::ScalarType dtype,
    const std::optional<at::Tensor>& scale_ub);
using RmsNormStaticQuantFn = at::Tensor(const at::Tensor& input, const at::Tensor& weight, double eps,
                                        const at::Tensor& scale, at::ScalarType dtype,
                                        const std::optional<at::Tensor>& azp);
using FusedAddRmsNormStaticQuantFn = at::Tensor(const at::Tensor& input, at::Tensor& residual,
                                                const at::Tensor& weight, double eps, const at::Tensor& scale,
                                                at::ScalarType dtype, const std::optional<at::Tensor>& azp);
using SiluAndMulPerTokenQuantFn = PerTokenQuantFn;

const OpContract& per_token_quant_contract();
const OpContract& per_token_quant_int8_azp_contract();
const OpContract& static_quant_contract();
const OpContract& rms_norm_per_token_quant_contract();
const OpContract& fused_add_rms_norm_per_token_quant_contract();
const OpContract& rms_norm_static_quant_contract();
const OpContract& fused_add_rms_norm_static_quant_contract();
const OpContract& silu_and_mul_per_token_quant_contract();

const TypedOperation<PerTokenQuantFn>& per_token_quant_operation();
const TypedOperation<PerTokenQuantInt8AzpFn>& per_token_quant_int8_azp_operation();
const TypedOperation<StaticQuantFn>& static_quant_operation();
const TypedOperation<RmsNormPerTokenQuantFn>& rms_norm_per_token_quant_operation();
const TypedOperation<FusedAddRmsNormPerTokenQuantFn>& fused_add_rms_norm_per_token_quant_operation();
const TypedOperation<RmsNormStaticQuantFn>& rms_norm_static_quant_operation();
const TypedOperation<FusedAddRmsNormStaticQuantFn>& fused_add_rms_norm_static_quant_operation();
const TypedOperation<SiluAndMulPerTokenQuantFn>& silu_and_mul_per_token_quant_operation();

// The family's group (its operations and backend modules), registered in the catalog.
const Group& quantization_group();

namespace ops {

// (q, scale): q of dtype (int8 or float8_e4m3fn) and input's shape, scale float32 [..., 1].
std::tuple<at::Tensor, at::Tensor> per_token_quant(const at::Tensor& input, at::ScalarType dtype,
                                                   const std::optional<at::Tensor>& scale_ub);
// (q int8, scale float32 [..., 1], azp int32 [..., 1]).
std::tuple<at::Tensor, at::Tensor, at::Tensor> per_token_quant_int8_azp(const at::Tensor& input);
// q with one given scale (and, int8 only, an optional zero point).
at::Tensor static_quant(const at::Tensor& input, const at::Tensor& scale, at::ScalarType dtype,
                        const std::optional<at::Tensor>& azp);
std::tuple<at::Tensor, at::Tensor> rms_norm_per_token_quant(const at::Tensor& input, const at::Tensor& weight,
                                                            double eps, at::ScalarType dtype,
                                                            const std::optional<at::Tensor>& scale_ub);
// residual <- round(input + residual), then per_token_quant(rms_norm(residual, weight, eps)).
std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm_per_token_quant(const at::Tensor& input, at::Tensor& residual,
                                                                      const at::Tensor& weight, double eps,
                                                                      at::ScalarType dtype,
                                                                      const std::optional<at::Tensor>& scale_ub);
at::Tensor rms_norm_static_quant(const at::Tensor& input, const at::Tensor& weight, double eps,
                                 const at::Tensor& scale, at::ScalarType dtype, const std::optional<at::Tensor>& azp);
at::Tensor fused_add_rms_norm_static_quant(const at::Tensor& input, at::Tensor& residual, const at::Tensor& weight,
                                           double eps, const at::Tensor& scale, at::ScalarType dtype,
                                           const std::optional<at::Tensor>& azp);
// input [..., 2d] -> (q [..., d], scale [..., 1]) of silu(input[..., :d]) * input[..., d:].
std::tuple<at::Tensor, at::Tensor> silu_and_mul_per_token_quant(const at::Tensor& input, at::ScalarType dtype,
                                                                const std::optional<at::Tensor>& scale_ub);

}  // namespace ops
}  // namespace xllm_kernel
