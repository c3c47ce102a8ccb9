// The parameters of the paged KV-cache write (reshape_and_cache, NHD layout): one torch-free
// struct for the CPU kernel (csrc/cpu/kv_cache/kv_cache.h) and the CUDA launcher
// (csrc/cuda/kv_cache/kv_cache.h). The bridges fill it once from checked tensors (kernel_params in
// src/ops/kv_cache/internal.h).
//
//   xllm_kernel::kernels::KvCacheParams p;
//   p.dtype = DType::kBFloat16; p.tokens = tokens; p.kv_heads = 8; p.head_size = 128;
//   p.block_size = 16; p.num_slots = num_blocks * 16;
//   p.key = k; p.key_strides = {3 * 8 * 128, 128};              // a slice of a [tokens, 3, 8, 128] qkv
//   p.value = v; p.value_strides = {3 * 8 * 128, 128};
//   p.key_cache = kc; p.key_cache_block_stride = 16 * 8 * 128;  // [num_blocks, 16, 8, 128]
//   p.value_cache = vc; p.value_cache_block_stride = 16 * 8 * 128;
//   p.slot_mapping = slots; p.slot_stride = 1;
//   xllm_kernel::cpu::reshape_and_cache(p, 0, tokens);  // or xllm_kernel::cuda::reshape_and_cache(p, stream)
#pragma once

#include <cstdint>

#include "csrc/common/rows.h"

namespace xllm_kernel::kernels {

// A token's row in key or value: element offset token * token + head * head (strides in elements).
struct KvTokenStrides {
  int64_t token = 0;
  int64_t head = 0;
};

struct KvCacheParams {
  DType dtype = DType::kFloat32;  // key, value and both caches; only its size matters (a copy)
  int64_t tokens = 0;             // key, value and slot_mapping rows; 0 tokens: nothing to do
  int64_t kv_heads = 0;           // >= 1
  int64_t head_size = 0;          // >= 1
  int64_t block_size = 0;         // >= 1
  int64_t num_slots = 0;          // num_blocks * block_size (>= 0)

  const void* key = nullptr;  // [tokens, kv_heads, head_size], last dim contiguous
  KvTokenStrides key_strides;
  const void* value = nullptr;
  KvTokenStrides value_strides;
  // [num_blocks, block_size, kv_heads, head_size]: each block contiguous, blocks this many
  // elements apart (>= block_size * kv_heads * head_size). Must not overlap each other or the
  // inputs.
  void* key_cache = nullptr;
  int64_t key_cache_block_stride = 0;
  void* value_cache = nullptr;
  int64_t value_cache_block_stride = 0;

  const int64_t* slot_mapping = nullptr;  // [tokens]
  int64_t slot_stride = 0;

  // CPU kernel only (the CUDA launcher ignores it): write the cache rows with non-temporal stores
  // where a row allows it (aligned to the SIMD width), for writes much larger than the last-level
  // cache.
  bool stream_out = false;
};

}  // namespace xllm_kernel::kernels
