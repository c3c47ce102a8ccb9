// CUDA kernel of the rotary embedding; the launcher is in csrc/cuda/rotary/rotary.cu.
//
// Block b rotates tokens b, b + gridDim.x, ...; in a token, thread t does pieces t, t + threads,
// ... (RotaryPlan). Every rotated element of a launch belongs to exactly one (token, thread,
// piece); the cos/sin row of the token is read element by element (it is shared by every head of
// the token, so it stays in L1). run_block is __host__ __device__ so that a test without a GPU can
// run every block and thread of a plan (test/cuda/rotary/rotary_kernels_host_test.cpp).
//
// Contracts the launcher guarantees: valid params with tokens >= 1; plan from plan_rotary (so
// plan.vector only where vector_access holds).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "csrc/cuda/common/codec.cuh"
#include "csrc/cuda/common/macros.cuh"
#include "csrc/cuda/common/vector.cuh"
#include "csrc/cuda/rotary/rotary.h"

namespace xllm_kernel::cuda::kernels {

inline constexpr int kRotaryMaxThreads = 256;

struct RotaryArgs {
  RotaryParams p;
  RotaryPlan plan;
};

// (x1, x2) rotated by (c, s) in float32, with the fused multiply-adds the device would contract to
// anyway, written out so that the host runs the same arithmetic.
XLLM_CUDA_HD void rotate(float x1, float x2, float c, float s, float& o1, float& o2) {
  o1 = fmaf(x1, c, -(x2 * s));
  o2 = fmaf(x2, c, x1 * s);
}

// Piece `k` of head x. V: elements per access (NeoX) or per piece (GPT-J).
template <class T, class C, bool kNeox, int V>
XLLM_CUDA_HD void rotate_piece(T* x, const C* cos, const C* sin, int64_t half, int64_t k) {
  if constexpr (kNeox) {
    const int64_t i = k * V;
    float a[V], b[V], o1[V], o2[V];
    load<V>(x + i, a);
    load<V>(x + half + i, b);
XLLM_CUDA_UNROLL
    for (int j = 0; j < V; ++j) {
      rotate(a[j], b[j], Codec<C>::to_float(cos[i + j]), Codec<C>::to_float(sin[i + j]), o1[j], o2[j]);
    }
    store<V>(x + i, o1);
    store<V>(x + half + i, o2);
  } else {
    const int64_t e = k * V, pair = e / 2;
    float v[V], o[V];
    load<V>(x + e, v);
XLLM_CUDA_UNROLL
    for (int j = 0; j < V / 2; ++j) {
      rotate(v[2 * j], v[2 * j + 1], Codec<C>::to_float(cos[pair + j]), Codec<C>::to_float(sin[pair + j]), o[2 * j],
             o[2 * j + 1]);
    }
    store<V>(x + e, o);
  }
}

// Thread t's pieces of token `token`.
template <class T, class C, bool kNeox, int V>
XLLM_CUDA_HD void run_token(const RotaryArgs& a, int64_t token, int t) {
  const RotaryParams& p = a.p;
  const int64_t pos = p.positions[token * p.position_stride];
  if (pos < 0 || pos >= p.max_position) return;  // rows left unchanged (rotary.h)
  const int64_t half = p.rot_dim / 2;
  const C* cos = static_cast<const C*>(p.cos_sin_cache) + pos * p.cache_stride;
  const C* sin = cos + half;
  const int per_head = a.plan.pieces_per_head;
  for (int w = t; w < a.plan.pieces_per_token; w += a.plan.threads) {
    const int head = w / per_head;
    const int k = w - head * per_head;
    T* x = head < p.query_heads
               ? static_cast<T*>(p.query) + token * p.query_token_stride + head * p.query_head_stride
               : static_cast<T*>(p.key) + token * p.key_token_stride + (head - p.query_heads) * p.key_head_stride;
    rotate_piece<T, C, kNeox, V>(x, cos, sin, half, k);
  }
}

template <class T, class C, bool kNeox, int V>
XLLM_CUDA_HD void run_block(const RotaryArgs& a, int64_t block, int64_t grid, int t) {
  for (int64_t token = block; token < a.p.tokens; token += grid) run_token<T, C, kNeox, V>(a, token, t);
}

template <class T, class C, bool kNeox, int V>
struct RotaryVariant {
  using type = T;
  using cache_type = C;
  static constexpr bool neox = kNeox;
  static constexpr int piece = V;
};

namespace detail {
template <class T, class C, class R, class F>
R dispatch_rotary_layout(const RotaryArgs& a, R otherwise, F&& f) {
  const int piece = a.plan.piece;
  if (a.p.is_neox) {
    if (a.plan.vector) return piece == kVec<T> ? f(RotaryVariant<T, C, true, kVec<T>>{}) : otherwise;
    return piece == 1 ? f(RotaryVariant<T, C, true, 1>{}) : otherwise;
  }
  if (a.plan.vector) return piece == kVec<T> ? f(RotaryVariant<T, C, false, kVec<T>>{}) : otherwise;
  return piece == 2 ? f(RotaryVariant<T, C, false, 2>{}) : otherwise;
}
}  // namespace detail

// Calls f(RotaryVariant<...>{}) for the variant that runs `a` (dtypes, layout, plan) and returns its
// result; `otherwise` where none matches. Host code: the launcher, and tests that run the same
// variant on the host.
template <class R, class F>
R dispatch_rotary(const RotaryArgs& a, R otherwise, F&& f) {
  return dispatch_dtype(a.p.dtype, otherwise, [&](auto element) {
    using T = typename decltype(element)::type;
    if (a.p.cache_dtype == ::xllm_kernel::kernels::DType::kFloat32) {
      return detail::dispatch_rotary_layout<T, float>(a, otherwise, f);
    }
    if constexpr (!std::is_same_v<T, float>) {
      if (dispatch_dtype(a.p.cache_dtype, false, [](auto c) { return std::is_same_v<typename decltype(c)::type, T>; })) {
        return detail::dispatch_rotary_layout<T, T>(a, otherwise, f);
      }
    }
    return otherwise;
  });
}

#ifdef __CUDACC__

template <class T, class C, bool kNeox, int V>
__global__ void __launch_bounds__(kRotaryMaxThreads) rotary_embedding_kernel(const __grid_constant__ RotaryArgs a) {
  run_block<T, C, kNeox, V>(a, blockIdx.x, gridDim.x, static_cast<int>(threadIdx.x));
}

#endif  // __CUDACC__

}  // namespace xllm_kernel::cuda::kernels
