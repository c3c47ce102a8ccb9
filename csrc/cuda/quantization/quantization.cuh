// CUDA quantization kernels; the launchers are in csrc/cuda/quantization/quantization.cu.
//
// A row belongs to a group of `width` threads (one warp, or one block: QuantPlan). Its work is a
// short program of passes separated by group reductions; a Team runs it. On the device every
// thread runs each pass once for its lane and meets the reduction (QuantDeviceTeam); on the host
// (test/cuda/quantization/quantization_kernels_host_test.cpp) a team runs each pass for every lane
// in turn and reduces in the device's order, so the host runs the very code of the device.
//   pass 1 (rms_norm, fused_add_rms_norm): the normalization kernel's own partial sum of squares
//          (kernels::Program<...>::partial: its partition of the row over the lanes, its order),
//          summed over the group as that kernel sums it (warp_sum, block_sum); fused_add writes
//          the rounded residual here, and the group synchronizes before the next pass reads it;
//   pass 2 (per-token schemes): each lane's amax (or min and max) of the produced row, reduced
//          with quant_max (NaN propagates; max is exact, so any order gives the same bits);
//   pass 3: the produced row quantized and stored, 16 elements (16 bytes of out) per piece.
// The produced row (the input, rms_norm(input), rms_norm(residual), silu(gate) * up, rounded to T
// as those kernels round it) is recomputed in passes 2 and 3 from global memory (L1/L2 hits for
// rows a block owns), with the same device functions, so every pass sees the same bits and no row
// needs to fit in shared memory.
//
// Arithmetic: the header's order (csrc/common/quantization.h) with float_div, float_mul and
// float_sub (csrc/cuda/common/float_ops.cuh: __fdiv_rn, __fmul_rn and __fsub_rn on the device,
// correctly rounded, never contracted into an fma, whatever nvcc's flags), the header's integer
// e4m3 conversion and its saturating int8/int32 conversions.
//
// Contracts the launcher guarantees: parameters check_quant accepts, rows >= 1, a plan from
// plan_quant for them (so plan.vector only where quant_vector_access holds), blockDim.x ==
// plan.threads.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "csrc/common/quantization.h"
#include "csrc/cuda/activation/activation.cuh"
#include "csrc/cuda/common/codec.cuh"
#include "csrc/cuda/common/float_ops.cuh"
#include "csrc/cuda/common/macros.cuh"
#include "csrc/cuda/common/reduce.cuh"
#include "csrc/cuda/common/rows.cuh"
#include "csrc/cuda/common/vector.cuh"
#include "csrc/cuda/normalization/normalization.cuh"
#include "csrc/cuda/quantization/quantization.h"

namespace xllm_kernel::cuda::kernels {

using ::xllm_kernel::kernels::float8_e4m3fn_from_float;
using ::xllm_kernel::kernels::int32_from_float;
using ::xllm_kernel::kernels::int8_from_float;
using ::xllm_kernel::kernels::int8_from_float_azp;
using ::xllm_kernel::kernels::quant_max;
using ::xllm_kernel::kernels::quant_min;
using ::xllm_kernel::kernels::quant_nan;

XLLM_CUDA_HD float q_abs(float x) { return float_from_bits(float_bits(x) & 0x7FFFFFFFu); }
XLLM_CUDA_HD bool q_negative(float x) { return (float_bits(x) >> 31) != 0; }

// min and max in the contract's order (-0 below +0), NaN if either is NaN: commutative and
// associative, so a tree reduction gives the bits of a sequential one.
XLLM_CUDA_HD float ordered_min(float a, float b) {
  if (a != a || b != b) return quant_nan();
  if (a < b) return a;
  if (b < a) return b;
  return q_negative(a) ? a : b;
}
XLLM_CUDA_HD float ordered_max(float a, float b) {
  if (a != a || b != b) return quant_nan();
  if (a > b) return a;
  if (b > a) return b;
  return q_negative(a) ? b : a;
}

struct MinMax {
  float min, max;
};

XLLM_CUDA_HD MinMax combine(MinMax a, MinMax b) { return MinMax{ordered_min(a.min, b.min), ordered_max(a.max, b.max)}; }

// How pass 3 turns a value into its code, and the row's parameter for it.
enum class QuantMethod : int {
  kFp8Div,      // per-token fp8: e4m3(x / scale)
  kFp8Mul,      // static fp8: e4m3(x * (1 / scale))
  kInt8Mul,     // per-token int8: int8(x * multiplier)
  kInt8Div,     // static int8: int8(x / scale)
  kInt8MulAzp,  // per-token azp and static azp: int8(int32(x * multiplier) + azp)
};

struct RowQuant {
  QuantMethod method = QuantMethod::kFp8Div;
  float factor = 0.0f;  // the scale (kFp8Div, kInt8Div) or the multiplier (the others)
  int32_t azp = 0;
};

// The header's per-row parameters (csrc/common/quantization.h), with the device's exact operations.
XLLM_CUDA_HD float fp8_scale(float amax, const float* scale_ub) {
  const float bounded = scale_ub != nullptr ? quant_min(amax, *scale_ub) : amax;
  if (bounded != bounded) return quant_nan();
  const float s = float_div(bounded, ::xllm_kernel::kernels::kFp8E4M3Max);
  const float lo = ::xllm_kernel::kernels::fp8_min_scale();
  return s > lo ? s : lo;
}
XLLM_CUDA_HD float int8_scale(float amax) { return amax != amax ? quant_nan() : float_div(amax, ::xllm_kernel::kernels::kInt8Max); }
XLLM_CUDA_HD float int8_multiplier(float amax) {
  return amax != amax ? quant_nan() : amax == 0.0f ? 0.0f : float_div(::xllm_kernel::kernels::kInt8Max, amax);
}
XLLM_CUDA_HD ::xllm_kernel::kernels::Int8AzpParams azp_params(float mn, float mx) {
  if (mn != mn || mx != mx) return {quant_nan(), quant_nan(), 0};
  const float scale = float_div(float_sub(mx, mn), 255.0f);
  return {scale, float_div(1.0f, scale), int32_from_float(float_sub(-128.0f, float_div(mn, scale)))};
}

// The code of one value (uint8_t bits: e4m3, or the int8's two's complement).
XLLM_CUDA_HD uint8_t quantize_value(const RowQuant& q, float x) {
  switch (q.method) {
    case QuantMethod::kFp8Div: return float8_e4m3fn_from_float(float_div(x, q.factor));
    case QuantMethod::kFp8Mul: return float8_e4m3fn_from_float(float_mul(x, q.factor));
    case QuantMethod::kInt8Mul: return static_cast<uint8_t>(int8_from_float(float_mul(x, q.factor)));
    case QuantMethod::kInt8Div: return static_cast<uint8_t>(int8_from_float(float_div(x, q.factor)));
    case QuantMethod::kInt8MulAzp: return static_cast<uint8_t>(int8_from_float_azp(float_mul(x, q.factor), q.azp));
  }
  return 0;
}

// Kernel arguments: the launcher's params and plan plus what it derived once per launch.
struct QuantArgs {
  QuantParams p;
  QuantPlan plan;
  float eps = 0.0f;
  bool weights_aligned = false;  // weight allows 16-byte access (the normalization's rule)
};

// One row's pointers.
template <class T, class W>
struct QuantRow {
  const T* input = nullptr;  // quant, rms_norm: the row; silu_and_mul: the gate half
  const T* up = nullptr;     // silu_and_mul: input + hidden
  T* residual = nullptr;     // fused_add_rms_norm
  const W* weight = nullptr;
  uint8_t* out = nullptr;
  float* scale = nullptr;    // per-token schemes
  int32_t* azp = nullptr;    // kPerTokenAzp
  int64_t hidden = 0;
  bool norm_vector = false;  // pass 1: 16-byte loads allowed
};

template <QuantProducer kOp, class T, class W>
XLLM_CUDA_HD QuantRow<T, W> make_quant_row(const QuantArgs& a, int64_t row) {
  const QuantParams& p = a.p;
  int64_t in = 0, out = 0, scale = 0, azp = 0, residual = 0;
  for_each_row_index(row, p.shape.ndim, p.shape.sizes, [&](int d, int64_t index) {
    in += index * p.input_strides.s[d];
    out += index * p.out_strides.s[d];
    scale += index * p.scale_strides.s[d];
    azp += index * p.azp_strides.s[d];
    residual += index * p.residual_strides.s[d];
  });
  QuantRow<T, W> r;
  r.hidden = p.hidden;
  r.input = static_cast<const T*>(p.input) + in;
  r.out = static_cast<uint8_t*>(p.out) + out;
  if (p.scale_out != nullptr) r.scale = p.scale_out + scale;
  if (p.azp_out != nullptr) r.azp = p.azp_out + azp;
  if constexpr (kOp == QuantProducer::kSiluAndMul) r.up = r.input + p.hidden;
  if constexpr (kOp == QuantProducer::kRmsNorm || kOp == QuantProducer::kFusedAddRmsNorm) {
    r.weight = static_cast<const W*>(p.weight);
  }
  if constexpr (kOp == QuantProducer::kFusedAddRmsNorm) r.residual = static_cast<T*>(p.residual) + residual;
  // 16-byte loads where the rows pass 1 reads allow them (the sums do not depend on it: see
  // for_each_piece in normalization.cuh).
  r.norm_vector = a.weights_aligned && aligned16(r.input) && aligned16(r.residual);
  return r;
}

// The produced values of elements [e, e + N) as float32 (rounded to T as the producing kernel
// rounds them). `inv`: the row's rms_inv_scale (norms only).
template <QuantProducer kOp, class T, class W, int N>
XLLM_CUDA_HD void produce(const QuantRow<T, W>& r, int64_t e, float inv, float (&v)[N]) {
  if constexpr (kOp == QuantProducer::kInput) {
    load<N>(r.input + e, v);
  } else if constexpr (kOp == QuantProducer::kSiluAndMul) {
    float up[N];
    load<N>(r.input + e, v);
    load<N>(r.up + e, up);
XLLM_CUDA_UNROLL
    for (int i = 0; i < N; ++i) v[i] = round_to<T>(activate_limited<Act::kSilu>(v[i]) * up[i]);
  } else {
    float w[N];
    if constexpr (kOp == QuantProducer::kRmsNorm) {
      load<N>(r.input + e, v);
    } else {
      load<N>(r.residual + e, v);  // rounded by pass 1
    }
    load<N>(r.weight + e, w);
XLLM_CUDA_UNROLL
    for (int i = 0; i < N; ++i) v[i] = round_to<T>(affine_value(v[i], 0.0f, inv, w[i]));
  }
}

// Calls f(e, v) for lane `lane`'s pieces of the produced row: 16 elements at multiples of 16
// (consecutive lanes take consecutive pieces) where `vector`, then the tail element by element.
template <QuantProducer kOp, class T, class W, class F>
XLLM_CUDA_HD void for_each_value(const QuantRow<T, W>& r, bool vector, float inv, int lane, int width, F&& f) {
  constexpr int V = kQuantPiece;
  const int64_t body = vector ? r.hidden / V * V : 0;
  for (int64_t e = int64_t{lane} * V; e < body; e += int64_t{width} * V) {
    float v[V];
    produce<kOp, T, W, V>(r, e, inv, v);
    f(e, v);
  }
  for (int64_t e = body + lane; e < r.hidden; e += width) {
    float v[1];
    produce<kOp, T, W, 1>(r, e, inv, v);
    f(e, v);
  }
}

// Pass 3 for one lane.
template <QuantProducer kOp, class T, class W>
XLLM_CUDA_HD void quantize_lane(const QuantRow<T, W>& r, bool vector, float inv, const RowQuant& q, int lane, int width) {
  for_each_value<kOp, T, W>(r, vector, inv, lane, width, [&](int64_t e, const auto& v) {
    constexpr int N = sizeof(v) / sizeof(float);
    if constexpr (N == kQuantPiece) {
      uint32_t u[4] = {0, 0, 0, 0};
XLLM_CUDA_UNROLL
      for (int i = 0; i < N; ++i) u[i / 4] |= static_cast<uint32_t>(quantize_value(q, v[i])) << (8 * (i % 4));
      store16(r.out + e, make_uint4(u[0], u[1], u[2], u[3]));
    } else {
      r.out[e] = quantize_value(q, v[0]);
#ifndef __CUDA_ARCH__
      if (host_store_observer != nullptr) host_store_observer(r.out + e, 1);
#endif
    }
  });
}

// The row program. Team: sum(f), max(f), minmax(f) reduce f(lane) over the group (every lane gets
// the result); each(f) runs f(lane); leader(f) runs f once (lane 0); sync() orders the group's
// global-memory writes before its later reads.
template <QuantProducer kOp, class T, class W, class Team>
XLLM_CUDA_HD void quant_row(const QuantArgs& a, int64_t row, Team& team) {
  const QuantParams& p = a.p;
  const QuantRow<T, W> r = make_quant_row<kOp, T, W>(a, row);
  const int width = team.width();
  const bool vector = a.plan.vector;
  float inv = 0.0f;
  if constexpr (kOp == QuantProducer::kRmsNorm || kOp == QuantProducer::kFusedAddRmsNorm) {
    constexpr Op kNorm = kOp == QuantProducer::kRmsNorm ? Op::kRmsNorm : Op::kFusedAddRmsNorm;
    Row<T, W> nr;
    nr.input = r.input;
    nr.residual = r.residual;
    nr.weight = r.weight;
    nr.hidden = r.hidden;
    nr.vector = r.norm_vector;
    const float total = team.sum([&](int lane) { return Program<kNorm>::partial(0, nr, lane, width, nullptr); });
    if constexpr (kOp == QuantProducer::kFusedAddRmsNorm) team.sync();  // the residual, read by other lanes
    inv = rms_inv_scale(total, r.hidden, a.eps);
  }

  RowQuant q;
  if (p.scheme == QuantScheme::kPerTokenAzp) {
    const MinMax mm = team.minmax([&](int lane) {
      MinMax acc{__builtin_inff(), -__builtin_inff()};
      for_each_value<kOp, T, W>(r, vector, inv, lane, width, [&](int64_t, const auto& v) {
        constexpr int N = sizeof(v) / sizeof(float);
XLLM_CUDA_UNROLL
        for (int i = 0; i < N; ++i) acc = combine(acc, MinMax{v[i], v[i]});
      });
      return acc;
    });
    const ::xllm_kernel::kernels::Int8AzpParams ap = azp_params(mm.min, mm.max);
    q.method = QuantMethod::kInt8MulAzp;
    q.factor = ap.multiplier;
    q.azp = ap.azp;
    team.leader([&] {
      *r.scale = ap.scale;
      *r.azp = ap.azp;
    });
  } else if (p.scheme == QuantScheme::kPerToken) {
    const float amax = team.max([&](int lane) {
      float acc = 0.0f;
      for_each_value<kOp, T, W>(r, vector, inv, lane, width, [&](int64_t, const auto& v) {
        constexpr int N = sizeof(v) / sizeof(float);
XLLM_CUDA_UNROLL
        for (int i = 0; i < N; ++i) acc = quant_max(acc, q_abs(v[i]));
      });
      return acc;
    });
    float scale;
    if (p.qdtype == QuantDType::kFloat8E4M3) {
      scale = fp8_scale(amax, p.scale_ub);
      q.method = QuantMethod::kFp8Div;
      q.factor = scale;
    } else {
      scale = int8_scale(amax);
      q.method = QuantMethod::kInt8Mul;
      q.factor = int8_multiplier(amax);
    }
    team.leader([&] { *r.scale = scale; });
  } else {
    const float scale = *p.static_scale;
    if (p.qdtype == QuantDType::kFloat8E4M3) {
      q.method = QuantMethod::kFp8Mul;
      q.factor = float_div(1.0f, scale);
    } else if (p.static_azp != nullptr) {
      q.method = QuantMethod::kInt8MulAzp;
      q.factor = float_div(1.0f, scale);
      q.azp = *p.static_azp;
    } else {
      q.method = QuantMethod::kInt8Div;
      q.factor = scale;
    }
  }
  team.each([&](int lane) { quantize_lane<kOp, T, W>(r, vector, inv, q, lane, width); });
}

// The rows of one group: first, first + step, ...
template <QuantProducer kOp, class T, class W, class Team>
XLLM_CUDA_HD void quant_group_rows(const QuantArgs& a, int64_t first, int64_t step, Team& team) {
  for (int64_t row = first; row < a.p.shape.rows; row += step) quant_row<kOp, T, W>(a, row, team);
}

// Shared scratch of a block-per-row launch, in floats: block_sum's two alternating slots per warp,
// and two alternating (min, max) slots per warp for the other reductions.
XLLM_CUDA_HD constexpr int quant_scratch_floats(int threads) { return 6 * (threads / kWarp); }

#ifdef __CUDACC__

__device__ __forceinline__ float warp_max(float v) {
XLLM_CUDA_UNROLL
  for (int m = kWarp / 2; m > 0; m /= 2) v = quant_max(v, __shfl_xor_sync(0xFFFFFFFFu, v, m));
  return v;
}

__device__ __forceinline__ MinMax warp_minmax(MinMax v) {
XLLM_CUDA_UNROLL
  for (int m = kWarp / 2; m > 0; m /= 2) {
    v = combine(v, MinMax{__shfl_xor_sync(0xFFFFFFFFu, v.min, m), __shfl_xor_sync(0xFFFFFFFFu, v.max, m)});
  }
  return v;
}

#endif  // __CUDACC__

// The device team: this thread's lane of a warp (kWarpPerRow) or of the block.
template <bool kWarpPerRow>
struct QuantDeviceTeam {
  int lane_ = 0, width_ = 0;
  float* sum_scratch = nullptr;  // 2 * warps floats (block_sum)
  float* red_scratch = nullptr;  // 2 * 2 * warps floats
  int sum_parity = 0, red_parity = 0;

  XLLM_CUDA_HD int width() const { return width_; }

  template <class F>
  XLLM_CUDA_HD float sum(F&& f) {
#ifdef __CUDA_ARCH__
    const float v = f(lane_);
    if constexpr (kWarpPerRow) {
      return warp_sum(v);
    } else {
      return block_sum(v, sum_scratch, sum_parity);
    }
#else
    return 0.0f;
#endif
  }

  template <class F>
  XLLM_CUDA_HD float max(F&& f) {
#ifdef __CUDA_ARCH__
    float v = warp_max(f(lane_));
    if constexpr (kWarpPerRow) {
      return v;
    } else {
      const int warps = width_ / kWarp, warp = lane_ / kWarp, l = lane_ % kWarp;
      float* slots = red_scratch + red_parity * 2 * warps;
      red_parity ^= 1;
      if (l == 0) slots[warp] = v;
      __syncthreads();
      return warp_max(l < warps ? slots[l] : 0.0f);  // 0: amax's identity
    }
#else
    return 0.0f;
#endif
  }

  template <class F>
  XLLM_CUDA_HD MinMax minmax(F&& f) {
#ifdef __CUDA_ARCH__
    MinMax v = warp_minmax(f(lane_));
    if constexpr (kWarpPerRow) {
      return v;
    } else {
      const int warps = width_ / kWarp, warp = lane_ / kWarp, l = lane_ % kWarp;
      float* slots = red_scratch + red_parity * 2 * warps;
      red_parity ^= 1;
      if (l == 0) {
        slots[warp] = v.min;
        slots[warps + warp] = v.max;
      }
      __syncthreads();
      return warp_minmax(l < warps ? MinMax{slots[l], slots[warps + l]} : MinMax{__builtin_inff(), -__builtin_inff()});
    }
#else
    return MinMax{0.0f, 0.0f};
#endif
  }

  template <class F>
  XLLM_CUDA_HD void each(F&& f) {
    f(lane_);
  }

  template <class F>
  XLLM_CUDA_HD void leader(F&& f) {
    if (lane_ == 0) f();
  }

  XLLM_CUDA_HD void sync() {
#ifdef __CUDA_ARCH__
    // A block's group: block_sum's barrier already ordered the writes before every later read.
    if constexpr (kWarpPerRow) __syncwarp();
#endif
  }
};

#ifdef __CUDACC__

template <QuantProducer kOp, class T, class W, bool kWarpPerRow>
__global__ void __launch_bounds__(1024) quant_rows(const __grid_constant__ QuantArgs a) {
  extern __shared__ float scratch[];
  QuantDeviceTeam<kWarpPerRow> team;
  int64_t first, step;
  if constexpr (kWarpPerRow) {
    const int warps = blockDim.x / kWarp;
    team.lane_ = threadIdx.x % kWarp;
    team.width_ = kWarp;
    first = int64_t{blockIdx.x} * warps + threadIdx.x / kWarp;
    step = int64_t{gridDim.x} * warps;
  } else {
    const int warps = blockDim.x / kWarp;
    team.lane_ = threadIdx.x;
    team.width_ = blockDim.x;
    team.sum_scratch = scratch;
    team.red_scratch = scratch + 2 * warps;
    first = blockIdx.x;
    step = gridDim.x;
  }
  quant_group_rows<kOp, T, W>(a, first, step, team);
}

#endif  // __CUDACC__

// Calls f(Element<T>{}, Element<W>{}) for the element and weight types of `p` (W = float where
// the operation has no weight) and returns its result; `otherwise` for a dtype no variant takes.
template <QuantProducer kOp, class R, class F>
R dispatch_quant_types(const QuantParams& p, R otherwise, F&& f) {
  return dispatch_dtype(p.dtype, otherwise, [&](auto element) {
    using T = typename decltype(element)::type;
    if constexpr (kOp == QuantProducer::kRmsNorm || kOp == QuantProducer::kFusedAddRmsNorm) {
      if (p.weight_dtype == ::xllm_kernel::kernels::DType::kFloat32) return f(element, Element<float>{});
      if (p.weight_dtype == p.dtype) return f(element, Element<T>{});
      return otherwise;
    } else {
      return f(element, Element<float>{});
    }
  });
}

}  // namespace xllm_kernel::cuda::kernels
