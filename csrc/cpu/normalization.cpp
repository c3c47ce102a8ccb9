// Torch-free CPU normalization kernels. This translation unit is compiled once per Highway
// target (foreach_target) and the entry points pick the best one at runtime, so no global
// -m flags are needed.
#include "csrc/cpu/normalization.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "csrc/cpu/normalization.cpp"
#include "hwy/cache_control.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#ifndef XLLM_KERNEL_CPU_NORMALIZATION_SHARED_
#define XLLM_KERNEL_CPU_NORMALIZATION_SHARED_
namespace xllm_kernel::cpu::detail {

// Element offsets of the current row in up to three tensors. Advancing is an odometer step,
// so the common case is one add per tensor and there is no division per row.
template <int kTensors>
struct RowCursor {
  int ndim;
  const int64_t* sizes;
  const int64_t* strides[kTensors];
  int64_t index[kMaxRowDims];
  int64_t offset[kTensors];

  RowCursor(const NormParams& p, int64_t row, const int64_t* const (&s)[kTensors])
      : ndim(p.row_ndim), sizes(p.row_sizes) {
    for (int t = 0; t < kTensors; ++t) {
      strides[t] = s[t];
      offset[t] = 0;
    }
    for (int d = ndim - 1; d >= 0; --d) {
      index[d] = row % sizes[d];
      row /= sizes[d];
      for (int t = 0; t < kTensors; ++t) offset[t] += index[d] * strides[t][d];
    }
  }

  // Offset of the next row in tensor t (without advancing).
  int64_t NextOffset(int t) const {
    int64_t off = offset[t];
    for (int d = ndim - 1; d >= 0; --d) {
      if (index[d] + 1 < sizes[d]) return off + strides[t][d];
      off -= (sizes[d] - 1) * strides[t][d];
    }
    return off;
  }

  void Next() {
    for (int d = ndim - 1; d >= 0; --d) {
      if (++index[d] < sizes[d]) {
        for (int t = 0; t < kTensors; ++t) offset[t] += strides[t][d];
        return;
      }
      // Wrap this dimension and carry into the next outer one.
      index[d] = 0;
      for (int t = 0; t < kTensors; ++t) offset[t] -= (sizes[d] - 1) * strides[t][d];
    }
  }
};

}  // namespace xllm_kernel::cpu::detail
#endif  // XLLM_KERNEL_CPU_NORMALIZATION_SHARED_

HWY_BEFORE_NAMESPACE();
namespace xllm_kernel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Highway 1.0.3 converts f16 with F16C (exact, RNE, NaN/Inf aware) only on AVX2/AVX3; its
// fallback paths truncate and mishandle Inf/NaN, so other targets use the integer code below.
#undef XLLM_NORM_NATIVE_F16
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
#define XLLM_NORM_NATIVE_F16 1
#else
#define XLLM_NORM_NATIVE_F16 0
#endif

using hwy::bfloat16_t;
using hwy::float16_t;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
using VU = hn::Vec<DU>;
constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

// ---------------------------------------------------------------- conversions

// f16 bits (in the low half of u32 lanes) -> f32, exact for every input.
HWY_INLINE VF F32FromF16Bits(VU h) {
  const DF d;
  const DU du;
  const DI di;
  const VU sign = hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000u)));
  const VU em = hn::And(h, hn::Set(du, 0x7FFFu));
  const VU normal = hn::Add(hn::ShiftLeft<13>(em), hn::Set(du, 112u << 23));
  // Integer convert + scale keeps subnormals exact even under DAZ/FTZ.
  const VU subnormal = hn::BitCast(
      du, hn::Mul(hn::ConvertTo(d, hn::BitCast(di, em)), hn::Set(d, 1.0f / 16777216.0f)));
  const VU inf_nan = hn::Or(hn::ShiftLeft<13>(em), hn::Set(du, 0x7F800000u));
  const auto em_i = hn::BitCast(di, em);
  VU bits = hn::IfThenElse(hn::RebindMask(du, em_i < hn::Set(di, 0x400)), subnormal, normal);
  bits = hn::IfThenElse(hn::RebindMask(du, em_i > hn::Set(di, 0x7BFF)), inf_nan, bits);
  return hn::BitCast(d, hn::Or(bits, sign));
}

// f32 -> f16 bits (low half of u32 lanes), round to nearest even, NaN stays (quiet) NaN.
HWY_INLINE VU F16BitsFromF32(VF v) {
  const DF d;
  const DU du;
  const DI di;
  const VU bits = hn::BitCast(du, v);
  const VU sign = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 0x8000u));
  const VU abs_bits = hn::And(bits, hn::Set(du, 0x7FFFFFFFu));
  const auto abs_i = hn::BitCast(di, abs_bits);
  // Normal range: rebias the exponent and round the 13 dropped bits (ties to even); a carry
  // out of the mantissa correctly bumps the exponent, up to Inf.
  const VU odd = hn::And(hn::ShiftRight<13>(abs_bits), hn::Set(du, 1u));
  const VU normal = hn::ShiftRight<13>(
      hn::Add(hn::Sub(abs_bits, hn::Set(du, 112u << 23)), hn::Add(hn::Set(du, 0xFFFu), odd)));
  // Below 2^-14: adding 0.5f makes the f32 ulp 2^-24, the f16 subnormal spacing, so the FPU
  // does the RNE; the mantissa is then the f16 subnormal (or 0x400, the smallest normal).
  const VU subnormal = hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(d, abs_bits), hn::Set(d, 0.5f))),
                               hn::Set(du, 0x3F000000u));
  VU h = hn::IfThenElse(hn::RebindMask(du, abs_i < hn::Set(di, 0x38800000)), subnormal, normal);
  h = hn::IfThenElse(hn::RebindMask(du, abs_i > hn::Set(di, 0x477FFFFF)), hn::Set(du, 0x7C00u), h);
  h = hn::IfThenElse(hn::RebindMask(du, abs_i > hn::Set(di, 0x7F800000)), hn::Set(du, 0x7E00u), h);
  return hn::Or(h, sign);
}

// f32 -> bf16 with round to nearest even, result in the upper 16 bits. Highway 1.0.3's
// DemoteTo(bf16) truncates. NaN is quieted instead of rounded (rounding could carry to Inf).
HWY_INLINE VU Bf16UpperFromF32(VF v) {
  const DU du;
  const VU bits = hn::BitCast(du, v);
  const VU bias = hn::Add(hn::Set(du, 0x7FFFu), hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u)));
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), hn::Or(bits, hn::Set(du, 0x00400000u)),
                        hn::Add(bits, bias));
}

// Narrows u32 lanes holding values < 2^16 and stores them as 16-bit elements.
HWY_INLINE void StoreLow16(VU v, void* p) {
  const DI di;
  const hn::Rebind<uint16_t, DF> d16;
  hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, v)), d16, static_cast<uint16_t*>(p));
}

HWY_INLINE VF LoadF(const float* p) { return hn::LoadU(DF(), p); }

HWY_INLINE VF LoadF(const bfloat16_t* p) {
  const hn::Rebind<bfloat16_t, DF> dh;
  return hn::PromoteTo(DF(), hn::LoadU(dh, p));
}

HWY_INLINE VF LoadF(const float16_t* p) {
#if XLLM_NORM_NATIVE_F16
  const hn::Rebind<float16_t, DF> dh;
  return hn::PromoteTo(DF(), hn::LoadU(dh, p));
#else
  const hn::Rebind<uint16_t, DF> d16;
  return F32FromF16Bits(hn::PromoteTo(DU(), hn::LoadU(d16, reinterpret_cast<const uint16_t*>(p))));
#endif
}

// Loads 2N consecutive elements as two vectors, lanes in any order (for reductions only).
template <typename T>
HWY_INLINE void Load2Unordered(const T* p, VF& a, VF& b) {
  a = LoadF(p);
  b = LoadF(p + hn::Lanes(DF()));
}

// bf16 pairs read as u32 lanes: the odd element is already an f32 in the upper half.
HWY_INLINE void Load2Unordered(const bfloat16_t* p, VF& a, VF& b) {
  const DU du;
  const VU u = hn::LoadU(du, reinterpret_cast<const uint32_t*>(p));
  a = hn::BitCast(DF(), hn::ShiftLeft<16>(u));
  b = hn::BitCast(DF(), hn::And(u, hn::Set(du, 0xFFFF0000u)));
}

// Rounds once to the element type, stores, and returns the stored value as f32.
HWY_INLINE VF StoreF(VF v, float* p) {
  hn::StoreU(v, DF(), p);
  return v;
}

HWY_INLINE VF StoreF(VF v, bfloat16_t* p) {
  const DU du;
  const VU upper = Bf16UpperFromF32(v);
  StoreLow16(hn::ShiftRight<16>(upper), p);
  return hn::BitCast(DF(), hn::And(upper, hn::Set(du, 0xFFFF0000u)));
}

HWY_INLINE VF StoreF(VF v, float16_t* p) {
#if XLLM_NORM_NATIVE_F16
  const hn::Rebind<float16_t, DF> dh;
  const auto h = hn::DemoteTo(dh, v);
  hn::StoreU(h, dh, p);
  return hn::PromoteTo(DF(), h);
#else
  const VU h = F16BitsFromF32(v);
  StoreLow16(h, p);
  return F32FromF16Bits(h);
#endif
}

// Stores two vectors and replaces them with the stored (rounded) values.
HWY_INLINE void Store2F(VF& v0, VF& v1, float* p) {
  hn::StoreU(v0, DF(), p);
  hn::StoreU(v1, DF(), p + hn::Lanes(DF()));
}

HWY_INLINE void Store2F(VF& v0, VF& v1, float16_t* p) {
  v0 = StoreF(v0, p);
  v1 = StoreF(v1, p + hn::Lanes(DF()));
}

HWY_INLINE void Store2F(VF& v0, VF& v1, bfloat16_t* p) {
#if HWY_TARGET == HWY_SCALAR
  v0 = StoreF(v0, p);
  v1 = StoreF(v1, p + 1);
#else
  // One pack of the upper halves of both vectors is cheaper than two narrowing demotes.
  const DU du;
  const hn::Repartition<uint16_t, DF> d16;
  const VU u0 = Bf16UpperFromF32(v0), u1 = Bf16UpperFromF32(v1);
  hn::StoreU(hn::ConcatOdd(d16, hn::BitCast(d16, u1), hn::BitCast(d16, u0)), d16,
             reinterpret_cast<uint16_t*>(p));
  v0 = hn::BitCast(DF(), hn::And(u0, hn::Set(du, 0xFFFF0000u)));
  v1 = hn::BitCast(DF(), hn::And(u1, hn::Set(du, 0xFFFF0000u)));
#endif
}

// Partial vectors go through a stack buffer: Highway 1.0.3 has no LoadN/StoreN and its AVX2
// MaskedLoad for 16-bit lanes reads the whole vector, which could cross the row end.
template <typename T>
HWY_INLINE VF LoadTail(const T* p, size_t n) {
  alignas(64) unsigned char buf[kMaxLanes * sizeof(T)] = {};
  std::memcpy(buf, p, n * sizeof(T));
  return LoadF(reinterpret_cast<const T*>(buf));
}

template <typename T>
HWY_INLINE VF StoreTail(VF v, T* p, size_t n) {
  alignas(64) unsigned char buf[kMaxLanes * sizeof(T)];
  const VF stored = StoreF(v, reinterpret_cast<T*>(buf));
  std::memcpy(p, buf, n * sizeof(T));
  return stored;
}

// ---------------------------------------------------------------- row passes

// Prefetches the cache lines holding `count` elements from p.
template <typename T>
HWY_INLINE void PrefetchElems(const T* p, size_t count) {
  for (size_t k = 0; k < count * sizeof(T); k += 64) {
    hwy::Prefetch(reinterpret_cast<const char*>(p) + k);
  }
}

struct SquareOp {
  HWY_INLINE VF operator()(VF v, VF acc) const { return hn::MulAdd(v, v, acc); }
};
struct SumOp {
  HWY_INLINE VF operator()(VF v, VF acc) const { return hn::Add(v, acc); }
};
struct DeviationSquareOp {
  VF mean;
  HWY_INLINE VF operator()(VF v, VF acc) const {
    const VF dev = hn::Sub(v, mean);
    return hn::MulAdd(dev, dev, acc);
  }
};

// fp32 reduction of op over a row; four accumulators hide the add latency.
template <typename T, class Op>
HWY_INLINE float ReduceRow(const T* x, size_t hidden, const Op& op) {
  const DF d;
  const size_t n = hn::Lanes(d);
  VF a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * n <= hidden; i += 4 * n) {
    VF v0, v1, v2, v3;
    Load2Unordered(x + i, v0, v1);
    Load2Unordered(x + i + 2 * n, v2, v3);
    a0 = op(v0, a0);
    a1 = op(v1, a1);
    a2 = op(v2, a2);
    a3 = op(v3, a3);
  }
  for (; i + n <= hidden; i += n) a0 = op(LoadF(x + i), a0);
  if (i < hidden) {
    const size_t rest = hidden - i;
    a1 = hn::IfThenElse(hn::FirstN(d, rest), op(LoadTail(x + i, rest), a1), a1);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
}

// y = (x - shift) * scale * w (+ b), rounded once into y.
template <bool kBias, typename W>
HWY_INLINE VF Affine(VF x, VF shift, VF scale, const W* w, const W* b) {
  const VF v = hn::Mul(hn::Sub(x, shift), scale);
  if constexpr (kBias) return hn::MulAdd(v, LoadF(w), LoadF(b));
  return hn::Mul(v, LoadF(w));
}

// `next` (the next row's input, or x for the last row) is prefetched in step, so memory keeps
// streaming while this row is finished from cache.
template <bool kShift, bool kBias, typename T, typename W>
HWY_INLINE void AffineRow(const T* x, float shift_s, float scale_s, const W* w, const W* b, T* y,
                          size_t hidden, const T* next) {
  const DF d;
  const size_t n = hn::Lanes(d);
  const VF shift = hn::Set(d, kShift ? shift_s : 0.0f);
  const VF scale = hn::Set(d, scale_s);
  size_t i = 0;
  for (; i + 4 * n <= hidden; i += 4 * n) {
    PrefetchElems(next + i, 4 * n);
    VF v0 = Affine<kBias>(LoadF(x + i), shift, scale, w + i, b + i);
    VF v1 = Affine<kBias>(LoadF(x + i + n), shift, scale, w + i + n, b + i + n);
    VF v2 = Affine<kBias>(LoadF(x + i + 2 * n), shift, scale, w + i + 2 * n, b + i + 2 * n);
    VF v3 = Affine<kBias>(LoadF(x + i + 3 * n), shift, scale, w + i + 3 * n, b + i + 3 * n);
    Store2F(v0, v1, y + i);
    Store2F(v2, v3, y + i + 2 * n);
  }
  for (; i + n <= hidden; i += n)
    StoreF(Affine<kBias>(LoadF(x + i), shift, scale, w + i, b + i), y + i);
  if (i < hidden) {
    const size_t rest = hidden - i;
    const VF xv = LoadTail(x + i, rest);
    VF v = hn::Mul(hn::Sub(xv, shift), scale);
    if constexpr (kBias) {
      v = hn::MulAdd(v, LoadTail(w + i, rest), LoadTail(b + i, rest));
    } else {
      v = hn::Mul(v, LoadTail(w + i, rest));
    }
    StoreTail(v, y + i, rest);
  }
}

// r = round(x + r) stored into r; returns the fp32 sum of squares of the stored values.
template <typename T>
HWY_INLINE float AddRoundSumSquares(const T* x, T* r, size_t hidden) {
  const DF d;
  const size_t n = hn::Lanes(d);
  VF a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * n <= hidden; i += 4 * n) {
    VF s0 = hn::Add(LoadF(x + i), LoadF(r + i));
    VF s1 = hn::Add(LoadF(x + i + n), LoadF(r + i + n));
    VF s2 = hn::Add(LoadF(x + i + 2 * n), LoadF(r + i + 2 * n));
    VF s3 = hn::Add(LoadF(x + i + 3 * n), LoadF(r + i + 3 * n));
    Store2F(s0, s1, r + i);
    Store2F(s2, s3, r + i + 2 * n);
    a0 = hn::MulAdd(s0, s0, a0);
    a1 = hn::MulAdd(s1, s1, a1);
    a2 = hn::MulAdd(s2, s2, a2);
    a3 = hn::MulAdd(s3, s3, a3);
  }
  for (; i + n <= hidden; i += n) {
    const VF s = StoreF(hn::Add(LoadF(x + i), LoadF(r + i)), r + i);
    a0 = hn::MulAdd(s, s, a0);
  }
  if (i < hidden) {
    // Padding lanes are 0 + 0, which rounds to 0 and adds nothing.
    const size_t rest = hidden - i;
    const VF s = StoreTail(hn::Add(LoadTail(x + i, rest), LoadTail(r + i, rest)), r + i, rest);
    a1 = hn::MulAdd(s, s, a1);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
}

// ---------------------------------------------------------------- kernels

template <typename T, typename W>
void RmsNormT(const NormParams& p, int64_t row_begin, int64_t row_end) {
  const size_t hidden = static_cast<size_t>(p.hidden);
  const W* w = static_cast<const W*>(p.weight);
  const float inv_hidden = 1.0f / static_cast<float>(p.hidden);
  const float eps = static_cast<float>(p.eps);
  detail::RowCursor<2> rc(p, row_begin, {p.input_strides, p.out_strides});
  for (int64_t row = row_begin; row < row_end; ++row, rc.Next()) {
    const T* x = static_cast<const T*>(p.input) + rc.offset[0];
    T* y = static_cast<T*>(p.out) + rc.offset[1];
    const T* next = row + 1 < row_end ? static_cast<const T*>(p.input) + rc.NextOffset(0) : x;
    const float ss = ReduceRow(x, hidden, SquareOp());
    const float inv = 1.0f / std::sqrt(ss * inv_hidden + eps);
    AffineRow<false, false>(x, 0.0f, inv, w, w, y, hidden, next);
  }
}

template <typename T, typename W>
void FusedAddRmsNormT(const NormParams& p, int64_t row_begin, int64_t row_end) {
  const size_t hidden = static_cast<size_t>(p.hidden);
  const W* w = static_cast<const W*>(p.weight);
  const float inv_hidden = 1.0f / static_cast<float>(p.hidden);
  const float eps = static_cast<float>(p.eps);
  detail::RowCursor<2> rc(p, row_begin, {p.input_strides, p.residual_strides});
  for (int64_t row = row_begin; row < row_end; ++row, rc.Next()) {
    T* x = static_cast<T*>(const_cast<void*>(p.input)) + rc.offset[0];
    T* r = static_cast<T*>(p.residual) + rc.offset[1];
    const T* next = row + 1 < row_end ? static_cast<const T*>(p.residual) + rc.NextOffset(1) : r;
    const float ss = AddRoundSumSquares(x, r, hidden);
    const float inv = 1.0f / std::sqrt(ss * inv_hidden + eps);
    // Normalizes the rounded residual as stored, so the result matches rms_norm(residual).
    AffineRow<false, false>(static_cast<const T*>(r), 0.0f, inv, w, w, x, hidden, next);
  }
}

template <bool kBias, typename T, typename W>
void LayerNormT(const NormParams& p, int64_t row_begin, int64_t row_end) {
  const size_t hidden = static_cast<size_t>(p.hidden);
  const W* w = static_cast<const W*>(p.weight);
  const W* b = kBias ? static_cast<const W*>(p.bias) : w;
  const float inv_hidden = 1.0f / static_cast<float>(p.hidden);
  const float eps = static_cast<float>(p.eps);
  const DF d;
  detail::RowCursor<2> rc(p, row_begin, {p.input_strides, p.out_strides});
  for (int64_t row = row_begin; row < row_end; ++row, rc.Next()) {
    const T* x = static_cast<const T*>(p.input) + rc.offset[0];
    T* y = static_cast<T*>(p.out) + rc.offset[1];
    const T* next = row + 1 < row_end ? static_cast<const T*>(p.input) + rc.NextOffset(0) : x;
    // Two-pass variance: E[x^2] - mean^2 cancels catastrophically when |mean| >> std.
    const float mean = ReduceRow(x, hidden, SumOp()) * inv_hidden;
    const float var = ReduceRow(x, hidden, DeviationSquareOp{hn::Set(d, mean)}) * inv_hidden;
    const float inv = 1.0f / std::sqrt(var + eps);
    AffineRow<true, kBias>(x, mean, inv, w, b, y, hidden, next);
  }
}

// Calls K<T, W> for the dtype pair in p.
template <template <typename, typename> class K>
void ForDTypes(const NormParams& p, int64_t row_begin, int64_t row_end) {
  const bool w32 = p.weight_dtype == DType::kFloat32;
  switch (p.dtype) {
    case DType::kFloat32:
      K<float, float>::Run(p, row_begin, row_end);
      break;
    case DType::kBFloat16:
      w32 ? K<bfloat16_t, float>::Run(p, row_begin, row_end)
          : K<bfloat16_t, bfloat16_t>::Run(p, row_begin, row_end);
      break;
    case DType::kFloat16:
      w32 ? K<float16_t, float>::Run(p, row_begin, row_end)
          : K<float16_t, float16_t>::Run(p, row_begin, row_end);
      break;
  }
}

template <typename T, typename W>
struct RmsNormK {
  static void Run(const NormParams& p, int64_t b, int64_t e) { RmsNormT<T, W>(p, b, e); }
};
template <typename T, typename W>
struct FusedAddRmsNormK {
  static void Run(const NormParams& p, int64_t b, int64_t e) { FusedAddRmsNormT<T, W>(p, b, e); }
};
template <typename T, typename W>
struct LayerNormK {
  static void Run(const NormParams& p, int64_t b, int64_t e) {
    if (p.bias != nullptr) {
      LayerNormT<true, T, W>(p, b, e);
    } else {
      LayerNormT<false, T, W>(p, b, e);
    }
  }
};

void RmsNormRows(const NormParams& p, int64_t b, int64_t e) { ForDTypes<RmsNormK>(p, b, e); }
void FusedAddRmsNormRows(const NormParams& p, int64_t b, int64_t e) {
  ForDTypes<FusedAddRmsNormK>(p, b, e);
}
void LayerNormRows(const NormParams& p, int64_t b, int64_t e) { ForDTypes<LayerNormK>(p, b, e); }
const char* TargetNameOfThis() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace xllm_kernel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace xllm_kernel::cpu {

HWY_EXPORT(RmsNormRows);
HWY_EXPORT(FusedAddRmsNormRows);
HWY_EXPORT(LayerNormRows);
HWY_EXPORT(TargetNameOfThis);

namespace {

bool ValidDType(DType t) {
  return t == DType::kFloat32 || t == DType::kBFloat16 || t == DType::kFloat16;
}

// Defence only: the bridge validates shapes, dtypes and pointers before calling.
bool ValidCommon(const NormParams& p, int64_t row_begin, int64_t row_end) {
  if (!ValidDType(p.dtype) || (p.weight_dtype != DType::kFloat32 && p.weight_dtype != p.dtype)) {
    return false;
  }
  if (p.hidden < 1 || p.row_ndim < 1 || p.row_ndim > kMaxRowDims || p.rows < 0) return false;
  int64_t rows = 1;
  for (int d = 0; d < p.row_ndim; ++d) {
    if (p.row_sizes[d] < 0 || __builtin_mul_overflow(rows, p.row_sizes[d], &rows)) return false;
  }
  if (rows != p.rows || row_begin < 0 || row_begin > row_end || row_end > p.rows) return false;
  if (!(std::isfinite(p.eps) && p.eps >= 0.0)) return false;
  return p.input != nullptr && p.weight != nullptr;
}

}  // namespace

Status rms_norm(const NormParams& p, int64_t row_begin, int64_t row_end) {
  if (!ValidCommon(p, row_begin, row_end) || p.out == nullptr) return Status::kInvalidArgument;
  if (row_begin < row_end) HWY_DYNAMIC_DISPATCH(RmsNormRows)(p, row_begin, row_end);
  return Status::kOk;
}

Status fused_add_rms_norm(const NormParams& p, int64_t row_begin, int64_t row_end) {
  if (!ValidCommon(p, row_begin, row_end) || p.residual == nullptr) {
    return Status::kInvalidArgument;
  }
  if (row_begin < row_end) HWY_DYNAMIC_DISPATCH(FusedAddRmsNormRows)(p, row_begin, row_end);
  return Status::kOk;
}

Status layer_norm(const NormParams& p, int64_t row_begin, int64_t row_end) {
  if (!ValidCommon(p, row_begin, row_end) || p.out == nullptr) return Status::kInvalidArgument;
  if (row_begin < row_end) HWY_DYNAMIC_DISPATCH(LayerNormRows)(p, row_begin, row_end);
  return Status::kOk;
}

const char* simd_target() { return HWY_DYNAMIC_DISPATCH(TargetNameOfThis)(); }

}  // namespace xllm_kernel::cpu
#endif  // HWY_ONCE
