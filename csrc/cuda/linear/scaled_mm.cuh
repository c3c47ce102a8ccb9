// The CUDA scaled_mm kernel (csrc/cuda/linear/scaled_mm.h); the launcher is scaled_mm.cu.
//
// A block computes one kScaledMmTileM x kScaledMmTileN tile of out (looping over row tiles beyond
// gridDim.y). K runs in steps of kScaledMmTileK: the block's threads copy the step's rows of a and
// of the weight into shared memory (zeros past M, N and K; w4a8 nibbles unpacked to the int8 q - z,
// e4m3 widened to float32, exact), synchronize, and each thread adds the step to its 4 x 4 outputs
// (rows ty + 16 i, columns tx + 16 j of the tile, lane = 16 ty + tx):
//   int8: acc = __dp4a(4 a bytes, 4 q bytes, acc) over k = 4c .. 4c + 3 (groups are K or
//         multiples of 8, so no dp4a straddles two; the bytes past K are zero);
//   fp8:  acc = acc + a * q for each k < K in increasing order, each operation rounded on its own.
// Where k reaches the next group's start, the finished group's acc goes into the epilogue (flush:
// t = t + (float(acc) * scale_a) * s, the contract's order) and acc restarts. After the last step
// the last group is flushed, the bias added, and each output rounded and stored once.
//
// The block's program runs on a team: the device team is this thread (each(f) runs f for its lane,
// sync() is __syncthreads()); the host team of the tests (test/cuda/linear/
// scaled_mm_kernels_host_test.cpp) runs f for every lane in turn, so the host runs the device's own
// loads, dot products and epilogue.
//
// Contracts the launcher guarantees: parameters check_scaled_mm accepts, m >= 1, blockDim.x ==
// kScaledMmThreads, the grid of plan_scaled_mm.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "csrc/common/linear.h"
#include "csrc/common/quantization.h"
#include "csrc/cuda/common/codec.cuh"
#include "csrc/cuda/common/float_ops.cuh"
#include "csrc/cuda/common/macros.cuh"
#include "csrc/cuda/linear/scaled_mm.h"

namespace xllm_kernel::cuda::kernels {

using ::xllm_kernel::kernels::LinearScheme;

inline constexpr int kTileM = kScaledMmTileM;
inline constexpr int kTileN = kScaledMmTileN;
inline constexpr int kTileK = kScaledMmTileK;
inline constexpr int kRowsPerThread = kScaledMmRowsPerThread;
inline constexpr int kColsPerThread = kScaledMmColsPerThread;
inline constexpr int kThreadCols = kTileN / kColsPerThread;  // 16 lanes across the columns
inline constexpr int kThreadRows = kTileM / kRowsPerThread;  // 16 lanes down the rows
static_assert(kThreadCols * kThreadRows == kScaledMmThreads, "one output block per thread");
static_assert(kTileK % 4 == 0, "dp4a steps of 4 k");

// a + b correctly rounded (never contracted into an fma): __fadd_rn on the device, the IEEE add on
// the host.
XLLM_CUDA_HD float float_add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// float(v) rounded to nearest even.
XLLM_CUDA_HD float float_from_int(int32_t v) {
#ifdef __CUDA_ARCH__
  return __int2float_rn(v);
#else
  return static_cast<float>(v);
#endif
}

// c + the sum of the products of the four signed bytes of a and b (byte i with byte i), in int32;
// exact while every partial sum fits (the K bound's).
XLLM_CUDA_HD int32_t dot4(uint32_t a, uint32_t b, int32_t c) {
#ifdef __CUDA_ARCH__
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
#else
  int64_t s = c;
  for (int i = 0; i < 4; ++i) {
    s += static_cast<int64_t>(static_cast<int8_t>(a >> (8 * i))) * static_cast<int8_t>(b >> (8 * i));
  }
  return static_cast<int32_t>(s);
#endif
}

// 4 bytes at p (4-byte aligned) as a little-endian word.
XLLM_CUDA_HD uint32_t load_word(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#endif
}

// The shared tiles of one K step: int8 bytes (w8a8-int8, w4a8: q - z) with a row pitch of
// kTileK + 4 bytes (a multiple of 4, rows on different banks), or float32 values (w8a8-fp8).
struct Int8Tiles {
  alignas(16) uint8_t a[kTileM][kTileK + 4];
  alignas(16) uint8_t b[kTileN][kTileK + 4];
};
struct FloatTiles {
  float a[kTileM][kTileK + 1];
  float b[kTileN][kTileK + 1];
};
union ScaledMmShared {
  Int8Tiles i8;
  FloatTiles f32;
};

template <LinearScheme kScheme>
inline constexpr bool kIsFp8 = kScheme == LinearScheme::kW8A8Fp8;

// One thread's outputs: acc of the current group, the epilogue's t, and its rows' scale_a and azp.
template <LinearScheme kScheme>
struct ScaledMmThread {
  using Acc = std::conditional_t<kIsFp8<kScheme>, float, int32_t>;
  Acc acc[kRowsPerThread][kColsPerThread];
  float t[kRowsPerThread][kColsPerThread];
  float sa[kRowsPerThread];
  int32_t azp[kRowsPerThread];
  int32_t group = 0;       // the group acc sums
  int64_t next_group = 0;  // the k where the next group starts
};

// The acc a group starts from: 0, or -0 for float32 (-0 + x == x for every x, -0 included).
template <LinearScheme kScheme>
XLLM_CUDA_HD typename ScaledMmThread<kScheme>::Acc acc_zero() {
  if constexpr (kIsFp8<kScheme>) {
    return -0.0f;
  } else {
    return 0;
  }
}

template <LinearScheme kScheme>
XLLM_CUDA_HD void init_thread(const ScaledMmParams& p, int64_t m0, int lane, ScaledMmThread<kScheme>& st) {
  const int ty = lane / kThreadCols;
XLLM_CUDA_UNROLL
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int64_t m = m0 + ty + kThreadRows * i;
    st.sa[i] = m < p.m ? p.scale_a[m * p.scale_a_stride] : 0.0f;
    st.azp[i] = m < p.m && p.azp != nullptr ? p.azp[m * p.azp_stride] : 0;
XLLM_CUDA_UNROLL
    for (int j = 0; j < kColsPerThread; ++j) {
      st.acc[i][j] = acc_zero<kScheme>();
      st.t[i][j] = 0.0f;
    }
  }
  st.group = 0;
  st.next_group = p.group;
}

// The weight's value at [n, k] for the int8 schemes: q (w8a8-int8), q - z (w4a8).
template <LinearScheme kScheme>
XLLM_CUDA_HD int32_t weight_int(const ScaledMmParams& p, int64_t n, int64_t k) {
  const uint8_t* w = static_cast<const uint8_t*>(p.weights);
  if constexpr (kScheme == LinearScheme::kW4A8) {
    const uint8_t byte = w[n * ((p.k + 1) / 2) + k / 2];
    const int32_t u = (k & 1) != 0 ? byte >> 4 : byte & 0xF;
    const int32_t z = p.zeros != nullptr ? static_cast<int32_t>(p.zeros[n * p.groups + k / p.group]) : 8;
    return u - z;
  } else {
    return static_cast<int8_t>(w[n * p.k + k]);
  }
}

// Lane `lane` of `threads` copies its share of K step [k0, k0 + kTileK) of a's rows [m0, m0 +
// kTileM) and the weight's rows [n0, n0 + kTileN) into `sh` (zeros outside [0, M) x [0, K) and
// [0, N) x [0, K)); consecutive lanes read consecutive k.
template <LinearScheme kScheme>
XLLM_CUDA_HD void load_tiles(const ScaledMmParams& p, int64_t m0, int64_t n0, int64_t k0, ScaledMmShared& sh, int lane,
                             int threads) {
  const uint8_t* a = static_cast<const uint8_t*>(p.a);
  for (int e = lane; e < kTileM * kTileK; e += threads) {
    const int r = e / kTileK, c = e % kTileK;
    const int64_t m = m0 + r, k = k0 + c;
    const bool inside = m < p.m && k < p.k;
    const uint8_t byte = inside ? a[m * p.a_stride + k] : 0;
    if constexpr (kIsFp8<kScheme>) {
      sh.f32.a[r][c] = inside ? ::xllm_kernel::kernels::float_from_float8_e4m3fn(byte) : 0.0f;
    } else {
      sh.i8.a[r][c] = byte;
    }
  }
  for (int e = lane; e < kTileN * kTileK; e += threads) {
    const int r = e / kTileK, c = e % kTileK;
    const int64_t n = n0 + r, k = k0 + c;
    const bool inside = n < p.n && k < p.k;
    if constexpr (kIsFp8<kScheme>) {
      const uint8_t byte = inside ? static_cast<const uint8_t*>(p.weights)[n * p.k + k] : 0;
      sh.f32.b[r][c] = inside ? ::xllm_kernel::kernels::float_from_float8_e4m3fn(byte) : 0.0f;
    } else {
      sh.i8.b[r][c] = static_cast<uint8_t>(inside ? weight_int<kScheme>(p, n, k) : 0);
    }
  }
}

// The finished group's acc into t (the contract's epilogue order), acc restarted.
template <LinearScheme kScheme>
XLLM_CUDA_HD void flush_group(const ScaledMmParams& p, int64_t n0, int lane, ScaledMmThread<kScheme>& st) {
  const int tx = lane % kThreadCols;
  const int64_t g = st.group;
XLLM_CUDA_UNROLL
  for (int j = 0; j < kColsPerThread; ++j) {
    const int64_t n = n0 + tx + kThreadCols * j;
    const float s = n < p.n ? p.scales[n * p.groups + g] : 0.0f;
    int32_t sum = 0;
    if constexpr (!kIsFp8<kScheme>) {
      if (p.azp != nullptr && n < p.n) sum = p.sums[n * p.groups + g];
    }
XLLM_CUDA_UNROLL
    for (int i = 0; i < kRowsPerThread; ++i) {
      float acc;
      if constexpr (kIsFp8<kScheme>) {
        acc = st.acc[i][j];
      } else {
        // acc - azp * sum_k q modulo 2^32: sum (a - azp) q, exact where it fits int32.
        const uint32_t v =
            static_cast<uint32_t>(st.acc[i][j]) - static_cast<uint32_t>(st.azp[i]) * static_cast<uint32_t>(sum);
        acc = float_from_int(static_cast<int32_t>(v));
      }
      const float term = float_mul(float_mul(acc, st.sa[i]), s);
      st.t[i][j] = g == 0 ? term : float_add(st.t[i][j], term);
      st.acc[i][j] = acc_zero<kScheme>();
    }
  }
  st.group += 1;
  st.next_group += p.group;
}

// Lane `lane`'s outputs take K step [k0, k0 + kTileK) from `sh`.
template <LinearScheme kScheme>
XLLM_CUDA_HD void accumulate_tile(const ScaledMmParams& p, const ScaledMmShared& sh, int64_t n0, int64_t k0, int lane,
                                  ScaledMmThread<kScheme>& st) {
  const int ty = lane / kThreadCols, tx = lane % kThreadCols;
  if constexpr (kIsFp8<kScheme>) {
    for (int kk = 0; kk < kTileK && k0 + kk < p.k; ++kk) {
      if (k0 + kk == st.next_group) flush_group<kScheme>(p, n0, lane, st);
      float av[kRowsPerThread], bv[kColsPerThread];
XLLM_CUDA_UNROLL
      for (int i = 0; i < kRowsPerThread; ++i) av[i] = sh.f32.a[ty + kThreadRows * i][kk];
XLLM_CUDA_UNROLL
      for (int j = 0; j < kColsPerThread; ++j) bv[j] = sh.f32.b[tx + kThreadCols * j][kk];
XLLM_CUDA_UNROLL
      for (int i = 0; i < kRowsPerThread; ++i) {
XLLM_CUDA_UNROLL
        for (int j = 0; j < kColsPerThread; ++j) st.acc[i][j] = float_add(st.acc[i][j], float_mul(av[i], bv[j]));
      }
    }
  } else {
    for (int kk = 0; kk < kTileK && k0 + kk < p.k; kk += 4) {
      if (k0 + kk == st.next_group) flush_group<kScheme>(p, n0, lane, st);
      uint32_t av[kRowsPerThread], bv[kColsPerThread];
XLLM_CUDA_UNROLL
      for (int i = 0; i < kRowsPerThread; ++i) av[i] = load_word(&sh.i8.a[ty + kThreadRows * i][kk]);
XLLM_CUDA_UNROLL
      for (int j = 0; j < kColsPerThread; ++j) bv[j] = load_word(&sh.i8.b[tx + kThreadCols * j][kk]);
XLLM_CUDA_UNROLL
      for (int i = 0; i < kRowsPerThread; ++i) {
XLLM_CUDA_UNROLL
        for (int j = 0; j < kColsPerThread; ++j) st.acc[i][j] = dot4(av[i], bv[j], st.acc[i][j]);
      }
    }
  }
}

// The last group flushed, the bias added, each output rounded once and stored.
template <LinearScheme kScheme, class T>
XLLM_CUDA_HD void finish_thread(const ScaledMmParams& p, int64_t m0, int64_t n0, int lane,
                                ScaledMmThread<kScheme>& st) {
  flush_group<kScheme>(p, n0, lane, st);
  const int ty = lane / kThreadCols, tx = lane % kThreadCols;
  T* out = static_cast<T*>(p.out);
XLLM_CUDA_UNROLL
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int64_t m = m0 + ty + kThreadRows * i;
    if (m >= p.m) continue;
XLLM_CUDA_UNROLL
    for (int j = 0; j < kColsPerThread; ++j) {
      const int64_t n = n0 + tx + kThreadCols * j;
      if (n >= p.n) continue;
      const float y = p.bias != nullptr ? float_add(st.t[i][j], p.bias[n]) : st.t[i][j];
      out[m * p.out_stride + n] = Codec<T>::from_float(y);
    }
  }
}

// One tile of out on `team` (each(f): f(lane, lane's ScaledMmThread) for the team's lanes; sync():
// the block's barrier).
template <LinearScheme kScheme, class T, class Team>
XLLM_CUDA_HD void scaled_mm_tile(const ScaledMmParams& p, int64_t row_tile, int64_t col_tile, ScaledMmShared& sh,
                                 Team& team) {
  const int64_t m0 = row_tile * kTileM, n0 = col_tile * kTileN;
  team.each([&](int lane, ScaledMmThread<kScheme>& st) { init_thread<kScheme>(p, m0, lane, st); });
  for (int64_t k0 = 0; k0 < p.k; k0 += kTileK) {
    team.each([&](int lane, ScaledMmThread<kScheme>&) {
      load_tiles<kScheme>(p, m0, n0, k0, sh, lane, kScaledMmThreads);
    });
    team.sync();
    team.each([&](int lane, ScaledMmThread<kScheme>& st) { accumulate_tile<kScheme>(p, sh, n0, k0, lane, st); });
    team.sync();  // the next step's loads overwrite sh
  }
  team.each([&](int lane, ScaledMmThread<kScheme>& st) { finish_thread<kScheme, T>(p, m0, n0, lane, st); });
}

// Calls f(Scheme<s>{}, OutElement<T>{}) for p's scheme and out_dtype; `otherwise` for others.
template <LinearScheme kScheme>
struct Scheme {
  static constexpr LinearScheme value = kScheme;
};
template <class T>
struct OutElement {
  using type = T;
};

template <class R, class F>
R dispatch_scaled_mm(const ScaledMmParams& p, R otherwise, F&& f) {
  auto by_out = [&](auto scheme) -> R {
    switch (p.out_dtype) {
      case DType::kFloat32: return f(scheme, OutElement<float>{});
      case DType::kBFloat16: return f(scheme, OutElement<__nv_bfloat16>{});
      case DType::kFloat16: return f(scheme, OutElement<__half>{});
    }
    return otherwise;
  };
  switch (p.scheme) {
    case LinearScheme::kW8A8Int8: return by_out(Scheme<LinearScheme::kW8A8Int8>{});
    case LinearScheme::kW8A8Fp8: return by_out(Scheme<LinearScheme::kW8A8Fp8>{});
    case LinearScheme::kW4A8: return by_out(Scheme<LinearScheme::kW4A8>{});
    default: return otherwise;
  }
}

#ifdef __CUDACC__

// The device team: this thread, its ScaledMmThread in registers.
template <LinearScheme kScheme>
struct ScaledMmDeviceTeam {
  ScaledMmThread<kScheme> st;
  template <class F>
  __device__ __forceinline__ void each(F&& f) {
    f(static_cast<int>(threadIdx.x), st);
  }
  __device__ __forceinline__ void sync() { __syncthreads(); }
};

template <LinearScheme kScheme, class T>
__global__ void __launch_bounds__(kScaledMmThreads) scaled_mm_tiles(const __grid_constant__ ScaledMmParams p,
                                                                     int64_t row_tiles) {
  __shared__ ScaledMmShared sh;
  ScaledMmDeviceTeam<kScheme> team;
  for (int64_t rt = blockIdx.y; rt < row_tiles; rt += gridDim.y) {
    scaled_mm_tile<kScheme, T>(p, rt, static_cast<int64_t>(blockIdx.x), sh, team);
  }
}

#endif  // __CUDACC__

}  // namespace xllm_kernel::cuda::kernels
