// The prefill tile kernel of paged attention (attention_prefill_amx.h), written once over the BF16
// tile operations (csrc/cpu/common/amx_tiles.h): attention_prefill_amx.cpp instantiates it with the
// AMX instructions (AmxTiles), attention_prefill_avx512.cpp with their AVX-512 BF16 form
// (Avx512Bf16Tiles) for CPUs without AMX. A flash-attention loop per KV head of an
// item over blocks of 32 keys, the item's query vectors (rows x group heads, in the Highway
// kernel's order) in tiles of 16:
//   S^T = K Q^T  tdpbf16ps with the key rows as the A operand (16 keys x 32 elements, loaded
//        straight from a bf16 cache block where a tile's 16 keys are in one block, all visible to
//        the item and head_size a multiple of 32; otherwise copied into a zero-padded scratch tile,
//        an int8 or float8_e4m3fn row converted to bf16 exactly on the way, cache_elements_avx512.h)
//        and the queries as the B operand (pairs of elements interleaved: transposed once per
//        item); exact bf16 products, float32 sums. Each row of S^T is one key's logits of 16 query
//        vectors, so the softmax below works down the keys, one query vector a lane. Quantized keys:
//        each row of S^T is multiplied by its key's factor (scale times the conversion's unit), which
//        makes it the dots of the dequantized key.
//   softmax  scale, soft cap, the masks (causal, window, the item's keys, keys without a block) as
//        a per-key lane mask, the running maximum of each lane (rescaling the output rows where it
//        grows), the weights exp(logit - max) rounded to bf16 (the denominator sums the rounded
//        weights, so that the weights of a row still sum to one) and interleaved into key pairs.
//        Quantized values: each weight is multiplied by its value's factor before the rounding,
//        and the denominator sums the plain float32 weights.
//   O += P V  tdpbf16ps with P (16 query vectors x 32 keys, the pairs transposed) as A and the value
//        rows (converted to bf16 where quantized), key pairs interleaved, as B (copied per key
//        block); float32 accumulation in a scratch row per query vector, one rounding at the end.
// Masked keys never reach the arithmetic: their weights are selected as zero (never a product
// with 0) and their value rows are zeros in the copy, so NaN in unused cache rows (or an int8
// row's scale) cannot reach a result; nothing past a row, past a sequence's keys or outside its
// table is read.
//
// Each item loads the tile configuration and releases the tiles at its end. Compiled with
// function-level AVX-512 / AMX targets: the rest of the build keeps its baseline.
// Internal to csrc/cpu/attention.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "csrc/cpu/attention/attention_internal.h"
#include "csrc/cpu/attention/cache_elements_avx512.h"
#include "csrc/cpu/common/amx_tiles.h"
#include "csrc/cpu/common/avx512_math.h"

#define XLLM_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")))
#define XLLM_AMX_LAMBDA __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")))
#define XLLM_AMX_INLINE \
  inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")))

namespace xllm_kernel::cpu::attention_detail::amx_prefill {

inline constexpr int kQ = 16;          // query vectors a tile
inline constexpr int kBlockKeys = 32;  // keys a block: two tiles of 16 (the K depth of P.V)

// Mask of lanes [0, n) of 16 (n clamped; Lanes32: cache_elements_avx512.h).
inline __mmask16 Lanes16(int64_t n) {
  return n <= 0 ? 0 : n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

// 2^x for x <= 0 (NaN stays NaN; below -126 a tiny positive number, callers mask what must be 0):
// x = n + f, |f| <= 1/2, 2^f = e^(f ln2) by its Taylor polynomial of degree 6 (truncation 1.2e-7
// relative), scaled by 2^n.
XLLM_AMX_INLINE __m512 Exp2(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-126.0f), x);  // the second operand where either is NaN
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 e = _mm512_set1_ps(1.5403530393381606e-4f);                 // ln2^6 / 720
  e = _mm512_fmadd_ps(e, f, _mm512_set1_ps(1.3333558146428443e-3f));  // ln2^5 / 120
  e = _mm512_fmadd_ps(e, f, _mm512_set1_ps(9.6181291076284772e-3f));  // ln2^4 / 24
  e = _mm512_fmadd_ps(e, f, _mm512_set1_ps(5.5504108664821580e-2f));  // ln2^3 / 6
  e = _mm512_fmadd_ps(e, f, _mm512_set1_ps(2.4022650695910071e-1f));  // ln2^2 / 2
  e = _mm512_fmadd_ps(e, f, _mm512_set1_ps(6.9314718055994531e-1f));  // ln2
  e = _mm512_fmadd_ps(e, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(e, n);
}

// Transposes the 16 x 16 matrix of 32-bit elements whose row i is r[i].
XLLM_AMX_INLINE void Transpose16(__m512i* r) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // u[4j + k], 128-bit lane L: column 4L + k of rows 4j .. 4j + 3.
  for (int j = 0; j < 4; ++j) {
    u[4 * j + 0] = _mm512_unpacklo_epi64(t[4 * j], t[4 * j + 2]);
    u[4 * j + 1] = _mm512_unpackhi_epi64(t[4 * j], t[4 * j + 2]);
    u[4 * j + 2] = _mm512_unpacklo_epi64(t[4 * j + 1], t[4 * j + 3]);
    u[4 * j + 3] = _mm512_unpackhi_epi64(t[4 * j + 1], t[4 * j + 3]);
  }
  // Row 4L + k of the result: lane L of u[k], u[4 + k], u[8 + k], u[12 + k].
  for (int k = 0; k < 4; ++k) {
    const __m512i a = _mm512_shuffle_i32x4(u[k], u[4 + k], 0x44), b = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0x44);
    const __m512i c = _mm512_shuffle_i32x4(u[k], u[4 + k], 0xEE), d = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0xEE);
    r[k] = _mm512_shuffle_i32x4(a, b, 0x88);
    r[4 + k] = _mm512_shuffle_i32x4(a, b, 0xDD);
    r[8 + k] = _mm512_shuffle_i32x4(c, d, 0x88);
    r[12 + k] = _mm512_shuffle_i32x4(c, d, 0xDD);
  }
}

// The rows of keys [j0, j0 + kBlockKeys) of one sequence (head 0 of the cache rows, bytes), null
// for a key outside [key_begin, key_end) or whose block id is out of range (never dereferenced).
// Quantized caches: each key's factors of KV head kvh (the scales times kUnit), 0 where it has no
// rows (no scale read).
struct BlockRows {
  const uint8_t* k[kBlockKeys];
  const uint8_t* v[kBlockKeys];
  float kf[kBlockKeys];
  float vf[kBlockKeys];
  uint32_t ok = 0;  // bit j: key j0 + j has rows
};

inline void FillRows(const PagedAttentionParams& p, Fmt fmt, int64_t kvh, const int32_t* table, int64_t j0,
                     int64_t key_begin, int64_t key_end, BlockRows& br) {
  const int64_t es = fmt == Fmt::kBf16 ? 2 : 1;
  const uint8_t* kc = static_cast<const uint8_t*>(p.key_cache);
  const uint8_t* vc = static_cast<const uint8_t*>(p.value_cache);
  // fp8: one scale per cache; int8: one per (row, KV head).
  const float k_tensor = fmt == Fmt::kFp8 ? kUnit<Fmt::kFp8> * *p.key_scale : 0.0f;
  const float v_tensor = fmt == Fmt::kFp8 ? kUnit<Fmt::kFp8> * *p.value_scale : 0.0f;
  int64_t b = j0 / p.block_size, r = j0 - b * p.block_size;
  br.ok = 0;
  for (int j = 0; j < kBlockKeys; ++j) {
    const int64_t key = j0 + j;
    br.k[j] = br.v[j] = nullptr;
    br.kf[j] = br.vf[j] = 0.0f;
    if (key >= key_begin && key < key_end) {
      const int64_t id = table[b];
      if (id >= 0 && id < p.num_blocks) {
        br.k[j] = kc + (id * p.key_cache_strides.block + r * p.key_cache_strides.row) * es;
        br.v[j] = vc + (id * p.value_cache_strides.block + r * p.value_cache_strides.row) * es;
        br.ok |= 1u << j;
        if (fmt == Fmt::kFp8) {
          br.kf[j] = k_tensor;
          br.vf[j] = v_tensor;
        } else if (fmt == Fmt::kInt8) {
          br.kf[j] = p.key_scale[id * p.key_scale_strides.block + r * p.key_scale_strides.row + kvh * p.key_scale_strides.head];
          br.vf[j] = p.value_scale[id * p.value_scale_strides.block + r * p.value_scale_strides.row +
                                   kvh * p.value_scale_strides.head];
        }
      }
    }
    if (++r == p.block_size) {
      r = 0;
      ++b;
    }
  }
}

// The per-item scratch (64-byte aligned pieces).
struct AmxScratch {
  uint32_t* qt;    // [QT][NC][16 element pairs][16 query vectors]: the B operands of Q.K
  float* o;        // [Mp][hsp]: unnormalized outputs
  float* row_max;  // [Mp]
  float* row_sum;  // [Mp]
  int32_t* pos;    // [Mp]: position of each query vector (-1: padding)
  int32_t* lo;     // [Mp]: its first visible key
  uint16_t* kg;    // [kBlockKeys][hsp]: key rows copied (bf16) where a tile cannot load from the cache
  uint32_t* vb;    // [2 NC][16 key pairs][16 elements]: the B operands of P.V
  float* s;        // [kBlockKeys][16]: S^T of one query tile
  uint32_t* pm;    // [16 query vectors][16 key pairs]: the A operand of P.V
  int64_t* tile_lo;  // [QT]: the first key a query tile sees, [QT] the last, [QT] the first key all
  int64_t* tile_hi;  // its vectors see, [QT] the last
};

template <class Tiles, int NC>
XLLM_AMX void RunHead(Tiles& tiles, const PagedAttentionParams& p, const AttentionItem& item, const SeqSpan& span,
                    int hi, const AmxScratch& sc, float* workspace) {
  constexpr int hsp = NC * 32, DT = 2 * NC;
  const int64_t G = kernels::query_heads_per_kv(p), hs = p.head_size;
  const int rows = static_cast<int>(item.query_end - item.query_begin);
  const int heads = static_cast<int>(item.kv_head_end - item.kv_head);
  const int M = rows * static_cast<int>(G), QT = (M + kQ - 1) / kQ, Mp = QT * kQ;
  const int64_t kvh = item.kv_head + hi;
  const int64_t q_begin = span.q_begin + item.query_begin;
  const int64_t first_pos = PositionOf(span, item.query_begin);
  const uint16_t* query = static_cast<const uint16_t*>(p.query);

  // Queries, transposed into pairs: qt[tile][c][i][m] = elements 32c + 2i, 2i + 1 of vector m.
  for (int t = 0; t < QT; ++t) {
    for (int c = 0; c < NC; ++c) {
      __m512i x[16];
      for (int i = 0; i < kQ; ++i) {
        const int m = t * kQ + i;
        x[i] = _mm512_setzero_si512();
        if (m < M) {
          const uint16_t* src = query + (q_begin + m / G) * p.query_strides.token +
                                (kvh * G + m % G) * p.query_strides.head + 32 * c;
          x[i] = _mm512_maskz_loadu_epi16(Lanes32(hs - 32 * c), src);
        }
      }
      Transpose16(x);
      uint32_t* dst = sc.qt + (static_cast<size_t>(t) * NC + c) * 256;
      for (int i = 0; i < 16; ++i) _mm512_store_si512(dst + 16 * i, x[i]);
    }
  }
  std::memset(sc.o, 0, sizeof(float) * Mp * hsp);
  std::fill(sc.row_max, sc.row_max + Mp, -std::numeric_limits<float>::infinity());
  std::fill(sc.row_sum, sc.row_sum + Mp, 0.0f);
  // Each tile's visible keys: [tile_lo, tile_hi].
  int64_t* tile_lo = sc.tile_lo;
  int64_t* tile_hi = sc.tile_hi;
  int64_t* tile_maxlo = sc.tile_hi + QT;
  int64_t* tile_minpos = tile_maxlo + QT;
  for (int t = 0; t < QT; ++t) {
    tile_lo[t] = tile_minpos[t] = std::numeric_limits<int64_t>::max();
    tile_hi[t] = tile_maxlo[t] = -1;
  }
  // A padding vector (past M) is never in a block seen in full: its position is -1.
  if (M < Mp) tile_minpos[QT - 1] = -1;
  for (int m = 0; m < Mp; ++m) {
    if (m < M) {
      const int64_t pos = first_pos + m / G, lo = FirstKeyOf(p, pos);
      sc.pos[m] = static_cast<int32_t>(pos);
      sc.lo[m] = static_cast<int32_t>(lo);
      tile_lo[m / kQ] = std::min(tile_lo[m / kQ], lo);
      tile_hi[m / kQ] = std::max(tile_hi[m / kQ], pos);
      tile_maxlo[m / kQ] = std::max(tile_maxlo[m / kQ], lo);
      tile_minpos[m / kQ] = std::min(tile_minpos[m / kQ], pos);
    } else {
      sc.pos[m] = -1;
      sc.lo[m] = 0;
    }
  }

  const int32_t* table = p.block_tables + item.seq * p.block_table_stride;
  const Fmt fmt = FmtOf(p.cache_format);
  const bool quant = fmt != Fmt::kBf16;
  const int64_t es = quant ? 1 : 2;  // bytes an element
  const int64_t kh = kvh * p.key_cache_strides.head * es, vh = kvh * p.value_cache_strides.head * es;
  // Logits in base 2 units: logit2 = log2(e) * (capped ? cap tanh(scale dot / cap) : scale dot);
  // tanh's e^x with the degree-6 polynomial (avx512_math.h: truncation 3e-7 relative).
  constexpr float kLog2e = 1.44269504088896341f;
  const bool capped = p.soft_cap > 0.0f, increasing = p.scale > 0.0f;
  const __m512 scale2 = _mm512_set1_ps(p.scale * kLog2e), cap2 = _mm512_set1_ps(p.soft_cap * kLog2e);
  const __m512 scale_cap = _mm512_set1_ps(capped ? p.scale / p.soft_cap : 0.0f);
  auto Logit2 = [&](__m512 x) XLLM_AMX_LAMBDA {
    return capped ? _mm512_mul_ps(cap2, avx512::Tanh<6>(_mm512_mul_ps(x, scale_cap))) : _mm512_mul_ps(x, scale2);
  };
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 one = _mm512_set1_ps(1.0f);
  const float ln2 = 0.693147180559945309f;
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  // Word q of the weights' bf16 pair vector: [a_0 b_0 a_1 b_1 ...] from [a_0 .. a_15 b_0 .. b_15].
  alignas(64) static constexpr uint16_t kPairs[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  // The value rows' pairs: elements 0..15 / 16..31 of rows a (indices < 32) and b (>= 32).
  alignas(64) static constexpr uint16_t kLowPairs[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                          8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr uint16_t kHighPairs[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21,
                                                           53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58,
                                                           27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i pairs = _mm512_load_si512(kPairs), low_pairs = _mm512_load_si512(kLowPairs);
  const __m512i high_pairs = _mm512_load_si512(kHighPairs);
  // bf16 key tiles load straight from the cache where possible; quantized ones are converted.
  const bool tiles_in_blocks = !quant && p.block_size % 16 == 0 && hs % 32 == 0;
  const int64_t k_stride = p.key_cache_strides.row * 2;

  BlockRows cur, next;
  int64_t j0 = item.key_begin / 16 * 16;
  FillRows(p, fmt, kvh, table, j0, item.key_begin, item.key_end, cur);
  for (; j0 < item.key_end; j0 += kBlockKeys) {
    // The next block's rows, prefetched (blocks are scattered: the table knows the next ones).
    FillRows(p, fmt, kvh, table, j0 + kBlockKeys, item.key_begin, item.key_end, next);
    for (int j = 0; j < kBlockKeys; ++j) {
      if (next.k[j] == nullptr) continue;
      for (int64_t b = 0; b < hs * es; b += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(next.k[j] + kh) + b, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(next.v[j] + vh) + b, _MM_HINT_T0);
      }
    }
    const uint32_t ok = cur.ok;
    bool active = false;
    for (int t = 0; t < QT; ++t) active |= tile_lo[t] < j0 + kBlockKeys && tile_hi[t] >= j0;
    if (ok == 0 || !active) {
      cur = next;
      continue;
    }
    // Key tiles: straight from the cache block, or copied (converted to bf16) and zero padded.
    const uint16_t* ktile[2] = {nullptr, nullptr};
    int64_t kstride[2] = {0, 0};
    for (int u = 0; u < 2; ++u) {
      const uint32_t bits = (ok >> (16 * u)) & 0xFFFF;
      if (bits == 0) continue;
      if (tiles_in_blocks && bits == 0xFFFF) {
        ktile[u] = reinterpret_cast<const uint16_t*>(cur.k[16 * u] + kh);
        kstride[u] = k_stride;
        continue;
      }
      uint16_t* dst = sc.kg + static_cast<size_t>(16 * u) * hsp;
      for (int i = 0; i < 16; ++i) {
        const uint8_t* src = cur.k[16 * u + i];
        for (int c = 0; c < NC; ++c) {
          const __m512i x =
              src != nullptr ? Load32(fmt, src + kh + 32 * c * es, Lanes32(hs - 32 * c)) : _mm512_setzero_si512();
          _mm512_store_si512(dst + i * hsp + 32 * c, x);
        }
      }
      ktile[u] = dst;
      kstride[u] = hsp * 2;
    }
    // Value rows, key pairs interleaved: vb[t][i][e] = elements 16t + e of keys 2i, 2i + 1.
    for (int i = 0; i < 16; ++i) {
      const uint8_t *a = cur.v[2 * i], *b = cur.v[2 * i + 1];
      for (int c = 0; c < NC; ++c) {
        const __mmask32 mk = Lanes32(hs - 32 * c);
        const __m512i xa = a != nullptr ? Load32(fmt, a + vh + 32 * c * es, mk) : _mm512_setzero_si512();
        const __m512i xb = b != nullptr ? Load32(fmt, b + vh + 32 * c * es, mk) : _mm512_setzero_si512();
        _mm512_store_si512(sc.vb + (2 * c * 16 + i) * 16, _mm512_permutex2var_epi16(xa, low_pairs, xb));
        _mm512_store_si512(sc.vb + ((2 * c + 1) * 16 + i) * 16, _mm512_permutex2var_epi16(xa, high_pairs, xb));
      }
    }

    for (int t = 0; t < QT; ++t) {
      if (!(tile_lo[t] < j0 + kBlockKeys && tile_hi[t] >= j0)) continue;
      // S^T = K Q^T: tile 0 keys 0..15, tile 1 keys 16..31.
      tiles.template Zero<0>();
      tiles.template Zero<1>();
      const uint32_t* qb = sc.qt + static_cast<size_t>(t) * NC * 256;
      for (int c = 0; c < NC; ++c) {
        tiles.template Load<4>(qb + c * 256, 64);
        if (ktile[0] != nullptr) {
          tiles.template Load<2>(ktile[0] + 32 * c, kstride[0]);
          tiles.template Dot<0, 2, 4>();
        }
        if (ktile[1] != nullptr) {
          tiles.template Load<3>(ktile[1] + 32 * c, kstride[1]);
          tiles.template Dot<1, 3, 4>();
        }
      }
      tiles.template Store<0>(sc.s, 64);
      tiles.template Store<1>(sc.s + 256, 64);
      // Quantized keys: each key's dots times its factor (the dots of its dequantized row).
      if (quant) {
        for (int j = 0; j < kBlockKeys; ++j) {
          if ((ok >> j) & 1) _mm512_store_ps(sc.s + 16 * j, _mm512_mul_ps(_mm512_load_ps(sc.s + 16 * j), _mm512_set1_ps(cur.kf[j])));
        }
      }

      // The masks per key (all set where every key of the block is visible to every vector of the
      // tile), then the tile's maximum logit per query vector in base 2 units (logit * log2(e)).
      // With scale > 0 the logit is increasing in the dot, so the maximum dot gives it; otherwise
      // every logit is computed here and kept in s.
      const bool full = ok == ~uint32_t{0} && j0 >= tile_maxlo[t] && j0 + kBlockKeys - 1 <= tile_minpos[t];
      __mmask16 valid[kBlockKeys];
      __m512 tmax = neg_inf;
      if (full) {
        for (int j = 0; j < kBlockKeys; ++j) {
          valid[j] = 0xFFFF;
          tmax = _mm512_max_ps(tmax, _mm512_load_ps(sc.s + 16 * j));
        }
      } else {
        const __m512i posv = _mm512_load_si512(sc.pos + t * kQ), lov = _mm512_load_si512(sc.lo + t * kQ);
        for (int j = 0; j < kBlockKeys; ++j) {
          valid[j] = 0;
          if (!((ok >> j) & 1)) continue;
          const __m512i key = _mm512_set1_epi32(static_cast<int32_t>(j0 + j));
          valid[j] = _mm512_cmple_epi32_mask(lov, key) & _mm512_cmpge_epi32_mask(posv, key);
        }
      }
      if (!full || !increasing) {
        for (int j = 0; j < kBlockKeys; ++j) {
          if (valid[j] == 0) continue;
          __m512 x = _mm512_load_ps(sc.s + 16 * j);
          if (!increasing) {
            x = Logit2(x);
            _mm512_store_ps(sc.s + 16 * j, x);
          }
          tmax = _mm512_mask_max_ps(tmax, valid[j], tmax, x);
        }
      }
      // NaN dots stay NaN; -inf (no key) stays -inf.
      if (increasing) tmax = _mm512_mask_mov_ps(tmax, _mm512_cmp_ps_mask(tmax, neg_inf, _CMP_NEQ_UQ), Logit2(tmax));
      float* rm = sc.row_max + t * kQ;
      float* rs = sc.row_sum + t * kQ;
      const __m512 old_max = _mm512_load_ps(rm);
      const __m512 new_max = _mm512_max_ps(old_max, tmax);  // NaN where the tile's maximum is (NaN logits)
      // Rows that saw nothing yet subtract 0 (their weights are masked to 0 anyway).
      const __m512 use_max = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(new_max, neg_inf, _CMP_NEQ_UQ), new_max);
      const __mmask16 had = _mm512_cmp_ps_mask(old_max, neg_inf, _CMP_NEQ_UQ);
      const __m512 alpha = _mm512_maskz_mov_ps(had, Exp2(_mm512_sub_ps(old_max, use_max)));
      _mm512_store_ps(rm, new_max);

      // Weights 2^(logit2 - max) rounded to bf16, in key pairs: w[i] word 2m / 2m + 1 = keys 2i /
      // 2i + 1 of vector m. Quantized values: each weight times its value's factor before the
      // rounding (P V of the dequantized rows), the denominator the sum of the plain weights.
      auto weight = [&](int j) XLLM_AMX_LAMBDA {
        const __m512 x = _mm512_load_ps(sc.s + 16 * j);
        const __m512 y = increasing ? (capped ? _mm512_sub_ps(Logit2(x), use_max) : _mm512_fmsub_ps(x, scale2, use_max))
                                    : _mm512_sub_ps(x, use_max);
        return _mm512_maskz_mov_ps(valid[j], Exp2(y));
      };
      __m512i w[16];
      __m512 sum = _mm512_setzero_ps();
      for (int i = 0; i < 16; ++i) {
        if ((valid[2 * i] | valid[2 * i + 1]) == 0) {
          w[i] = _mm512_setzero_si512();
          continue;
        }
        const __m512 pa = weight(2 * i), pb = weight(2 * i + 1);
        if (quant) {
          sum = _mm512_add_ps(sum, _mm512_add_ps(pa, pb));
          const __m512 fa = _mm512_maskz_mul_ps(valid[2 * i], pa, _mm512_set1_ps(cur.vf[2 * i]));
          const __m512 fb = _mm512_maskz_mul_ps(valid[2 * i + 1], pb, _mm512_set1_ps(cur.vf[2 * i + 1]));
          w[i] = _mm512_permutexvar_epi16(pairs, (__m512i)_mm512_cvtne2ps_pbh(fb, fa));
          continue;
        }
        w[i] = _mm512_permutexvar_epi16(pairs, (__m512i)_mm512_cvtne2ps_pbh(pb, pa));
        sum = _mm512_add_ps(sum, _mm512_castsi512_ps(_mm512_slli_epi32(w[i], 16)));
        sum = _mm512_add_ps(sum, _mm512_castsi512_ps(_mm512_and_si512(w[i], high)));
      }
      _mm512_store_ps(rs, _mm512_fmadd_ps(_mm512_load_ps(rs), alpha, sum));
      Transpose16(w);
      for (int m = 0; m < 16; ++m) _mm512_store_si512(sc.pm + 16 * m, w[m]);

      // Rescale the outputs whose maximum grew.
      float* o = sc.o + static_cast<size_t>(t) * kQ * hsp;
      const __mmask16 grew = had & _mm512_cmp_ps_mask(alpha, one, _CMP_NEQ_UQ);
      if (grew != 0) {
        alignas(64) float a[16];
        _mm512_store_ps(a, alpha);
        for (int m = 0; m < 16; ++m) {
          if (!((grew >> m) & 1)) continue;
          const __m512 am = _mm512_set1_ps(a[m]);
          float* om = o + m * hsp;
          for (int e = 0; e < hsp; e += 16) _mm512_store_ps(om + e, _mm512_mul_ps(_mm512_load_ps(om + e), am));
        }
      }
      // O += P V, two column tiles at a time.
      tiles.template Load<5>(sc.pm, 64);
      for (int d = 0; d < DT; d += 2) {
        tiles.template Load<6>(o + 16 * d, hsp * 4);
        tiles.template Load<7>(sc.vb + d * 256, 64);
        tiles.template Load<2>(o + 16 * (d + 1), hsp * 4);
        tiles.template Load<3>(sc.vb + (d + 1) * 256, 64);
        tiles.template Dot<6, 5, 7>();
        tiles.template Dot<2, 5, 3>();
        tiles.template Store<6>(o + 16 * d, hsp * 4);
        tiles.template Store<2>(o + 16 * (d + 1), hsp * 4);
      }
    }
    cur = next;
  }

  const int V = heads * M;
  if (item.split < 0) {
    uint16_t* out = static_cast<uint16_t*>(p.out);
    for (int m = 0; m < M; ++m) {
      uint16_t* dst = out + (q_begin + m / G) * p.out_strides.token + (kvh * G + m % G) * p.out_strides.head;
      const __m512 l = _mm512_set1_ps(sc.row_sum[m]);
      const float* om = sc.o + static_cast<size_t>(m) * hsp;
      for (int e = 0; e < hs; e += 16) {
        const __m256bh b = _mm512_cvtneps_pbh(_mm512_div_ps(_mm512_load_ps(om + e), l));
        _mm256_mask_storeu_epi16(dst + e, Lanes16(hs - e), (__m256i)b);
      }
    }
    return;
  }
  float* state = workspace + item.state + item.split * SplitFloats(V, hs);
  const int64_t stride = StateRowStride(hs);
  float* acc = state + RoundUp(2 * static_cast<int64_t>(V), kStatePad);
  for (int m = 0; m < M; ++m) {
    const int v = hi * M + m;
    state[v] = sc.row_max[m] * ln2;  // natural units (-inf stays -inf)
    state[V + v] = sc.row_sum[m];
    const float* om = sc.o + static_cast<size_t>(m) * hsp;
    for (int e = 0; e < hs; e += 16) {
      _mm512_mask_storeu_ps(acc + v * stride + e, Lanes16(hs - e), _mm512_load_ps(om + e));
    }
  }
}

template <class Tiles, int NC>
XLLM_AMX void RunItem(const PagedAttentionParams& p, const AttentionItem& item, float* workspace) {
  SeqSpan span;
  if (!SeqSpanOf(p, item.seq, span)) return;
  constexpr int hsp = NC * 32, DT = 2 * NC;
  const int64_t G = kernels::query_heads_per_kv(p);
  const int M = static_cast<int>((item.query_end - item.query_begin) * G);
  const int QT = (M + kQ - 1) / kQ, Mp = QT * kQ;
  const size_t floats = static_cast<size_t>(QT) * NC * 256 + static_cast<size_t>(Mp) * hsp + 4 * Mp +
                        kBlockKeys * hsp / 2 + DT * 256 + kBlockKeys * 16 + 256 + 8 * static_cast<size_t>(QT);
  float* base = Scratch(floats);
  if (base == nullptr) return;
  AmxScratch sc;
  sc.qt = reinterpret_cast<uint32_t*>(base);
  sc.o = base + static_cast<size_t>(QT) * NC * 256;
  sc.row_max = sc.o + static_cast<size_t>(Mp) * hsp;
  sc.row_sum = sc.row_max + Mp;
  sc.pos = reinterpret_cast<int32_t*>(sc.row_sum + Mp);
  sc.lo = sc.pos + Mp;
  sc.kg = reinterpret_cast<uint16_t*>(sc.lo + Mp);
  sc.vb = reinterpret_cast<uint32_t*>(sc.kg + kBlockKeys * hsp);
  sc.s = reinterpret_cast<float*>(sc.vb + DT * 256);
  sc.pm = reinterpret_cast<uint32_t*>(sc.s + kBlockKeys * 16);
  sc.tile_lo = reinterpret_cast<int64_t*>(sc.pm + 256);
  sc.tile_hi = sc.tile_lo + QT;
  Tiles tiles;
  tiles.Configure();
  for (int hi = 0; hi < static_cast<int>(item.kv_head_end - item.kv_head); ++hi) {
    RunHead<Tiles, NC>(tiles, p, item, span, hi, sc, workspace);
  }
  tiles.Release();
}


// Runs one item accepted by PrefillAmxBf16Accepts on the tiles of `Tiles`.
template <class Tiles>
void RunPrefillItem(const PagedAttentionParams& p, const AttentionItem& item, float* workspace) {
  switch ((p.head_size + 31) / 32) {
    case 1: RunItem<Tiles, 1>(p, item, workspace); break;
    case 2: RunItem<Tiles, 2>(p, item, workspace); break;
    case 3: RunItem<Tiles, 3>(p, item, workspace); break;
    case 4: RunItem<Tiles, 4>(p, item, workspace); break;
    case 5: RunItem<Tiles, 5>(p, item, workspace); break;
    case 6: RunItem<Tiles, 6>(p, item, workspace); break;
    case 7: RunItem<Tiles, 7>(p, item, workspace); break;
    case 8: RunItem<Tiles, 8>(p, item, workspace); break;
    default: break;  // not accepted (kAmxMaxHeadSize)
  }
}

}  // namespace xllm_kernel::cpu::attention_detail::amx_prefill
