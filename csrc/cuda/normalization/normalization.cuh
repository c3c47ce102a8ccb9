// CUDA normalization kernels; the launchers are in csrc/cuda/normalization/normalization.cu.
//
// A row belongs to a group of `width` threads (one warp, or one block). Its work is a short
// program: one or two per-thread partial sums, each summed over the group, then a write pass.
// The passes are __host__ __device__ so that a test on a machine without a GPU can run them lane
// by lane (test/cuda/normalization/normalization_kernels_host_test.cpp); only the group sums
// (csrc/cuda/common/reduce.cuh) and the grid loop are device-only.
//
// Contracts the launcher guarantees: hidden >= 1; rows >= 1; 1 <= row_ndim <= kMaxRowDims;
// weight_dtype is float32 or dtype; blockDim.x is a multiple of 32 and at most 1024.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "csrc/cuda/common/codec.cuh"
#include "csrc/cuda/common/macros.cuh"
#include "csrc/cuda/common/reduce.cuh"
#include "csrc/cuda/common/rows.cuh"
#include "csrc/cuda/common/vector.cuh"
#include "csrc/cuda/normalization/normalization.h"

namespace xllm_kernel::cuda::kernels {

XLLM_CUDA_HD float inv_sqrt(float x) {
#ifdef __CUDA_ARCH__
  return rsqrtf(x);
#else
  return 1.0f / std::sqrt(x);
#endif
}

// One row as the passes see it.
template <class T, class W>
struct Row {
  const T* input = nullptr;  // read
  T* out = nullptr;          // written; fused_add_rms_norm: the input row
  T* residual = nullptr;     // fused_add_rms_norm only
  const W* weight = nullptr;
  const W* bias = nullptr;   // layer_norm, may be null
  int64_t hidden = 0;
  bool vector = false;       // every pointer above is 16-byte aligned: 16-byte accesses allowed
};

template <int N>
struct Piece {
  static constexpr int size = N;
};

// Calls f(element, Piece<N>) for the elements `lane` of a group of `width` threads owns. With
// vector access: pieces of kVec<T> elements at multiples of kVec<T> (consecutive lanes take
// consecutive pieces, so a warp touches 512 contiguous bytes), then the tail one element at a
// time; otherwise the same pieces, one element at a time, in the same order: a lane's elements and
// their order do not depend on the alignment, so neither do a row's sums (the bits of rms_norm,
// and of the quantization kernels that reuse these sums, are the same for any layout of the
// tensors). Every element belongs to exactly one lane, and to the same lane in every pass, so a
// lane may read back what it wrote without a barrier.
template <class T, class F>
XLLM_CUDA_HD void for_each_piece(int64_t hidden, bool vector, int lane, int width, F&& f) {
  constexpr int V = kVec<T>;
  const int64_t body = hidden / V * V;
  if (vector) {
XLLM_CUDA_UNROLL_4
    for (int64_t e = int64_t{lane} * V; e < body; e += int64_t{width} * V) f(e, Piece<V>{});
  } else {
    for (int64_t e = int64_t{lane} * V; e < body; e += int64_t{width} * V) {
XLLM_CUDA_UNROLL
      for (int i = 0; i < V; ++i) f(e + i, Piece<1>{});
    }
  }
  for (int64_t e = body + lane; e < hidden; e += width) f(e, Piece<1>{});
}

// One element of affine_pass before the bias and the rounding: (x - shift) * scale * w.
XLLM_CUDA_HD float affine_value(float x, float shift, float scale, float w) { return (x - shift) * scale * w; }

// The scale rms_norm and fused_add_rms_norm multiply by: rsqrt(sum_squares / hidden + eps). The
// quantization kernels (csrc/cuda/quantization) call it and affine_value to produce the same bits.
XLLM_CUDA_HD float rms_inv_scale(float sum_squares, int64_t hidden, float eps) {
  return inv_sqrt(sum_squares / static_cast<float>(hidden) + eps);
}

// out = (src - shift) * scale * weight (+ bias), rounded once to T.
template <bool kBias, class T, class W>
XLLM_CUDA_HD void affine_pass(const Row<T, W>& r, const T* src, int lane, int width, float shift, float scale) {
  for_each_piece<T>(r.hidden, r.vector, lane, width, [&](int64_t e, auto piece) {
    constexpr int N = decltype(piece)::size;
    float x[N], w[N];
    load<N>(src + e, x);
    load<N>(r.weight + e, w);
XLLM_CUDA_UNROLL
    for (int i = 0; i < N; ++i) x[i] = affine_value(x[i], shift, scale, w[i]);
    if constexpr (kBias) {
      float b[N];
      load<N>(r.bias + e, b);
XLLM_CUDA_UNROLL
      for (int i = 0; i < N; ++i) x[i] += b[i];
    }
    store<N>(r.out + e, x);
  });
}

enum class Op { kRmsNorm, kFusedAddRmsNorm, kLayerNorm };

// Per operation: kReductions partial sums (stage s may use the group totals of stages < s), then
// finish() writes the row.
template <Op kOp>
struct Program;

template <>
struct Program<Op::kRmsNorm> {
  static constexpr int kReductions = 1;

  template <class T, class W>
  static XLLM_CUDA_HD float partial(int stage, const Row<T, W>& r, int lane, int width, const float* totals) {
    float acc = 0.0f;
    for_each_piece<T>(r.hidden, r.vector, lane, width, [&](int64_t e, auto piece) {
      constexpr int N = decltype(piece)::size;
      float x[N];
      load<N>(r.input + e, x);
XLLM_CUDA_UNROLL
      for (int i = 0; i < N; ++i) acc += x[i] * x[i];
    });
    return acc;
  }

  template <class T, class W>
  static XLLM_CUDA_HD void finish(const Row<T, W>& r, int lane, int width, const float* totals, float eps) {
    affine_pass<false>(r, r.input, lane, width, 0.0f, rms_inv_scale(totals[0], r.hidden, eps));
  }
};

template <>
struct Program<Op::kFusedAddRmsNorm> {
  static constexpr int kReductions = 1;

  // residual <- round(input + residual); sums the squares of the rounded values, which are what
  // finish() reads back.
  template <class T, class W>
  static XLLM_CUDA_HD float partial(int stage, const Row<T, W>& r, int lane, int width, const float* totals) {
    float acc = 0.0f;
    for_each_piece<T>(r.hidden, r.vector, lane, width, [&](int64_t e, auto piece) {
      constexpr int N = decltype(piece)::size;
      float x[N], s[N];
      load<N>(r.input + e, x);
      load<N>(r.residual + e, s);
XLLM_CUDA_UNROLL
      for (int i = 0; i < N; ++i) {
        s[i] = round_to<T>(x[i] + s[i]);
        acc += s[i] * s[i];
      }
      store<N>(r.residual + e, s);
    });
    return acc;
  }

  template <class T, class W>
  static XLLM_CUDA_HD void finish(const Row<T, W>& r, int lane, int width, const float* totals, float eps) {
    affine_pass<false>(r, r.residual, lane, width, 0.0f, rms_inv_scale(totals[0], r.hidden, eps));
  }
};

template <>
struct Program<Op::kLayerNorm> {
  // Two passes (sum, then squared deviations from the mean): E[x^2] - E[x]^2 loses the variance
  // of rows with a large mean.
  static constexpr int kReductions = 2;

  template <class T, class W>
  static XLLM_CUDA_HD float partial(int stage, const Row<T, W>& r, int lane, int width, const float* totals) {
    const float mean = stage == 0 ? 0.0f : totals[0] / static_cast<float>(r.hidden);
    float acc = 0.0f;
    for_each_piece<T>(r.hidden, r.vector, lane, width, [&](int64_t e, auto piece) {
      constexpr int N = decltype(piece)::size;
      float x[N];
      load<N>(r.input + e, x);
XLLM_CUDA_UNROLL
      for (int i = 0; i < N; ++i) {
        const float d = x[i] - mean;
        acc += stage == 0 ? x[i] : d * d;
      }
    });
    return acc;
  }

  template <class T, class W>
  static XLLM_CUDA_HD void finish(const Row<T, W>& r, int lane, int width, const float* totals, float eps) {
    const float n = static_cast<float>(r.hidden);
    const float mean = totals[0] / n;
    const float inv = inv_sqrt(totals[1] / n + eps);
    if (r.bias != nullptr) {
      affine_pass<true>(r, r.input, lane, width, mean, inv);
    } else {
      affine_pass<false>(r, r.input, lane, width, mean, inv);
    }
  }
};

// Kernel arguments: the launcher's params plus what it derived once per launch.
struct KernelArgs {
  NormParams p;
  float eps = 0.0f;
  bool weights_aligned = false;  // weight and bias (if any) allow 16-byte access
};

// The pointers of row `row` (row-major over the leading dimensions).
template <Op kOp, class T, class W>
XLLM_CUDA_HD Row<T, W> make_row(const KernelArgs& a, int64_t row) {
  const NormParams& p = a.p;
  int64_t in_offset = 0, out_offset = 0, residual_offset = 0;
  for_each_row_index(row, p.row_ndim, p.row_sizes, [&](int d, int64_t index) {
    in_offset += index * p.input_strides[d];
    out_offset += index * p.out_strides[d];
    residual_offset += index * p.residual_strides[d];
  });
  Row<T, W> r;
  r.hidden = p.hidden;
  r.weight = static_cast<const W*>(p.weight);
  r.bias = static_cast<const W*>(p.bias);
  if constexpr (kOp == Op::kFusedAddRmsNorm) {
    T* input = static_cast<T*>(const_cast<void*>(p.input)) + in_offset;
    r.input = input;
    r.out = input;
    r.residual = static_cast<T*>(p.residual) + residual_offset;
  } else {
    r.input = static_cast<const T*>(p.input) + in_offset;
    r.out = static_cast<T*>(p.out) + out_offset;
  }
  r.vector = a.weights_aligned && aligned16(r.input) && aligned16(r.out) && aligned16(r.residual);
  return r;
}

#ifdef __CUDACC__

// kWarpPerRow: each warp of the block owns rows (no barriers). Otherwise the block owns rows and
// sums through shared memory. Rows beyond the grid are taken in grid-sized steps.
template <Op kOp, class T, class W, bool kWarpPerRow>
__global__ void __launch_bounds__(1024) norm_rows(const __grid_constant__ KernelArgs a) {
  using P = Program<kOp>;
  extern __shared__ float scratch[];
  int parity = 0;
  int lane, width;
  int64_t row, step;
  if constexpr (kWarpPerRow) {
    const int warps = blockDim.x / kWarp;
    lane = threadIdx.x % kWarp;
    width = kWarp;
    row = int64_t{blockIdx.x} * warps + threadIdx.x / kWarp;
    step = int64_t{gridDim.x} * warps;
  } else {
    lane = threadIdx.x;
    width = blockDim.x;
    row = blockIdx.x;
    step = gridDim.x;
  }
  for (; row < a.p.rows; row += step) {
    const Row<T, W> r = make_row<kOp, T, W>(a, row);
    float totals[P::kReductions];
XLLM_CUDA_UNROLL
    for (int s = 0; s < P::kReductions; ++s) {
      const float v = P::partial(s, r, lane, width, totals);
      if constexpr (kWarpPerRow) {
        totals[s] = warp_sum(v);
      } else {
        totals[s] = block_sum(v, scratch, parity);
      }
    }
    P::finish(r, lane, width, totals, a.eps);
  }
}

#endif  // __CUDACC__

}  // namespace xllm_kernel::cuda::kernels
