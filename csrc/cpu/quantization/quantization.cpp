// Torch-free CPU quantization kernels. This translation unit is compiled once per Highway target
// (foreach_target) and the entry points pick the best one at runtime. The arithmetic is the
// contract's (csrc/common/quantization.h); the SIMD forms below compute the same bits as its
// scalar functions, which the tests check on every target.
#include "csrc/cpu/quantization/quantization.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "csrc/cpu/quantization/quantization.cpp"
#include "hwy/aligned_allocator.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "csrc/cpu/activation/activation-inl.h"
#include "csrc/cpu/common/convert-inl.h"
#include "csrc/cpu/common/cpu_features.h"
#include "csrc/cpu/common/row_cursor.h"
#include "csrc/cpu/common/stream-inl.h"
#include "csrc/cpu/normalization/normalization-inl.h"

HWY_BEFORE_NAMESPACE();
namespace xllm_kernel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using VI = hn::Vec<DI>;
using DQ = hn::Rebind<uint8_t, DF>;  // one byte per float lane

// ---------------------------------------------------------------- conversions
// Each maps float32 lanes to int32 lanes holding the quantized element: int8 values in
// [-128, 127], or float8_e4m3fn bits in [0, 255]; exactly as the scalar functions of
// csrc/common/quantization.h.

// x86 targets convert with the instructions directly: cvtps2dq rounds to nearest even in the
// default rounding mode (as every kernel here assumes) and Highway's NearestInt / ConvertTo add
// an overflow fix-up the callers below make unnecessary.
#undef XLLM_QUANT_X86
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSSE3
#define XLLM_QUANT_X86 1
#else
#define XLLM_QUANT_X86 0
#endif

// v rounded to nearest even, for v not NaN with |v| < 2^31.
HWY_INLINE VI RoundToInt(VF v) {
#if XLLM_QUANT_X86 && HWY_TARGET <= HWY_AVX3
  return VI{_mm512_cvtps_epi32(v.raw)};
#elif XLLM_QUANT_X86 && HWY_TARGET == HWY_AVX2
  return VI{_mm256_cvtps_epi32(v.raw)};
#elif XLLM_QUANT_X86
  return VI{_mm_cvtps_epi32(v.raw)};
#else
  return hn::ConvertTo(DI(), hn::Round(v));
#endif
}

// float8_e4m3fn_from_float for |v| <= 448 (1 + 2^-20), not NaN. Normal range: rebias the
// exponent and round the 20 dropped mantissa bits (ties to even) in integer arithmetic; a carry
// out of the mantissa bumps the exponent. Below 2^-6: adding 2^14 makes the float32 ulp 2^-9, the
// e4m3 subnormal spacing, so the FPU rounds |v| to m * 2^-9 (ties to even) and the low mantissa
// bits are m (8 for 2^-6, the smallest normal's encoding).
// sign_of: where the sign bit comes from (v itself, or for a quotient v = x / s with s > 0, x: the
// sign of x / s is the sign of x, also where the quotient underflows to zero).
HWY_INLINE VI E4m3BitsInRange(VF v, VF sign_of) {
  const DF d;
  const DI di;
  const VI abs = hn::And(hn::BitCast(di, v), hn::Set(di, 0x7FFFFFFF));
  const VI bits = hn::BitCast(di, sign_of);
  const VI lsb = hn::And(hn::ShiftRight<20>(abs), hn::Set(di, 1));
  // (abs - (120 << 23) + 0x7FFFF + lsb) >> 20; for |v| < 2^-7 the subtraction wraps, and those
  // lanes take the subnormal result. A logical shift: the wrapped lanes are not used.
  const VI sum = hn::Add(hn::Add(abs, hn::Set(di, static_cast<int32_t>(0x7FFFFu - 0x3C000000u))), lsb);
  const VI normal = hn::BitCast(di, hn::ShiftRight<20>(hn::BitCast(DU(), sum)));
  const VI subnormal = hn::Sub(hn::BitCast(di, hn::Add(hn::BitCast(d, abs), hn::Set(d, 16384.0f))),
                               hn::Set(di, 0x46800000));
  const VI mag = hn::IfThenElse(abs < hn::Set(di, 0x3C800000), subnormal, normal);
  return hn::OrAnd(mag, hn::ShiftRight<24>(bits), hn::Set(di, 0x80));  // the sign (bits >> 24 is arithmetic)
}

#if XLLM_QUANT_X86 && HWY_TARGET <= HWY_AVX3
// The same bits in 8 operations instead of 12 (AVX-512): a = max(|v|, 2^-23) (one vrangeps; below
// 2^-23 every v gives +-0) has a biased exponent E in [104, 135]. Adding M = 2^(e + 20) (e = E -
// 127, e >= -6) makes the float32 ulp 2^(e - 3), the e4m3 spacing in a's binade, so the FPU rounds
// a to 2^e * k / 8 (ties to even, k in [8, 16]) and the sum's bits are M's plus k; the code is
// 8 (e + 6) + k. Below 2^-6, M = 2^14 (ulp 2^-9, the subnormal spacing), k is the code. So the code
// is bits(a + M) - T with M and T = bits(M) - 8 (e + 6) looked up by E mod 32 (two vpermi2d).
struct E4m3Tables {
  static constexpr int32_t M(int idx) {
    const int e = (idx < 8 ? idx + 128 : idx + 96) - 127;
    return e >= -6 ? (e + 147) << 23 : 0x46800000;
  }
  static constexpr int32_t T(int idx) {
    const int e = (idx < 8 ? idx + 128 : idx + 96) - 127;
    return e >= -6 ? M(idx) - 8 * (e + 6) : 0x46800000;
  }
};

HWY_INLINE VI E4m3BitsInRangeAvx3(VF v, VF sign_of) {
  using Tb = E4m3Tables;
  const __m512i m_lo = _mm512_setr_epi32(Tb::M(0), Tb::M(1), Tb::M(2), Tb::M(3), Tb::M(4), Tb::M(5), Tb::M(6), Tb::M(7),
                                         Tb::M(8), Tb::M(9), Tb::M(10), Tb::M(11), Tb::M(12), Tb::M(13), Tb::M(14), Tb::M(15));
  const __m512i m_hi = _mm512_setr_epi32(Tb::M(16), Tb::M(17), Tb::M(18), Tb::M(19), Tb::M(20), Tb::M(21), Tb::M(22),
                                         Tb::M(23), Tb::M(24), Tb::M(25), Tb::M(26), Tb::M(27), Tb::M(28), Tb::M(29),
                                         Tb::M(30), Tb::M(31));
  const __m512i t_lo = _mm512_setr_epi32(Tb::T(0), Tb::T(1), Tb::T(2), Tb::T(3), Tb::T(4), Tb::T(5), Tb::T(6), Tb::T(7),
                                         Tb::T(8), Tb::T(9), Tb::T(10), Tb::T(11), Tb::T(12), Tb::T(13), Tb::T(14), Tb::T(15));
  const __m512i t_hi = _mm512_setr_epi32(Tb::T(16), Tb::T(17), Tb::T(18), Tb::T(19), Tb::T(20), Tb::T(21), Tb::T(22),
                                         Tb::T(23), Tb::T(24), Tb::T(25), Tb::T(26), Tb::T(27), Tb::T(28), Tb::T(29),
                                         Tb::T(30), Tb::T(31));
  // imm 0x0B: the larger magnitude, sign cleared.
  const __m512 a = _mm512_range_ps(v.raw, _mm512_set1_ps(0x1p-23f), 0x0B);
  const __m512i e = _mm512_srli_epi32(_mm512_castps_si512(a), 23);  // vpermi2d reads bits 0..4
  const __m512i m = _mm512_permutex2var_epi32(m_lo, e, m_hi);
  const __m512i t = _mm512_permutex2var_epi32(t_lo, e, t_hi);
  const __m512i mag = _mm512_sub_epi32(_mm512_castps_si512(_mm512_add_ps(a, _mm512_castsi512_ps(m))), t);
  // mag | ((sign_of >> 24) & 0x80); ternlog 0xF8 = a | (b & c)
  return VI{_mm512_ternarylogic_epi32(mag, _mm512_srai_epi32(_mm512_castps_si512(sign_of.raw), 24),
                                      _mm512_set1_epi32(0x80), 0xF8)};
}
#endif

HWY_INLINE VI E4m3BitsInRange(VF v) { return E4m3BitsInRange(v, v); }

// float8_e4m3fn_from_float for every v: from 448 on (inf included) the normal result is at or
// above 0x7E, so a min saturates it; NaN gives 0x7F.
HWY_INLINE VI E4m3Bits(VF v) {
  const DF d;
  const DI di;
  const VI bits = hn::BitCast(di, v);
  const VI abs = hn::And(bits, hn::Set(di, 0x7FFFFFFF));
  const VI lsb = hn::And(hn::ShiftRight<20>(abs), hn::Set(di, 1));
  const VI sum = hn::Add(hn::Add(abs, hn::Set(di, static_cast<int32_t>(0x7FFFFu - 0x3C000000u))), lsb);
  const VI normal = hn::Min(hn::BitCast(di, hn::ShiftRight<20>(hn::BitCast(DU(), sum))), hn::Set(di, 0x7E));
  const VI subnormal = hn::Sub(hn::BitCast(di, hn::Add(hn::BitCast(d, abs), hn::Set(d, 16384.0f))),
                               hn::Set(di, 0x46800000));
  const VI mag = hn::IfThenElse(abs < hn::Set(di, 0x3C800000), subnormal, normal);
  const VI q = hn::OrAnd(mag, hn::ShiftRight<24>(bits), hn::Set(di, 0x80));
  return hn::IfThenElse(abs > hn::Set(di, 0x7F800000), hn::Set(di, 0x7F), q);
}

// int8_from_float: NaN to 0, clamped to [-128, 127] (both integers, so clamping before rounding
// changes nothing), rounded to nearest even.
HWY_INLINE VI Int8Bits(VF v) {
  const DF d;
  const VF clean = hn::IfThenZeroElse(hn::IsNaN(v), v);
  return RoundToInt(hn::Min(hn::Max(clean, hn::Set(d, -128.0f)), hn::Set(d, 127.0f)));
}

// int8_from_float_azp(v, azp) with lo = max(-128 - azp, -2^31) and hi = min(127 - azp, 2^31 - 1):
// int32(v) clamped to [lo, hi] plus azp is the saturated sum, and the int32 addition cannot
// overflow. int32(v): NaN to 0, rounded, >= 2^31 to 2^31 - 1, <= -2^31 to -2^31 (2147483520 is the
// largest float32 below 2^31; -2^31 is a float32).
HWY_INLINE VI Int8AzpBits(VF v, VI lo, VI hi, VI azp) {
  const DF d;
  const DI di;
  const VF clean = hn::IfThenZeroElse(hn::IsNaN(v), v);
  VI i = RoundToInt(hn::Min(hn::Max(clean, hn::Set(d, -2147483648.0f)), hn::Set(d, 2147483520.0f)));
  i = hn::IfThenElse(hn::RebindMask(di, clean >= hn::Set(d, 2147483648.0f)), hn::Set(di, 2147483647), i);
  i = hn::Min(hn::Max(i, lo), hi);
  return hn::Add(i, azp);
}

// The quantizers: one float vector to its quantized elements, as the contract's quantize_*
// functions. kUnsigned: the elements are e4m3 bits (0..255), else int8 values.
struct Fp8PerToken {  // e4m3(x / scale)
  static constexpr bool kUnsigned = true;
  VF scale;
  HWY_INLINE VI operator()(VF x) const { return E4m3Bits(hn::Div(x, scale)); }
};
// The same for a row whose amax is finite and at most scale_ub: |x / scale| <= 448 (1 + 2^-23).
struct Fp8PerTokenInRange {
  static constexpr bool kUnsigned = true;
  VF scale;
  HWY_INLINE VI operator()(VF x) const { return E4m3BitsInRange(hn::Div(x, scale)); }
};
#if HWY_NATIVE_FMA
// RN(x / s) without a division, for s > 0 a normal float with y = RN(1 / s) normal, |x / s| <=
// 448 (1 + 2^-23) and x finite; where |x / s| < 2^-12 the result is only within a few ulps (and
// of either sign), which e4m3 rounds to zero all the same (with the sign taken from x).
//   q0 = RN(x * y). y = (1 / s)(1 + e), |e| <= 2^-24, so q0 = (x / s)(1 + e)(1 + e'): within
//      about 2 ulps of t = x / s, not always faithful.
//   q1 = RN(q0 + r0 * y), r0 = RN(x - q0 * s) (one fma; exact when q0 is within 1 ulp, else
//      rounded once, a relative 2^-24 of r0). q0 + r0 * y = t + (t - q0) * O(2^-23): within
//      2^-20 ulp of t, so q1 is within 1/2 + 2^-20 ulp of t: faithful. (One step is not enough
//      for RN(t) itself: t may lie closer than that to the midpoint of two floats; it is never on
//      one unless s is a power of 2, where q0 is already exact.)
//   q2 = RN(q1 + r1 * y), r1 = x - q1 * s, exact (q1 faithful: r1 is a multiple of
//      ulp(q1) * ulp(s) below 2^24 of them). Markstein's theorem (Muller et al., Handbook of
//      Floating-Point Arithmetic, division with a fused multiply-add): y = RN(1 / s) and q1
//      faithful give q2 = RN(x / s), barring underflow and overflow.
// Underflow cannot happen where it matters: for |t| >= 2^-12 (below, e4m3 is 0 anyway), with
// s >= 2^-18 (the smallest fp8 scale is 1 / 229376) and |t| <= 448.1, every operand and result
// (x >= 2^-30, r >= 2^-54, r * y, the products inside the fmas) is a normal float; s * q <= amax
// and x * y <= 448.1 cannot overflow.
// The tests check it against x / s for every bf16 and f16 value and dense float32 sweeps around
// the e4m3 rounding boundaries, times scales over the whole range.
HWY_INLINE VF DivideByScale(VF x, VF s, VF y) {
  const VF q0 = hn::Mul(x, y);
  const VF q1 = hn::MulAdd(hn::NegMulAdd(q0, s, x), y, q0);
  return hn::MulAdd(hn::NegMulAdd(q1, s, x), y, q1);
}

// Fp8PerTokenInRange without the division (see DivideByScale), for rows whose scale s is a
// normal float with 2^-18 <= s <= 2^120 (every in-range row's).
struct Fp8PerTokenInRangeFma {
  static constexpr bool kUnsigned = true;
  VF scale, inv_scale;  // inv_scale = RN(1 / scale)
  HWY_INLINE VI operator()(VF x) const {
#if XLLM_QUANT_X86 && HWY_TARGET <= HWY_AVX3
    return E4m3BitsInRangeAvx3(DivideByScale(x, scale, inv_scale), x);
#else
    return E4m3BitsInRange(DivideByScale(x, scale, inv_scale), x);
#endif
  }
};
#endif

struct Fp8Static {  // e4m3(x * (1 / scale))
  static constexpr bool kUnsigned = true;
  VF inv_scale;
  HWY_INLINE VI operator()(VF x) const { return E4m3Bits(hn::Mul(x, inv_scale)); }
};
// int8(x * multiplier) for a row whose amax is finite with a finite multiplier > 0: |x * m| <=
// 127 (1 + 2^-22), never NaN, so the rounding alone is the conversion.
struct Int8PerTokenInRange {
  static constexpr bool kUnsigned = false;
  VF multiplier;
  HWY_INLINE VI operator()(VF x) const { return RoundToInt(hn::Mul(x, multiplier)); }
};
struct Int8PerToken {  // int8(x * multiplier), any multiplier
  static constexpr bool kUnsigned = false;
  VF multiplier;
  HWY_INLINE VI operator()(VF x) const { return Int8Bits(hn::Mul(x, multiplier)); }
};
struct Int8Static {  // int8(x / scale)
  static constexpr bool kUnsigned = false;
  VF scale;
  HWY_INLINE VI operator()(VF x) const { return Int8Bits(hn::Div(x, scale)); }
};
struct Int8Azp {  // int8(int32(x * multiplier) + azp)
  static constexpr bool kUnsigned = false;
  VF multiplier;
  VI lo, hi, azp;
  HWY_INLINE VI operator()(VF x) const { return Int8AzpBits(hn::Mul(x, multiplier), lo, hi, azp); }
};

Int8Azp MakeInt8Azp(float multiplier, int32_t azp) {
  const DF d;
  const DI di;
  const int64_t lo = -128 - static_cast<int64_t>(azp), hi = 127 - static_cast<int64_t>(azp);
  return Int8Azp{hn::Set(d, multiplier), hn::Set(di, static_cast<int32_t>(lo < INT32_MIN ? INT32_MIN : lo)),
                 hn::Set(di, static_cast<int32_t>(hi > INT32_MAX ? INT32_MAX : hi)), hn::Set(di, azp)};
}

// ---------------------------------------------------------------- row passes

// Prefetch hints of the next row: none, into L1 (PrefetchElems), into L2 (PrefetchElemsL2), or
// into L1 its second half only, at half the rate (after a pass that prefetched the first half:
// AffineRowEvenOdd<..., kHalfPrefetch>).
constexpr int kPrefetchNone = 0, kPrefetchL1 = 1, kPrefetchL2 = 2, kPrefetchL1SecondHalf = 3;

// The prefetch of a pass over a row of `count` elements at elements [i, i + n): the same span of
// the next row `next`, or with kPrefetchL1SecondHalf half as many elements of its second half.
template <int kPrefetch, typename T>
HWY_INLINE void PrefetchNext(const T* next, size_t count, size_t i, size_t n) {
  if constexpr (kPrefetch == kPrefetchL1) {
    PrefetchElems(next + i, n);
  } else if constexpr (kPrefetch == kPrefetchL2) {
    PrefetchElemsL2(next + i, n);
  } else if constexpr (kPrefetch == kPrefetchL1SecondHalf) {
    PrefetchElems(next + count / 2 + i / 2, n / 2);
  }
}

// The elements before y's first address aligned to v bytes (at most count): stored normally
// ahead of a row's non-temporal stores.
HWY_INLINE size_t StreamHead(const uint8_t* y, size_t count, size_t v) {
  const size_t misaligned = reinterpret_cast<uintptr_t>(y) % v;
  return misaligned == 0 ? 0 : HWY_MIN(count, v - misaligned);
}

// Fewer than a full byte vector: float vectors of N, then a partial one through a stack buffer
// (no access past the row's end).
template <class Q, typename T>
HWY_INLINE void QuantizePartial(const T* HWY_RESTRICT x, uint8_t* HWY_RESTRICT y, size_t count, const Q& q) {
  const DF d;
  const DQ dq;
  const DU du;
  const size_t n = hn::Lanes(d);
  size_t i = 0;
  for (; i + n <= count; i += n) hn::StoreU(hn::TruncateTo(dq, hn::BitCast(du, q(LoadF(x + i)))), dq, y + i);
  if (i < count) {
    alignas(64) uint8_t buf[kMaxLanes];
    hn::StoreU(hn::TruncateTo(dq, hn::BitCast(du, q(LoadTail(x + i, count - i)))), dq, buf);
    std::memcpy(y + i, buf, count - i);
  }
}

#if HWY_TARGET != HWY_SCALAR
using D8 = hn::ScalableTag<uint8_t>;

#if XLLM_QUANT_X86 && HWY_TARGET <= HWY_AVX3
// A 16-to-8-bit pack of vectors a and b interleaves their 64-bit groups per 128-bit block (a0 b0
// a1 b1 ...); this puts them back in memory order (a0 a1 a2 a3 b0 b1 b2 b3).
HWY_INLINE __m512i QwordsInOrder(__m512i packed) {
  return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), packed);
}
#endif

// The elements of four int32 vectors (4N elements in memory order, each in [-128, 127] or, with
// kUnsigned, [0, 255]) as one full vector of bytes. x86: two saturating packs to 16 bits, one to
// 8 bits, and (256 and 512 bits, whose packs work per 128-bit block) one permutation of the
// 32-bit groups back into memory order.
template <bool kUnsigned>
HWY_INLINE hn::Vec<D8> PackBytes(VI a, VI b, VI c, VI e) {
#if XLLM_QUANT_X86 && HWY_TARGET <= HWY_AVX3
  const __m512i ab = _mm512_packs_epi32(a.raw, b.raw), ce = _mm512_packs_epi32(c.raw, e.raw);
  const __m512i packed = kUnsigned ? _mm512_packus_epi16(ab, ce) : _mm512_packs_epi16(ab, ce);
  // Block k holds a[4k..4k+3], b[4k..], c[4k..], e[4k..] as its four 32-bit groups.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return hn::Vec<D8>{_mm512_permutexvar_epi32(order, packed)};
#elif XLLM_QUANT_X86 && HWY_TARGET == HWY_AVX2
  const __m256i ab = _mm256_packs_epi32(a.raw, b.raw), ce = _mm256_packs_epi32(c.raw, e.raw);
  const __m256i packed = kUnsigned ? _mm256_packus_epi16(ab, ce) : _mm256_packs_epi16(ab, ce);
  return hn::Vec<D8>{_mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))};
#elif XLLM_QUANT_X86
  const __m128i ab = _mm_packs_epi32(a.raw, b.raw), ce = _mm_packs_epi32(c.raw, e.raw);
  return hn::Vec<D8>{kUnsigned ? _mm_packus_epi16(ab, ce) : _mm_packs_epi16(ab, ce)};
#else
  const D8 d8;
  const hn::Half<D8> dh;
  const DQ dq;
  const DU du;
  const auto lo = hn::Combine(dh, hn::TruncateTo(dq, hn::BitCast(du, b)), hn::TruncateTo(dq, hn::BitCast(du, a)));
  const auto hi = hn::Combine(dh, hn::TruncateTo(dq, hn::BitCast(du, e)), hn::TruncateTo(dq, hn::BitCast(du, c)));
  return hn::Combine(d8, hi, lo);
#endif
}
#endif

// y[j] = q(x[j]) for j < count, a full vector of bytes (4 float vectors) at a time. kStream: the
// bytes from the first one aligned to the vector size on are stored non-temporally (the head
// before it normally). kPrefetch: the same span of `next` (the next row) is prefetched in step
// (PrefetchNext).
template <bool kStream, int kPrefetch, class Q, typename T>
HWY_INLINE void QuantizeRow(const T* HWY_RESTRICT x, uint8_t* HWY_RESTRICT y, size_t count, const Q& q,
                            const T* next) {
  size_t i = 0;
#if HWY_TARGET != HWY_SCALAR
  const D8 d8;
  const size_t v = hn::Lanes(d8);
  const size_t n = hn::Lanes(DF());
  if constexpr (kStream) {
    i = StreamHead(y, count, v);
    QuantizePartial(x, y, i, q);
  }
#if XLLM_QUANT_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (std::is_same_v<T, bfloat16_t>) {
    // bf16: one unpack per float vector instead of a widening load and a shift. Unpacking with
    // zeros gives 128-bit block k of lo(a) elements 8k..8k+3 and of hi(a) 8k+4..8k+7, so the
    // 32-bit pack of (lo, hi) is a's 32 elements in order; the 16-bit pack interleaves a's and b's
    // 64-bit groups, which one vpermq puts back in order.
    const __m512i zero = _mm512_setzero_si512();
    for (; i + v <= count; i += v) {
      PrefetchNext<kPrefetch>(next, count, i, v);
      const __m512i a = _mm512_loadu_si512(x + i), b = _mm512_loadu_si512(x + i + v / 2);
      const VI q0 = q(VF{_mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, a))});
      const VI q1 = q(VF{_mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, a))});
      const VI q2 = q(VF{_mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, b))});
      const VI q3 = q(VF{_mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, b))});
      const __m512i ab = _mm512_packs_epi32(q0.raw, q1.raw), ce = _mm512_packs_epi32(q2.raw, q3.raw);
      const __m512i packed = Q::kUnsigned ? _mm512_packus_epi16(ab, ce) : _mm512_packs_epi16(ab, ce);
      StoreVec<kStream>(hn::Vec<D8>{QwordsInOrder(packed)}, d8, y + i);
    }
  }
#endif
  for (; i + v <= count; i += v) {
    PrefetchNext<kPrefetch>(next, count, i, v);
    const VI q0 = q(LoadF(x + i)), q1 = q(LoadF(x + i + n));
    const VI q2 = q(LoadF(x + i + 2 * n)), q3 = q(LoadF(x + i + 3 * n));
    StoreVec<kStream>(PackBytes<Q::kUnsigned>(q0, q1, q2, q3), d8, y + i);
  }
#else
  (void)next;
#endif
  QuantizePartial(x + i, y + i, count - i, q);
}

// A tail of `count` elements (< a vector's worth of bytes), zero-padded.
template <typename T, class D>
HWY_INLINE hn::Vec<D> LoadBitsTail(D d, const T* p, size_t count) {
  alignas(64) unsigned char buf[HWY_MAX_BYTES] = {};
  std::memcpy(buf, p, count * sizeof(T));
  return hn::Load(d, reinterpret_cast<const hn::TFromD<D>*>(buf));
}

// max |x| over a row as float32, NaN (quant_nan) if the row holds one: the largest magnitude bits
// (sign cleared), where every NaN is above inf. On the element type's own bits, so bf16 and f16
// rows are not widened.
template <typename T>
HWY_INLINE float RowAbsMax(const T* HWY_RESTRICT x, size_t count) {
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>;
  const hn::ScalableTag<U> du;
  const size_t n = hn::Lanes(du);
  const auto mask = hn::Set(du, static_cast<U>(sizeof(T) == 4 ? 0x7FFFFFFFu : 0x7FFFu));
  const U* p = reinterpret_cast<const U*>(x);
  auto a0 = hn::Zero(du), a1 = hn::Zero(du), a2 = hn::Zero(du), a3 = hn::Zero(du);
  size_t i = 0;
  for (; i + 4 * n <= count; i += 4 * n) {
    a0 = hn::Max(a0, hn::And(hn::LoadU(du, p + i), mask));
    a1 = hn::Max(a1, hn::And(hn::LoadU(du, p + i + n), mask));
    a2 = hn::Max(a2, hn::And(hn::LoadU(du, p + i + 2 * n), mask));
    a3 = hn::Max(a3, hn::And(hn::LoadU(du, p + i + 3 * n), mask));
  }
  for (; i + n <= count; i += n) a0 = hn::Max(a0, hn::And(hn::LoadU(du, p + i), mask));
  if (i < count) a1 = hn::Max(a1, hn::And(LoadBitsTail(du, p + i, count - i), mask));
  alignas(64) U lanes[HWY_MAX_BYTES / sizeof(U)];
  hn::Store(hn::Max(hn::Max(a0, a1), hn::Max(a2, a3)), du, lanes);
  U m = 0;
  for (size_t k = 0; k < n; ++k) m = lanes[k] > m ? lanes[k] : m;
  if constexpr (std::is_same_v<T, float>) {
    return m > 0x7F800000u ? kernels::quant_nan() : kernels::float_from_bits(m);
  } else if constexpr (std::is_same_v<T, bfloat16_t>) {
    return m > 0x7F80u ? kernels::quant_nan() : kernels::float_from_bits(static_cast<uint32_t>(m) << 16);
  } else {
    return m > 0x7C00u ? kernels::quant_nan() : hn::GetLane(F32FromF16Bits(hn::Set(DU(), m)));
  }
}

// A signed integer whose order is the order of the floats (-0 below +0); NaN with the sign clear
// above +inf's key, with the sign set below -inf's. Its own inverse.
HWY_INLINE VI OrderKey(VF v) {
  const DI di;
  const VI b = hn::BitCast(di, v);
  return hn::Xor(b, hn::And(hn::ShiftRight<31>(b), hn::Set(di, 0x7FFFFFFF)));
}

inline int32_t OrderKeyScalar(uint32_t bits) {
  const int32_t b = static_cast<int32_t>(bits);
  return b ^ ((b >> 31) & 0x7FFFFFFF);
}

// min and max of a row as float32; both NaN (quant_nan) if the row holds a NaN.
template <typename T>
HWY_INLINE void RowMinMax(const T* HWY_RESTRICT x, size_t count, float& min, float& max) {
  const DF d;
  const DI di;
  const size_t n = hn::Lanes(d);
  const VI top = hn::Set(di, INT32_MAX), bottom = hn::Set(di, INT32_MIN);
  VI lo0 = top, lo1 = top, hi0 = bottom, hi1 = bottom;
  size_t i = 0;
  for (; i + 2 * n <= count; i += 2 * n) {
    const VI k0 = OrderKey(LoadF(x + i)), k1 = OrderKey(LoadF(x + i + n));
    lo0 = hn::Min(lo0, k0);
    hi0 = hn::Max(hi0, k0);
    lo1 = hn::Min(lo1, k1);
    hi1 = hn::Max(hi1, k1);
  }
  for (; i + n <= count; i += n) {
    const VI k = OrderKey(LoadF(x + i));
    lo0 = hn::Min(lo0, k);
    hi0 = hn::Max(hi0, k);
  }
  if (i < count) {
    const auto valid = hn::RebindMask(di, hn::FirstN(d, count - i));
    const VI k = OrderKey(LoadTail(x + i, count - i));
    lo1 = hn::Min(lo1, hn::IfThenElse(valid, k, top));
    hi1 = hn::Max(hi1, hn::IfThenElse(valid, k, bottom));
  }
  alignas(64) int32_t lo_lanes[kMaxLanes], hi_lanes[kMaxLanes];
  hn::Store(hn::Min(lo0, lo1), di, lo_lanes);
  hn::Store(hn::Max(hi0, hi1), di, hi_lanes);
  int32_t lo = INT32_MAX, hi = INT32_MIN;
  for (size_t k = 0; k < n; ++k) {
    lo = lo_lanes[k] < lo ? lo_lanes[k] : lo;
    hi = hi_lanes[k] > hi ? hi_lanes[k] : hi;
  }
  if (lo < OrderKeyScalar(0xFF800000u) || hi > OrderKeyScalar(0x7F800000u)) {
    min = max = kernels::quant_nan();
    return;
  }
  min = kernels::float_from_bits(static_cast<uint32_t>(OrderKeyScalar(static_cast<uint32_t>(lo))));
  max = kernels::float_from_bits(static_cast<uint32_t>(OrderKeyScalar(static_cast<uint32_t>(hi))));
}

// ---------------------------------------------------------------- fp8 of bf16 rows by table
#undef XLLM_QUANT_BF16_TABLE
#if XLLM_QUANT_X86 && HWY_TARGET <= HWY_AVX3 && HWY_NATIVE_FMA
// Per-token fp8 of a bf16 row whose scale s is a normal float in [2^-18, 2^120] and whose
// quotients are in range (Fp8PerTokenInRangeFma's rows), by a 128-byte table and vpermi2b
// (AVX512_VBMI) instead of the quotient and its conversion per element.
// A bf16 x = 2^(E - 127) (1 + m / 128) (E >= 1) is r_m = 2^(eb - 127) (1 + m / 128) times
// 2^(E - eb). Take eb = Es, s's biased exponent, so r_m / s lies in (1/2, 2). Scaling
// by a power of 2 commutes with both roundings while every value stays normal: RN32(x / s) =
// 2^(E - eb) RN32(r_m / s), and e4m3 of 2^k w is e4m3 of w plus k binades, i.e. code + 8k,
// wherever the result is a normal e4m3 (>= 2^-6). So code(x) = T[m] + 8 (E - eb) with T[m] the
// code of r_m / s, computed by Fp8PerTokenInRangeFma itself. Where that sum is below 8 (x / s
// below 2^-6, e4m3's subnormals, and zeros and bf16 subnormals, whose sums are below 0 as eb >=
// 109) the spacing differs: a block of 64 elements holding such a lane is quantized by the
// quotient instead. (A sum of exactly 8 from the binade below, a value within 2^-11 of 2^-6, is
// 8 by the subnormal spacing as well: 2^-6 - 2^-10 is already the tie that rounds to 8.) In-range
// quotients are at most 448 (1 + 2^-23), so no sum exceeds 0x7E. The tests run every bf16 value
// through it against x / s for every scale of the quotient tests, with the tables and without.
struct Bf16E4m3Table {
  __m512i lo, hi;  // T[0..63], T[64..127]
  __m512i bias;    // 8 eb in every 16-bit lane
};

HWY_INLINE Bf16E4m3Table MakeBf16E4m3Table(const Fp8PerTokenInRangeFma& q, float s) {
  const DF d;
  const DI di;
  const uint32_t s_bits = kernels::float_bits(s);
  const int32_t eb = static_cast<int32_t>(s_bits >> 23);
  const size_t n = hn::Lanes(d);  // 16
  VI codes[8];
  for (size_t j = 0; j < 8; ++j) {
    const VI m = hn::Add(hn::Iota(di, static_cast<int32_t>(j * n)), hn::Set(di, eb << 7));
    codes[j] = q(hn::BitCast(d, hn::ShiftLeft<16>(m)));
  }
  return Bf16E4m3Table{PackBytes<true>(codes[0], codes[1], codes[2], codes[3]).raw,
                       PackBytes<true>(codes[4], codes[5], codes[6], codes[7]).raw,
                       _mm512_set1_epi16(static_cast<int16_t>(8 * eb))};
}

// The codes of 32 bf16 elements (16-bit lanes, sign included); *small: a lane needs the quotient.
HWY_INLINE __m512i Bf16E4m3Codes(__m512i a, const Bf16E4m3Table& t, __mmask32& small) {
  __m512i r = a;  // byte indexes: the low byte of each element is its m (bit 7, E's low bit, unread)
  // vpermi2b by assembly: this target's compiler flags do not include AVX512_VBMI, which the
  // caller checked at run time.
  __asm__("vpermi2b %[hi], %[lo], %[r]" : [r] "+v"(r) : [lo] "v"(t.lo), [hi] "v"(t.hi));
  const __m512i e8 = _mm512_and_si512(_mm512_srli_epi16(a, 4), _mm512_set1_epi16(0x07F8));
  const __m512i code =
      _mm512_sub_epi16(_mm512_add_epi16(_mm512_and_si512(r, _mm512_set1_epi16(0x00FF)), e8), t.bias);
  small = _mm512_cmplt_epi16_mask(code, _mm512_set1_epi16(8));
  // code | ((a >> 8) & 0x80); ternlog 0xF8 = a | (b & c)
  return _mm512_ternarylogic_epi32(code, _mm512_srli_epi16(a, 8), _mm512_set1_epi16(0x80), 0xF8);
}

// QuantizeRow<kStream, kPrefetch> of a bf16 row with q, by the table where it applies.
template <bool kStream, int kPrefetch>
HWY_NOINLINE void QuantizeBf16RowByTable(const bfloat16_t* HWY_RESTRICT x, uint8_t* HWY_RESTRICT y, size_t count,
                                         const Fp8PerTokenInRangeFma& q, const Bf16E4m3Table& t,
                                         const bfloat16_t* next) {
  const D8 d8;
  constexpr size_t v = 64;
  size_t i = 0;
  if constexpr (kStream) {
    i = StreamHead(y, count, v);
    QuantizePartial(x, y, i, q);
  }
  for (; i + v <= count; i += v) {
    PrefetchNext<kPrefetch>(next, count, i, v);
    const __m512i a = _mm512_loadu_si512(x + i), b = _mm512_loadu_si512(x + i + v / 2);
    __mmask32 small_a, small_b;
    const __m512i ca = Bf16E4m3Codes(a, t, small_a), cb = Bf16E4m3Codes(b, t, small_b);
    if (HWY_UNLIKELY((small_a | small_b) != 0)) {
      QuantizePartial(x + i, y + i, v, q);
      continue;
    }
    StoreVec<kStream>(hn::Vec<D8>{QwordsInOrder(_mm512_packus_epi16(ca, cb))}, d8, y + i);
  }
  QuantizePartial(x + i, y + i, count - i, q);
}

HWY_INLINE bool CpuHasVbmi() { return cpu_features().avx512_vbmi; }  // cpu_features.h
#define XLLM_QUANT_BF16_TABLE 1
#else
#define XLLM_QUANT_BF16_TABLE 0
#endif

// ---------------------------------------------------------------- quantizing rows

enum class Method : int {
  kFp8PerToken,
  kInt8PerToken,
  kInt8Azp,
  kFp8Static,
  kFp8StaticDivide,
  kInt8Static,
  kInt8AzpStatic
};

Method MethodOf(const QuantParams& p) {
  const bool fp8 = p.qdtype == QuantDType::kFloat8E4M3;
  switch (p.scheme) {
    case QuantScheme::kPerToken: return fp8 ? Method::kFp8PerToken : Method::kInt8PerToken;
    case QuantScheme::kPerTokenAzp: return Method::kInt8Azp;
    case QuantScheme::kStatic: break;
  }
  if (fp8) return p.static_divide ? Method::kFp8StaticDivide : Method::kFp8Static;
  return p.static_azp != nullptr ? Method::kInt8AzpStatic : Method::kInt8Static;
}

// Quantizes rows of T as p's scheme says: the per-token schemes find each row's parameters (and
// write them), the static ones use the constants read once here.
class RowQuantizer {
 public:
  explicit RowQuantizer(const QuantParams& p) : method_(MethodOf(p)), scale_ub_(p.scale_ub), stream_(p.stream_out) {
#if XLLM_QUANT_BF16_TABLE
    tables_ = CpuHasVbmi();
#endif
    if (p.scheme == QuantScheme::kStatic) {
      static_scale_ = *p.static_scale;
      static_azp_ = p.static_azp != nullptr ? *p.static_azp : 0;
    }
  }

  bool streams() const { return stream_; }

  // Row src of `count` elements into y; per-token: its scale into *scale (and azp into *azp).
  // kPrefetch (PrefetchNext's hint): prefetch the same span of `next` while quantizing. Rows whose
  // values all map to one element (a NaN row, an int8 row with multiplier 0) are filled; rows
  // whose amax bounds the quotients take the conversions without NaN and saturation handling.
  template <int kPrefetch, typename T>
  HWY_INLINE void Row(const T* src, uint8_t* y, size_t count, float* scale, int32_t* azp, const T* next) const {
    const DF d;
    switch (method_) {
      case Method::kFp8PerToken: {
        const float amax = RowAbsMax(src, count);
        const float s = kernels::fp8_per_token_scale(amax, scale_ub_);
        *scale = s;
        if (std::isnan(s)) return Fill(y, count, 0x7F);  // x / NaN
        // amax finite and not above scale_ub (which may be +inf): |x / s| <= 448 (1 + 2^-23).
        if (std::isfinite(amax) && (scale_ub_ == nullptr || amax <= *scale_ub_)) {
#if HWY_NATIVE_FMA
          // Always so for these rows (s >= 1 / 229376, s <= FLT_MAX / 448); checked all the same.
          if (s >= 0x1p-18f && s <= 0x1p120f) {
            const Fp8PerTokenInRangeFma q{hn::Set(d, s), hn::Set(d, 1.0f / s)};
#if XLLM_QUANT_BF16_TABLE
            if constexpr (std::is_same_v<T, bfloat16_t>) {
              // The table costs about what 300 elements do by the quotient.
              if (tables_ && count >= 512) {
                const Bf16E4m3Table t = MakeBf16E4m3Table(q, s);
                if (stream_) return QuantizeBf16RowByTable<true, kPrefetch>(src, y, count, q, t, next);
                return QuantizeBf16RowByTable<false, kPrefetch>(src, y, count, q, t, next);
              }
            }
#endif
            return Quantize<kPrefetch>(src, y, count, q, next);
          }
#endif
          return Quantize<kPrefetch>(src, y, count, Fp8PerTokenInRange{hn::Set(d, s)}, next);
        }
        return Quantize<kPrefetch>(src, y, count, Fp8PerToken{hn::Set(d, s)}, next);
      }
      case Method::kInt8PerToken: {
        const float amax = RowAbsMax(src, count);
        const float m = kernels::int8_per_token_multiplier(amax);
        *scale = kernels::int8_per_token_scale(amax);
        // NaN rows (m NaN) and rows of zeros or with an infinity (m = 0: x * 0 is 0 or NaN).
        if (!(m > 0.0f)) return Fill(y, count, 0);
        if (std::isfinite(m) && std::isfinite(amax)) {
          return Quantize<kPrefetch>(src, y, count, Int8PerTokenInRange{hn::Set(d, m)}, next);
        }
        return Quantize<kPrefetch>(src, y, count, Int8PerToken{hn::Set(d, m)}, next);
      }
      case Method::kInt8Azp: {
        float min, max;
        RowMinMax(src, count, min, max);
        const kernels::Int8AzpParams a = kernels::int8_azp_params(min, max);
        *scale = a.scale;
        *azp = a.azp;
        return Quantize<kPrefetch>(src, y, count, MakeInt8Azp(a.multiplier, a.azp), next);
      }
      case Method::kFp8Static:
        return Quantize<kPrefetch>(src, y, count, Fp8Static{hn::Set(d, 1.0f / static_scale_)}, next);
      case Method::kFp8StaticDivide:
        return Quantize<kPrefetch>(src, y, count, Fp8PerToken{hn::Set(d, static_scale_)}, next);
      case Method::kInt8Static:
        return Quantize<kPrefetch>(src, y, count, Int8Static{hn::Set(d, static_scale_)}, next);
      case Method::kInt8AzpStatic:
        return Quantize<kPrefetch>(src, y, count, MakeInt8Azp(1.0f / static_scale_, static_azp_), next);
    }
  }

 private:
  template <int kPrefetch, class Q, typename T>
  HWY_INLINE void Quantize(const T* src, uint8_t* y, size_t count, const Q& q, const T* next) const {
    if (stream_) {
      QuantizeRow<true, kPrefetch>(src, y, count, q, next);
    } else {
      QuantizeRow<false, kPrefetch>(src, y, count, q, next);
    }
  }

  static void Fill(uint8_t* y, size_t count, uint8_t value) { std::memset(y, value, count); }

  Method method_;
  const float* scale_ub_;
  bool stream_;
#if XLLM_QUANT_BF16_TABLE
  bool tables_ = false;  // the bf16 fp8 table path (AVX512_VBMI), unless turned off for a test
#endif
  float static_scale_ = 0.0f;
  int32_t static_azp_ = 0;
};

// The per-row outputs of row `row` through a cursor whose tensors 1, 2, 3 are out, scale, azp.
struct RowOutputs {
  uint8_t* out;
  float* scale;
  int32_t* azp;
};

template <class Cursor>
HWY_INLINE RowOutputs OutputsAt(const QuantParams& p, const Cursor& rc, int first) {
  return RowOutputs{static_cast<uint8_t*>(p.out) + rc.offset[first],
                    p.scale_out != nullptr ? p.scale_out + rc.offset[first + 1] : nullptr,
                    p.azp_out != nullptr ? p.azp_out + rc.offset[first + 2] : nullptr};
}

// ---------------------------------------------------------------- kernels

// quant: the input rows themselves. The row stays in L1 between the amax pass and the quantizing
// pass, which prefetches the next row into L2 (prefetcht1). Into L1 the prefetches hold fill
// buffers the quantizing pass's non-temporal stores also need: on the 2-core AVX-512 VM, 8192 x
// 4096 bf16 cold went from 85% to 93% of copy (int8) and 63% to 83% (fp8). The fused kernels keep
// prefetcht0, which measured better for them.
template <typename T>
void QuantRowsT(const QuantParams& p, int64_t row_begin, int64_t row_end) {
  const size_t hidden = static_cast<size_t>(p.hidden);
  const RowQuantizer rq(p);
  const T* input = static_cast<const T*>(p.input);
  RowCursor<4> rc(p.shape, row_begin, {&p.input_strides, &p.out_strides, &p.scale_strides, &p.azp_strides});
  for (int64_t row = row_begin; row < row_end; ++row, rc.Next()) {
    const T* x = input + rc.offset[0];
    const T* next = row + 1 < row_end ? input + rc.NextOffset(0) : x;
    const RowOutputs o = OutputsAt(p, rc, 1);
    rq.Row<kPrefetchL2>(x, o.out, hidden, o.scale, o.azp, next);
  }
  if (rq.streams()) hwy::FlushStream();  // order the non-temporal stores before returning
}

// rms_norm_quant: rms_norm's row passes (ReduceRow, RmsInverse, PreparedWeights::Row, as
// RmsNormT in csrc/cpu/normalization/normalization.cpp) into buf, then buf quantized.
template <typename T, typename W>
void RmsNormQuantRowsT(const QuantParams& p, int64_t row_begin, int64_t row_end, T* buf) {
  const size_t hidden = static_cast<size_t>(p.hidden);
  const PreparedWeights<T, W> weights(static_cast<const W*>(p.weight), nullptr, hidden, row_end - row_begin);
  const float inv_hidden = 1.0f / static_cast<float>(p.hidden);
  const float eps = static_cast<float>(p.eps);
  const RowQuantizer rq(p);
  const T* input = static_cast<const T*>(p.input);
  RowCursor<4> rc(p.shape, row_begin, {&p.input_strides, &p.out_strides, &p.scale_strides, &p.azp_strides});
  for (int64_t row = row_begin; row < row_end; ++row, rc.Next()) {
    const T* x = input + rc.offset[0];
    const T* next = row + 1 < row_end ? input + rc.NextOffset(0) : x;
    const float ss = ReduceRow(x, hidden, SquareOp());
    const float inv = RmsInverse(ss, inv_hidden, eps);
    weights.template Row<false, false, /*kHalfPrefetch=*/true>(x, 0.0f, inv, buf, hidden, next, std::isnan(ss),
                                                               /*stream=*/false);
    const RowOutputs o = OutputsAt(p, rc, 1);
    // The next row's first half is prefetched while normalizing, its second half while
    // quantizing, each at half the rate of the pass, so that the fetch spreads over both passes
    // instead of stalling the normalizing one (bf16 rows; others prefetch the whole row there).
    rq.Row<kPrefetchL1SecondHalf>(static_cast<const T*>(buf), o.out, hidden, o.scale, o.azp, next);
  }
  if (rq.streams()) hwy::FlushStream();
}

// fused_add_rms_norm_quant: residual = round(input + residual) in place and its sum of squares
// (as FusedAddRmsNormT), the normalized residual into buf, then buf quantized. input is only read.
template <typename T, typename W>
void FusedAddRmsNormQuantRowsT(const QuantParams& p, int64_t row_begin, int64_t row_end, T* buf) {
  const size_t hidden = static_cast<size_t>(p.hidden);
  const PreparedWeights<T, W> weights(static_cast<const W*>(p.weight), nullptr, hidden, row_end - row_begin);
  const float inv_hidden = 1.0f / static_cast<float>(p.hidden);
  const float eps = static_cast<float>(p.eps);
  const RowQuantizer rq(p);
  const T* input = static_cast<const T*>(p.input);
  T* residual = static_cast<T*>(p.residual);
  RowCursor<5> rc(p.shape, row_begin,
                  {&p.input_strides, &p.residual_strides, &p.out_strides, &p.scale_strides, &p.azp_strides});
  for (int64_t row = row_begin; row < row_end; ++row, rc.Next()) {
    const T* x = input + rc.offset[0];
    T* r = residual + rc.offset[1];
    const T* next = row + 1 < row_end ? residual + rc.NextOffset(1) : r;
    float ss;
    if constexpr (std::is_same_v<T, bfloat16_t>) {
      ss = AddRoundSumSquaresEvenOdd(x, r, hidden);
    } else {
      ss = AddRoundSumSquares(x, r, hidden);
    }
    const float inv = RmsInverse(ss, inv_hidden, eps);
    weights.template Row<false, false, /*kHalfPrefetch=*/true>(static_cast<const T*>(r), 0.0f, inv, buf, hidden,
                                                               next, std::isnan(ss), /*stream=*/false);
    const RowOutputs o = OutputsAt(p, rc, 2);
    // As in RmsNormQuantRowsT.
    rq.Row<kPrefetchL1SecondHalf>(static_cast<const T*>(buf), o.out, hidden, o.scale, o.azp, next);
  }
  if (rq.streams()) hwy::FlushStream();
}

// silu_and_mul_quant: silu_and_mul's row pass (ActRow<Silu, gated>, as the silu_and_mul kernel)
// into buf, then buf quantized.
template <typename T>
void SiluAndMulQuantRowsT(const QuantParams& p, int64_t row_begin, int64_t row_end, T* buf) {
  const size_t d_size = static_cast<size_t>(p.hidden);
  const RowQuantizer rq(p);
  const T* input = static_cast<const T*>(p.input);
  RowCursor<4> rc(p.shape, row_begin, {&p.input_strides, &p.out_strides, &p.scale_strides, &p.azp_strides});
  for (int64_t row = row_begin; row < row_end; ++row, rc.Next()) {
    ActRow<Silu, /*kGated=*/true, /*kStream=*/false>(input + rc.offset[0], buf, d_size);
    const RowOutputs o = OutputsAt(p, rc, 1);
    rq.Row<kPrefetchNone>(static_cast<const T*>(buf), o.out, d_size, o.scale, o.azp, static_cast<const T*>(nullptr));
  }
  if (rq.streams()) hwy::FlushStream();
}

void QuantRows(const QuantParams& p, int64_t b, int64_t e, void* /*buf*/) {
  switch (p.dtype) {
    case DType::kFloat32: return QuantRowsT<float>(p, b, e);
    case DType::kBFloat16: return QuantRowsT<bfloat16_t>(p, b, e);
    case DType::kFloat16: return QuantRowsT<float16_t>(p, b, e);
  }
}

template <template <typename, typename> class K>
void NormDTypes(const QuantParams& p, int64_t b, int64_t e, void* buf) {
  const bool w32 = p.weight_dtype == DType::kFloat32;
  switch (p.dtype) {
    case DType::kFloat32: return K<float, float>::Run(p, b, e, buf);
    case DType::kBFloat16:
      return w32 ? K<bfloat16_t, float>::Run(p, b, e, buf) : K<bfloat16_t, bfloat16_t>::Run(p, b, e, buf);
    case DType::kFloat16:
      return w32 ? K<float16_t, float>::Run(p, b, e, buf) : K<float16_t, float16_t>::Run(p, b, e, buf);
  }
}

template <typename T, typename W>
struct RmsNormQuantK {
  static void Run(const QuantParams& p, int64_t b, int64_t e, void* buf) {
    RmsNormQuantRowsT<T, W>(p, b, e, static_cast<T*>(buf));
  }
};
template <typename T, typename W>
struct FusedAddRmsNormQuantK {
  static void Run(const QuantParams& p, int64_t b, int64_t e, void* buf) {
    FusedAddRmsNormQuantRowsT<T, W>(p, b, e, static_cast<T*>(buf));
  }
};

void RmsNormQuantRows(const QuantParams& p, int64_t b, int64_t e, void* buf) { NormDTypes<RmsNormQuantK>(p, b, e, buf); }
void FusedAddRmsNormQuantRows(const QuantParams& p, int64_t b, int64_t e, void* buf) {
  NormDTypes<FusedAddRmsNormQuantK>(p, b, e, buf);
}

void SiluAndMulQuantRows(const QuantParams& p, int64_t b, int64_t e, void* buf) {
  switch (p.dtype) {
    case DType::kFloat32: return SiluAndMulQuantRowsT<float>(p, b, e, static_cast<float*>(buf));
    case DType::kBFloat16: return SiluAndMulQuantRowsT<bfloat16_t>(p, b, e, static_cast<bfloat16_t*>(buf));
    case DType::kFloat16: return SiluAndMulQuantRowsT<float16_t>(p, b, e, static_cast<float16_t*>(buf));
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace xllm_kernel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace xllm_kernel::cpu {

HWY_EXPORT(QuantRows);
HWY_EXPORT(RmsNormQuantRows);
HWY_EXPORT(FusedAddRmsNormQuantRows);
HWY_EXPORT(SiluAndMulQuantRows);

namespace {

using kernels::QuantProducer;

template <class Rows>
Status Run(QuantProducer producer, Rows rows, const QuantParams& p, int64_t row_begin, int64_t row_end) {
  // Defence only: the bridge validates dtypes, shapes and pointers before calling.
  if (const char* why = kernels::invalid_quant_params(p, producer, row_begin, row_end)) return Status::invalid(why);
  if (row_begin == row_end) return Status::ok();
  hwy::AlignedFreeUniquePtr<unsigned char[]> buf;
  if (producer != QuantProducer::kInput) {
    buf = hwy::AllocateAligned<unsigned char>(static_cast<size_t>(p.hidden) * kernels::element_size(p.dtype));
    if (!buf) return Status::invalid("quantization: cannot allocate the row buffer");
  }
  rows(p, row_begin, row_end, buf.get());
  return Status::ok();
}

}  // namespace

Status quant(const QuantParams& p, int64_t row_begin, int64_t row_end) {
  return Run(QuantProducer::kInput, HWY_DYNAMIC_DISPATCH(QuantRows), p, row_begin, row_end);
}

Status rms_norm_quant(const QuantParams& p, int64_t row_begin, int64_t row_end) {
  return Run(QuantProducer::kRmsNorm, HWY_DYNAMIC_DISPATCH(RmsNormQuantRows), p, row_begin, row_end);
}

Status fused_add_rms_norm_quant(const QuantParams& p, int64_t row_begin, int64_t row_end) {
  return Run(QuantProducer::kFusedAddRmsNorm, HWY_DYNAMIC_DISPATCH(FusedAddRmsNormQuantRows), p, row_begin, row_end);
}

Status silu_and_mul_quant(const QuantParams& p, int64_t row_begin, int64_t row_end) {
  return Run(QuantProducer::kSiluAndMul, HWY_DYNAMIC_DISPATCH(SiluAndMulQuantRows), p, row_begin, row_end);
}

}  // namespace xllm_kernel::cpu
#endif  // HWY_ONCE
