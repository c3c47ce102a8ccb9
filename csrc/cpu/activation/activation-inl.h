// The activation functions and the row pass of the activation kernels
// (csrc/cpu/activation/activation.cpp), shared with the kernels that fuse an activation with what
// follows (csrc/cpu/quantization), so that both compute the same float32 arithmetic and round to
// the same bits. The numerics are documented in csrc/cpu/activation/activation.h.
//
// Include after "hwy/highway.h" in a foreach_target translation unit (per-target include guard):
//   #include "csrc/cpu/activation/activation-inl.h"
//   ActRow<Silu, /*kGated=*/true, /*kStream=*/false>(x, y, d);  // y = round(silu(x[:d]) * x[d:])
// Per-target include guard (Highway's idiom): included once per target by foreach_target.
#if defined(XLLM_KERNEL_CPU_ACTIVATION_ACTIVATION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef XLLM_KERNEL_CPU_ACTIVATION_ACTIVATION_INL_H_
#undef XLLM_KERNEL_CPU_ACTIVATION_ACTIVATION_INL_H_
#else
#define XLLM_KERNEL_CPU_ACTIVATION_ACTIVATION_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "csrc/cpu/common/convert-inl.h"
#include "csrc/cpu/common/math-inl.h"
#include "csrc/cpu/common/stream-inl.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace xllm_kernel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---------------------------------------------------------------- the functions

// a / (1 + e^-u) = a * sigmoid(u), for u with a's sign. Where e^-u leaves ExpInRange's range:
// for u > 87.5 (the clamp), e^-u < 2^-126 and the quotient is a (1 + e^-u rounds to 1 from
// u > 17.3 on anyway); for u < -88 the result is -0 (the exact value is below 2^-126 |a|; a
// division would give NaN for a = -inf). A NaN a gives NaN through the division, whatever Min
// and the comparison make of it (their NaN rules differ between targets).
// kBf16Precision (bfloat16 results): e^-u from the degree-3 ExpNegBf16Parts. The division stays: it is not
// what limits the loop, and a / 1 keeps large a exact. (On AVX-512 a vdivps costs about as much
// port time as 20 other instructions and was what limited the bf16 loops: TimesSigmoidExp2.)
template <bool kBf16Precision>
HWY_INLINE VF TimesSigmoid(VF a, VF u) {
  const DF d;
  const VF m = hn::Min(u, hn::Set(d, -kExpInRangeMin));
  VF er, pow2n;
  if constexpr (kBf16Precision) {
    ExpNegBf16Parts(d, m, er, pow2n);
  } else {
    const VF x = hn::Neg(m);
    ExpParts<false>(d, x, x, er, pow2n);
  }
  const VF s = hn::Div(a, hn::MulAdd(er, pow2n, hn::Set(d, 1.0f)));
  return hn::IfThenElse(hn::Lt(u, hn::Set(d, -kExpInRangeMax)), hn::Set(d, -0.0f), s);
}

#if XLLM_CPU_AVX512_BF16_PRECISION_MATH
// a / (1 + 2^y) for y = -u log2(e) (the callers fold log2(e) into their constants), for
// bfloat16 results: 2^y from Exp2Bf16 (7.5e-5) and the reciprocal from ApproxRecip14 (2^-14):
// within 1.4e-4 together, about 11 instructions instead of 18 and a division (a vdivps has the
// throughput of some 20 other instructions). No clamps: 2^y is 0 for y < -150 (1 + 2^y is then 1,
// exactly inverted, so large a give a exactly) and inf for y >= 128, whose reciprocal 0 gives -0
// for large negative a; a = -inf is replaced by -FLT_MAX there (-inf * 0 would be NaN; x86 max
// returns its second operand where one is NaN, so a NaN a stays). NaN gives NaN.
HWY_INLINE VF TimesSigmoidExp2(VF a, VF y) {
  const DF d;
  // 1 + 2^y as P(r) 2^floor(y) + 1 in one fused operation: 2^floor(y) comes in parallel with
  // the polynomial (a shorter dependency chain than scaling P and adding 1; 3% faster).
  const VF one = hn::Set(d, 1.0f);
  const VF z = ApproxRecip14(hn::MulAdd(Exp2FracBf16(y), Exp2FloorScale(one, y), one));
  return hn::Mul(hn::Max(hn::Set(d, -3.40282347e+38f), a), z);
}
#endif

template <bool kBf16Precision>
struct Silu {
  HWY_INLINE VF operator()(VF a) const {
#if XLLM_CPU_AVX512_BF16_PRECISION_MATH
    if constexpr (kBf16Precision) return TimesSigmoidExp2(a, hn::Mul(a, hn::Set(DF(), -1.44269504f)));
#endif
    return TimesSigmoid<kBf16Precision>(a, a);
  }
};

// a * sigmoid(1.702 a) (the "quick" GELU of CLIP): TimesSigmoid with u = 1.702 a.
template <bool kBf16Precision>
struct QuickGelu {
  HWY_INLINE VF operator()(VF a) const {
#if XLLM_CPU_AVX512_BF16_PRECISION_MATH
    if constexpr (kBf16Precision) return TimesSigmoidExp2(a, hn::Mul(a, hn::Set(DF(), -2.45546696f)));  // -1.702 log2(e)
#endif
    return TimesSigmoid<kBf16Precision>(a, hn::Mul(a, hn::Set(DF(), 1.702f)));
  }
};

// 0.5 a (1 + tanh(v)) = a * sigmoid(2 v), v = sqrt(2 / pi) (a + 0.044715 a^3): no tanh needed,
// and no cancellation in 1 + tanh(v) for negative a.
template <bool kBf16Precision>
struct GeluTanh {
  HWY_INLINE VF operator()(VF a) const {
    const DF d;
#if XLLM_CPU_AVX512_BF16_PRECISION_MATH
    if constexpr (kBf16Precision) {
      // y = -u log2(e), at least -125: the cubic reaches y < -126 from a = 10 on, where 2^y would
      // be subnormal, which costs microcode assists (with randn * 3 inputs, 15% of the loop's
      // time on average); 1 + 2^-125 is 1 as well. (Silu and quick_gelu reach it only beyond
      // a = 87 and a = 51, and are not clamped.)
      const VF y = hn::Mul(a, hn::MulAdd(hn::Set(d, -0.10294324f), hn::Mul(a, a), hn::Set(d, -2.30220820f)));
      return TimesSigmoidExp2(a, hn::Max(y, hn::Set(d, -125.0f)));
    }
#endif
    const VF k0 = hn::Set(d, 1.5957691216057308f);  // 2 sqrt(2 / pi)
    const VF k1 = hn::Set(d, 0.0713548162726f);     // 2 sqrt(2 / pi) 0.044715
    const VF u = hn::Mul(a, hn::MulAdd(k1, hn::Mul(a, a), k0));
    return TimesSigmoid<kBf16Precision>(a, u);
  }
};

// a * Phi(a). For a < -13.25, Phi(a) is 0 (NormalCdfNotNaN) and the result is -0 (a * 0 would be
// NaN for a = -inf). A NaN a gives NaN through the product.
// AVX-512, kBf16Precision: with t = min(|a|, 15) and the tail Phi(-t) (NormalTailBf16), a Phi(a) is
// a - t Phi(-t) for a >= 0 and -t Phi(-t) for a < 0, i.e. m - t Phi(-t) with m = a or -0: one
// vfixupimmps gives m from a's class (a for NaN, +-0, positive and +inf; -0 for negative and
// -inf), so -0 - t * 0 = -0 where the tail is 0 (a < -14.5, -inf), and NaN stays NaN.
template <bool kBf16Precision>
struct Gelu {
  HWY_INLINE VF operator()(VF a) const {
    const DF d;
#if XLLM_CPU_AVX512_BF16_PRECISION_MATH
    if constexpr (kBf16Precision) {
      const VF t = AbsMin15(a);
      // fixup table, one response per class of a (4 bits each, class 0 lowest): QNaN -> a,
      // SNaN -> quiet a, 0 -> a, 1 -> a, -inf -> -0, +inf -> a, negative -> -0, positive -> a.
      const VF m{_mm512_fixupimm_ps(a.raw, a.raw, _mm512_set1_epi32(0x17171121), 0)};
      return hn::NegMulAdd(t, NormalTailBf16(t), m);
    }
#endif
    const VF phi = kBf16Precision ? NormalCdfBf16NotNaN(d, a) : NormalCdfNotNaN(d, a);
    return hn::IfThenElse(hn::Lt(a, hn::Set(d, -13.25f)), hn::Set(d, -0.0f), hn::Mul(a, phi));
  }
};

// ---------------------------------------------------------------- rows

// One row: out[j] = act(x[j]) * x[d + j] (kGated, x holds 2d elements) or out[j] = act(x[j])
// (x holds d). kStream: full vectors are stored non-temporally, y must be aligned to the vector
// size (StreamAligned).
//
// bf16 rows are processed in even/odd form (LoadEvenOdd): elementwise work needs no reordering.
// Their results are rounded without the NaN guard of Bf16UpperFromF32: the only NaNs are from
// bf16 inputs (whose payload is in the upper half, which the rounding bias cannot carry out of)
// or the FPU's default NaN.
// Without the gate a core reads one stream, which the hardware prefetchers alone keep too few
// lines ahead of (a quarter of the copy bandwidth at 8192 x 14336 bf16, cold): the rows are
// also prefetched kPrefetchBytes ahead, the lines of a vector pair and the next one.
inline constexpr size_t kPrefetchBytes = 2048;

template <typename T>
HWY_INLINE void PrefetchAhead(const T* p) {
  const char* c = reinterpret_cast<const char*>(p) + kPrefetchBytes;
  hwy::Prefetch(c);
  if constexpr (sizeof(T) == 4) hwy::Prefetch(c + 64);  // a float32 vector pair spans two lines (AVX-512)
}

template <template <bool> class Act, bool kGated, bool kStream, typename T>
HWY_INLINE void ActRow(const T* HWY_RESTRICT x, T* HWY_RESTRICT y, size_t d_size) {
  const Act<std::is_same_v<T, bfloat16_t>> act;  // the cheaper math where results round to bf16
  const DF d;
  const size_t n = hn::Lanes(d);
  const T* HWY_RESTRICT b = x + d_size;  // the up projection (kGated only)
  // act(a), times the up projection's b where gated.
  auto times_up = [&](VF v, VF up) HWY_ATTR { return kGated ? hn::Mul(v, up) : v; };
  auto load_up = [&](size_t at) HWY_ATTR { return kGated ? LoadF(b + at) : hn::Zero(d); };
  size_t i = 0;
  if constexpr (std::is_same_v<T, bfloat16_t>) {
    // Two vector pairs per iteration: more independent work in flight (3-7% on AVX-512).
    constexpr size_t kPairs = 2;
    for (; i + 2 * kPairs * n <= d_size; i += 2 * kPairs * n) {
      VF ae[kPairs], ao[kPairs], be[kPairs], bo[kPairs];
      for (size_t u = 0; u < kPairs; ++u) {
        if constexpr (!kGated) PrefetchAhead(x + i + 2 * u * n);
        LoadEvenOdd(x + i + 2 * u * n, ae[u], ao[u]);
        if constexpr (kGated) LoadEvenOdd(b + i + 2 * u * n, be[u], bo[u]);
      }
      for (size_t u = 0; u < kPairs; ++u) {
        VF ye = times_up(act(ae[u]), be[u]), yo = times_up(act(ao[u]), bo[u]);
        StoreEvenOdd</*kNaNPayload=*/false, kStream>(ye, yo, y + i + 2 * u * n);
      }
    }
    for (; i + 2 * n <= d_size; i += 2 * n) {
      if constexpr (!kGated) PrefetchAhead(x + i);
      VF ae, ao, be = hn::Zero(d), bo = hn::Zero(d);
      LoadEvenOdd(x + i, ae, ao);
      if constexpr (kGated) LoadEvenOdd(b + i, be, bo);
      VF ye = times_up(act(ae), be), yo = times_up(act(ao), bo);
      StoreEvenOdd</*kNaNPayload=*/false, kStream>(ye, yo, y + i);
    }
  } else {
    for (; i + 2 * n <= d_size; i += 2 * n) {
      if constexpr (!kGated) PrefetchAhead(x + i);
      VF y0 = times_up(act(LoadF(x + i)), load_up(i));
      VF y1 = times_up(act(LoadF(x + i + n)), load_up(i + n));
      Store2F<kStream>(y0, y1, y + i);
    }
  }
  for (; i + n <= d_size; i += n) StoreF(times_up(act(LoadF(x + i)), load_up(i)), y + i);
  // The last partial vector: the same math on zero-padded lanes (only `rest` lanes are stored).
  if (i < d_size) {
    const size_t rest = d_size - i;
    const VF up = kGated ? LoadTail(b + i, rest) : hn::Zero(d);
    StoreTail(times_up(act(LoadTail(x + i, rest)), up), y + i, rest);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace xllm_kernel::cpu
HWY_AFTER_NAMESPACE();

#endif  // XLLM_KERNEL_CPU_ACTIVATION_ACTIVATION_INL_H_
