// Linear operators: weights packed once at load, then y = x W^T + b.
//
//   xllm_kernel::initialize("cpu");
//   at::Tensor packed = xllm_kernel::ops::linear_pack(w_bf16, std::nullopt, std::nullopt, "bf16", 0);
//   at::Tensor y = xllm_kernel::ops::linear(x, packed, std::nullopt);          // [..., N]
//   at::Tensor q4 = xllm_kernel::ops::linear_pack(q_int8, scales, zeros, "int4", 128);
//
// Schemes (the canonical, unpacked form linear_pack takes; group_size 0 unless said):
//   "f32", "bf16", "f16"  weight [N, K] in that dtype
//   "int8"                weight int8 [N, K], scales [N] (one per output channel, group_size 0) or
//                         [N, K / g] (groups of g dividing K, or -1: g = K), W = q * s
//   "fp8"                 weight float8_e4m3fn [N, K], scales [] or [1] (per tensor), [N] (per channel)
//                         or [ceil(N / 128), ceil(K / 128)] (per 128 x 128 block), W = q * s
//   "int4"                weight int8 [N, K] holding [-8, 7] (symmetric) or [0, 15] with zeros
//                         [N, K / g]; scales [N, K / g]; group_size g >= 1 dividing K (or -1: g = K);
//                         W = (q - z) * s
//   "w8a8-int8"           for scaled_mm: weight int8 [N, K] in [-127, 127], scales [N]
//   "w8a8-fp8"            for scaled_mm: weight float8_e4m3fn [N, K], scales as "fp8"
//   "w4a8"                for scaled_mm: as "int4", group_size g a multiple of 8 dividing K
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
using ScaledMmFn = at::Tensor(const at::Tensor& a, const at::Tensor& packed, const at::Tensor& scale_a,
                              const std::optional<at::Tensor>& azp, const std::optional<at::Tensor>& bias,
                              at::ScalarType out_dtype);
using LinearDynamicQuantFn = at::Tensor(const at::Tensor& input, const at::Tensor& packed,
                                        const std::optional<at::Tensor>& bias);

const OpContract& linear_pack_contract();
const OpContract& linear_contract();
const OpContract& scaled_mm_contract();
const OpContract& linear_dynamic_quant_contract();

const TypedOperation<LinearPackFn>& linear_pack_operation();
const TypedOperation<LinearFn>& linear_operation();
const TypedOperation<ScaledMmFn>& scaled_mm_operation();
const TypedOperation<LinearDynamicQuantFn>& linear_dynamic_quant_operation();

// The family's group (its operations and backend modules), registered in the catalog.
const Group& linear_group();

namespace ops {

// The packed weight (uint8 [N, row_bytes]) on weight's device, for the selected linear.
at::Tensor linear_pack(const at::Tensor& weight, const std::optional<at::Tensor>& scales,
                       const std::optional<at::Tensor>& zeros, const std::string& scheme, int64_t group_size);

// input [..., K] (float32, bfloat16, float16; rows may be strided) -> [..., N] in input's dtype.
at::Tensor linear(const at::Tensor& input, const at::Tensor& packed, const std::optional<at::Tensor>& bias);

// ---- Quantized activations (docs/scaled-mm.md): weights packed with "w8a8-int8", "w8a8-fp8" or
// "w4a8", activations quantized per token (or per tensor) by the quantization family.
//
//   at::Tensor packed = ops::linear_pack(q_int8, scales_n, std::nullopt, "w8a8-int8", 0);
//   auto [a, scale_a] = ops::per_token_quant(x, at::kChar, std::nullopt);
//   at::Tensor y = ops::scaled_mm(a, packed, scale_a, std::nullopt, std::nullopt, at::kBFloat16);
//   at::Tensor same = ops::linear_dynamic_quant(x, packed, std::nullopt);   // the two steps, fused
//
// a [..., K] int8 (w8a8-int8, w4a8) or float8_e4m3fn (w8a8-fp8); scale_a float32 [..., 1] or one
// element; azp int32 like scale_a (w8a8-int8 only) -> [..., N] of out_dtype (float32, bfloat16, float16).
at::Tensor scaled_mm(const at::Tensor& a, const at::Tensor& packed, const at::Tensor& scale_a,
                     const std::optional<at::Tensor>& azp, const std::optional<at::Tensor>& bias,
                     at::ScalarType out_dtype);

// scaled_mm(per_token_quant(input, int8 or float8_e4m3fn by the packed scheme), ..., input's dtype),
// bit for bit.
at::Tensor linear_dynamic_quant(const at::Tensor& input, const at::Tensor& packed,
                                const std::optional<at::Tensor>& bias);

// ---- Checkpoint formats into the canonical form (docs/checkpoint-formats.md).
//
//   LinearWeight w = ops::linear_weight_from_gptq(qweight, qzeros, scales, g_idx, 4, "v1");
//   at::Tensor packed = ops::linear_pack(w);
//   at::Tensor y = ops::linear(w.permute_input(x), packed, bias);
//
// Each importer checks its tensors' shapes and dtypes (errors name the function, the argument, the
// expected and the given value) and works on their device with ATen operations.

// The canonical arguments of linear_pack, and the input's column order where a format reorders K.
struct LinearWeight {
  at::Tensor weight;                 // [N, K]
  std::optional<at::Tensor> scales;  // by scheme
  std::optional<at::Tensor> zeros;   // int4 with zero points
  std::string scheme;                // "int8", "int4", "fp8"
  int64_t group_size = 0;
  // int64 [K]: linear takes x[..., input_permutation] (GPTQ with act-order, whose groups are not
  // contiguous in K; the importer sorts K by group). Absent: x as it is.
  std::optional<at::Tensor> input_permutation;

  // x[..., input_permutation], or x.
  at::Tensor permute_input(const at::Tensor& x) const;
};

// GPTQ (AutoGPTQ / GPTQModel): qweight int32 [K * bits / 32, N] packed along K (low bits first),
// qzeros int32 [G, N * bits / 32] packed along N, scales [G, N], g_idx int32 [K] (the group of each
// input channel; none: k / (K / G)). format "v1" stores zero - 1 (AutoGPTQ), "v2" the zero itself
// (GPTQModel). bits 4: int4 in groups (symmetric when every zero is 8); bits 8: int8 in groups,
// symmetric checkpoints only (every zero 128).
LinearWeight linear_weight_from_gptq(const at::Tensor& qweight, const at::Tensor& qzeros, const at::Tensor& scales,
                                     const std::optional<at::Tensor>& g_idx, int64_t bits, const std::string& format);

// AWQ (AutoAWQ's GEMM layout): qweight int32 [K, N / 8] and qzeros int32 [G, N / 8] packed along N in
// AWQ's interleaved order (nibble i holds column 8 c + {0, 2, 4, 6, 1, 3, 5, 7}[i]), scales [G, N].
// W = (q - z) * s: int4 in groups of K / G.
LinearWeight linear_weight_from_awq(const at::Tensor& qweight, const at::Tensor& qzeros, const at::Tensor& scales);

// GGUF blocks of 32 weights along K, each row of K / 32 blocks: "Q8_0" (f16 d, 32 int8 q; W = d q)
// as int8 in groups of 32, "Q4_0" (f16 d, 16 bytes: weight j in the low nibble of byte j, weight
// j + 16 in its high nibble; W = d (q - 8)) as symmetric int4 in groups of 32. data: the tensor's
// bytes, uint8 [N, K / 32 * block bytes] or flat; n, k: the weight's shape [N, K] (GGUF's ne1, ne0).
LinearWeight linear_weight_from_gguf(const at::Tensor& data, const std::string& type, int64_t n, int64_t k);

// fp8 checkpoints with block scales (DeepSeek-V3, Qwen3-FP8): weight float8_e4m3fn [N, K],
// weight_scale_inv float32 [ceil(N / 128), ceil(K / 128)]; W = q * weight_scale_inv (the name is
// the checkpoints': it multiplies).
LinearWeight linear_weight_from_fp8_blocks(const at::Tensor& weight, const at::Tensor& weight_scale_inv);

// linear_pack of a canonical weight.
at::Tensor linear_pack(const LinearWeight& weight);

}  // namespace ops
}  // namespace xllm_kernel
