// scaled_mm's x86 panel kernels (scaled_mm_internal.h), compiled with function-level targets so
// the rest of the build keeps its baseline; the per-target driver (scaled_mm-inl.h) calls them
// only where cpu_features() has what their names say. Each computes t, the epilogue's sum over
// the K groups before the bias, for every row of the call and the kPanel channels of one panel,
// over the kQuads layout (scaled_mm.h):
//
//   w8a8-int8, AVX-512 VNNI: vpdpbusd(acc, a ^ 0x80, q): the activation as the unsigned operand
//     (a + 128, broadcast 4 bytes per instruction), the weight quads as the signed one, 8 rows x 32
//     channels of int32 per tile; then acc - (128 + azp) * sum_k q (the sums section). Every
//     partial sum stays in int32: |sum (a + 128) q| <= 255 * 127 * kScaledMmMaxK < 2^31.
//   w8a8-int8, AVX-VNNI (Alder Lake and later client cores, Zen 5; no AVX-512 needed): the same
//     vpdpbusd on ymm, VEX-encoded ({vex} in inline assembly), 3 rows x 32 channels per tile (12
//     of the 16 ymm registers accumulate); w4a8 2 rows. Both widths' int8 and w4a8 tiles are one
//     source, scaled_mm_vnni-inl.h, compiled once per width (namespaces zmm and ymm below).
//   w8a8-int8, AVX2: vpmaddubsw(|a|, q * sign(a)) (vpsignb), then vpmaddwd with ones into int32:
//     |a| <= 128 and |q| <= 127, so a pair's int16 sum (<= 2 * 128 * 127 = 32512) never saturates.
//   w4a8: the nibbles u (0..15) are the unsigned operand of vpdpbusd (zmm, or ymm with AVX-VNNI)
//     or vpmaddubsw (a 64-byte load gives two quads: u & 0xF and (u >> 4) & 0xF), the activations
//     the signed one (no shift; vpmaddubsw's pairs do not saturate: 2 * 15 * 128 < 2^15);
//     acc_g - z * sum_{k in g} a per group.
//   w8a8-fp8, AVX512_BF16: e4m3 weights converted in registers to bf16 (exact: a two-table vpermi2w
//     lookup of the 7 magnitude bits, the sign or-ed in) and vdpbf16ps against the activations in
//     bf16 (converted once per call): lane 2c of a zmm holds channel c's k = 4i, 4i + 1 products and
//     lane 2c + 1 its 4i + 2, 4i + 3 ones, added (even + odd) per group. vdpbf16ps treats bf16
//     subnormal inputs as zero and flushes float32 subnormal results: every e4m3 value is a normal
//     bf16 (>= 2^-9), and every partial sum is 0 or a multiple of 2^-18 in magnitude, so neither
//     happens. More than one row tile: the panel is converted once into scratch (the same bits).
//   w8a8-fp8, AVX2: blocks of the panel converted to float32 in [k][channel] order (through
//     float16: the e4m3 bits shifted into a float16 of 2^-8 its value, subnormals included, then
//     vcvtph2ps), then acc = fma(a, w, acc) for k = 0, 1, ... in order: every product is exact,
//     so this is the plain float32 sum in k order, the same bits as the scalar kernel; the 2^-8
//     comes back as an exact * 256 (no partial sum is subnormal).
//
// The int schemes' epilogue, (float(acc) * scale_a) * s, then t + that, is separate float32
// multiplies and adds: this file is compiled with -ffp-contract=off (CMakeLists.txt) so that the
// compiler does not fuse them. The order of every fp8 sum depends on K (and the group) alone.
#if defined(__x86_64__) || defined(_M_X64)

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include "csrc/cpu/linear/scaled_mm_internal.h"
#include "hwy/base.h"

#define XLLM_AVX2 __attribute__((target("avx2,fma,f16c")))
#define XLLM_AVX2_INLINE inline __attribute__((always_inline, target("avx2,fma,f16c")))
#define XLLM_AVX_VNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
#define XLLM_AVX_VNNI_INLINE inline __attribute__((always_inline, target("avx2,fma,f16c,avxvnni")))
#define XLLM_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
#define XLLM_VNNI_INLINE \
  inline __attribute__((always_inline, target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
#define XLLM_BF16 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define XLLM_BF16_INLINE \
  inline __attribute__((always_inline, target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace xllm_kernel::cpu::scaled_mm_detail {
namespace {

inline int32_t Load32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline int64_t Load64(const void* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// ================================================================ AVX-512

// t[0, 32) = (c * sa) * s, or t + that after the first group (c: a group's float32 sums). AVX-512 F
// only, so that the VNNI and BF16 kernels both inline it.
inline __attribute__((always_inline, target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq"))) void EpilogueF512(
    float* t, __m512 c0, __m512 c1, __m512 sa, __m512 s0, __m512 s1, bool first) {
  __m512 f0 = _mm512_mul_ps(_mm512_mul_ps(c0, sa), s0);
  __m512 f1 = _mm512_mul_ps(_mm512_mul_ps(c1, sa), s1);
  if (!first) {
    f0 = _mm512_add_ps(_mm512_loadu_ps(t), f0);
    f1 = _mm512_add_ps(_mm512_loadu_ps(t + 16), f1);
  }
  _mm512_storeu_ps(t, f0);
  _mm512_storeu_ps(t + 16, f1);
}

// The same from int32 sums: c converted to float32 (nearest even) first.
XLLM_VNNI_INLINE void Epilogue512(float* t, __m512i c0, __m512i c1, __m512 sa, __m512 s0, __m512 s1, bool first) {
  EpilogueF512(t, _mm512_cvtepi32_ps(c0), _mm512_cvtepi32_ps(c1), sa, s0, s1, first);
}

// acc + the dot products of u's unsigned bytes with s's signed ones, per int32 lane: vpdpbusd in
// inline assembly, because GCC 12 allocates the intrinsic's accumulator arrays badly in the int8
// tile (a register copy of most accumulators per quad, and spills), which left that loop bound by
// dispatch at about two thirds of vpdpbusd's peak. (The w4a8 loop keeps the intrinsic: the same
// change measured no faster there.)
XLLM_VNNI_INLINE __m512i Dpbusd(__m512i acc, __m512i u, __m512i s) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
}

// ---------------------------------------------------------------- w8a8-fp8, vdpbf16ps

constexpr int kFp8Bf16Rows = 4;

// bf16 bits of the e4m3 magnitudes 0..127 (127: NaN), four tables of 32 for vpermi2w.
struct Bf16Table {
  alignas(64) uint16_t v[128];
  constexpr Bf16Table() : v() {
    for (int em = 0; em < 128; ++em) {
      const int e = em >> 3, mant = em & 7;
      if (em == 127) {
        v[em] = 0x7FC0;
      } else if (e == 0) {
        // mant * 2^-9: 0, 2^-9, 2^-8, 1.5 * 2^-8, 2^-7, 1.25 * 2^-7, ...
        uint16_t bits = 0;
        if (mant != 0) {
          int lead = 2;
          while ((mant >> lead) == 0) --lead;  // mant = 2^lead * (1 + f)
          const int frac = (mant - (1 << lead)) << (7 - lead);
          bits = static_cast<uint16_t>(((127 - 9 + lead) << 7) | frac);
        }
        v[em] = bits;
      } else {
        v[em] = static_cast<uint16_t>(((e + 120) << 7) | (mant << 4));
      }
    }
  }
};
constexpr Bf16Table kBf16Table{};

struct Bf16Tables {
  __m512i t0, t1, t2, t3;
};

XLLM_BF16_INLINE Bf16Tables LoadBf16Tables() {
  return {_mm512_load_si512(kBf16Table.v), _mm512_load_si512(kBf16Table.v + 32), _mm512_load_si512(kBf16Table.v + 64),
          _mm512_load_si512(kBf16Table.v + 96)};
}

// 32 e4m3 bytes -> 32 bf16, exact (NaN stays NaN).
XLLM_BF16_INLINE __m512i E4m3ToBf16(__m256i bytes, const Bf16Tables& tb) {
  const __m512i x = _mm512_cvtepu8_epi16(bytes);
  const __m512i lo = _mm512_permutex2var_epi16(tb.t0, x, tb.t1);  // magnitudes 0..63 (index bits 0-5)
  const __m512i hi = _mm512_permutex2var_epi16(tb.t2, x, tb.t3);  // 64..127
  const __m512i mag = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(x, _mm512_set1_epi16(0x40)), lo, hi);
  // mag | (x << 8 & 0x8000): ternlog 0xF8 = a | (b & c).
  return _mm512_ternarylogic_epi32(mag, _mm512_slli_epi16(x, 8), _mm512_set1_epi16(static_cast<short>(0x8000)), 0xF8);
}

// Converts quads [q0, q1) of a panel (e4m3, [quads][32][4]) to bf16, 4 zmm per quad.
XLLM_BF16 void ConvertFp8PanelBf16(const uint8_t* w, int64_t q0, int64_t q1, __m512i* dst) {
  const Bf16Tables tb = LoadBf16Tables();
  for (int64_t q = q0; q < q1; ++q) {
    for (int j = 0; j < 4; ++j) {
      dst[q * 4 + j] = E4m3ToBf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + q * 128 + j * 32)), tb);
    }
  }
}

// Rows [m0, m0 + R) of a panel: w its e4m3 quads, or (kConverted) `conv` its bf16 quads.
template <int R, bool kConverted>
XLLM_BF16_INLINE void Fp8Bf16Rows(const Prepared& x, int64_t panel, const uint8_t* w, const __m512i* conv, int64_t m0,
                                float* t) {
  const ScaledMmParams& p = *x.p;
  const int64_t quads = x.k4 / 4, groups = p.groups;
  const int64_t per_group = groups == 1 ? quads : p.group / 4;
  const Bf16Tables tb = LoadBf16Tables();
  const uint16_t* a[R];
  for (int r = 0; r < R; ++r) a[r] = static_cast<const uint16_t*>(x.a) + (m0 + r) * x.stride;
  // The channels of the even lanes of (lo, hi): 0, 2, .., 14 of lo then of hi.
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  for (int64_t g = 0; g < groups; ++g) {
    __m512 acc[R][4];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = _mm512_setzero_ps();
    const int64_t q1 = std::min(quads, (g + 1) * per_group);
    for (int64_t q = g * per_group; q < q1; ++q) {
      __m512i b[4];
      for (int j = 0; j < 4; ++j) {
        if constexpr (kConverted) {
          b[j] = _mm512_load_si512(conv + q * 4 + j);
        } else {
          b[j] = E4m3ToBf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + q * 128 + j * 32)), tb);
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512bh av = (__m512bh)_mm512_set1_epi64(Load64(a[r] + q * 4));
        for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], (__m512bh)b[j], av);
      }
    }
    const int64_t at = (panel * groups + g) * kP;
    const __m512 s0 = _mm512_loadu_ps(p.scales + at), s1 = _mm512_loadu_ps(p.scales + at + 16);
    for (int r = 0; r < R; ++r) {
      __m512 c[4];
      // even + odd lanes: the k = 4i, 4i + 1 and 4i + 2, 4i + 3 sums of each channel (a + b = b + a).
      for (int j = 0; j < 4; ++j) c[j] = _mm512_add_ps(acc[r][j], _mm512_permute_ps(acc[r][j], 0xB1));
      const __m512 g0 = _mm512_permutex2var_ps(c[0], even, c[1]), g1 = _mm512_permutex2var_ps(c[2], even, c[3]);
      EpilogueF512(t + (m0 + r) * kP, g0, g1, _mm512_set1_ps(x.scale_a[m0 + r]), s0, s1, g == 0);
    }
  }
}

template <bool kConverted>
XLLM_BF16_INLINE void Fp8Bf16Tiles(const Prepared& x, int64_t panel, const uint8_t* w, const __m512i* conv, float* t) {
  const int64_t m = x.p->m;
  for (int64_t m0 = 0; m0 < m; m0 += kFp8Bf16Rows) {
    switch (std::min<int64_t>(kFp8Bf16Rows, m - m0)) {
      case 1: Fp8Bf16Rows<1, kConverted>(x, panel, w, conv, m0, t); break;
      case 2: Fp8Bf16Rows<2, kConverted>(x, panel, w, conv, m0, t); break;
      case 3: Fp8Bf16Rows<3, kConverted>(x, panel, w, conv, m0, t); break;
      default: Fp8Bf16Rows<4, kConverted>(x, panel, w, conv, m0, t); break;
    }
  }
}

XLLM_BF16 void Fp8Bf16Panel(const Prepared& x, int64_t panel, float* t) {
  const int64_t quads = x.k4 / 4;
  const uint8_t* w = static_cast<const uint8_t*>(x.p->weights) + panel * quads * 128;
  if (x.p->m <= kFp8Bf16Rows) return Fp8Bf16Tiles<false>(x, panel, w, nullptr, t);
  // Several tiles: the panel converted once; the same bf16 and the same dot products.
  __m512i* conv = static_cast<__m512i*>(x.scratch);
  ConvertFp8PanelBf16(w, 0, quads, conv);
  Fp8Bf16Tiles<true>(x, panel, w, conv, t);
}

int64_t Fp8Bf16Scratch(int64_t m, int64_t k4) { return m > kFp8Bf16Rows ? k4 / 4 * 4 * 64 : 0; }

// ---------------------------------------------------------------- w8a8-fp8, the caller's bf16 GEMM

// A panel's e4m3 quads ([quads][32][4]) as bf16 pairs of k ([2 * quads][32][2]: the operand layout of
// vdpbf16ps and oneDNN's bf16 brgemm), exact. A converted zmm holds channels 8j .. 8j + 7, each as the
// 32-bit words (k0, k1), (k2, k3): the even words of two such zmm are 16 channels' (k0, k1).
XLLM_BF16 void ConvertFp8PanelPairs(const uint8_t* w, int64_t quads, uint16_t* pairs) {
  const Bf16Tables tb = LoadBf16Tables();
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t q = 0; q < quads; ++q) {
    __m512i b[4];
    for (int j = 0; j < 4; ++j) {
      b[j] = E4m3ToBf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + q * 128 + j * 32)), tb);
    }
    uint16_t* row = pairs + q * 2 * 64;  // two rows of 32 channels x 2 k
    _mm512_storeu_si512(row, _mm512_permutex2var_epi32(b[0], even, b[1]));
    _mm512_storeu_si512(row + 32, _mm512_permutex2var_epi32(b[2], even, b[3]));
    _mm512_storeu_si512(row + 64, _mm512_permutex2var_epi32(b[0], odd, b[1]));
    _mm512_storeu_si512(row + 96, _mm512_permutex2var_epi32(b[2], odd, b[3]));
  }
}

// The panel converted once into scratch, then per K group the caller's float32 sums
// (ScaledMmParams::bf16_panel_sums) and the epilogue: t = (acc * sa) * s, or t + that after the first.
XLLM_BF16 void BrgemmFp8Panel(const Prepared& x, int64_t panel, float* t) {
  const ScaledMmParams& p = *x.p;
  const int64_t quads = x.k4 / 4, groups = p.groups;
  const int64_t per_group = groups == 1 ? quads : p.group / 4;
  uint16_t* pairs = static_cast<uint16_t*>(x.scratch);
  float* acc = reinterpret_cast<float*>(pairs + x.k4 * kP);
  ConvertFp8PanelPairs(static_cast<const uint8_t*>(p.weights) + panel * quads * 128, quads, pairs);
  const uint16_t* a = static_cast<const uint16_t*>(x.a);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t q0 = g * per_group, q1 = std::min(quads, q0 + per_group);
    p.bf16_panel_sums(a + q0 * 4, x.stride, p.m, (q1 - q0) * 4, pairs + q0 * 4 * kP, acc);
    const float* s = p.scales + (panel * groups + g) * kP;
    const __m512 s0 = _mm512_loadu_ps(s), s1 = _mm512_loadu_ps(s + 16);
    for (int64_t r = 0; r < p.m; ++r) {
      EpilogueF512(t + r * kP, _mm512_loadu_ps(acc + r * kP), _mm512_loadu_ps(acc + r * kP + 16),
                   _mm512_set1_ps(x.scale_a[r]), s0, s1, g == 0);
    }
  }
}

// The converted panel (K4 * 32 bf16) and the sums of one group (m * 32 float32).
int64_t BrgemmFp8Scratch(int64_t m, int64_t k4) { return k4 * kP * 2 + m * kP * 4; }

// ================================================================ AVX2

XLLM_AVX2_INLINE void Epilogue256(float* t, __m256i c, __m256 sa, __m256 s, bool first) {
  __m256 f = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(c), sa), s);
  if (!first) f = _mm256_add_ps(_mm256_loadu_ps(t), f);
  _mm256_storeu_ps(t, f);
}

// ---------------------------------------------------------------- w8a8-int8, vpmaddubsw

constexpr int kInt8Avx2Rows = 2;

template <int R>
XLLM_AVX2_INLINE void Int8Avx2Rows(const Prepared& x, const int8_t* w, int64_t quads, int64_t m0, const int32_t* sums,
                                 const float* scales, float* t) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[R][4];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = _mm256_setzero_si256();
  const int8_t* a[R];
  for (int r = 0; r < R; ++r) a[r] = static_cast<const int8_t*>(x.a) + (m0 + r) * x.stride;
  for (int64_t q = 0; q < quads; ++q) {
    __m256i wv[4];
    for (int j = 0; j < 4; ++j) wv[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + q * 128 + j * 32));
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      const __m256i av = _mm256_set1_epi32(Load32(a[r] + q * 4));
      const __m256i mag = _mm256_abs_epi8(av);  // -128 -> 0x80 = 128 as unsigned
      for (int j = 0; j < 4; ++j) {
        const __m256i prod = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(wv[j], av));
        acc[r][j] = _mm256_add_epi32(acc[r][j], _mm256_madd_epi16(prod, ones));
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m256i azp = _mm256_set1_epi32(x.azp != nullptr ? x.azp[m0 + r] : 0);
    const __m256 sa = _mm256_set1_ps(x.scale_a[m0 + r]);
    for (int j = 0; j < 4; ++j) {
      const __m256i sum = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums + j * 8));
      const __m256i c = _mm256_sub_epi32(acc[r][j], _mm256_mullo_epi32(sum, azp));
      Epilogue256(t + (m0 + r) * kP + j * 8, c, sa, _mm256_loadu_ps(scales + j * 8), true);
    }
  }
}

XLLM_AVX2 void Int8Avx2Panel(const Prepared& x, int64_t panel, float* t) {
  const ScaledMmParams& p = *x.p;
  const int64_t quads = x.k4 / 4;
  const int8_t* w = static_cast<const int8_t*>(p.weights) + panel * quads * 128;
  for (int64_t m0 = 0; m0 < p.m; m0 += kInt8Avx2Rows) {
    if (p.m - m0 >= 2) {
      Int8Avx2Rows<2>(x, w, quads, m0, p.sums + panel * kP, p.scales + panel * kP, t);
    } else {
      Int8Avx2Rows<1>(x, w, quads, m0, p.sums + panel * kP, p.scales + panel * kP, t);
    }
  }
}

// ---------------------------------------------------------------- w4a8, vpmaddubsw

constexpr int kW4a8Avx2Rows = 2;

template <int R>
XLLM_AVX2_INLINE void W4a8Avx2Rows(const Prepared& x, int64_t panel, int64_t m0, float* t) {
  const ScaledMmParams& p = *x.p;
  const int64_t blocks = p.k / 8, per_group = p.group / 8, groups = p.groups;
  const uint8_t* w = static_cast<const uint8_t*>(p.weights) + panel * p.k * 16;
  const int32_t* zeros = static_cast<const int32_t*>(p.zeros);
  const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  const int8_t* a[R];
  for (int r = 0; r < R; ++r) a[r] = static_cast<const int8_t*>(x.a) + (m0 + r) * x.stride;
  for (int64_t g = 0; g < groups; ++g) {
    __m256i acc[R][4];  // channels 8j .. 8j + 7
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = _mm256_setzero_si256();
    const int64_t b1 = std::min(blocks, (g + 1) * per_group);
    for (int64_t b = g * per_group; b < b1; ++b) {
      __m256i alo[R], ahi[R];
      for (int r = 0; r < R; ++r) {
        alo[r] = _mm256_set1_epi32(Load32(a[r] + b * 8));
        ahi[r] = _mm256_set1_epi32(Load32(a[r] + b * 8 + 4));
      }
      for (int j = 0; j < 4; ++j) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + b * 128 + j * 32));
        const __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        for (int r = 0; r < R; ++r) {
          // Two int16 pair sums of at most 2 * 15 * 128 each: no saturation.
          const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, alo[r]), _mm256_maddubs_epi16(hi, ahi[r]));
          acc[r][j] = _mm256_add_epi32(acc[r][j], _mm256_madd_epi16(s16, ones));
        }
      }
    }
    const int64_t at = (panel * groups + g) * kP;
    for (int r = 0; r < R; ++r) {
      const __m256i asum = _mm256_set1_epi32(x.asum[(m0 + r) * groups + g]);
      const __m256 sa = _mm256_set1_ps(x.scale_a[m0 + r]);
      for (int j = 0; j < 4; ++j) {
        const __m256i z = zeros != nullptr ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(zeros + at + j * 8))
                                           : _mm256_set1_epi32(8);
        const __m256i c = _mm256_sub_epi32(acc[r][j], _mm256_mullo_epi32(z, asum));
        Epilogue256(t + (m0 + r) * kP + j * 8, c, sa, _mm256_loadu_ps(p.scales + at + j * 8), g == 0);
      }
    }
  }
}

XLLM_AVX2 void W4a8Avx2Panel(const Prepared& x, int64_t panel, float* t) {
  const int64_t m = x.p->m;
  for (int64_t m0 = 0; m0 < m; m0 += kW4a8Avx2Rows) {
    if (m - m0 >= 2) {
      W4a8Avx2Rows<2>(x, panel, m0, t);
    } else {
      W4a8Avx2Rows<1>(x, panel, m0, t);
    }
  }
}

// ================================================================ AVX-VNNI (VEX vpdpbusd on ymm)

// acc + the dot products of u's unsigned bytes with s's signed ones, per int32 lane: AVX-VNNI's
// vpdpbusd on ymm. Inline assembly, as Dpbusd on zmm: with _mm256_dpbusd_avx_epi32, GCC 12 stores
// most of the 3-row tile's accumulators to the stack every quad. {vex}: without it the assembler
// encodes the AVX512_VNNI + VL (EVEX) form, which a CPU with AVX-VNNI alone does not have. Only
// ymm0-15 ("x"); s may come from memory.
XLLM_AVX_VNNI_INLINE __m256i DpbusdVex(__m256i acc, __m256i u, __m256i s) {
  asm("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "xm"(s));
  return acc;
}

// ================================================================ the vpdpbusd tiles, zmm and ymm

// One source (scaled_mm_vnni-inl.h) compiled for each width in a namespace of its own, under that
// width's target attributes, with W its operations.
namespace zmm {
HWY_PUSH_ATTRIBUTES("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
// 32 zmm registers: 8 rows x 2 vectors of accumulators (or two sets of 2 rows), a quad's weights held.
struct W {
  using V = __m512i;
  static constexpr int kVecs = 2, kInt8Rows = 8, kW4a8Rows = 8;
  static constexpr bool kHoldWeights = true;
  static V Zero() { return _mm512_setzero_si512(); }
  static V Load(const void* p) { return _mm512_loadu_si512(p); }
  static V Broadcast(int32_t v) { return _mm512_set1_epi32(v); }
  static V Set1(int32_t v) { return _mm512_set1_epi32(v); }
  static V Add(V a, V b) { return _mm512_add_epi32(a, b); }
  static V Sub(V a, V b) { return _mm512_sub_epi32(a, b); }
  static V Mullo(V a, V b) { return _mm512_mullo_epi32(a, b); }
  static V LowNibbles(V v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0F)); }
  static V HighNibbles(V v) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F)); }
  static V Dpbusd(V acc, V u, V s) { return scaled_mm_detail::Dpbusd(acc, u, s); }
  // The intrinsic: the inline assembly measured no faster in the w4a8 tile.
  static V DpbusdNibbles(V acc, V u, V s) { return _mm512_dpbusd_epi32(acc, u, s); }
  // The scales held in registers over a tile's rows.
  struct S {
    __m512 s0, s1;
  };
  static S Scales(const float* s) { return {_mm512_loadu_ps(s), _mm512_loadu_ps(s + 16)}; }
  static void Epilogue(float* t, const V (&c)[kVecs], float sa, S s, bool first) {
    Epilogue512(t, c[0], c[1], _mm512_set1_ps(sa), s.s0, s.s1, first);
  }
};
#include "csrc/cpu/linear/scaled_mm_vnni-inl.h"
HWY_POP_ATTRIBUTES
}  // namespace zmm

namespace ymm {
HWY_PUSH_ATTRIBUTES("avx2,fma,f16c,avxvnni")
// 16 ymm registers: 3 rows x 4 vectors of accumulators (w4a8: 2 rows, whose 4 broadcasts are held
// too), the rows' broadcasts held. 12 independent chains hide vpdpbusd's latency: about 1.65x the
// throughput of 2 rows (8 chains) on Zen 5 at K = N = 4096; 3 w4a8 rows need more than 16 registers
// (reloading the broadcasts, the mask from memory, measured slower on Zen 5).
struct W {
  using V = __m256i;
  static constexpr int kVecs = 4, kInt8Rows = 3, kW4a8Rows = 2;
  static constexpr bool kHoldWeights = false;
  static V Zero() { return _mm256_setzero_si256(); }
  static V Load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  static V Broadcast(int32_t v) { return _mm256_set1_epi32(v); }
  static V Set1(int32_t v) { return _mm256_set1_epi32(v); }
  static V Add(V a, V b) { return _mm256_add_epi32(a, b); }
  static V Sub(V a, V b) { return _mm256_sub_epi32(a, b); }
  static V Mullo(V a, V b) { return _mm256_mullo_epi32(a, b); }
  static V LowNibbles(V v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
  static V HighNibbles(V v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F)); }
  static V Dpbusd(V acc, V u, V s) { return DpbusdVex(acc, u, s); }
  static V DpbusdNibbles(V acc, V u, V s) { return DpbusdVex(acc, u, s); }
  // The scales read from memory by each row (registers are few).
  using S = const float*;
  static S Scales(const float* s) { return s; }
  static void Epilogue(float* t, const V (&c)[kVecs], float sa, S scales, bool first) {
    const __m256 s = _mm256_set1_ps(sa);
    for (int j = 0; j < kVecs; ++j) Epilogue256(t + j * 8, c[j], s, _mm256_loadu_ps(scales + j * 8), first);
  }
};
#include "csrc/cpu/linear/scaled_mm_vnni-inl.h"
HWY_POP_ATTRIBUTES
}  // namespace ymm

// ---------------------------------------------------------------- w8a8-fp8, float32 FMA

constexpr int kFp8Avx2Rows = 3;
constexpr int64_t kFp8Avx2BlockQuads = 64;  // 256 k of the panel in float32: 32 KiB

// 16 e4m3 bytes (u16 lanes) -> float16 bits of 2^-8 their value (exact; NaN stays NaN).
XLLM_AVX2_INLINE __m256i E4m3ToF16Scaled(__m256i x) {
  const __m256i em = _mm256_and_si256(x, _mm256_set1_epi16(0x7F));
  const __m256i sign = _mm256_and_si256(_mm256_slli_epi16(x, 8), _mm256_set1_epi16(static_cast<short>(0x8000)));
  const __m256i nan = _mm256_and_si256(_mm256_cmpeq_epi16(em, _mm256_set1_epi16(0x7F)), _mm256_set1_epi16(0x7C00));
  return _mm256_or_si256(_mm256_or_si256(_mm256_slli_epi16(em, 7), sign), nan);
}

// Quads [q0, q1) of a panel (e4m3, [quads][32][4]) as float32 2^-8 their value, [k][32].
XLLM_AVX2 void ConvertFp8BlockF32(const uint8_t* w, int64_t q0, int64_t q1, float* dst) {
  // Within each 128-bit lane (4 channels x 4 k) gather by k, then the lanes' dwords in k order:
  // bytes 8i .. 8i + 7 of the result are channels 0..7 at k = i.
  const __m256i by_k = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5, 9,
                                        13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m256i lanes = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t q = q0; q < q1; ++q) {
    float* out = dst + (q - q0) * 4 * kP;
    for (int j = 0; j < 4; ++j) {  // channels 8j .. 8j + 7
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + q * 128 + j * 32));
      const __m256i v = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(raw, by_k), lanes);
      const __m256i h01 = E4m3ToF16Scaled(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(v)));       // k = 0, 1
      const __m256i h23 = E4m3ToF16Scaled(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(v, 1)));  // k = 2, 3
      _mm256_storeu_ps(out + 0 * kP + j * 8, _mm256_cvtph_ps(_mm256_castsi256_si128(h01)));
      _mm256_storeu_ps(out + 1 * kP + j * 8, _mm256_cvtph_ps(_mm256_extracti128_si256(h01, 1)));
      _mm256_storeu_ps(out + 2 * kP + j * 8, _mm256_cvtph_ps(_mm256_castsi256_si128(h23)));
      _mm256_storeu_ps(out + 3 * kP + j * 8, _mm256_cvtph_ps(_mm256_extracti128_si256(h23, 1)));
    }
  }
}

// acc = fma(a[k], W[k], acc) for k in [k0, k1) of the block (W: [k - kb][32] float32), rows [m0, m0 + R),
// the partial sums carried in `partial` ([m][32], exact float32) between blocks.
template <int R>
XLLM_AVX2_INLINE void Fp8Avx2Chain(const Prepared& x, const float* block, int64_t kb, int64_t k0, int64_t k1,
                                 int64_t m0, bool first, float* partial) {
  __m256 acc[R][4];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < 4; ++j) acc[r][j] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(partial + (m0 + r) * kP + j * 8);
  }
  const float* a[R];
  for (int r = 0; r < R; ++r) a[r] = static_cast<const float*>(x.a) + (m0 + r) * x.stride;
  for (int64_t k = k0; k < k1; ++k) {
    const float* wk = block + (k - kb) * kP;
    const __m256 w0 = _mm256_loadu_ps(wk), w1 = _mm256_loadu_ps(wk + 8), w2 = _mm256_loadu_ps(wk + 16),
                 w3 = _mm256_loadu_ps(wk + 24);
#pragma GCC unroll 3
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(a[r] + k);
      acc[r][0] = _mm256_fmadd_ps(av, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, w1, acc[r][1]);
      acc[r][2] = _mm256_fmadd_ps(av, w2, acc[r][2]);
      acc[r][3] = _mm256_fmadd_ps(av, w3, acc[r][3]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < 4; ++j) _mm256_storeu_ps(partial + (m0 + r) * kP + j * 8, acc[r][j]);
  }
}

XLLM_AVX2 void Fp8Avx2Panel(const Prepared& x, int64_t panel, float* t) {
  const ScaledMmParams& p = *x.p;
  const int64_t quads = x.k4 / 4, groups = p.groups, m = p.m;
  const int64_t per_group = groups == 1 ? quads : p.group / 4;
  const uint8_t* w = static_cast<const uint8_t*>(p.weights) + panel * quads * 128;
  float* block = static_cast<float*>(x.scratch);
  float* partial = block + kFp8Avx2BlockQuads * 4 * kP;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t g0 = g * per_group, g1 = std::min(quads, g0 + per_group);
    for (int64_t q0 = g0; q0 < g1; q0 += kFp8Avx2BlockQuads) {
      const int64_t q1 = std::min(g1, q0 + kFp8Avx2BlockQuads);
      ConvertFp8BlockF32(w, q0, q1, block);
      for (int64_t m0 = 0; m0 < m; m0 += kFp8Avx2Rows) {
        switch (std::min<int64_t>(kFp8Avx2Rows, m - m0)) {
          case 1: Fp8Avx2Chain<1>(x, block, q0 * 4, q0 * 4, q1 * 4, m0, q0 == g0, partial); break;
          case 2: Fp8Avx2Chain<2>(x, block, q0 * 4, q0 * 4, q1 * 4, m0, q0 == g0, partial); break;
          default: Fp8Avx2Chain<3>(x, block, q0 * 4, q0 * 4, q1 * 4, m0, q0 == g0, partial); break;
        }
      }
    }
    const int64_t at = (panel * groups + g) * kP;
    for (int64_t r = 0; r < m; ++r) {
      const __m256 sa = _mm256_set1_ps(x.scale_a[r]);
      for (int j = 0; j < 4; ++j) {
        // The sum in true scale (* 2^8, exact), then the epilogue.
        const __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(partial + r * kP + j * 8), _mm256_set1_ps(256.0f));
        __m256 f = _mm256_mul_ps(_mm256_mul_ps(acc, sa), _mm256_loadu_ps(p.scales + at + j * 8));
        if (g > 0) f = _mm256_add_ps(_mm256_loadu_ps(t + r * kP + j * 8), f);
        _mm256_storeu_ps(t + r * kP + j * 8, f);
      }
    }
  }
}

int64_t Fp8Avx2Scratch(int64_t m, int64_t) { return (kFp8Avx2BlockQuads * 4 + m) * kP * 4; }

}  // namespace

PanelKernel Int8Avx512VnniKernel() { return {zmm::Int8Panel, AForm::kUint8, "avx512-vnni", nullptr}; }
PanelKernel W4a8Avx512VnniKernel() { return {zmm::W4a8Panel, AForm::kInt8, "avx512-vnni", nullptr}; }
PanelKernel Fp8Avx512Bf16Kernel() { return {Fp8Bf16Panel, AForm::kBf16, "avx512-bf16", Fp8Bf16Scratch}; }
PanelKernel BrgemmFp8Kernel() { return {BrgemmFp8Panel, AForm::kBf16, "brgemm", BrgemmFp8Scratch}; }
PanelKernel Int8AvxVnniKernel() { return {ymm::Int8Panel, AForm::kUint8, "avx-vnni", nullptr}; }
PanelKernel W4a8AvxVnniKernel() { return {ymm::W4a8Panel, AForm::kInt8, "avx-vnni", nullptr}; }
PanelKernel Int8Avx2Kernel() { return {Int8Avx2Panel, AForm::kInt8, "avx2", nullptr}; }
PanelKernel W4a8Avx2Kernel() { return {W4a8Avx2Panel, AForm::kInt8, "avx2", nullptr}; }
PanelKernel Fp8Avx2Kernel() { return {Fp8Avx2Panel, AForm::kFloat32, "avx2-fma", Fp8Avx2Scratch}; }

}  // namespace xllm_kernel::cpu::scaled_mm_detail

#endif  // x86-64
