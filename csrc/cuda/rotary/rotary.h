// Torch-free CUDA kernel of the rotary embedding (vLLM's rotary_embedding): query and key rotated
// in place, token by token, with the cos/sin row of the token's position. For a head x, with
// half = rot_dim / 2, c = cache[pos][i], s = cache[pos][half + i], for 0 <= i < half:
//   NeoX (is_neox):    (x[i], x[half + i]) <- (x[i] c - x[half + i] s, x[half + i] c + x[i] s)
//   GPT-J (!is_neox):  (x[2i], x[2i + 1])  <- (x[2i] c - x[2i + 1] s,  x[2i + 1] c + x[2i] s)
// Elements rot_dim <= j < head_size are neither read nor written.
//
// The at::Tensor side (a bridge) checks every argument and passes the current stream. The launcher
// validates only what the kernel relies on, enqueues one kernel on `stream`, checks the launch and
// never synchronizes.
//
//   xllm_kernel::cuda::RotaryParams p;
//   p.dtype = DType::kBFloat16; p.cache_dtype = DType::kFloat32;
//   p.tokens = tokens; p.head_size = p.rot_dim = 128; p.is_neox = true;
//   p.positions = pos; p.position_stride = 1;
//   p.cos_sin_cache = cache; p.cache_stride = 128; p.max_position = 4096;
//   p.query = q; p.query_heads = 32; p.query_token_stride = 6144; p.query_head_stride = 128;
//   p.key = k; p.key_heads = 8; p.key_token_stride = 6144; p.key_head_stride = 128;
//   cudaError_t e = xllm_kernel::cuda::rotary_embedding(p, stream);  // device pointers, current device
//
// Numerics: float32, x1 c - x2 s as fmaf(x1, c, -(x2 s)) and x2 c + x1 s as fmaf(x2, c, x1 s) (within
// 2 * 2^-24 (|x1 c| + |x2 s|) of the exact value), then one rounding to the dtype (nearest even).
//
// Positions outside [0, max_position): checking them on the host would cost a synchronization, so
// the kernel skips such a token: its query and key rows are left unchanged and nothing outside the
// cache is read.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "csrc/common/rows.h"

namespace xllm_kernel::cuda {

using ::xllm_kernel::kernels::DType;

struct RotaryParams {
  DType dtype = DType::kFloat32;        // query and key
  DType cache_dtype = DType::kFloat32;  // float32 or dtype
  int64_t tokens = 0;                   // 0 launches nothing
  int64_t head_size = 0;                // >= rot_dim
  int64_t rot_dim = 0;                  // even, >= 2
  bool is_neox = true;

  const int64_t* positions = nullptr;  // [tokens], position_stride apart
  int64_t position_stride = 1;

  const void* cos_sin_cache = nullptr;  // [max_position, rot_dim], rows cache_stride apart
  int64_t cache_stride = 0;
  int64_t max_position = 0;

  void* query = nullptr;  // [tokens, query_heads, head_size], last dim contiguous
  int64_t query_heads = 0;
  int64_t query_token_stride = 0;
  int64_t query_head_stride = 0;

  void* key = nullptr;  // the same with key_heads heads, or null (key_heads 0); must not overlap query
  int64_t key_heads = 0;
  int64_t key_token_stride = 0;
  int64_t key_head_stride = 0;
};

// Enqueues the rotation on `stream`. Every pointer is device memory of the current device.
// Returns cudaErrorInvalidValue for parameters the kernel cannot handle (unknown dtype, a cache
// dtype other than float32 or dtype, rot_dim odd or outside [2, head_size], no query heads, key
// and key_heads disagreeing, null pointers with tokens > 0, more than 2^30 pieces per token),
// cudaSuccess without launching for zero tokens, otherwise the launch's cudaGetLastError().
cudaError_t rotary_embedding(const RotaryParams& p, cudaStream_t stream);

// How a launch is shaped; exposed so that tests can host-check it. Block b rotates tokens b,
// b + blocks, ...; in a token, thread t does pieces t, t + threads, ... of the token's heads
// (query heads, then key heads). A piece is `piece` pairs (NeoX: two accesses of `piece`
// elements, at i and half + i) or `piece` elements (GPT-J: piece / 2 pairs).
struct RotaryPlan {
  bool vector = false;          // 16-byte accesses (piece = 16 / element size)
  int piece = 0;                // NeoX: 1 (scalar) or 16 / element size; GPT-J: 2 or 16 / element size
  int pieces_per_head = 0;      // NeoX: half / piece; GPT-J: rot_dim / piece
  int pieces_per_token = 0;     // pieces_per_head * (query_heads + key_heads)
  int threads = 0;              // a multiple of 32, <= 256
  int64_t blocks = 0;           // min(tokens, 16 waves of resident blocks)
};

// The plan the launcher uses for `p` on a GPU with `sm_count` SMs; all zero for zero tokens or
// parameters the launcher rejects.
RotaryPlan plan_rotary(const RotaryParams& p, int sm_count);

// Whether 16-byte accesses are safe for every head: query and key 16-byte aligned, their token
// and head strides multiples of 16 bytes, and the pieces (NeoX: half; GPT-J: rot_dim) whole
// multiples of 16 bytes.
bool vector_access(const RotaryParams& p);

}  // namespace xllm_kernel::cuda
