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

// How a cache stores its elements. kPlain: in the keys' dtype (reshape_and_cache, paged_attention).
// The quantized forms (reshape_and_cache_quant, paged_attention_quant), with the arithmetic of
// csrc/common/quantization.h:
//   kFp8E4M3  float8_e4m3fn bits, one float32 scale per cache (per tensor, given by the caller):
//             q = e4m3(x / scale), a true division (vLLM's fp8 KV cache; static_quant multiplies by
//             the reciprocal instead), round to nearest even, saturating to +-448, NaN to 0x7F.
//   kInt8     int8, one float32 scale per (slot, KV head), written beside the cache: each row of
//             head_size elements is per_token_quant(row, int8), bit for bit: scale = amax / 127,
//             q = int8(x * (127 / amax)); a row holding a NaN gets scale NaN and q 0.
// Dequantized, a cache element is x = float(q) * scale (float32) in either form.
enum class KvCacheFormat : int { kPlain = 0, kFp8E4M3 = 1, kInt8 = 2 };

constexpr bool valid_kv_cache_format(KvCacheFormat f) {
  return f == KvCacheFormat::kPlain || f == KvCacheFormat::kFp8E4M3 || f == KvCacheFormat::kInt8;
}

constexpr const char* kv_cache_format_name(KvCacheFormat f) {
  return f == KvCacheFormat::kFp8E4M3 ? "float8_e4m3fn" : f == KvCacheFormat::kInt8 ? "int8" : "plain";
}

// A token's row in key or value: element offset token * token + head * head (strides in elements).
struct KvTokenStrides {
  int64_t token = 0;
  int64_t head = 0;
};

struct KvCacheParams {
  DType dtype = DType::kFloat32;  // key, value and (format kPlain) both caches; only its size matters for a copy
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

  // The caches' element format (above). kPlain: the caches hold dtype, the scales are unused.
  // Quantized: the caches hold one byte per element (block strides still in elements), and
  //   kFp8E4M3: key_scale, value_scale point at one float32 each (read; device memory on CUDA);
  //   kInt8:    key_scale, value_scale are [num_blocks, block_size, kv_heads] float32 (written at
  //             each written slot's row), each block's [block_size, kv_heads] contiguous, blocks
  //             key_scale_block_stride / value_scale_block_stride elements apart.
  KvCacheFormat format = KvCacheFormat::kPlain;
  float* key_scale = nullptr;
  int64_t key_scale_block_stride = 0;
  float* value_scale = nullptr;
  int64_t value_scale_block_stride = 0;

  // CPU kernel only (the CUDA launcher ignores it): write the cache rows with non-temporal stores
  // where a row allows it (aligned to the SIMD width), for writes much larger than the last-level
  // cache.
  bool stream_out = false;
};

}  // namespace xllm_kernel::kernels
