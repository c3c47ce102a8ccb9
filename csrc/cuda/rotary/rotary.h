// Torch-free CUDA kernel of the rotary embedding (vLLM's rotary_embedding): query and key rotated
// in place, token by token, with the cos/sin row of the token's position. For a head x, with
// half = rot_dim / 2, c = cache[pos][i], s = cache[pos][half + i], for 0 <= i < half:
//   NeoX (is_neox):    (x[i], x[half + i]) <- (x[i] c - x[half + i] s, x[half + i] c + x[i] s)
//   GPT-J (!is_neox):  (x[2i], x[2i + 1])  <- (x[2i] c - x[2i + 1] s,  x[2i + 1] c + x[2i] s)
// Elements rot_dim <= j < head_size are neither read nor written.
//
// The at::Tensor side (a bridge) checks every argument, fills a RotaryParams (csrc/common/rotary.h)
// and passes the current stream. The launcher validates only what the kernel relies on, enqueues
// one kernel on `stream`, checks the launch and never synchronizes.
//
//   xllm_kernel::cuda::RotaryParams p;  // the fields as in csrc/common/rotary.h
//   Status s = xllm_kernel::cuda::rotary_embedding(p, stream);  // device pointers, current device
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

#include "csrc/common/rotary.h"
#include "csrc/common/rows.h"

namespace xllm_kernel::cuda {

using ::xllm_kernel::kernels::DType;
using ::xllm_kernel::kernels::Status;

// The parameters, shared with the CPU kernel (csrc/common/rotary.h).
using ::xllm_kernel::kernels::RotaryParams;

// Enqueues the rotation on `stream`. Every pointer is device memory of the current device.
// Returns kInvalidArgument with the reason for parameters the kernel cannot handle (unknown dtype,
// a cache dtype other than float32 or dtype, rot_dim odd or outside [2, head_size], no query heads,
// key and key_heads disagreeing, negative tokens or max_position, null pointers with tokens > 0,
// more than 2^30 pieces per token), ok without launching for zero tokens, kDeviceError for a
// failing SM-count query or launch, otherwise ok.
Status rotary_embedding(const RotaryParams& p, cudaStream_t stream);

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
