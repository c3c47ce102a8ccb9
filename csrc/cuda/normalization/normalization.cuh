// CUDA normalization kernels; the launchers are in csrc/cuda/normalization.cu.
//
// A row belongs to a group of `width` threads (one warp, or one block). Its work is a short
// program: one or two per-thread partial sums, each summed over the group, then a write pass.
// The passes are __host__ __device__ so that a test on a machine without a GPU can run them lane
// by lane (test/cuda/normalization_kernels_host_test.cu); only the group sums and the grid loop
// are device-only.
//
// Contracts the launcher guarantees: hidden >= 1; rows >= 1; 1 <= row_ndim <= kMaxRowDims;
// weight_dtype is float32 or dtype; blockDim.x is a multiple of 32 and at most 1024.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "csrc/cuda/normalization/normalization.h"

#define XLLM_CUDA_HD __host__ __device__ __forceinline__
// Unrolling hints for the device pass only (host compilers warn about the pragma).
#ifdef __CUDA_ARCH__
#define XLLM_CUDA_UNROLL _Pragma("unroll")
#define XLLM_CUDA_UNROLL_4 _Pragma("unroll 4")
#else
#define XLLM_CUDA_UNROLL
#define XLLM_CUDA_UNROLL_4
#endif

namespace xllm_kernel::cuda::kernels {

inline constexpr int kWarp = 32;
inline constexpr int kVectorBytes = 16;

// Elements per 16-byte access.
template <class T>
inline constexpr int kVec = kVectorBytes / static_cast<int>(sizeof(T));

XLLM_CUDA_HD bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % kVectorBytes == 0; }

// 16-byte accesses. The host build (tests) copies bytes instead of punning and insists on the
// alignment the device needs, so a wrong vectorization decision fails the host test.
XLLM_CUDA_HD uint4 load16(const void* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint4*>(p);
#else
  if (!aligned16(p)) throw std::logic_error("16-byte load from a misaligned address");
  uint4 q;
  std::memcpy(&q, p, sizeof(q));
  return q;
#endif
}

XLLM_CUDA_HD void store16(void* p, uint4 q) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<uint4*>(p) = q;
#else
  if (!aligned16(p)) throw std::logic_error("16-byte store to a misaligned address");
  std::memcpy(p, &q, sizeof(q));
#endif
}

XLLM_CUDA_HD float bits_to_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

XLLM_CUDA_HD uint32_t float_to_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

// Element <-> float32. Rounding to the storage type is round to nearest even.
template <class T>
struct Codec;

template <>
struct Codec<float> {
  static XLLM_CUDA_HD float to_float(float x) { return x; }
  static XLLM_CUDA_HD float from_float(float x) { return x; }
  static XLLM_CUDA_HD float decode(uint32_t bits) { return bits_to_float(bits); }
  static XLLM_CUDA_HD uint32_t encode(float x) { return float_to_bits(x); }
};

template <>
struct Codec<__nv_bfloat16> {
  static XLLM_CUDA_HD float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  static XLLM_CUDA_HD __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
  static XLLM_CUDA_HD float decode(uint32_t bits) { return bits_to_float(bits << 16); }  // exact
  static XLLM_CUDA_HD uint32_t encode(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
};

template <>
struct Codec<__half> {
  static XLLM_CUDA_HD float to_float(__half x) { return __half2float(x); }
  static XLLM_CUDA_HD __half from_float(float x) { return __float2half_rn(x); }
  static XLLM_CUDA_HD float decode(uint32_t bits) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  }
  static XLLM_CUDA_HD uint32_t encode(float x) { return __half_as_ushort(__float2half_rn(x)); }
};

// Loads N consecutive elements as float32: whole 16-byte words when N elements fill them (the
// caller guarantees 16-byte alignment then), single elements otherwise.
template <int N, class T>
XLLM_CUDA_HD void load(const T* p, float (&v)[N]) {
  constexpr int kBytes = N * static_cast<int>(sizeof(T));
  if constexpr (kBytes % kVectorBytes == 0) {
    constexpr int kPerU32 = 4 / static_cast<int>(sizeof(T));
    constexpr int kPerWord = kVectorBytes / static_cast<int>(sizeof(T));
XLLM_CUDA_UNROLL
    for (int w = 0; w < kBytes / kVectorBytes; ++w) {
      const uint4 q = load16(p + w * kPerWord);
      const uint32_t u[4] = {q.x, q.y, q.z, q.w};
XLLM_CUDA_UNROLL
      for (int i = 0; i < kPerWord; ++i) {
        // Little-endian: the lower half of a 32-bit word holds the earlier 16-bit element.
        const uint32_t bits = kPerU32 == 1 ? u[i] : (u[i / kPerU32] >> (16 * (i % kPerU32))) & 0xFFFFu;
        v[w * kPerWord + i] = Codec<T>::decode(bits);
      }
    }
  } else {
XLLM_CUDA_UNROLL
    for (int i = 0; i < N; ++i) v[i] = Codec<T>::to_float(p[i]);
  }
}

// Rounds N float32 values to T and stores them; same access rules as load.
template <int N, class T>
XLLM_CUDA_HD void store(T* p, const float (&v)[N]) {
  constexpr int kBytes = N * static_cast<int>(sizeof(T));
  if constexpr (kBytes % kVectorBytes == 0) {
    constexpr int kPerU32 = 4 / static_cast<int>(sizeof(T));
    constexpr int kPerWord = kVectorBytes / static_cast<int>(sizeof(T));
XLLM_CUDA_UNROLL
    for (int w = 0; w < kBytes / kVectorBytes; ++w) {
      uint32_t u[4] = {0, 0, 0, 0};
XLLM_CUDA_UNROLL
      for (int i = 0; i < kPerWord; ++i) {
        u[i / kPerU32] |= Codec<T>::encode(v[w * kPerWord + i]) << (kPerU32 == 1 ? 0 : 16 * (i % kPerU32));
      }
      store16(p + w * kPerWord, make_uint4(u[0], u[1], u[2], u[3]));
    }
  } else {
XLLM_CUDA_UNROLL
    for (int i = 0; i < N; ++i) p[i] = Codec<T>::from_float(v[i]);
  }
}

template <class T>
XLLM_CUDA_HD float round_to(float x) {
  return Codec<T>::to_float(Codec<T>::from_float(x));
}

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
// time; otherwise one element at a time. Every element belongs to exactly one lane, and to the
// same lane in every pass, so a lane may read back what it wrote without a barrier.
template <class T, class F>
XLLM_CUDA_HD void for_each_piece(int64_t hidden, bool vector, int lane, int width, F&& f) {
  constexpr int V = kVec<T>;
  const int64_t body = vector ? hidden / V * V : 0;
XLLM_CUDA_UNROLL_4
  for (int64_t e = int64_t{lane} * V; e < body; e += int64_t{width} * V) f(e, Piece<V>{});
  for (int64_t e = body + lane; e < hidden; e += width) f(e, Piece<1>{});
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
    for (int i = 0; i < N; ++i) x[i] = (x[i] - shift) * scale * w[i];
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
    const float inv = inv_sqrt(totals[0] / static_cast<float>(r.hidden) + eps);
    affine_pass<false>(r, r.input, lane, width, 0.0f, inv);
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
    const float inv = inv_sqrt(totals[0] / static_cast<float>(r.hidden) + eps);
    affine_pass<false>(r, r.residual, lane, width, 0.0f, inv);
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

// The pointers of row `row` (row-major over the leading dimensions). The loop is unrolled over
// kMaxRowDims so that kernel-parameter arrays are indexed by constants; the outermost dimension
// takes the remaining quotient, so one leading dimension costs no division.
template <Op kOp, class T, class W>
XLLM_CUDA_HD Row<T, W> make_row(const KernelArgs& a, int64_t row) {
  const NormParams& p = a.p;
  int64_t in_offset = 0, out_offset = 0, residual_offset = 0;
  int64_t rest = row;
XLLM_CUDA_UNROLL
  for (int d = kMaxRowDims - 1; d >= 0; --d) {
    if (d >= p.row_ndim) continue;
    const int64_t index = d == 0 ? rest : rest % p.row_sizes[d];
    if (d != 0) rest /= p.row_sizes[d];
    in_offset += index * p.input_strides[d];
    out_offset += index * p.out_strides[d];
    residual_offset += index * p.residual_strides[d];
  }
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

__device__ __forceinline__ float warp_sum(float v) {
  // Butterfly: every lane ends with the same bits (each step adds the same two values).
XLLM_CUDA_UNROLL
  for (int m = kWarp / 2; m > 0; m /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, m);
  return v;
}

// Sum over the block; every thread gets the same value. `scratch` holds 2 * (blockDim.x / 32)
// floats; the two halves alternate between calls, so one barrier per call suffices: a half is
// rewritten only after every thread has passed the barrier of the call in between.
__device__ __forceinline__ float block_sum(float v, float* scratch, int& parity) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  float* slots = scratch + parity * warps;
  parity ^= 1;
  v = warp_sum(v);
  if (lane == 0) slots[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? slots[lane] : 0.0f);
}

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
