// Linear operators: weights packed once at load, then y = x W^T + b.
//
//   xllm_kernel::initialize("cpu");
//   at::Tensor packed = xllm_kernel::ops::linear_pack(w_bf16, std::nullopt, std::nullopt, "bf16", 0);
//   at::Tensor y = xllm_kernel::ops::linear(x, packed, std::nullopt);          // [..., N]
//   at::Tensor q4 = xllm_kernel::ops::linear_pack(q_int8, scales, zeros, "int4", 128);
//
// Schemes (the canonical, unpacked form linear_pack takes; group_size 0 unless said):
//   "f32", "bf16", "f16"  weight [N, K] in that dtype
//   "int8"                weight int8 [N, K], scales [N] (one per output channel), W = q * s
//   "fp8"                 weight float8_e4m3fn [N, K], scales [] or [1] (per tensor), [N] (per channel)
//                         or [ceil(N / 128), ceil(K / 128)] (per 128 x 128 block), W = q * s
//   "int4"                weight int8 [N, K] holding [-8, 7] (symmetric) or [0, 15] with zeros
//                         [N, K / g]; scales [N, K / g]; group_size g >= 1 dividing K (or -1: g = K);
//                         W = (q - z) * s
// Scales and zeros are float32, bfloat16 or float16 (converted exactly to float32); zeros hold
// integers in [0, 15].
//
// Semantics (docs/operators.md): W is formed in float32 ((q - z) exact, one rounding of its product
// with s); x is taken exactly in float32; products and sums in float32, + bias, one rounding to the
// input's dtype. Non-finite scales propagate as IEEE arithmetic does. The packed tensor (uint8
// [N, row_bytes]) records the scheme, N, K, the groups, the layout and the implementation that
// packed it; only that implementation's linear accepts it, any other raises an error. The native
// CPU implementation is batch invariant: a row's bits do not depend on the other rows, their number,
// its position or the thread count.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>

#include "xllm_kernel/catalog.h"

namespace xllm_kernel {

using LinearPackFn = at::Tensor(const at::Tensor& weight, const std::optional<at::Tensor>& scales,
                                const std::optional<at::Tensor>& zeros, std::string scheme, int64_t group_size);
using LinearFn = at::Tensor(const at::Tensor& input, const at::Tensor& packed, const std::optional<at::Tensor>& bias);

const OpContract& linear_pack_contract();
const OpContract& linear_contract();

const TypedOperation<LinearPackFn>& linear_pack_operation();
const TypedOperation<LinearFn>& linear_operation();

// The family's group (its operations and backend modules), registered in the catalog.
const Group& linear_group();

namespace ops {

// The packed weight (uint8 [N, row_bytes]) on weight's device, for the selected linear.
at::Tensor linear_pack(const at::Tensor& weight, const std::optional<at::Tensor>& scales,
                       const std::optional<at::Tensor>& zeros, const std::string& scheme, int64_t group_size);

// input [..., K] (float32, bfloat16, float16; rows may be strided) -> [..., N] in input's dtype.
at::Tensor linear(const at::Tensor& input, const at::Tensor& packed, const std::optional<at::Tensor>& bias);

}  // namespace ops
}  // namespace xllm_kernel
