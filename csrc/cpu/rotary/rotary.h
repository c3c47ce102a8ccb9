// Torch-free CPU kernel of the rotary position embedding (Highway, runtime ISA dispatch), vLLM's
// rotary_embedding: query and key rotated in place, token by token, with the cos/sin row of the
// token's position.
//
// For a head x (head_size elements) of token t, with half = rot_dim / 2, c = cos_sin_cache[pos][i],
// s = cos_sin_cache[pos][half + i], pos = positions[t], for 0 <= i < half:
//   NeoX (is_neox):    (x[i], x[half + i])     <- (x[i] c - x[half + i] s, x[half + i] c + x[i] s)
//   GPT-J (!is_neox):  (x[2i], x[2i + 1])      <- (x[2i] c - x[2i + 1] s,  x[2i + 1] c + x[2i] s)
// Elements rot_dim <= j < head_size are neither read nor written.
//
// The at::Tensor side (a bridge) checks every argument (positions in range included), fills a
// RotaryParams and splits the tokens over threads. Kernels assume valid arguments; a status other
// than ok names what a buggy bridge got wrong.
//
//   xllm_kernel::cpu::RotaryParams p;
//   p.dtype = DType::kBFloat16; p.cache_dtype = DType::kFloat32;
//   p.tokens = tokens; p.head_size = 128; p.rot_dim = 128; p.is_neox = true;
//   p.positions = pos; p.position_stride = 1;
//   p.cache = cache; p.cache_stride = 128; p.max_position = 4096;     // [4096, 128]
//   p.query = q; p.query_heads = 32; p.query_token_stride = 32 * 128 + 2 * 8 * 128;
//   p.query_head_stride = 128;                                        // a slice of a fused qkv
//   p.key = k; p.key_heads = 8; p.key_token_stride = p.query_token_stride; p.key_head_stride = 128;
//   xllm_kernel::cpu::rotary_embedding(p, 0, tokens);
//
// Numerics. query and key share the dtype (float32, bfloat16 or float16); the cache is float32
// or that dtype. All arithmetic is in float32 with fused multiply-adds where the target has them
// (x1 c - x2 s is MulSub(x1, c, x2 s)), rounded once to the dtype (round to nearest even): the
// float32 value is within 2 * 2^-24 (|x1 c| + |x2 s|) of the exact one (two roundings at most),
// then one rounding to the dtype. NaN and infinity propagate as IEEE arithmetic makes them.
//
// Positions. A token whose position is outside [0, max_position) is skipped (its rows are left
// unchanged): the kernel never reads outside the cache. The CPU bridges reject such positions with
// an error before calling, so this is a defence, not a semantics.
#pragma once

#include <cstdint>

#include "csrc/common/rows.h"

namespace xllm_kernel::cpu {

using kernels::DType;
using kernels::Status;

struct RotaryParams {
  DType dtype = DType::kFloat32;        // query and key
  DType cache_dtype = DType::kFloat32;  // float32 or dtype
  int64_t tokens = 0;
  int64_t head_size = 0;  // >= rot_dim
  int64_t rot_dim = 0;    // even, >= 2: the rotated leading part of each head
  bool is_neox = true;    // halves (NeoX) or interleaved pairs (GPT-J)

  const int64_t* positions = nullptr;  // [tokens]
  int64_t position_stride = 1;         // in elements

  const void* cos_sin_cache = nullptr;  // [max_position, rot_dim], last dim contiguous
  int64_t cache_stride = 0;             // row stride, in elements
  int64_t max_position = 0;

  void* query = nullptr;  // [tokens, query_heads, head_size], last dim contiguous
  int64_t query_heads = 0;  // >= 1
  int64_t query_token_stride = 0;
  int64_t query_head_stride = 0;

  void* key = nullptr;   // [tokens, key_heads, head_size] or null (key_heads 0)
  int64_t key_heads = 0;
  int64_t key_token_stride = 0;
  int64_t key_head_stride = 0;
  // The rotated elements of query and key must not overlap (each is written once, in place).
};

// Rotates tokens [token_begin, token_end); may run concurrently on disjoint ranges. Pointers may be
// null when the range is empty.
Status rotary_embedding(const RotaryParams& p, int64_t token_begin, int64_t token_end);

}  // namespace xllm_kernel::cpu
