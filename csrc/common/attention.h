// The parameters of paged attention over the KV cache (paged_attention): one torch-free struct for
// the CPU kernel (csrc/cpu/attention/attention.h) and the CUDA launcher
// (csrc/cuda/attention/attention.h). The bridges fill it once from checked tensors (kernel_params
// in src/ops/attention/internal.h).
//
// What it computes, for every sequence s and every query row t in [query_start_loc[s],
// query_start_loc[s + 1]) (q_len = that count, position pos = seq_lens[s] - q_len + (t -
// query_start_loc[s])), every query head h (its KV head g = h / (q_heads / kv_heads)):
//   keys j in [lo, pos], lo = sliding_window > 0 ? max(0, pos - sliding_window + 1) : 0
//   logit_j = scale * dot(query[t, h], K_j);  soft_cap > 0: logit_j = soft_cap * tanh(logit_j / soft_cap)
//   out[t, h] = sum_j softmax(logit)_j * V_j        (float32 accumulation, one rounding)
// where K_j, V_j are row j % block_size of block block_tables[s, j / block_size] of key_cache /
// value_cache, head g. Cache rows past seq_lens[s] and blocks not in a sequence's table are never
// read (they may hold NaN). Query rows from query_start_loc[num_seqs] to query_tokens belong to no
// sequence (a batch padded to a fixed shape): the CPU bridge zero-fills them; CUDA writes them as
// csrc/cuda/attention/attention.h says.
//
//   xllm_kernel::kernels::PagedAttentionParams p;
//   p.dtype = DType::kBFloat16; p.num_seqs = 16; p.query_tokens = 16;
//   p.q_heads = 32; p.kv_heads = 8; p.head_size = 128; p.block_size = 16;
//   p.num_blocks = num_blocks; p.max_blocks_per_seq = 256;
//   p.query = q; p.query_strides = {48 * 128, 128};  // a slice of a [tokens, 32 + 8 + 8, 128] qkv buffer
//   p.key_cache = kc; p.key_cache_strides = {16 * 8 * 128, 8 * 128, 128};  // [num_blocks, 16, 8, 128]
//   p.value_cache = vc; p.value_cache_strides = {16 * 8 * 128, 8 * 128, 128};
//   p.out = o; p.out_strides = {32 * 128, 128};
//   p.block_tables = bt; p.block_table_stride = 256;
//   p.query_start_loc = qsl; p.seq_lens = lens;
//   p.scale = 1 / sqrt(128.f);
#pragma once

#include <cstdint>

#include "csrc/common/host_device.h"
#include "csrc/common/kv_cache.h"
#include "csrc/common/rows.h"

namespace xllm_kernel::kernels {

// A query or output row: element offset token * token + head * head (strides in elements; the
// head's head_size elements are contiguous).
struct AttentionRowStrides {
  int64_t token = 0;
  int64_t head = 0;
};

// A cache [num_blocks, block_size, kv_heads, head_size]: element offset block * block + row * row +
// head * head (strides in elements, >= 0; the head's head_size elements are contiguous).
struct CacheStrides {
  int64_t block = 0;
  int64_t row = 0;
  int64_t head = 0;
};

struct PagedAttentionParams {
  DType dtype = DType::kFloat32;  // query, out and (cache_format kPlain) both caches
  int64_t num_seqs = 0;           // block_tables rows, seq_lens entries; query_start_loc has num_seqs + 1
  int64_t query_tokens = 0;       // query and out rows (query_start_loc[num_seqs] on a valid call)
  int64_t q_heads = 0;            // >= 1, a multiple of kv_heads
  int64_t kv_heads = 0;           // >= 1
  int64_t head_size = 0;          // >= 1
  int64_t block_size = 0;         // >= 1
  int64_t num_blocks = 0;         // cache blocks (>= 0); a block id is valid in [0, num_blocks)
  int64_t max_blocks_per_seq = 0; // block_tables columns; a sequence's context is at most
                                  // max_blocks_per_seq * block_size

  const void* query = nullptr;  // [query_tokens, q_heads, head_size]
  AttentionRowStrides query_strides;
  const void* key_cache = nullptr;  // [num_blocks, block_size, kv_heads, head_size]
  CacheStrides key_cache_strides;
  const void* value_cache = nullptr;
  CacheStrides value_cache_strides;
  void* out = nullptr;  // [query_tokens, q_heads, head_size]; must not overlap an input
  AttentionRowStrides out_strides;

  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq], rows this many apart
  int64_t block_table_stride = 0;
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1], contiguous
  const int32_t* seq_lens = nullptr;         // [num_seqs], contiguous

  // The caches' element format (csrc/common/kv_cache.h; paged_attention_quant). Quantized: the
  // caches hold one byte per element (strides still in elements) and every key and value element
  // read is dequantized first, x = float(q) * scale in float32, then used as a kPlain cache's:
  //   kFp8E4M3: key_scale, value_scale point at one float32 each (device memory on CUDA);
  //   kInt8:    key_scale, value_scale are [num_blocks, block_size, kv_heads] float32: the scale of
  //             KV head g of row r of block b at element b * block + r * row + g * head.
  KvCacheFormat cache_format = KvCacheFormat::kPlain;
  const float* key_scale = nullptr;
  CacheStrides key_scale_strides;
  const float* value_scale = nullptr;
  CacheStrides value_scale_strides;

  float scale = 1.0f;          // multiplies the logits
  float soft_cap = 0.0f;       // > 0: logit = soft_cap * tanh(logit / soft_cap); 0: off
  int64_t sliding_window = 0;  // > 0: the last sliding_window positions (its own included); <= 0: off
  // A plan whose work depends on each row alone (never on the thread or SM count, or the other
  // rows), merged in order, so that a row's bits are the same in any batch: read by both kernels'
  // plan_paged_attention (csrc/cpu/attention/attention.h, csrc/cuda/attention/attention.h).
  bool batch_invariant = false;
};

// Callable from CUDA device code too (XLLM_HOST_DEVICE, csrc/common/host_device.h).
// The group of query heads that share a KV head.
XLLM_HOST_DEVICE inline int64_t query_heads_per_kv(const PagedAttentionParams& p) { return p.q_heads / p.kv_heads; }

// The longest context a sequence of these shapes can have.
XLLM_HOST_DEVICE inline int64_t max_context(const PagedAttentionParams& p) { return p.max_blocks_per_seq * p.block_size; }

}  // namespace xllm_kernel::kernels
