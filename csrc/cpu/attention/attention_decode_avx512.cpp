// The AVX-512 BF16 decode kernel of paged attention (attention_internal.h): an item's query vectors
// (rows x group heads, at most kDecodeMaxVectors per KV head) against tiles of kTileKeys keys,
// every KV head of the item per tile, with nothing widened to memory:
//   Q.K  the bf16 query (copied once, zero padded to 32 elements) times the bf16 key row read from
//        the cache with vdpbf16ps (exact products, float32 sums); the 16 keys' vectors of partial
//        sums reduced to one vector of 16 logits by a transpose-add tree.
//   softmax  the 16 logits at once: masks (causal, window, keys without a block), scale, soft cap,
//        the running maximum (rescaling the sum and the output when it grows); the running sum
//        kept as 16 lane sums, added up at the end.
//   P.V  each value row's 32 bf16 loaded as 16 int32 lanes: the even elements are the lanes
//        shifted left by 16, the odd ones the lanes with the low half cleared (exact float32), so
//        the output accumulates in an even / odd layout, interleaved back once at the end.
// Loads of a row's tail are masked (zeroed lanes, never an access past the row), so NaN in the
// cache beyond a row or past a sequence's keys never reaches a result. Compiled with function-level
// AVX-512 targets: the rest of the build keeps its baseline, and the entry points call it only
// where the CPU has AVX512_BF16.
//
// Quantized caches (paged_attention_quant, csrc/common/kv_cache.h) take the same path: each 32-element
// piece of an int8 or float8_e4m3fn row is converted in registers to 32 bf16, exactly (an int8 has 8
// significant bits, an e4m3 3), and the scales move out of the dot products: a key's scale times
// the call's scale multiplies its logit, a value's scale its probability (the sums keep the plain
// probabilities). e4m3 converts through float16 (cache_elements_avx512.h: a float16 that is 2^-8 of
// its value, subnormals included), the 2^8 folded into those factors.
//
// vdpbf16ps treats bf16 subnormal inputs as zero and flushes float32 subnormal sums (the products
// of two bf16 below 2^-126 in magnitude); attention logits are far from that range.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "csrc/cpu/attention/attention_internal.h"
#include "csrc/cpu/attention/cache_elements_avx512.h"
#include "csrc/cpu/common/avx512_math.h"
#include "csrc/cpu/common/cpu_features.h"

#define XLLM_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define XLLM_AVX512BF16_INLINE inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace xllm_kernel::cpu::attention_detail {

bool DecodeAvx512Bf16Supported() { return cpu_features().avx512_bf16; }  // cpu_features.h

namespace {

constexpr int kT = static_cast<int>(kTileKeys);
// Keys from the tile being computed to the one being prefetched (RunItem).
constexpr int64_t kAheadKeys = 2 * kTileKeys;
// The degree of e^x's polynomial (avx512_math.h: truncation 5e-9 relative), in the weights and the
// soft cap's tanh.
constexpr int kExpDegree = 7;

// Mask of keys [lo, hi] of 16 (relative to the tile).
inline __mmask16 KeyRange(int64_t lo, int64_t hi) {
  lo = std::max<int64_t>(lo, 0);
  hi = std::min<int64_t>(hi, kT - 1);
  if (hi < lo) return 0;
  const uint32_t upto = (2u << hi) - 1, below = (1u << lo) - 1;
  return static_cast<__mmask16>(upto & ~below);
}

// Elements [0, 32) of an int8 row (lanes outside `m` zero) as float32: the even ones in `even`, the
// odd ones in `odd` (the layout TileValues accumulates in).
XLLM_AVX512BF16_INLINE void EvenOddInt8(const uint8_t* p, __mmask32 m, __m512& even, __m512& odd) {
  const __m512i w = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, p));
  even = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(w, 16), 16));
  odd = _mm512_cvtepi32_ps(_mm512_srai_epi32(w, 16));
}

// r[j] = the sum of the 16 lanes of a[j] (16 vectors, 64 bytes apart), by a transpose-add tree.
XLLM_AVX512BF16_INLINE __m512 Reduce16(const float* a) {
  __m512 b[8], c[4];
  for (int p = 0; p < 8; ++p) {
    const __m512 x = _mm512_load_ps(a + 32 * p), y = _mm512_load_ps(a + 32 * p + 16);
    b[p] = _mm512_add_ps(_mm512_unpacklo_ps(x, y), _mm512_unpackhi_ps(x, y));
  }
  for (int q = 0; q < 4; ++q) {
    const __m512d x = _mm512_castps_pd(b[2 * q]), y = _mm512_castps_pd(b[2 * q + 1]);
    c[q] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  // c[q]: per 128-bit lane L, the partial sums over L of keys 4q .. 4q + 3.
  const __m512 d0 = _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 d1 = _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm512_shuffle_f32x4(c[2], c[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(d0, d1, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(d0, d1, _MM_SHUFFLE(3, 1, 3, 1)));
}

// The scratch of one item (64-byte aligned): bf16 queries [V][NC * 32], outputs [V][op] (even /
// odd layout per 32 elements), lane sums [V][16], running maxima [16 per head], partial dots
// [MB][16][16], logits / probabilities [16][16], rescale factors and maxima [16].
struct Scratch16 {
  uint16_t* q;
  float *o, *sum, *row_max, *dots, *s, *alpha, *new_max;
};

// Prefetches (into L1) the lines of [row, row + bytes): a head's slice of a cache row of a later tile.
XLLM_AVX512BF16_INLINE void PrefetchSlice(const char* row, int64_t bytes) {
  const char* end = row + bytes;
  for (const char* a = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(row) & ~uintptr_t{63}); a < end;
       a += 64) {
    _mm_prefetch(a, _MM_HINT_T0);
  }
}

// One pass of TileDots over query vectors [m0, m0 + mb), mb <= MB (a constant MB: no tests per
// vector where the pass is full); ahead[j] (or null): this head's slice of a later key, prefetched
// alongside key j.
template <Fmt F, int NC, int MB>
XLLM_AVX512BF16_INLINE void DotsPass(const uint16_t* q, int m0, int mb, const Elem<F>* const* krow, __mmask16 ok,
                                   __mmask32 last, float* dots, const char* const* ahead, int64_t ahead_bytes) {
  __m512bh qv[MB][NC];
  for (int i = 0; i < MB; ++i) {
    if (i >= mb) break;
    for (int c = 0; c < NC; ++c) qv[i][c] = (__m512bh)_mm512_load_si512(q + (m0 + i) * NC * 32 + 32 * c);
  }
  for (int j = 0; j < kT; ++j) {
    if (ahead != nullptr && ahead[j] != nullptr) PrefetchSlice(ahead[j], ahead_bytes);
    __m512 acc[MB];
    for (int i = 0; i < MB; ++i) acc[i] = _mm512_setzero_ps();
    if ((ok >> j) & 1) {
      const Elem<F>* k = krow[j];
      for (int c = 0; c < NC; ++c) {
        const __m512bh kv = (__m512bh)Load32<F>(k + 32 * c, c + 1 < NC ? ~__mmask32{0} : last);
        for (int i = 0; i < MB; ++i) {
          if (i < mb) acc[i] = _mm512_dpbf16_ps(acc[i], qv[i][c], kv);
        }
      }
    }
    for (int i = 0; i < MB; ++i) {
      if (i < mb) _mm512_store_ps(dots + (i * kT + j) * 16, acc[i]);
    }
  }
}

// S[m][j] = q[m] . k[j] (unscaled) for the M query vectors of one KV head, keys j with bit j of
// `ok` (others 0); q rows NC * 32 bf16 apart, krow[j] the key's row of this head. ahead[j] (or
// null): this head's slice of a key of a later tile, ahead_bytes long, prefetched with key j (the
// prefetches spread over the work instead of issued at once).
template <Fmt F, int NC>
XLLM_AVX512BF16 void TileDots(const uint16_t* q, int M, const Elem<F>* const* krow, __mmask16 ok, __mmask32 last,
                            float* dots, float* s, const char* const* ahead, int64_t ahead_bytes) {
  constexpr int MB = NC >= 16 ? 1 : 16 / NC;  // query vectors per pass, held in registers
  for (int m0 = 0; m0 < M; m0 += MB) {
    const int mb = std::min(MB, M - m0);
    const char* const* pf = m0 == 0 ? ahead : nullptr;
    if (mb == MB) {
      DotsPass<F, NC, MB>(q, m0, MB, krow, ok, last, dots, pf, ahead_bytes);
    } else {
      DotsPass<F, NC, MB>(q, m0, mb, krow, ok, last, dots, pf, ahead_bytes);
    }
    for (int i = 0; i < mb; ++i) _mm512_store_ps(s + (m0 + i) * 16, Reduce16(dots + i * kT * 16));
  }
}

// O[m] = alpha[m] O[m] + sum_j P[m][j] V[j] over the keys j with bit j of `ok`, one 64-element
// chunk of the head at a time; the rows' 32-element groups masked by `masks` (2 per chunk).
// ahead[j] (or null): as TileDots', prefetched with key j, each chunk's part in its first pass.
template <Fmt F>
XLLM_AVX512BF16 void TileValues(const float* pm, const float* alpha, int M, const Elem<F>* const* vrow, __mmask16 ok,
                              const __mmask32* masks, int chunks, int op, float* o, const char* const* ahead,
                              int64_t ahead_bytes) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int g = 0; g < chunks; ++g) {
    const __mmask32 k0 = masks[2 * g], k1 = masks[2 * g + 1];
    for (int m0 = 0; m0 < M; m0 += 4) {
      const int mb = std::min(4, M - m0);
      __m512 acc[4][4];
      for (int i = 0; i < 4; ++i) {
        if (i >= mb) break;
        const __m512 a = _mm512_set1_ps(alpha[m0 + i]);
        float* om = o + (m0 + i) * op + 64 * g;
        for (int c = 0; c < 4; ++c) acc[i][c] = _mm512_mul_ps(_mm512_load_ps(om + 16 * c), a);
      }
      // The chunk's part of the later slices (64 elements), in the first pass over the chunk.
      constexpr int64_t kPart = 64 * sizeof(Elem<F>);
      const bool prefetch = ahead != nullptr && m0 == 0 && kPart * g < ahead_bytes;
      const int64_t part = std::min<int64_t>(kPart, ahead_bytes - kPart * g);
      for (int j = 0; j < kT; ++j) {
        if (prefetch && ahead[j] != nullptr) PrefetchSlice(ahead[j] + kPart * g, part);
        if (!((ok >> j) & 1)) continue;
        const Elem<F>* v = vrow[j] + 64 * g;
        __m512 y0, y1, y2, y3;
        if constexpr (F == Fmt::kInt8) {
          // Straight to the even / odd float32 layout: each int32 lane holds elements 2i, 2i + 1
          // as two int16.
          EvenOddInt8(v, k0, y0, y1);
          EvenOddInt8(v + 32, k1, y2, y3);
        } else {
          const __m512i x0 = Load32<F>(v, k0), x1 = Load32<F>(v + 32, k1);
          y0 = _mm512_castsi512_ps(_mm512_slli_epi32(x0, 16));
          y1 = _mm512_castsi512_ps(_mm512_and_si512(x0, high));
          y2 = _mm512_castsi512_ps(_mm512_slli_epi32(x1, 16));
          y3 = _mm512_castsi512_ps(_mm512_and_si512(x1, high));
        }
        for (int i = 0; i < 4; ++i) {
          if (i >= mb) break;
          const __m512 w = _mm512_set1_ps(pm[(m0 + i) * 16 + j]);
          acc[i][0] = _mm512_fmadd_ps(w, y0, acc[i][0]);
          acc[i][1] = _mm512_fmadd_ps(w, y1, acc[i][1]);
          acc[i][2] = _mm512_fmadd_ps(w, y2, acc[i][2]);
          acc[i][3] = _mm512_fmadd_ps(w, y3, acc[i][3]);
        }
      }
      for (int i = 0; i < 4; ++i) {
        if (i >= mb) break;
        float* om = o + (m0 + i) * op + 64 * g;
        for (int c = 0; c < 4; ++c) _mm512_store_ps(om + 16 * c, acc[i][c]);
      }
    }
  }
}

// The element-order floats of 32-element group g of an even / odd row: lo = elements 0..15,
// hi = 16..31.
XLLM_AVX512BF16_INLINE void Interleave(const float* o, __m512& lo, __m512& hi) {
  const __m512 e = _mm512_load_ps(o), d = _mm512_load_ps(o + 16);
  const __m512i ilo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i ihi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  lo = _mm512_permutex2var_ps(e, ilo, d);
  hi = _mm512_permutex2var_ps(e, ihi, d);
}

template <Fmt F, int NC>
XLLM_AVX512BF16 void RunItem(const PagedAttentionParams& p, const AttentionItem& item, float* workspace) {
  using TC = Elem<F>;
  constexpr int64_t kEs = sizeof(TC);
  constexpr bool kQuant = F != Fmt::kBf16;
  SeqSpan span;
  if (!SeqSpanOf(p, item.seq, span)) return;
  const int64_t G = kernels::query_heads_per_kv(p), hs = p.head_size;
  const int rows = static_cast<int>(item.query_end - item.query_begin);
  const int heads = static_cast<int>(item.kv_head_end - item.kv_head);
  const int M = rows * static_cast<int>(G), V = heads * M;
  const int qs = NC * 32;                                     // bf16 per query vector
  const int op = static_cast<int>(RoundUp(hs, 64));           // floats per output vector
  const int chunks = op / 64;
  constexpr int MB = NC >= 16 ? 1 : 16 / NC;
  const size_t floats = static_cast<size_t>(V) * (qs / 2 + op + 16) + 16 * heads + MB * kT * 16 + 2 * 16 * 16 + 64;
  float* base = Scratch(floats);
  if (base == nullptr) return;
  Scratch16 sc;
  sc.q = reinterpret_cast<uint16_t*>(base);
  sc.o = base + static_cast<size_t>(V) * qs / 2;
  sc.sum = sc.o + static_cast<size_t>(V) * op;
  sc.row_max = sc.sum + static_cast<size_t>(V) * 16;
  sc.dots = sc.row_max + 16 * heads;
  sc.s = sc.dots + MB * kT * 16;
  sc.alpha = sc.s + 16 * 16;
  sc.new_max = sc.alpha + 16;
  float* pv = sc.new_max + 16;  // quantized: the probabilities times the values' factors [16][16]
  float* kfac = pv + 16 * 16;   // quantized: each key's logit factor, the call's scale included [16]
  float* vfac = kfac + 16;      // quantized: each value's factor [16]

  // Queries: vector v = (head hi, row r, group head gi), in that order (as the Highway kernel's).
  const uint16_t* query = static_cast<const uint16_t*>(p.query);
  const int64_t q_begin = span.q_begin + item.query_begin;
  for (int v = 0; v < V; ++v) {
    const int hi = v / M, m = v % M, r = m / static_cast<int>(G), gi = m % static_cast<int>(G);
    const uint16_t* src = query + (q_begin + r) * p.query_strides.token +
                          ((item.kv_head + hi) * G + gi) * p.query_strides.head;
    for (int c = 0; c < NC; ++c) {
      _mm512_store_si512(sc.q + v * qs + 32 * c, _mm512_maskz_loadu_epi16(Lanes32(hs - 32 * c), src + 32 * c));
    }
  }
  std::memset(sc.o, 0, sizeof(float) * V * op);
  std::memset(sc.sum, 0, sizeof(float) * V * 16);
  std::fill(sc.row_max, sc.row_max + 16 * heads, -std::numeric_limits<float>::infinity());

  __mmask32 masks[2 * kDecodeMaxHeadSize / 64];
  for (int g = 0; g < 2 * chunks; ++g) masks[g] = Lanes32(hs - 32 * g);
  const __mmask32 last = Lanes32(hs - 32 * (NC - 1));

  const TC* kc = static_cast<const TC*>(p.key_cache);
  const TC* vc = static_cast<const TC*>(p.value_cache);
  const int32_t* table = p.block_tables + item.seq * p.block_table_stride;
  const CacheStrides ks = p.key_cache_strides, vs = p.value_cache_strides;
  const CacheStrides kss = p.key_scale_strides, vss = p.value_scale_strides;
  const bool per_row = p.cache_format == kernels::KvCacheFormat::kInt8;
  // The rows of key j of the sequence (every head), or null when its block id is out of range;
  // int8: its scales (the item's first head) in *ksc, *vsc.
  auto rows_of = [&](int64_t j, const TC*& k, const TC*& v, const float** ksc = nullptr, const float** vsc = nullptr) {
    const int64_t b = j / p.block_size, r = j - b * p.block_size, id = table[b];
    if (id < 0 || id >= p.num_blocks) {
      k = v = nullptr;
      return;
    }
    k = kc + id * ks.block + r * ks.row + item.kv_head * ks.head;
    v = vc + id * vs.block + r * vs.row + item.kv_head * vs.head;
    if (kQuant && per_row && ksc != nullptr) {
      *ksc = p.key_scale + id * kss.block + r * kss.row + item.kv_head * kss.head;
      *vsc = p.value_scale + id * vss.block + r * vss.row + item.kv_head * vss.head;
    }
  };
  const int64_t first_pos = PositionOf(span, item.query_begin);
  const bool capped = p.soft_cap > 0.0f;
  const __m512 scale = _mm512_set1_ps(p.scale), cap = _mm512_set1_ps(p.soft_cap);
  const __m512 inv_cap = _mm512_set1_ps(capped ? 1.0f / p.soft_cap : 0.0f);
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  // Each query vector's position and first key.
  int64_t pos_of[kDecodeMaxVectors], lo_of[kDecodeMaxVectors];
  for (int m = 0; m < M; ++m) {
    pos_of[m] = first_pos + m / G;
    lo_of[m] = FirstKeyOf(p, pos_of[m]);
  }
  const TC* krow[kT];
  const TC* vrow[kT];
  const TC* khead[kT];
  const TC* vhead[kT];
  const float* kscale[kT] = {};
  const float* vscale[kT] = {};

  // Prefetch: the tile kAheadKeys ahead of the one being computed, each head's slice of each key
  // issued with the same key of the current tile (TileDots, TileValues), so that the prefetches
  // (which hold a line fill buffer each) spread over the work; the item's first kAheadKeys keys at
  // its start, every line of the item's heads. Blocks are scattered: the table knows the next
  // ones, the hardware prefetchers do not. Decode of 16 x 4096 keys, 8 KV heads of 128 bf16 (2
  // threads, the best per-thread CPU time of 8 cold calls on a loaded machine): 18.8 ms with every
  // line of a tile 32 keys ahead prefetched at once at the tile's start, 13.8 ms spread; 16, 48 or
  // 64 keys ahead 14.2, 14.9, 15.3 ms; no prefetch 23.7 ms; a quarter of the lines, or only the
  // first head's (for the hardware prefetchers to follow), 28 and 32 ms; into L2 the same or
  // slower. Alternated with the prefetch at once, 4 times: 19.3 against 15.3 ms.
  const int64_t kspan = ((heads - 1) * ks.head + hs) * kEs, vspan = ((heads - 1) * vs.head + hs) * kEs;
  for (int64_t j = item.key_begin; j < std::min(item.key_end, item.key_begin + kAheadKeys); ++j) {
    const TC *k, *v;
    rows_of(j, k, v);
    if (k == nullptr) continue;
    PrefetchSlice(reinterpret_cast<const char*>(k), kspan);
    PrefetchSlice(reinterpret_cast<const char*>(v), vspan);
  }
  const char* kahead[kT];
  const char* vahead[kT];
  const char* khead_ahead[kT];
  const char* vhead_ahead[kT];
  for (int64_t j0 = item.key_begin; j0 < item.key_end; j0 += kTileKeys) {
    const int n = static_cast<int>(std::min<int64_t>(kTileKeys, item.key_end - j0));
    for (int j = 0; j < kT; ++j) {
      const TC *k = nullptr, *v = nullptr;
      if (j0 + kAheadKeys + j < item.key_end) rows_of(j0 + kAheadKeys + j, k, v);
      kahead[j] = reinterpret_cast<const char*>(k);
      vahead[j] = reinterpret_cast<const char*>(v);
    }
    __mmask16 ok = 0;
    for (int j = 0; j < kT; ++j) {
      krow[j] = vrow[j] = nullptr;
      if (j < n) rows_of(j0 + j, krow[j], vrow[j], &kscale[j], &vscale[j]);
      if (krow[j] != nullptr) ok = static_cast<__mmask16>(ok | (1u << j));
    }
    __mmask16 seen[kDecodeMaxVectors];
    for (int m = 0; m < M; ++m) seen[m] = static_cast<__mmask16>(ok & KeyRange(lo_of[m] - j0, pos_of[m] - j0));

    for (int hi = 0; hi < heads; ++hi) {
      for (int j = 0; j < kT; ++j) {
        khead[j] = krow[j] != nullptr ? krow[j] + hi * ks.head : nullptr;
        vhead[j] = vrow[j] != nullptr ? vrow[j] + hi * vs.head : nullptr;
        khead_ahead[j] = kahead[j] != nullptr ? kahead[j] + kEs * hi * ks.head : nullptr;
        vhead_ahead[j] = vahead[j] != nullptr ? vahead[j] + kEs * hi * vs.head : nullptr;
      }
      TileDots<F, NC>(sc.q + static_cast<size_t>(hi) * M * qs, M, khead, ok, last, sc.dots, sc.s, khead_ahead, kEs * hs);
      __m512 key_factor = scale;
      if constexpr (kQuant) {
        // Each key's logit factor (the call's scale times its scale) and value factor; 0 for a key
        // without a block (masked anyway).
        const float kt = p.scale * kUnit<F>, vt = kUnit<F>;
        for (int j = 0; j < kT; ++j) {
          const bool has = (ok >> j) & 1;
          kfac[j] = !has ? 0.0f : kt * (per_row ? kscale[j][hi * kss.head] : *p.key_scale);
          vfac[j] = !has ? 0.0f : vt * (per_row ? vscale[j][hi * vss.head] : *p.value_scale);
        }
        key_factor = _mm512_load_ps(kfac);
      }
      // Logits, their maxima, then (over the M vectors at once) the new maxima and rescale factors.
      alignas(64) float tile_max[16];
      for (int m = 0; m < 16; ++m) tile_max[m] = -std::numeric_limits<float>::infinity();
      for (int m = 0; m < M; ++m) {
        __m512 x = _mm512_mul_ps(_mm512_load_ps(sc.s + m * 16), key_factor);
        if (capped) x = _mm512_mul_ps(cap, avx512::Tanh<kExpDegree>(_mm512_mul_ps(x, inv_cap)));
        x = _mm512_mask_mov_ps(neg_inf, seen[m], x);
        _mm512_store_ps(sc.s + m * 16, x);
        // NaN logits (NaN in a row's own keys) poison the row's maximum and so its output.
        tile_max[m] = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q) ? std::numeric_limits<float>::quiet_NaN()
                                                              : _mm512_reduce_max_ps(x);
      }
      float* rm = sc.row_max + 16 * hi;
      const __m512 old_max = _mm512_load_ps(rm), tmax = _mm512_load_ps(tile_max);
      __m512 new_max = _mm512_max_ps(old_max, tmax);
      new_max = _mm512_mask_mov_ps(new_max, _mm512_cmp_ps_mask(old_max, tmax, _CMP_UNORD_Q),
                                   _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
      // Rows that saw nothing yet have output and sums 0: their factor only needs to be finite.
      const __m512 alpha = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(old_max, neg_inf, _CMP_NEQ_UQ),
                                               avx512::Exp<kExpDegree>(_mm512_sub_ps(old_max, new_max)));
      _mm512_store_ps(rm, new_max);
      _mm512_store_ps(sc.alpha, alpha);
      _mm512_store_ps(sc.new_max, new_max);
      float* sum = sc.sum + static_cast<size_t>(hi) * M * 16;
      for (int m = 0; m < M; ++m) {
        const __m512 pr = _mm512_maskz_mov_ps(
            seen[m], avx512::Exp<kExpDegree>(_mm512_sub_ps(_mm512_load_ps(sc.s + m * 16), _mm512_set1_ps(sc.new_max[m]))));
        _mm512_store_ps(sc.s + m * 16, pr);
        _mm512_store_ps(sum + m * 16, _mm512_fmadd_ps(_mm512_load_ps(sum + m * 16), _mm512_set1_ps(sc.alpha[m]), pr));
      }
      const float* weights = sc.s;
      if constexpr (kQuant) {
        // The values' factors enter the weights of P.V only (the sums keep the probabilities);
        // masked so that a factor of a key a row does not see never meets its zero weight.
        const __m512 f = _mm512_load_ps(vfac);
        for (int m = 0; m < M; ++m) _mm512_store_ps(pv + m * 16, _mm512_maskz_mul_ps(seen[m], _mm512_load_ps(sc.s + m * 16), f));
        weights = pv;
      }
      TileValues<F>(weights, sc.alpha, M, vhead, ok, masks, chunks, op, sc.o + static_cast<size_t>(hi) * M * op,
                    vhead_ahead, kEs * hs);
    }
  }

  if (item.split < 0) {
    uint16_t* out = static_cast<uint16_t*>(p.out);
    for (int v = 0; v < V; ++v) {
      const int hi = v / M, m = v % M, r = m / static_cast<int>(G), gi = m % static_cast<int>(G);
      uint16_t* dst = out + (q_begin + r) * p.out_strides.token + ((item.kv_head + hi) * G + gi) * p.out_strides.head;
      const __m512 l = _mm512_set1_ps(_mm512_reduce_add_ps(_mm512_load_ps(sc.sum + v * 16)));
      for (int g = 0; g < 2 * chunks; ++g) {
        if (masks[g] == 0) break;
        __m512 lo, hi2;
        Interleave(sc.o + v * op + 32 * g, lo, hi2);
        const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_div_ps(hi2, l), _mm512_div_ps(lo, l));
        _mm512_mask_storeu_epi16(dst + 32 * g, masks[g], (__m512i)b);
      }
    }
    return;
  }
  float* state = workspace + item.state + item.split * SplitFloats(V, hs);
  const int64_t stride = StateRowStride(hs);
  float* acc = state + RoundUp(2 * static_cast<int64_t>(V), kStatePad);
  for (int v = 0; v < V; ++v) {
    state[v] = sc.row_max[16 * (v / M) + v % M];
    state[V + v] = _mm512_reduce_add_ps(_mm512_load_ps(sc.sum + v * 16));
    for (int g = 0; g < 2 * chunks; ++g) {
      if (masks[g] == 0) break;
      __m512 lo, hi2;
      Interleave(sc.o + v * op + 32 * g, lo, hi2);
      const __mmask32 mk = masks[g];
      _mm512_mask_storeu_ps(acc + v * stride + 32 * g, static_cast<__mmask16>(mk), lo);
      _mm512_mask_storeu_ps(acc + v * stride + 32 * g + 16, static_cast<__mmask16>(mk >> 16), hi2);
    }
  }
}

template <Fmt F>
void RunDecodeItem(const PagedAttentionParams& p, const AttentionItem& item, float* workspace) {
  switch ((p.head_size + 31) / 32) {
    case 1: RunItem<F, 1>(p, item, workspace); break;
    case 2: RunItem<F, 2>(p, item, workspace); break;
    case 3: RunItem<F, 3>(p, item, workspace); break;
    case 4: RunItem<F, 4>(p, item, workspace); break;
    case 5: RunItem<F, 5>(p, item, workspace); break;
    case 6: RunItem<F, 6>(p, item, workspace); break;
    case 7: RunItem<F, 7>(p, item, workspace); break;
    case 8: RunItem<F, 8>(p, item, workspace); break;
    default: break;  // not accepted (kDecodeMaxHeadSize)
  }
}

}  // namespace

void RunDecodeItemAvx512Bf16(const PagedAttentionParams& p, const AttentionItem& item, float* workspace) {
  switch (p.cache_format) {
    case kernels::KvCacheFormat::kPlain: return RunDecodeItem<Fmt::kBf16>(p, item, workspace);
    case kernels::KvCacheFormat::kFp8E4M3: return RunDecodeItem<Fmt::kFp8>(p, item, workspace);
    case kernels::KvCacheFormat::kInt8: return RunDecodeItem<Fmt::kInt8>(p, item, workspace);
  }
}

}  // namespace xllm_kernel::cpu::attention_detail
