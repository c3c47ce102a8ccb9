// Torch-free CPU kernel of the paged KV-cache write (Highway, runtime ISA dispatch):
//   key_cache[s / block_size, s % block_size] = key[t],  value_cache[...] = value[t]
// for every token t with 0 <= s = slot_mapping[t] < num_slots, copied bit for bit.
//
// The at::Tensor side (a bridge) checks every argument and every slot (out-of-range and duplicate
// slots are errors there), fills a KvCacheParams and splits the tokens over threads. The kernel
// skips a slot outside [0, num_slots) (never writes out of bounds); it assumes distinct slots
// (tokens of one slot on concurrent ranges would race).
//
//   xllm_kernel::cpu::KvCacheParams p;
//   p.dtype = DType::kBFloat16; p.kv_heads = 8; p.head_size = 128; p.block_size = 16;
//   p.num_slots = num_blocks * 16; p.tokens = tokens;
//   p.key = k; p.key_strides = {q_stride, 128};               // [tokens, 8, 128] in a fused qkv
//   p.value = v; p.value_strides = {q_stride, 128};
//   p.key_cache = kc; p.key_cache_block_stride = 16 * 8 * 128;  // [num_blocks, 16, 8, 128]
//   p.value_cache = vc; p.value_cache_block_stride = 16 * 8 * 128;
//   p.slot_mapping = slots; p.slot_stride = 1;
//   xllm_kernel::cpu::reshape_and_cache(p, 0, tokens);
#pragma once

#include <cstdint>

#include "csrc/common/rows.h"

namespace xllm_kernel::cpu {

using kernels::DType;
using kernels::Status;

// A token's row in key or value: element offset token * token + head * head (strides in elements).
struct TokenStrides {
  int64_t token = 0;
  int64_t head = 0;
};

struct KvCacheParams {
  DType dtype = DType::kFloat32;  // key, value and both caches; only its size matters (a copy)
  int64_t tokens = 0;             // key, value and slot_mapping rows
  int64_t kv_heads = 0;           // >= 1
  int64_t head_size = 0;          // >= 1
  int64_t block_size = 0;         // >= 1
  int64_t num_slots = 0;          // num_blocks * block_size

  const void* key = nullptr;  // [tokens, kv_heads, head_size], last dim contiguous
  TokenStrides key_strides;
  const void* value = nullptr;
  TokenStrides value_strides;
  // [num_blocks, block_size, kv_heads, head_size]: each block contiguous, blocks this many
  // elements apart (>= block_size * kv_heads * head_size). Must not overlap each other or the
  // inputs.
  void* key_cache = nullptr;
  int64_t key_cache_block_stride = 0;
  void* value_cache = nullptr;
  int64_t value_cache_block_stride = 0;

  const int64_t* slot_mapping = nullptr;  // [tokens]
  int64_t slot_stride = 0;

  // Write the cache rows with non-temporal stores where a row allows it (aligned to the SIMD
  // width): for writes much larger than the last-level cache.
  bool stream_out = false;
};

// Copies the rows of tokens [token_begin, token_end); may run concurrently on disjoint ranges
// (with distinct slots). Pointers may be null when the range is empty.
Status reshape_and_cache(const KvCacheParams& p, int64_t token_begin, int64_t token_end);

}  // namespace xllm_kernel::cpu
