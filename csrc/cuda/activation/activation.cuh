// CUDA kernels of the gated activations; the launchers are in csrc/cuda/activation/activation.cu.
//
// A launch is a list of work items (ActivationPlan): rows_per_block rows times one column chunk.
// Block b does items b, b + gridDim.x, ...; in an item, thread t works on row
// t / threads_per_row of the item's rows and, as lane t % threads_per_row, on pieces
// lane, lane + threads_per_row, ... (at most per_thread of them) of the chunk. A piece is 16
// bytes (plan.vector) or one element. Every output element of the launch belongs to exactly one
// (item, thread, piece). run_block is __host__ __device__ so that a test without a GPU can run
// every block and thread of a plan (test/cuda/activation/activation_kernels_host_test.cpp).
//
// Math: float32 throughout and one rounding to T. No packed bf16/f16 arithmetic: it would round
// after each step (breaking the one-rounding contract), and it would not pay. At bf16 an H200's
// bandwidth allows ~0.8e12 output elements/s (6 bytes each); the float32 path is ~20-30
// instructions per element (precise expf/erff/tanhf and the IEEE division are short sequences
// around one or two SFU operations), which the SMs issue at ~1.1-1.6e12 elements/s (estimates;
// the benchmark is the judge). Packed bf16 would halve only the few plain multiplies, not the
// transcendental sequences that dominate.
//
// Contracts the launcher guarantees: d >= 1; rows >= 1; a valid row shape; plan from
// plan_activation for these params (so plan.vector only where vector_access holds).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "csrc/cuda/activation/activation.h"
#include "csrc/cuda/common/codec.cuh"
#include "csrc/cuda/common/macros.cuh"
#include "csrc/cuda/common/rows.cuh"
#include "csrc/cuda/common/vector.cuh"

namespace xllm_kernel::cuda::kernels {

// The gated operations (out = act(gate) * up) and those without the gate (out = act(input)).
enum class Act { kSilu, kGelu, kGeluTanh, kPlainGelu, kPlainGeluTanh, kQuickGelu };

XLLM_CUDA_HD constexpr bool gated(Act act) { return act == Act::kSilu || act == Act::kGelu || act == Act::kGeluTanh; }

// Threads per block at most (ActivationPlan::threads).
inline constexpr int kActivationMaxThreads = 256;
// Pieces per thread at most on the vector path: 2 keeps a thread at <= 64 registers (4 blocks of
// 256 per SM) with four 16-byte loads in flight; 4 needs ~100 registers and halves occupancy for
// no more bytes in flight per SM. The scalar path allows 4.
inline constexpr int kMaxPerThreadVector = 2;
inline constexpr int kMaxPerThreadScalar = 4;

// act(a) in float32. expf, erff and tanhf are CUDA's precise versions on the device (2 ulp) and
// the C library's on the host (tests).
template <Act kAct>
XLLM_CUDA_HD float activate(float a) {
  if constexpr (kAct == Act::kQuickGelu) {
    // a / (1 + e^(-1.702 a)): quick_gelu(a) = a * sigmoid(1.702 a), as silu for the limits.
    return a / (1.0f + expf(-1.702f * a));
  } else if constexpr (kAct == Act::kSilu) {
    // a / (1 + e^-a). Below a = -88.7, e^-a overflows to inf and the quotient is -0 (the exact
    // value is below 1e-36 in magnitude); a = -inf gives NaN, as inf / inf.
    return a / (1.0f + expf(-a));
  } else if constexpr (kAct == Act::kGelu || kAct == Act::kPlainGelu) {
    // 0.5 a (1 + erf(a / sqrt 2)) = 0.5 a erfc(-a / sqrt 2): erfc keeps its relative accuracy
    // (4 ulp) where 1 + erf would cancel (a < 0), down to a = -13.2, below which the result is
    // smaller than float32's subnormals and erfcf gives 0 (a * 0 = -0).
    constexpr float kSqrtHalf = 0.70710678118654752440f;
    return 0.5f * a * erfcf(-a * kSqrtHalf);
  } else {
    // 0.5 a (1 + tanh(v)) = a / (1 + e^(-2 v)), v = sqrt(2 / pi) (a + 0.044715 a^3): no
    // cancellation for a < 0. e^(-2 v) overflows to inf below a = -10.4 or so, giving -0 where the
    // exact value is below 1e-38 anyway.
    constexpr float kTwoSqrt2OverPi = 1.5957691216057308f;  // 2 sqrt(2 / pi)
    constexpr float kCubic = 0.044715f;
    const float twice_inner = kTwoSqrt2OverPi * (a + kCubic * a * a * a);
    return a / (1.0f + expf(-twice_inner));
  }
}

// The activation with the contracts' limits: act(+inf) = +inf and act(-inf) = 0 (the formulas
// above give NaN there, as -inf * 0 or inf / inf); NaN stays NaN. The gated operations multiply
// this by the up projection (IEEE: a gate of +inf times an up of 0 is NaN).
template <Act kAct>
XLLM_CUDA_HD float activate_limited(float a) {
  if (a == -__builtin_inff()) return 0.0f;
  if (a == __builtin_inff()) return a;
  return activate<kAct>(a);
}

// Kernel arguments: the launcher's params and plan.
struct ActivationArgs {
  ActivationParams p;
  ActivationPlan plan;
};

// Thread `t`'s share of work item `item`. V = elements per piece (kVec<T> or 1), P = per_thread.
// All loads of the thread are issued before any store: out and input have the same element type,
// so the compiler could not move a load above an earlier store by itself.
template <Act kAct, class T, int V, int P>
XLLM_CUDA_HD void run_item(const ActivationArgs& a, int64_t item, int t) {
  const ActivationParams& p = a.p;
  const ActivationPlan& plan = a.plan;
  const int64_t row_block = plan.chunks == 1 ? item : item / plan.chunks;  // skip a 64-bit division
  const int64_t chunk = item - row_block * plan.chunks;
  const int64_t row = row_block * plan.rows_per_block + t / plan.threads_per_row;
  if (row >= p.shape.rows) return;
  const int lane = t % plan.threads_per_row;

  int64_t in_offset = 0, out_offset = 0;
  for_each_row_index(row, p.shape.ndim, p.shape.sizes, [&](int dim, int64_t index) {
    in_offset += index * p.input_strides.s[dim];
    out_offset += index * p.out_strides.s[dim];
  });
  const T* gate = static_cast<const T*>(p.input) + in_offset;  // [d]
  const T* up = gate + p.d;                                     // [d], gated operations only
  T* out = static_cast<T*>(p.out) + out_offset;                 // [d]

  // Piece k starts at element first + k * stride. On the vector path d is a multiple of V, so a
  // piece that starts inside the row ends inside it.
  const int64_t first = chunk * plan.chunk + int64_t{lane} * V;
  const int64_t stride = int64_t{plan.threads_per_row} * V;
  float x[P][V], y[P][V];
XLLM_CUDA_UNROLL
  for (int k = 0; k < P; ++k) {
    const int64_t e = first + k * stride;
    if (e < p.d) {
      load<V>(gate + e, x[k]);
      if constexpr (gated(kAct)) load<V>(up + e, y[k]);
    }
  }
XLLM_CUDA_UNROLL
  for (int k = 0; k < P; ++k) {
    const int64_t e = first + k * stride;
    if (e < p.d) {
XLLM_CUDA_UNROLL
      for (int i = 0; i < V; ++i) {
        x[k][i] = gated(kAct) ? activate_limited<kAct>(x[k][i]) * y[k][i] : activate_limited<kAct>(x[k][i]);
      }
      store<V>(out + e, x[k]);
    }
  }
}

// Block `block` of a grid of `grid` blocks, thread `t`: its items in grid-sized steps.
template <Act kAct, class T, int V, int P>
XLLM_CUDA_HD void run_block(const ActivationArgs& a, int64_t block, int64_t grid, int t) {
  for (int64_t item = block; item < a.plan.items; item += grid) run_item<kAct, T, V, P>(a, item, t);
}

// One compiled variant of the kernel: activation, element type, elements per piece, pieces per
// thread.
template <Act kAct, class T, int V, int P>
struct Variant {
  static constexpr Act act = kAct;
  using type = T;
  static constexpr int piece = V;
  static constexpr int per_thread = P;
};

namespace detail {
template <Act kAct, class T, int V, class R, class F>
R dispatch_per_thread(int per_thread, R otherwise, F&& f) {
  switch (per_thread) {
    case 1: return f(Variant<kAct, T, V, 1>{});
    case 2: return f(Variant<kAct, T, V, 2>{});
    case 4:
      if constexpr (V == 1) return f(Variant<kAct, T, V, 4>{});  // see kMaxPerThreadVector
      break;
  }
  return otherwise;
}
}  // namespace detail

// Calls f(Variant<...>{}) for the variant that runs `a` (its dtype and plan) and returns its
// result; `otherwise` for a dtype or plan no variant matches. Host code: the launcher, and tests
// that run the same variant on the host.
template <Act kAct, class R, class F>
R dispatch_variant(const ActivationArgs& a, R otherwise, F&& f) {
  return dispatch_dtype(a.p.dtype, otherwise, [&](auto element) {
    using T = typename decltype(element)::type;
    if (a.plan.vector) {
      if (a.plan.piece != kVec<T>) return otherwise;
      return detail::dispatch_per_thread<kAct, T, kVec<T>>(a.plan.per_thread, otherwise, f);
    }
    if (a.plan.piece != 1) return otherwise;
    return detail::dispatch_per_thread<kAct, T, 1>(a.plan.per_thread, otherwise, f);
  });
}

#ifdef __CUDACC__

template <Act kAct, class T, int V, int P>
__global__ void __launch_bounds__(kActivationMaxThreads) act_and_mul(const __grid_constant__ ActivationArgs a) {
  run_block<kAct, T, V, P>(a, blockIdx.x, gridDim.x, static_cast<int>(threadIdx.x));
}

#endif  // __CUDACC__

}  // namespace xllm_kernel::cuda::kernels
