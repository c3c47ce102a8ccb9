// CUDA kernel of the paged KV-cache write; the launcher is csrc/cuda/kv_cache/kv_cache.cu.
//
// Thread t of an item's block works on token item * tokens_per_block + t / threads_per_token and,
// as lane t % threads_per_token, on pieces lane, lane + threads_per_token, ... of that token's
// 2 * kv_heads * pieces_per_head pieces (key's heads first, then value's). A piece is 16 bytes
// (plan.vector) or one element, copied as raw bits (never through a float: NaN payloads and
// signed zeros survive). run_block is __host__ __device__ so that a test without a GPU can run
// every block and thread of a plan (test/cuda/kv_cache/kv_cache_kernels_host_test.cpp).
//
// Contracts the launcher guarantees: a valid KvCacheParams with tokens >= 1 and num_slots >= 1,
// and a plan from plan_kv_cache for it (plan.vector only where kv_cache_vector_access holds).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "csrc/cuda/common/macros.cuh"
#include "csrc/cuda/common/vector.cuh"
#include "csrc/cuda/kv_cache/kv_cache.h"

namespace xllm_kernel::cuda::kernels {

// Threads per block at most (KvCachePlan::threads).
inline constexpr int kKvCacheMaxThreads = 256;

struct KvCacheArgs {
  KvCacheParams p;
  KvCachePlan plan;
};

// Copies one piece of kBytes (16, 4 or 2) from src to dst, both aligned to kBytes.
template <int kBytes>
XLLM_CUDA_HD void copy_piece(const unsigned char* src, unsigned char* dst) {
  if constexpr (kBytes == 16) {
    store16(dst, load16(src));
  } else {
    using Word = std::conditional_t<kBytes == 4, uint32_t, uint16_t>;
#ifdef __CUDA_ARCH__
    *reinterpret_cast<Word*>(dst) = *reinterpret_cast<const Word*>(src);
#else
    Word w;
    std::memcpy(&w, src, sizeof(w));
    std::memcpy(dst, &w, sizeof(w));
    if (host_store_observer != nullptr) host_store_observer(dst, sizeof(w));
#endif
  }
}

// Thread t's share of work item `item`.
template <int kBytes>
XLLM_CUDA_HD void run_item(const KvCacheArgs& a, int64_t item, int t) {
  const KvCacheParams& p = a.p;
  const KvCachePlan& plan = a.plan;
  const int64_t token = item * plan.tokens_per_block + t / plan.threads_per_token;
  if (token >= p.tokens) return;
  const int64_t slot = p.slot_mapping[token * p.slot_stride];
  if (slot < 0 || slot >= p.num_slots) return;  // padding, or out of range: skipped
  const int64_t block = slot / p.block_size, offset = slot - block * p.block_size;
  const int64_t es = p.dtype == DType::kFloat32 ? 4 : 2;  // element_size() is host-only
  const int64_t per_tensor = p.kv_heads * plan.pieces_per_head;
  // Element offsets of the token's rows; the cache row's heads are adjacent.
  const int64_t key_row = token * p.key_strides.token, value_row = token * p.value_strides.token;
  const int64_t key_slot = block * p.key_cache_block_stride + offset * p.kv_heads * p.head_size;
  const int64_t value_slot = block * p.value_cache_block_stride + offset * p.kv_heads * p.head_size;
  for (int64_t q = t % plan.threads_per_token; q < plan.pieces_per_token; q += plan.threads_per_token) {
    const bool is_value = q >= per_tensor;
    const int64_t r = is_value ? q - per_tensor : q;
    const int64_t h = r / plan.pieces_per_head, j = r - h * plan.pieces_per_head;
    const int64_t src = (is_value ? value_row + h * p.value_strides.head : key_row + h * p.key_strides.head) * es;
    const int64_t dst = ((is_value ? value_slot : key_slot) + h * p.head_size) * es;
    const auto* in = static_cast<const unsigned char*>(is_value ? p.value : p.key);
    auto* out = static_cast<unsigned char*>(is_value ? p.value_cache : p.key_cache);
    copy_piece<kBytes>(in + src + j * kBytes, out + dst + j * kBytes);
  }
}

// Block `block` of a grid of `grid` blocks, thread `t`: its items in grid-sized steps.
template <int kBytes>
XLLM_CUDA_HD void run_block(const KvCacheArgs& a, int64_t block, int64_t grid, int t) {
  for (int64_t item = block; item < a.plan.items; item += grid) run_item<kBytes>(a, item, t);
}

// Calls f(std::integral_constant<int, kBytes>{}) for the plan's piece size; `otherwise` for none.
template <class R, class F>
R dispatch_piece(const KvCachePlan& plan, R otherwise, F&& f) {
  switch (plan.piece_bytes) {
    case 16: return f(std::integral_constant<int, 16>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 2: return f(std::integral_constant<int, 2>{});
  }
  return otherwise;
}

#ifdef __CUDACC__

template <int kBytes>
__global__ void __launch_bounds__(kKvCacheMaxThreads) reshape_and_cache_kernel(const __grid_constant__ KvCacheArgs a) {
  run_block<kBytes>(a, blockIdx.x, gridDim.x, static_cast<int>(threadIdx.x));
}

#endif  // __CUDACC__

}  // namespace xllm_kernel::cuda::kernels
