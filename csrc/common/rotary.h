// The parameters of the rotary embedding kernels (vLLM's rotary_embedding): one torch-free struct
// for the CPU kernel (csrc/cpu/rotary/rotary.h) and the CUDA launcher (csrc/cuda/rotary/rotary.h).
// The bridges fill it once from checked tensors (kernel_params in src/ops/rotary/internal.h).
//
//   xllm_kernel::kernels::RotaryParams p;
//   p.dtype = DType::kBFloat16; p.cache_dtype = DType::kFloat32;
//   p.tokens = tokens; p.head_size = 128; p.rot_dim = 128; p.is_neox = true;
//   p.positions = pos; p.position_stride = 1;
//   p.cos_sin_cache = cache; p.cache_stride = 128; p.max_position = 4096;  // [4096, 128]
//   p.query = q; p.query_heads = 32; p.query_token_stride = 32 * 128 + 2 * 8 * 128;
//   p.query_head_stride = 128;                                             // a slice of a fused qkv
//   p.key = k; p.key_heads = 8; p.key_token_stride = p.query_token_stride; p.key_head_stride = 128;
//   xllm_kernel::cpu::rotary_embedding(p, 0, tokens);  // or xllm_kernel::cuda::rotary_embedding(p, stream)
#pragma once

#include <cstdint>

#include "csrc/common/rows.h"

namespace xllm_kernel::kernels {

struct RotaryParams {
  DType dtype = DType::kFloat32;        // query and key
  DType cache_dtype = DType::kFloat32;  // float32 or dtype
  int64_t tokens = 0;                   // 0 tokens: nothing to do
  int64_t head_size = 0;                // >= rot_dim
  int64_t rot_dim = 0;                  // even, >= 2: the rotated leading part of each head
  bool is_neox = true;                  // halves (NeoX) or interleaved pairs (GPT-J)

  const int64_t* positions = nullptr;  // [tokens]
  int64_t position_stride = 1;         // in elements

  const void* cos_sin_cache = nullptr;  // [max_position, rot_dim], last dim contiguous
  int64_t cache_stride = 0;             // row stride, in elements
  int64_t max_position = 0;

  void* query = nullptr;    // [tokens, query_heads, head_size], last dim contiguous
  int64_t query_heads = 0;  // >= 1
  int64_t query_token_stride = 0;
  int64_t query_head_stride = 0;

  void* key = nullptr;  // [tokens, key_heads, head_size] or null (key_heads 0)
  int64_t key_heads = 0;
  int64_t key_token_stride = 0;
  int64_t key_head_stride = 0;
  // The rotated elements of query and key must not overlap (each is written once, in place).
};

}  // namespace xllm_kernel::kernels
