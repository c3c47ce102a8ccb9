// Attention over the paged KV cache: paged_attention, the decode, prefill, chunked-prefill and
// mixed-batch attention of an engine in one call.
//
//   xllm_kernel::initialize("cpu");
//   // query [tokens, q_heads, head_size]; caches [num_blocks, block_size, kv_heads, head_size]
//   // (what reshape_and_cache writes); block_tables int32 [seqs, max_blocks]; query_start_loc
//   // int32 [seqs + 1]; seq_lens int32 [seqs] (each sequence's context, its new tokens included)
//   at::Tensor out = xllm_kernel::ops::paged_attention(query, key_cache, value_cache, block_tables,
//                                                      query_start_loc, seq_lens, 1 / std::sqrt(128.0),
//                                                      /*soft_cap=*/0, /*sliding_window=*/0);
//
// Semantics (docs/operators.md): sequence s owns query rows [query_start_loc[s],
// query_start_loc[s + 1]) (q_len of them); its query row i sits at position
// p = seq_lens[s] - q_len + i and attends to the positions [lo, p], lo = max(0, p - sliding_window
// + 1) when sliding_window > 0, else 0 (decode: q_len 1; prefill: q_len = seq_lens[s]; chunked
// prefill and mixed batches are the same call). Position j of sequence s is row j % block_size of
// block block_tables[s, j / block_size] of each cache. Query head h reads KV head h / (q_heads /
// kv_heads) (GQA and MQA; q_heads a multiple of kv_heads). logit = scale * dot(q, k); soft_cap > 0
// replaces it by soft_cap * tanh(logit / soft_cap) (Gemma 2); out = softmax(logits) @ V, with
// float32 accumulation, the softmax of the running maximum and one rounding to the query's dtype.
// Cache rows past a sequence's length and blocks outside its table never affect the output (NaN
// allowed). A sequence with seq_lens 0 and no query rows is padding, and so are the query rows from
// query_start_loc[seqs] on (a batch padded to a fixed shape): their output rows are zero.
//
// Arguments: query float32, bfloat16 or float16, [tokens, q_heads, head_size], any token and head
// strides, a contiguous last dimension (a slice of a fused qkv tensor); 1 <= head_size <= 512. Caches
// of query's dtype, device and head_size, one shape, any block, row and head strides with a
// contiguous last dimension (padded blocks, halves of a [num_blocks, 2, ...] KV tensor).
// block_tables, query_start_loc and seq_lens int32 on query's device, query_start_loc and seq_lens
// contiguous, block_tables with a contiguous last dimension. scale > 0 and finite; soft_cap >= 0 and
// finite; sliding_window <= 0 turns the window off. The output is a new contiguous tensor
// [tokens, q_heads, head_size] of query's dtype.
//
// Values. On the CPU, before any compute: query_start_loc must start at 0, never decrease and end
// at most at query's rows; 0 <= q_len <= seq_lens[s] <= max_blocks * block_size; every block a query row
// reads must be in [0, num_blocks). On CUDA, where checking would cost a synchronization, nothing
// outside the arguments is read or written instead: a query row that would read a block id outside
// [0, num_blocks) gets NaN in every element (the sequence's other rows are computed), and a
// sequence whose lengths contradict each other gets NaN in its rows within [0, tokens).
//
// The quantized KV cache: paged_attention_quant reads the caches reshape_and_cache_quant writes
// (float8_e4m3fn with one scale each, or int8 with [num_blocks, block_size, kv_heads] scales),
// dequantizing every element it reads, x = float(q) * scale in float32, then computing exactly as
// paged_attention does over those values:
//
//   at::Tensor out = xllm_kernel::ops::paged_attention_quant(query, key_cache, value_cache, key_scale,
//                                                            value_scale, block_tables, query_start_loc,
//                                                            seq_lens, 1 / std::sqrt(128.0), 0, 0);
//
// Arguments as paged_attention's, with caches of float8_e4m3fn or int8 (both the same) and their
// scales on query's device (fp8: one element each; int8: [num_blocks, block_size, kv_heads], any
// strides). Non-finite values: an fp8 NaN (0x7F) or an int8 row's NaN scale is a NaN read.
#pragma once

#include <ATen/core/Tensor.h>

#include "xllm_kernel/catalog.h"

namespace xllm_kernel {

using PagedAttentionFn = at::Tensor(const at::Tensor& query, const at::Tensor& key_cache,
                                    const at::Tensor& value_cache, const at::Tensor& block_tables,
                                    const at::Tensor& query_start_loc, const at::Tensor& seq_lens, double scale,
                                    double soft_cap, int64_t sliding_window);

using PagedAttentionQuantFn = at::Tensor(const at::Tensor& query, const at::Tensor& key_cache,
                                         const at::Tensor& value_cache, const at::Tensor& key_scale,
                                         const at::Tensor& value_scale, const at::Tensor& block_tables,
                                         const at::Tensor& query_start_loc, const at::Tensor& seq_lens, double scale,
                                         double soft_cap, int64_t sliding_window);

const OpContract& paged_attention_contract();
const TypedOperation<PagedAttentionFn>& paged_attention_operation();
const OpContract& paged_attention_quant_contract();
const TypedOperation<PagedAttentionQuantFn>& paged_attention_quant_operation();

// The family's group (its operations and backend modules), registered in the catalog.
const Group& attention_group();

namespace ops {

// Attention of every query row over its sequence's paged context; returns a new
// [tokens, q_heads, head_size] tensor of query's dtype.
at::Tensor paged_attention(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache,
                           const at::Tensor& block_tables, const at::Tensor& query_start_loc,
                           const at::Tensor& seq_lens, double scale, double soft_cap, int64_t sliding_window);

// paged_attention over quantized caches (float8_e4m3fn or int8) and their scales.
at::Tensor paged_attention_quant(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache,
                                 const at::Tensor& key_scale, const at::Tensor& value_scale,
                                 const at::Tensor& block_tables, const at::Tensor& query_start_loc,
                                 const at::Tensor& seq_lens, double scale, double soft_cap, int64_t sliding_window);

}  // namespace ops
}  // namespace xllm_kernel
