// Torch-free CUDA kernel of the paged KV-cache write (reshape_and_cache, NHD layout):
//   key_cache[s / block_size, s % block_size] = key[t],  value_cache[...] = value[t]
// for every token t with 0 <= s = slot_mapping[t] < num_slots, copied bit for bit. A slot outside
// [0, num_slots) skips its token: checking it on the host would cost a synchronization, so the
// kernel never writes out of bounds instead. Tokens with the same slot race (each 16-byte piece
// from one of them).
//
// The at::Tensor side (a bridge) checks every argument, fills a KvCacheParams
// (csrc/common/kv_cache.h) and passes the current stream. The launcher validates only what it
// relies on, enqueues one kernel on `stream`, checks the launch, and never synchronizes.
//
//   xllm_kernel::cuda::KvCacheParams p;  // the fields as in csrc/common/kv_cache.h
//   Status s = xllm_kernel::cuda::reshape_and_cache(p, stream);  // device pointers
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "csrc/common/kv_cache.h"
#include "csrc/common/rows.h"

namespace xllm_kernel::cuda {

using ::xllm_kernel::kernels::DType;
using ::xllm_kernel::kernels::Status;

// The parameters, shared with the CPU kernel (csrc/common/kv_cache.h; stream_out is ignored).
using ::xllm_kernel::kernels::KvCacheParams;
using ::xllm_kernel::kernels::KvTokenStrides;

// Enqueues the copy on `stream`; every pointer is device memory of the current device. Returns
// kInvalidArgument with the reason for parameters the kernel cannot handle (unknown dtype, sizes
// < 1, negative counts or strides, a null pointer with tokens > 0, offsets beyond int64), ok
// without launching for zero tokens or slots, kDeviceError for a failing SM-count query or launch,
// otherwise ok.
Status reshape_and_cache(const KvCacheParams& p, cudaStream_t stream);

// How a launch is shaped; exposed so that tests can see (and host-check) it. A token's work is
// 2 * kv_heads * pieces_per_head pieces (key's heads, then value's); a piece is 16 bytes (vector)
// or one element. Block b does the tokens of items b, b + blocks, ...; an item is
// tokens_per_block tokens, each taken by threads_per_token threads that stride over its pieces.
struct KvCachePlan {
  bool vector = false;           // 16-byte pieces (every row and base 16-byte aligned)
  int piece_bytes = 0;           // 16, or the element size
  int64_t pieces_per_head = 0;   // head_size * element size / piece_bytes
  int64_t pieces_per_token = 0;  // 2 * kv_heads * pieces_per_head
  int threads_per_token = 0;     // a power of two <= 32, or a multiple of 32 <= 256
  int tokens_per_block = 0;      // >= 1; threads_per_token * tokens_per_block <= 256
  int threads = 0;               // threads_per_token * tokens_per_block
  int64_t items = 0;             // ceil(tokens / tokens_per_block)
  int64_t blocks = 0;            // grid size: min(items, a few waves of the GPU)
};

// The plan the launcher uses for `p` on a GPU with `sm_count` SMs; all zero for zero tokens or
// slots, or parameters the launcher rejects.
KvCachePlan plan_kv_cache(const KvCacheParams& p, int sm_count);

// Whether 16-byte pieces are safe: head_size * element size a multiple of 16, every base pointer
// 16-byte aligned and so is every stride that is used (token, head, block).
bool kv_cache_vector_access(const KvCacheParams& p);

}  // namespace xllm_kernel::cuda
