// Highway float32 math for the CPU kernels, cheaper than hwy/contrib/math where a kernel needs
// less range: e^x on the range where it is a normal float, and the normal distribution function
// Phi(a) = 0.5 * (1 + erf(a / sqrt(2))) with a small relative error also in its lower tail
// (Highway 1.0.3 has no erf).
//
// Include after "hwy/highway.h" in a foreach_target translation unit (per-target include guard):
//   #include "csrc/cpu/common/math-inl.h"
//   const VF e = ExpInRange(d, x);   // x in [kExpInRangeMin, kExpInRangeMax]
//   const VF phi = NormalCdf(d, a);  // any a
//
// Error bounds, as measured on every target compiled here (AVX2 with FMA, SSE4 without; also
// SSSE3 and SCALAR, when the build still compiled them) by test/csrc/activation/cpu_activation_kernels_test.cpp against float64
// std::exp / std::erf / std::erfc over dense sweeps, rounded up:
//   ExpInRange      relative 4.5e-7 (measured 3.9e-7 with FMA, where ln2's float error grows
//                   with |x| up to 2.4e-7; 2.1e-7 without FMA; the polynomial alone 1.07e-7)
//   NormalCdf       relative 2.0e-6 wherever Phi(a) >= 2^-126 (the lower tail included:
//                   Phi(-12.9) ~ 2^-126; measured 6e-7 with FMA, 1.4e-6 without); absolute
//                   4e-7 everywhere (measured 2.6e-7 against std::erf). As an erf:
//                   2 Phi(x sqrt(2)) - 1 is within 8e-7 of erf(x), plus the rounding of x sqrt(2).
// NormalCdf(+inf) = 1, NormalCdf(-inf) = 0, NaN in -> NaN out.

// Per-target include guard (Highway's idiom): included once per target by foreach_target.
#if defined(XLLM_KERNEL_CPU_COMMON_MATH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef XLLM_KERNEL_CPU_COMMON_MATH_INL_H_
#undef XLLM_KERNEL_CPU_COMMON_MATH_INL_H_
#else
#define XLLM_KERNEL_CPU_COMMON_MATH_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace xllm_kernel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ExpParts and ExpInRange are accurate on [kExpInRangeMin, kExpInRangeMax], where
// 2^round(x / ln 2) is a normal float; outside it their lanes are unspecified (callers clamp or
// select what they need).
inline constexpr float kExpInRangeMin = -87.5f;
inline constexpr float kExpInRangeMax = 88.0f;

// e^(x + x_lo) as er * 2^n, er in [0.7, 1.42] and 2^n a float (n in [-126, 127]), so that callers
// can fuse the final product with what follows. kLo: add x_lo, a small correction of x that the
// caller computed separately (|x_lo| <= 2^-12 |x|); otherwise x_lo is ignored. Just below the
// range, for x in [-88.37, -87.68] (n = -127), pow2n is +0: NormalCdfNotNaN relies on it.
//
// x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2 (+ a few ulps where MulAdd is not
// fused); e^x = 2^n e^r. With FMA, r is one fused operation; without, ln2 is split in two so that
// n * kLn2Hi is exact for |n| < 2^8 (kLn2Hi has 16 significant bits) and r carries one rounding.
// e^r = 1 + r + r^2 (c2 + c3 r + c4 r^2 + c5 r^3): a minimax fit of relative error 1.07e-7 on
// |r| <= 0.3475 (fitted for this file with Lawson's algorithm, float32 coefficients).
template <bool kLo, class D, class V = hn::Vec<D>>
HWY_INLINE void ExpParts(D d, V x, V x_lo, V& er, V& pow2n) {
  const hn::RebindToSigned<D> di;
  // Adding 1.5 * 2^23 rounds x / ln2 to an integer in the low mantissa bits (|n| < 2^22).
  const V kShifter = hn::Set(d, 12582912.0f);
  const V t = hn::MulAdd(x, hn::Set(d, 1.44269502f), kShifter);
  const V n = hn::Sub(t, kShifter);
#if HWY_NATIVE_FMA
  // One fused rounding of x - n * ln2f, with ln2f = ln2 + 1.9e-9: the constant's error adds
  // |n| * 1.9e-9 (up to 2.4e-7 at the ends of the range) to the relative error. One operation
  // fewer than the split below, which matters in the activations' inner loops.
  V r = hn::NegMulAdd(n, hn::Set(d, 0.693147182f), x);
#else
  V r = hn::NegMulAdd(n, hn::Set(d, 0.693145751953125f), x);  // x - n * kLn2Hi, exact
  r = hn::NegMulAdd(n, hn::Set(d, 1.42860677e-6f), r);        // - n * kLn2Lo
#endif
  if constexpr (kLo) r = hn::Add(r, x_lo);
  // Estrin's scheme: a shorter dependency chain than Horner's for one more multiplication.
  const V r2 = hn::Mul(r, r);
  const V c23 = hn::MulAdd(hn::Set(d, 1.666712e-01f), r, hn::Set(d, 4.9999225e-01f));
  const V c45 = hn::MulAdd(hn::Set(d, 8.312399e-03f), r, hn::Set(d, 4.189128e-02f));
  const V c25 = hn::MulAdd(c45, r2, c23);
  er = hn::MulAdd(c25, r2, hn::Add(r, hn::Set(d, 1.0f)));
  // 2^n: t's bits are those of the shifter plus n, and the shifter's low 9 bits are 0, so
  // (bits(t) + 127) << 23 is the biased exponent n + 127 in place.
  pow2n = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::BitCast(di, t), hn::Set(di, 127))));
}

// e^x for x in [kExpInRangeMin, kExpInRangeMax].
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ExpInRange(D d, V x) {
  V er, pow2n;
  ExpParts<false>(d, x, x, er, pow2n);
  return hn::Mul(er, pow2n);
}

// Phi(a) = 0.5 * (1 + erf(a / sqrt(2))), the standard normal distribution function, for a not
// NaN (a NaN gives an unspecified value: callers multiply by a, or use NormalCdf).
//
// With t = |a|: Phi(-t) = exp(-t^2 / 2) R(t) and Phi(t) = 1 - Phi(-t), where R(t) = Phi(-t)
// e^(t^2 / 2) is smooth and decreasing (R(0) = 1/2, R(t) ~ 1 / (t sqrt(2 pi))). R(t) = z g(z) with
// z = 1 / (1 + t / 4) in (0, 1] and g a polynomial of degree 8: a minimax fit of relative error
// 4.9e-8 on t in [0, 13.25] (fitted for this file with Lawson's algorithm, float32
// coefficients). One form for every a, so there is no seam; the exponential keeps the lower
// tail's relative accuracy, and t^2 is split in two exact parts so that its rounding (up to
// 88 * 2^-24 absolute) does not reach the exponential.
// t is clamped to 13.25: from t = 13.243 on, 2^n is 0 and so is the tail (Phi(-13.243) < 2^-128).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V NormalCdfNotNaN(D d, V a) {
  const V t = hn::Min(hn::Abs(a), hn::Set(d, 13.25f));
  // -t^2 / 2 = hi + lo exactly (h = -t / 2 is exact).
#if HWY_NATIVE_FMA
  const V h = hn::Mul(t, hn::Set(d, -0.5f));
  const V hi = hn::Mul(h, t);
  const V lo = hn::MulSub(h, t, hi);  // h t - hi, exact
#else
  // th (t's upper 12 significant bits) squared is exact, and so is th * tl (12 bits each); only
  // tl^2 (< 2^-22 t^2) rounds in lo.
  const hn::RebindToUnsigned<D> du;
  const V kMinusHalf = hn::Set(d, -0.5f);
  const V th = hn::BitCast(d, hn::And(hn::BitCast(du, t), hn::Set(du, 0xFFFFF000u)));
  const V tl = hn::Sub(t, th);
  const V hi = hn::Mul(hn::Mul(th, th), kMinusHalf);
  const V lo = hn::Mul(hn::MulAdd(hn::Add(th, th), tl, hn::Mul(tl, tl)), kMinusHalf);
#endif
  V er, pow2n;
  ExpParts<true>(d, hi, lo, er, pow2n);

  const V z = hn::Div(hn::Set(d, 4.0f), hn::Add(t, hn::Set(d, 4.0f)));
  V g = hn::Set(d, 2.6590627e-02f);
  g = hn::MulAdd(g, z, hn::Set(d, -1.5710099e-01f));
  g = hn::MulAdd(g, z, hn::Set(d, 3.051742e-01f));
  g = hn::MulAdd(g, z, hn::Set(d, -2.1639004e-01f));
  g = hn::MulAdd(g, z, hn::Set(d, 2.0929366e-01f));
  g = hn::MulAdd(g, z, hn::Set(d, 2.9610978e-02f));
  g = hn::MulAdd(g, z, hn::Set(d, 1.0462847e-01f));
  g = hn::MulAdd(g, z, hn::Set(d, 9.838761e-02f));
  g = hn::MulAdd(g, z, hn::Set(d, 9.980547e-02f));
  const V tail = hn::Mul(hn::Mul(er, pow2n), hn::Mul(z, g));  // Phi(-t)
  return hn::IfThenElse(hn::Lt(a, hn::Zero(d)), tail, hn::Sub(hn::Set(d, 1.0f), tail));
}

// ---------------------------------------------------------------- cheaper forms for bfloat16
// Kernels whose result is rounded to bfloat16 (unit roundoff 2^-8) use these: their relative
// errors (measured as above, rounded up) stay below 2^-10, a quarter of the final rounding's.
//   ExpNegBf16      relative 1.3e-4 (a degree-3 polynomial instead of degree 5)
//   NormalCdfBf16   relative 2.5e-4 wherever Phi(a) >= 2^-126 (degree 4 instead of 8, t^2 not
//                   split)
// AVX-512 targets have forms of their own, within the same bounds (below).

// e^-t as er * 2^n for t in [-kExpInRangeMax, -kExpInRangeMin] (like ExpParts for x = -t).
// t = r' - n ln2 with n = round(-t / ln2); e^-t = 2^n e^-r', e^-r' = 1 - r' + r'^2 (c2 - c3 r'): a
// minimax fit of e^r of relative error 1.23e-4 on |r| <= 0.3467 (fitted for this file with
// Lawson's algorithm, float32 coefficients). Without FMA, r' carries the rounding of n ln2 (at
// most 2^-18 absolute), negligible at this accuracy.
template <class D, class V = hn::Vec<D>>
HWY_INLINE void ExpNegBf16Parts(D d, V t, V& er, V& pow2n) {
  const hn::RebindToSigned<D> di;
  const V kShifter = hn::Set(d, 12582912.0f);
  const V s = hn::MulAdd(t, hn::Set(d, -1.44269502f), kShifter);
  const V n = hn::Sub(s, kShifter);
  const V r = hn::MulAdd(n, hn::Set(d, 0.693147182f), t);  // t + n ln2 = -(-t - n ln2)
  const V p = hn::MulAdd(hn::Set(d, -1.6662803e-01f), r, hn::Set(d, 5.0394326e-01f));
  er = hn::MulAdd(p, hn::Mul(r, r), hn::Sub(hn::Set(d, 1.0f), r));
  pow2n = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::BitCast(di, s), hn::Set(di, 127))));
}

// ---------------------------------------------------------------- AVX-512 forms for bfloat16
// AVX-512 has the parts of an exponential as single instructions on both vector ports: vreduceps
// (y - floor(y)) and vscalefps (x * 2^floor(y), exact, 0 or inf where that leaves the float
// range, NaN for NaN), and vrcp14ps, a reciprocal within 2^-14 (relative). The bfloat16 forms
// are built from them here (XLLM_CPU_AVX512_BF16_PRECISION_MATH; the other targets use the forms above):
//   Exp2Bf16          2^y for any y, relative error 7.5e-5 (degree-3 polynomial); a caller's
//                     e^x = 2^(x log2 e) adds the rounding of its argument (|y| 2^-24 ln 2):
//                     e^x within 7.9e-5 on [-87.5, 88] (measured; kExpBf16's bound 1.3e-4)
//   NormalTailBf16    Phi(-t), relative 2.0e-4 wherever Phi(-t) >= 2^-126 (measured 1.8e-4 as
//                     NormalCdfBf16, whose bound is 2.5e-4)
#undef XLLM_CPU_AVX512_BF16_PRECISION_MATH
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#define XLLM_CPU_AVX512_BF16_PRECISION_MATH 1

using V512F = hn::Vec512<float>;

// r = y - floor(y) in [0, 1) (0 for y = +-inf, NaN for NaN) and 2^r = P(r): a minimax fit of
// relative error 7.49e-5 on [0, 1] (fitted for this file with Lawson's algorithm, float32
// coefficients, error measured with them). 2^y = P(r) 2^floor(y) = Exp2FloorScale(P(r), y).
HWY_INLINE V512F Exp2FracBf16(V512F y) {
  const hn::Full512<float> d;
  const V512F r{_mm512_reduce_ps(y.raw, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)};
  V512F p = hn::MulAdd(hn::Set(d, 7.80242756e-02f), r, hn::Set(d, 2.26067260e-01f));
  p = hn::MulAdd(p, r, hn::Set(d, 6.95833623e-01f));
  return hn::MulAdd(p, r, hn::Set(d, 9.99925196e-01f));
}

// x * 2^floor(y), exactly rounded (gradual underflow to 0, overflow to inf).
HWY_INLINE V512F Exp2FloorScale(V512F x, V512F y) { return V512F{_mm512_scalef_ps(x.raw, y.raw)}; }

// 2^y for any y: 0 below -150, inf from 128 on, NaN for NaN.
HWY_INLINE V512F Exp2Bf16(V512F y) { return Exp2FloorScale(Exp2FracBf16(y), y); }

// 1 / x within 2^-14 relative (exact for powers of 2, 0 for inf).
HWY_INLINE V512F ApproxRecip14(V512F x) { return V512F{_mm512_rcp14_ps(x.raw)}; }

// min(|a|, 15) in one instruction (vrangeps; 15 for NaN, which the callers pass on otherwise).
HWY_INLINE V512F AbsMin15(V512F a) {
  return V512F{_mm512_range_ps(a.raw, _mm512_set1_ps(15.0f), 0x0A)};  // min of |.|, sign cleared
}

// Phi(-t) for t in [0, 15], as 2^Y(t) with Y(t) = log2 Phi(-t) (concave, from -1 at 0 to -167.5
// at 15): on each interval |t - k / 2| <= 1/4, k = 0..30 (entry 31 is unused), Y is a quadratic
// in x = t - k / 2, a minimax fit of absolute error 1.5e-4 (relative 1.1e-4 in 2^Y; fitted for this
// file with Lawson's algorithm against log2 of 0.5 erfc(t / sqrt(2)) in float64, float32
// coefficients, then measured with them in float32). The three coefficients of t's interval come
// from 32-entry tables (two registers each) by vpermt2ps, indexed by round(2 t) in the low bits
// of 2 t + 1.5 * 2^23; x = t - round(2 t) / 2 is exact (vreduceps with one fraction bit, the same
// rounding). About 12 instructions, no division or reciprocal. 2^Y from Exp2Bf16 (7.5e-5): Phi(-t)
// is within 2.0e-4 (measured 1.8e-4) wherever it is at least 2^-126 (t <= 13), below 2^-126 from
// 13 on and 0 from 14.5 on (Y(14.5) = -156.9).
alignas(64) inline constexpr float kNormalTailC0[32] = {
    -1.00002396f, -1.69648814f, -2.65603733f, -3.9038558f, -5.45798349f, -7.33127022f,
    -9.53293514f, -12.0696821f, -14.9464674f, -18.1670227f, -21.7341995f, -25.650219f,
    -29.9168339f, -34.53545f, -39.507206f, -44.8330345f, -50.5137138f, -56.5498886f,
    -62.9421158f, -69.6908569f, -76.7965088f, -84.2594299f, -92.0799179f, -100.258232f,
    -108.794601f, -117.689247f, -126.942329f, -136.554031f, -146.52449f, -156.853821f,
    -167.542175f, -178.5896f
};
alignas(64) inline constexpr float kNormalTailC1[32] = {
    -1.14936209f, -1.64806116f, -2.20162439f, -2.79785848f, -3.42449617f, -4.07284403f,
    -4.73686504f, -5.41237879f, -6.09646416f, -6.78705454f, -7.48266554f, -8.18221283f,
    -8.88489056f, -9.59009266f, -10.2973547f, -11.0063162f, -11.7166948f, -12.4282656f,
    -13.1408482f, -13.8542957f, -14.5684891f, -15.283329f, -15.9987316f, -16.7146282f,
    -17.4309616f, -18.1476822f, -18.8647461f, -19.5821171f, -20.2997627f, -21.0176563f,
    -21.7357635f, -22.4539356f
};
alignas(64) inline constexpr float kNormalTailC2[32] = {
    -0.478101254f, -0.527196527f, -0.577356994f, -0.613206029f, -0.638727188f, -0.657038391f,
    -0.670360804f, -0.680216432f, -0.687635481f, -0.693316638f, -0.697738111f, -0.701231599f,
    -0.704030454f, -0.70630163f, -0.708166122f, -0.709713101f, -0.711009085f, -0.712104499f,
    -0.713037908f, -0.713839233f, -0.714531779f, -0.715134144f, -0.715661168f, -0.716124713f,
    -0.716534436f, -0.716898263f, -0.71722281f, -0.717513382f, -0.71777463f, -0.718010247f,
    -0.718172491f, -0.718172491f
};

HWY_INLINE V512F NormalTailBf16(V512F t) {
  const hn::Full512<float> d;
  const __m512i k = _mm512_castps_si512(hn::MulAdd(t, hn::Set(d, 2.0f), hn::Set(d, 12582912.0f)).raw);
  const V512F x{_mm512_reduce_ps(t.raw, (1 << 4) | _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC)};
  auto coefficient = [k](const float* table) HWY_ATTR {
    return V512F{_mm512_permutex2var_ps(_mm512_load_ps(table), k, _mm512_load_ps(table + 16))};
  };
  const V512F c2 = coefficient(kNormalTailC2), c1 = coefficient(kNormalTailC1), c0 = coefficient(kNormalTailC0);
  return Exp2Bf16(hn::MulAdd(hn::MulAdd(c2, x, c1), x, c0));
}
#endif  // HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3

// Phi(a) for a not NaN, as NormalCdfNotNaN with R(t) = z g(z) of degree 4 (a minimax fit of
// relative error 4.7e-5 on t in [0, 13.25], fitted like the one above) and e^(-t^2 / 2) from the
// rounded t^2. (An approximate reciprocal for z would save little and, amplified by g, cost up to
// 1e-3.) AVX-512: NormalTailBf16.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V NormalCdfBf16NotNaN(D d, V a) {
#if XLLM_CPU_AVX512_BF16_PRECISION_MATH
  const V tail = NormalTailBf16(AbsMin15(a));
  return hn::IfThenElse(hn::Lt(a, hn::Zero(d)), tail, hn::Sub(hn::Set(d, 1.0f), tail));
#else
  const V t = hn::Min(hn::Abs(a), hn::Set(d, 13.25f));
  V er, pow2n;
  ExpNegBf16Parts(d, hn::Mul(hn::Mul(t, t), hn::Set(d, 0.5f)), er, pow2n);
  const V z = hn::Div(hn::Set(d, 4.0f), hn::Add(t, hn::Set(d, 4.0f)));
  V g = hn::Set(d, 2.4165949e-01f);
  g = hn::MulAdd(g, z, hn::Set(d, -1.0403112e-01f));
  g = hn::MulAdd(g, z, hn::Set(d, 1.8052770e-01f));
  g = hn::MulAdd(g, z, hn::Set(d, 8.0469362e-02f));
  g = hn::MulAdd(g, z, hn::Set(d, 1.0135494e-01f));
  const V tail = hn::Mul(hn::Mul(er, pow2n), hn::Mul(z, g));  // Phi(-t)
  return hn::IfThenElse(hn::Lt(a, hn::Zero(d)), tail, hn::Sub(hn::Set(d, 1.0f), tail));
#endif
}

// Phi(a) for any a; NaN gives NaN.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V NormalCdf(D d, V a) {
  return hn::IfThenElse(hn::IsNaN(a), a, NormalCdfNotNaN(d, a));
}

}  // namespace HWY_NAMESPACE
}  // namespace xllm_kernel::cpu
HWY_AFTER_NAMESPACE();

#endif  // XLLM_KERNEL_CPU_COMMON_MATH_INL_H_
