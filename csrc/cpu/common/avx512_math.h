// Float32 e^x and tanh on AVX-512 vectors (16 lanes) for the kernels written with intrinsics and
// function-level target attributes (csrc/cpu/attention: the AVX-512 BF16 decode and AMX prefill
// kernels); the Highway kernels use hwy's math instead. The functions carry the smallest target
// they need (avx512f, avx512dq) and are always inlined, so any caller whose own target includes
// those compiles them in its own context; callers check cpu_features() (cpu_features.h) first.
//
//   XLLM_AVX512BF16_INLINE __m512 Weights(__m512 logits, __m512 max) {
//     return xllm_kernel::cpu::avx512::Exp<7>(_mm512_sub_ps(logits, max));
//   }
#pragma once

#include <immintrin.h>

#define XLLM_AVX512_MATH_INLINE inline __attribute__((always_inline, target("avx512f,avx512dq")))

namespace xllm_kernel::cpu::avx512 {

// e^x for x <= 0 (NaN stays NaN; below -87.5 a tiny positive number, callers mask what must be 0):
// x = n ln2 + r, |r| <= ln2 / 2, e^r by its Taylor polynomial of degree kDegree, scaled by 2^n.
// Truncation error (relative): 5e-9 for degree 7, 3e-7 for degree 6.
template <int kDegree>
XLLM_AVX512_MATH_INLINE __m512 Exp(__m512 x) {
  static_assert(kDegree == 6 || kDegree == 7, "the polynomial has degree 6 or 7");
  x = _mm512_max_ps(_mm512_set1_ps(-87.5f), x);  // the second operand where either is NaN
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);  // ln2 high part (exact n * hi)
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);     // ln2 - high part
  __m512 e;
  if constexpr (kDegree == 7) {
    e = _mm512_set1_ps(1.0f / 5040);
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f / 720));
  } else {
    e = _mm512_set1_ps(1.0f / 720);
  }
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f / 120));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f / 24));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f / 6));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(0.5f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(e, n);
}

// tanh(y) = sign(y) (1 - e^(-2|y|)) / (1 + e^(-2|y|)), e^ by Exp<kDegree> (it takes x <= 0; for
// large |y| e^(-2|y|) -> tiny, the quotient -> 1): absolute error a few float32 ulps of 1.
template <int kDegree>
XLLM_AVX512_MATH_INLINE __m512 Tanh(__m512 y) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  const __m512 em = Exp<kDegree>(_mm512_mul_ps(_mm512_andnot_ps(sign, y), _mm512_set1_ps(-2.0f)));
  const __m512 t = _mm512_div_ps(_mm512_sub_ps(_mm512_set1_ps(1.0f), em), _mm512_add_ps(_mm512_set1_ps(1.0f), em));
  return _mm512_or_ps(t, _mm512_and_ps(sign, y));
}

}  // namespace xllm_kernel::cpu::avx512
