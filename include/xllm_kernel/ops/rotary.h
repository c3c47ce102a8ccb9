// Rotary position embedding: rotary_embedding (vLLM's semantics), query and key rotated in place.
//
//   xllm_kernel::initialize("cpu");
//   at::Tensor qkv = ...;                                   // [tokens, (32 + 2 * 8) * 128]
//   at::Tensor q = qkv.narrow(1, 0, 32 * 128), k = qkv.narrow(1, 32 * 128, 8 * 128);
//   xllm_kernel::ops::rotary_embedding(positions, q, k, 128, cos_sin_cache, /*is_neox=*/true);
//
// Semantics (docs/operators.md): positions int64 [tokens]; query [tokens, heads * head_size] or
// [tokens, heads, head_size], key likewise with its own head count (query's a multiple of it) or
// None; cos_sin_cache [max_position, rot_dim], cos in the first half of a row and sin in the second,
// float32 or the query's dtype; rot_dim even, 2 <= rot_dim <= head_size. Each head's first rot_dim
// elements are rotated by the angle of the token's position, in pairs (x[i], x[i + rot_dim/2])
// (is_neox) or (x[2i], x[2i + 1]) (GPT-J): (x1, x2) <- (x1 cos - x2 sin, x2 cos + x1 sin), in
// float32 with one rounding to the dtype; the elements past rot_dim are left bitwise unchanged.
// float32, bfloat16, float16; any token and head strides with a contiguous last dimension (query
// and key may be slices of one fused qkv tensor, but must not overlap); zero tokens allowed.
//
// Positions outside [0, max_position): on the CPU an error, raised before anything is written; on
// CUDA (where checking would cost a synchronization) the token's query and key rows are left
// unchanged, and nothing outside the cache is read.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "xllm_kernel/catalog.h"

namespace xllm_kernel {

using RotaryEmbeddingFn = void(const at::Tensor& positions, at::Tensor& query, const std::optional<at::Tensor>& key,
                               int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox);

const OpContract& rotary_embedding_contract();
const TypedOperation<RotaryEmbeddingFn>& rotary_embedding_operation();

// The family's group (its operations and backend modules), registered in the catalog.
const Group& rotary_group();

namespace ops {

// Rotates query (and key, when given) in place; returns nothing.
void rotary_embedding(const at::Tensor& positions, at::Tensor& query, const std::optional<at::Tensor>& key,
                      int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox);

}  // namespace ops
}  // namespace xllm_kernel
