// The paged KV-cache write: reshape_and_cache.
//
//   xllm_kernel::initialize("cpu");
//   // key, value [tokens, kv_heads, head_size]; caches [num_blocks, block_size, kv_heads, head_size]
//   xllm_kernel::ops::reshape_and_cache(key, value, key_cache, value_cache, slot_mapping);
//
// Semantics (docs/operators.md), the paged NHD layout of vLLM's reshape_and_cache_flash and
// FlashInfer's append_paged_kv_cache: for every token t with s = slot_mapping[t] >= 0,
//   key_cache[s / block_size, s % block_size] = key[t],  value_cache[...] = value[t]
// copied bit for bit; a negative slot skips its token (padding). Nothing else of either cache
// changes. The caches are the caller's; the operator only writes the addressed rows.
//
// Arguments: key and value of one shape and dtype (float32, bfloat16, float16), any strides for
// tokens and heads, a contiguous last dimension (e.g. slices of a fused qkv tensor). Caches of
// key's dtype and device, shape [num_blocks, block_size, kv_heads, head_size], each block's
// [block_size, kv_heads, head_size] contiguous and any block stride of at least one block (the
// contiguous cache, and halves of a [num_blocks, 2, ...] or [2, num_blocks, ...] KV tensor).
// key_cache and value_cache must not share an element; key and value must not overlap a cache.
// slot_mapping: int64 [tokens], any stride, on the caches' device.
//
// Slots. On the CPU, a slot >= num_blocks * block_size, or a non-negative slot given twice, is an
// error naming it, raised before anything is written. On CUDA, where checking would cost a
// synchronization, an out-of-range slot skips its token like a negative one (never an
// out-of-bounds access), and a duplicated slot ends with each element of its rows from one of its
// tokens, not necessarily the same token for every element: cuda.native's threads write 16-byte
// pieces independently (the caller's scheduler never maps two tokens to one slot).
//
// The quantized KV cache: reshape_and_cache_quant writes the same rows into caches of one byte per
// element, with their scales (docs/operators.md, csrc/common/kv_cache.h for the arithmetic):
//
//   // fp8: caches float8_e4m3fn, key_scale and value_scale float32 of one element, given:
//   //      q = e4m3(x / scale) (vLLM's kv_cache_dtype="fp8"; static_quant multiplies by 1 / scale)
//   // int8: caches int8, key_scale and value_scale float32 [num_blocks, block_size, kv_heads],
//   //      written: each (token, head) row is per_token_quant(row, int8) bit for bit
//   xllm_kernel::ops::reshape_and_cache_quant(key, value, key_cache, value_cache, slot_mapping, key_scale,
//                                             value_scale);
//
// Arguments as reshape_and_cache's, with caches of dtype float8_e4m3fn or int8 (both the same). The
// scales on the caches' device: fp8, one element each (any shape of one element); int8, of shape
// [num_blocks, block_size, kv_heads] with each block's [block_size, kv_heads] contiguous and any
// block stride, not overlapping the caches or each other. The slots as reshape_and_cache's. On the
// CPU an fp8 scale must be positive and finite (an error); on CUDA it is not read on the host.
#pragma once

#include <ATen/core/Tensor.h>

#include "xllm_kernel/catalog.h"

namespace xllm_kernel {

using ReshapeAndCacheFn = void(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                               at::Tensor& value_cache, const at::Tensor& slot_mapping);

using ReshapeAndCacheQuantFn = void(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                                    at::Tensor& value_cache, const at::Tensor& slot_mapping, at::Tensor& key_scale,
                                    at::Tensor& value_scale);

const OpContract& reshape_and_cache_contract();
const OpContract& reshape_and_cache_quant_contract();

const TypedOperation<ReshapeAndCacheFn>& reshape_and_cache_operation();
const TypedOperation<ReshapeAndCacheQuantFn>& reshape_and_cache_quant_operation();

// The family's group (its operations and backend modules), registered in the catalog.
const Group& kv_cache_group();

namespace ops {

// key_cache[slot / block_size, slot % block_size] = key[t] (and value) for every token t whose
// slot = slot_mapping[t] is non-negative; in place.
void reshape_and_cache(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache, at::Tensor& value_cache,
                       const at::Tensor& slot_mapping);

// The same rows quantized into float8_e4m3fn caches (the given per-tensor scales) or int8 caches
// (per-(token, head) scales written at the slots); in place.
void reshape_and_cache_quant(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                             at::Tensor& value_cache, const at::Tensor& slot_mapping, at::Tensor& key_scale,
                             at::Tensor& value_scale);

}  // namespace ops
}  // namespace xllm_kernel
