// Torch-free CUDA kernel of the paged KV-cache write (reshape_and_cache, NHD layout):
//   key_cache[s / block_size, s % block_size] = key[t],  value_cache[...] = value[t]
// for every token t with 0 <= s = slot_mapping[t] < num_slots, copied bit for bit. A slot outside
// [0, num_slots) skips its token: checking it on the host would cost a synchronization, so the
// kernel never writes out of bounds instead. Tokens with the same slot race (each 16-byte piece
// from one of them).
//
// Quantized caches (p.format, reshape_and_cache_quant; csrc/common/kv_cache.h): each (token, KV
// head) row of key and value is quantized on its way into the cache, with the quantization
// family's device arithmetic (csrc/cuda/quantization/quantization.cuh): kFp8E4M3 q = e4m3(x /
// *scale), the scale read from device memory (never on the host); kInt8 per_token_quant(row, int8)
// bit for bit, its scale written beside the cache. Slots as above; tokens with the same slot race
// (each 16-byte piece, and each scale, from one of them).
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

// Enqueues the copy (or the quantized write) on `stream`; every pointer is device memory of the
// current device. Returns kInvalidArgument with the reason for parameters the kernel cannot handle
// (unknown dtype or cache format, sizes < 1, negative counts or strides, a null pointer with tokens
// and slots > 0, a quantized format's scales included, offsets beyond int64), ok without launching
// for zero tokens or slots, kDeviceError for a failing SM-count query or launch, otherwise ok.
Status reshape_and_cache(const KvCacheParams& p, cudaStream_t stream);

// How a launch is shaped; exposed so that tests can see (and host-check) it.
//
// kPlain: a token's work is 2 * kv_heads * pieces_per_head pieces (key's heads, then value's); a
// piece is 16 bytes (vector) or one element. Block b does the tokens of items b, b + blocks, ...;
// an item is tokens_per_block tokens, each taken by threads_per_token threads that stride over its
// pieces.
//
// Quantized: the work is rows = tokens * 2 * kv_heads rows of head_size elements (token t's key
// heads, then its value heads: row (t * 2 + tensor) * kv_heads + head); a piece is 16 elements
// (vector: 16 bytes of the cache) or one. Block b does the rows of items b, b + blocks, ...; an
// item is rows_per_block rows, each taken by threads_per_row adjacent lanes of one warp that stride
// over its pieces (and, int8, reduce its amax across them). threads_per_token and tokens_per_block
// are 0.
struct KvCachePlan {
  bool vector = false;           // 16-byte pieces (plain) / 16-element pieces (quantized)
  int piece_bytes = 0;           // plain: 16, or the element size; quantized: cache bytes, 16 or 1
  int64_t pieces_per_head = 0;   // plain: head_size * element size / piece_bytes; quantized: head_size / piece_bytes
  int64_t pieces_per_token = 0;  // 2 * kv_heads * pieces_per_head
  int threads_per_token = 0;     // plain: a power of two <= 32, or a multiple of 32 <= 256
  int tokens_per_block = 0;      // plain: >= 1; threads_per_token * tokens_per_block <= 256
  int threads_per_row = 0;       // quantized: a power of two <= 32
  int rows_per_block = 0;        // quantized: >= 1; threads_per_row * rows_per_block <= 256
  int64_t rows = 0;              // quantized: tokens * 2 * kv_heads
  int threads = 0;               // threads_per_token * tokens_per_block, or threads_per_row * rows_per_block
  int64_t items = 0;             // ceil(tokens / tokens_per_block), or ceil(rows / rows_per_block)
  int64_t blocks = 0;            // grid size: min(items, a few waves of the GPU)
};

// The plan the launcher uses for `p` on a GPU with `sm_count` SMs; all zero for zero tokens or
// slots, or parameters the launcher rejects.
KvCachePlan plan_kv_cache(const KvCacheParams& p, int sm_count);

// Whether 16-byte pieces are safe: head_size * element size a multiple of 16, every base pointer
// 16-byte aligned and so is every stride that is used (token, head, block). Quantized formats:
// 16-element pieces, so head_size a multiple of 16, the inputs as above and the caches' bases and
// block strides (in bytes: elements) multiples of 16.
bool kv_cache_vector_access(const KvCacheParams& p);

}  // namespace xllm_kernel::cuda
