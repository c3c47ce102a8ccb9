// Cache elements as bf16 in AVX-512 registers, shared by the AVX-512 BF16 decode kernel
// (attention_decode_avx512.cpp) and the AMX prefill kernel (attention_prefill_amx_kernel.h): a bf16
// cache's 32 elements as they are; an int8 or float8_e4m3fn cache's 32 elements converted exactly
// (an int8 has 8 significant bits, an e4m3 3; bf16 holds 8). e4m3 converts through float16: its
// magnitude bits shifted left by 7 make a float16 that is 2^-8 of the element's value (subnormals
// included: float16's exponent bias is 15 to e4m3's 7), and the sign moves to bit 15; the 2^8 is
// kUnit, folded by the callers into the scale. NaN (S.1111.111) becomes a float16 NaN.
// Internal to csrc/cpu/attention; callers run it only where the CPU has AVX512_BF16.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "csrc/common/kv_cache.h"

#define XLLM_CACHE_ELEMENTS_INLINE \
  inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace xllm_kernel::cpu::attention_detail {

// How a cache stores its elements: bf16, or a quantized format (the query is bf16 either way).
enum class Fmt { kBf16, kFp8, kInt8 };
template <Fmt F>
using Elem = std::conditional_t<F == Fmt::kBf16, uint16_t, uint8_t>;
// The factor between a converted element and its dequantized value, besides the scale.
template <Fmt F>
inline constexpr float kUnit = F == Fmt::kFp8 ? 256.0f : 1.0f;

// Mask of lanes [0, n) of 32 (n clamped to [0, 32]): a row's first n elements.
inline __mmask32 Lanes32(int64_t n) {
  return n <= 0 ? 0 : n >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << n) - 1);
}

inline Fmt FmtOf(kernels::KvCacheFormat f) {
  return f == kernels::KvCacheFormat::kFp8E4M3 ? Fmt::kFp8 : f == kernels::KvCacheFormat::kInt8 ? Fmt::kInt8 : Fmt::kBf16;
}

// Elements [0, 32) of p (lanes outside `m` zero, never read) as 32 bf16: exact for every format (an
// e4m3 element comes out as 2^-8 of its value).
template <Fmt F>
XLLM_CACHE_ELEMENTS_INLINE __m512i Load32(const Elem<F>* p, __mmask32 m) {
  if constexpr (F == Fmt::kBf16) {
    return _mm512_maskz_loadu_epi16(m, p);
  } else if constexpr (F == Fmt::kInt8) {
    const __m256i b = _mm256_maskz_loadu_epi8(m, p);
    const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(b)));
    const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(b, 1)));
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
  } else {
    const __m512i b = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, p));
    const __m512i mag = _mm512_and_si512(b, _mm512_set1_epi16(0x7F));
    __m512i h = _mm512_or_si512(_mm512_slli_epi16(mag, 7), _mm512_slli_epi16(_mm512_and_si512(b, _mm512_set1_epi16(0x80)), 8));
    h = _mm512_mask_mov_epi16(h, _mm512_cmpeq_epi16_mask(mag, _mm512_set1_epi16(0x7F)), _mm512_set1_epi16(0x7E00));
    const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
    const __m512 hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
  }
}

// Load32 with the format chosen at run time; p points at the first element's byte.
XLLM_CACHE_ELEMENTS_INLINE __m512i Load32(Fmt f, const uint8_t* p, __mmask32 m) {
  switch (f) {
    case Fmt::kFp8: return Load32<Fmt::kFp8>(p, m);
    case Fmt::kInt8: return Load32<Fmt::kInt8>(p, m);
    case Fmt::kBf16: break;
  }
  return Load32<Fmt::kBf16>(reinterpret_cast<const uint16_t*>(p), m);
}

}  // namespace xllm_kernel::cpu::attention_detail
