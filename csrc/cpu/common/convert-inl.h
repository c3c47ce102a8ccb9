// Highway helpers for float32, bfloat16 and float16 rows: loads that widen to f32, stores that
// round once to the element type (round to nearest even, NaN stays NaN), bf16 in even/odd form,
// and partial vectors at a row's end.
//
// Include after "hwy/highway.h" in a foreach_target translation unit (per-target include guard):
//   #include "csrc/cpu/common/convert-inl.h"
//   const VF v = LoadF(x + i);        // T = float, hwy::bfloat16_t or hwy::float16_t
//   StoreF(hn::Mul(v, v), y + i);      // rounded once to T
//
// Why not Highway's own conversions: in 1.0.3 DemoteTo(bf16) truncates, and f16 converts exactly
// only with F16C (x86 AVX2 and up); the other targets' fallback truncates and mishandles Inf/NaN.

// Per-target include guard (Highway's idiom): included once per target by foreach_target.
#if defined(XLLM_KERNEL_CPU_COMMON_CONVERT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef XLLM_KERNEL_CPU_COMMON_CONVERT_INL_H_
#undef XLLM_KERNEL_CPU_COMMON_CONVERT_INL_H_
#else
#define XLLM_KERNEL_CPU_COMMON_CONVERT_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "csrc/cpu/common/stream-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace xllm_kernel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Highway 1.0.3 converts f16 with F16C (exact, RNE, NaN/Inf aware) only on AVX2/AVX3; its
// fallback paths truncate and mishandle Inf/NaN, so other targets use the integer code below.
#undef XLLM_CPU_NATIVE_F16
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
#define XLLM_CPU_NATIVE_F16 1
#else
#define XLLM_CPU_NATIVE_F16 0
#endif

using hwy::bfloat16_t;
using hwy::float16_t;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
using VU = hn::Vec<DU>;
constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

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

// The same rounding without the NaN guard. Only for values that cannot carry a NaN payload
// from the inputs: a NaN the FPU creates itself (0 * Inf, Inf - Inf) is the default quiet NaN
// 0xFFC00000, which this rounds to the bf16 NaN 0xFFC0, and finite values and Inf round
// correctly (a carry out of the largest finite values gives Inf, as RNE requires).
HWY_INLINE VU Bf16UpperFromF32NoNaNPayload(VF v) {
  const DU du;
  const VU bits = hn::BitCast(du, v);
  return hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u))));
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
#if XLLM_CPU_NATIVE_F16
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
#if XLLM_CPU_NATIVE_F16
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

// Stores two vectors (2N elements in memory order) and replaces them with the stored (rounded)
// values. kStream: as one or two full-vector non-temporal stores, p aligned to the vector size
// (StreamAligned); on HWY_SCALAR the stores are plain.
template <bool kStream = false>
HWY_INLINE void Store2F(VF& v0, VF& v1, float* p) {
  StoreVec<kStream>(v0, DF(), p);
  StoreVec<kStream>(v1, DF(), p + hn::Lanes(DF()));
}

template <bool kStream = false>
HWY_INLINE void Store2F(VF& v0, VF& v1, float16_t* p) {
#if HWY_TARGET == HWY_SCALAR
  v0 = StoreF(v0, p);
  v1 = StoreF(v1, p + 1);
#else
  if constexpr (!kStream) {
    v0 = StoreF(v0, p);
    v1 = StoreF(v1, p + hn::Lanes(DF()));
  } else {
    // Both halves in one full vector of u16, so the store can be a single non-temporal one.
    const hn::Repartition<uint16_t, DF> d16;
#if XLLM_CPU_NATIVE_F16
    const hn::Rebind<float16_t, DF> dh;
    const hn::Rebind<uint16_t, DF> dh16;
    const auto h0 = hn::DemoteTo(dh, v0), h1 = hn::DemoteTo(dh, v1);
    StoreVec<true>(hn::Combine(d16, hn::BitCast(dh16, h1), hn::BitCast(dh16, h0)), d16,
                   reinterpret_cast<uint16_t*>(p));
    v0 = hn::PromoteTo(DF(), h0);
    v1 = hn::PromoteTo(DF(), h1);
#else
    const VU h0 = F16BitsFromF32(v0), h1 = F16BitsFromF32(v1);
    StoreVec<true>(hn::ConcatEven(d16, hn::BitCast(d16, h1), hn::BitCast(d16, h0)), d16,
                   reinterpret_cast<uint16_t*>(p));
    v0 = F32FromF16Bits(h0);
    v1 = F32FromF16Bits(h1);
#endif
  }
#endif
}

template <bool kStream = false>
HWY_INLINE void Store2F(VF& v0, VF& v1, bfloat16_t* p) {
#if HWY_TARGET == HWY_SCALAR
  v0 = StoreF(v0, p);
  v1 = StoreF(v1, p + 1);
#else
  // One pack of the upper halves of both vectors is cheaper than two narrowing demotes.
  const DU du;
  const hn::Repartition<uint16_t, DF> d16;
  const VU u0 = Bf16UpperFromF32(v0), u1 = Bf16UpperFromF32(v1);
  StoreVec<kStream>(hn::ConcatOdd(d16, hn::BitCast(d16, u1), hn::BitCast(d16, u0)), d16,
                    reinterpret_cast<uint16_t*>(p));
  v0 = hn::BitCast(DF(), hn::And(u0, hn::Set(du, 0xFFFF0000u)));
  v1 = hn::BitCast(DF(), hn::And(u1, hn::Set(du, 0xFFFF0000u)));
#endif
}

// bf16 rows in even/odd form: 2N elements loaded as N u32 lanes give the even elements (low
// halves) and the odd elements (high halves) as two f32 vectors with one shift and one mask, and
// the rounded results go back with a shift, a mask and an or: no widening or narrowing shuffles.
// Elementwise work needs any other operand (weights, the second half of a gated row) in the same
// order.
HWY_INLINE void LoadEvenOdd(const bfloat16_t* p, VF& even, VF& odd) { Load2Unordered(p, even, odd); }

// Rounds both vectors to bf16, stores the 2N elements in memory order and replaces the vectors
// with the stored values. kNaNPayload: the values may carry a NaN payload from the inputs.
// kStream: a non-temporal store (p must be aligned to the vector size).
template <bool kNaNPayload, bool kStream = false>
HWY_INLINE void StoreEvenOdd(VF& even, VF& odd, bfloat16_t* p) {
  const DU du;
  const VU mask = hn::Set(du, 0xFFFF0000u);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (!kNaNPayload) {
    // The same rounding in 16-bit lanes, 7 operations per vector pair instead of 10: the upper
    // halves hi (the truncated results, already in memory order) get 1 added where the lower
    // halves lo round up, lo > 0x8000 or lo = 0x8000 with hi odd, i.e. (lo | (hi & 1)) > 0x8000
    // (bit for bit Bf16UpperFromF32NoNaNPayload: lo + (hi & 1) > 0x8000 is the same test).
    const __m512i ue = hn::BitCast(du, even).raw, uo = hn::BitCast(du, odd).raw;
    // ternlog immediates: 0xF8 = a | (b & c), 0xDC = (a & ~c) | b
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_srli_epi32(ue, 16), uo, mask.raw, 0xF8);
    const __m512i lo = _mm512_ternarylogic_epi32(ue, _mm512_slli_epi32(uo, 16), mask.raw, 0xDC);
    const __m512i t = _mm512_ternarylogic_epi32(lo, hi, _mm512_set1_epi32(0x00010001), 0xF8);
    const __mmask32 up = _mm512_cmpgt_epu16_mask(t, _mm512_set1_epi16(static_cast<short>(0x8000)));
    const VU packed{_mm512_mask_add_epi16(hi, up, hi, _mm512_set1_epi16(1))};
    StoreVec<kStream>(packed, du, reinterpret_cast<uint32_t*>(p));
    even = hn::BitCast(DF(), hn::ShiftLeft<16>(packed));
    odd = hn::BitCast(DF(), hn::And(packed, mask));
    return;
  }
#endif

  const VU ue = kNaNPayload ? Bf16UpperFromF32(even) : Bf16UpperFromF32NoNaNPayload(even);
  const VU uo = hn::And(kNaNPayload ? Bf16UpperFromF32(odd) : Bf16UpperFromF32NoNaNPayload(odd), mask);
  const VU packed = hn::Or(hn::ShiftRight<16>(ue), uo);
  StoreVec<kStream>(packed, du, reinterpret_cast<uint32_t*>(p));
  even = hn::BitCast(DF(), hn::And(ue, mask));
  odd = hn::BitCast(DF(), uo);
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

}  // namespace HWY_NAMESPACE
}  // namespace xllm_kernel::cpu
HWY_AFTER_NAMESPACE();

#endif  // XLLM_KERNEL_CPU_COMMON_CONVERT_INL_H_
