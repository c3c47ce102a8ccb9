// Torch-free CPU kernel of paged attention: a tiled flash-attention loop per (sequence, KV head,
// tile of query rows) over tiles of kTileKeys keys, with every query head of the KV head's group
// in the tile, so that each key and value row is loaded (and widened to float32) once for all of
// them. This translation unit is compiled once per Highway target (foreach_target) and the entry
// points pick the best one at runtime.
//
// Per item: the queries are widened once into Q [heads][M][hp] (M = rows x group heads, hp =
// head_size rounded up to the vector length, zero padded, so that tails need no masks); per key
// tile the rows are gathered through the block table into Kt, Vt [heads][kTileKeys][hp] (float32,
// zero padded), then per KV head S = Q Kt^T, the causal / window mask and the online softmax
// (running maximum m, sum l, unnormalized O rescaled only when m grows), O += P Vt. Decode items
// take every KV head (heads = kv_heads), prefill tiles one. Cache rows outside the item's keys are
// never read; a key whose block id is out of range is neither read nor counted.
#include "csrc/cpu/attention/attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "csrc/cpu/attention/attention_internal.h"
#include "csrc/cpu/attention/attention_prefill_amx.h"
#include "csrc/common/quantization.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "csrc/cpu/attention/attention.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/cache_control.h"
#include "hwy/contrib/math/math-inl.h"

#include "csrc/cpu/common/convert-inl.h"
#include "csrc/cpu/common/math-inl.h"
#include "csrc/cpu/common/stream-inl.h"

HWY_BEFORE_NAMESPACE();
namespace xllm_kernel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace attention_detail;  // NOLINT: this file's shared helpers

using DI32 = hn::RebindToSigned<DF>;

// Widens n elements of a row to float32 at dst and zeroes dst up to hp (a multiple of the
// vector length).
template <typename T>
HWY_INLINE void WidenRow(const T* HWY_RESTRICT src, size_t n, size_t hp, float* HWY_RESTRICT dst) {
  const DF d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::Store(LoadF(src + i), d, dst + i);
  if (i < n) {
    hn::Store(LoadTail(src + i, n - i), d, dst + i);
    i += N;
  }
  for (; i < hp; i += N) hn::Store(hn::Zero(d), d, dst + i);
}

// The four sums of the lanes of a, b, c, e at out[0, 4).
HWY_INLINE void Reduce4(VF a, VF b, VF c, VF e, float* HWY_RESTRICT out) {
  const DF d;
#if HWY_TARGET == HWY_SCALAR
  out[0] = hn::GetLane(a);
  out[1] = hn::GetLane(b);
  out[2] = hn::GetLane(c);
  out[3] = hn::GetLane(e);
#else
  // Per 128-bit block: [a0+a2, b0+b2, a1+a3, b1+b3] and the same for c, e; then the 64-bit
  // halves interleaved give [a, b, c, e] summed over the block.
  const hn::Repartition<uint64_t, DF> d64;
  const VF ab = hn::Add(hn::InterleaveLower(d, a, b), hn::InterleaveUpper(d, a, b));
  const VF ce = hn::Add(hn::InterleaveLower(d, c, e), hn::InterleaveUpper(d, c, e));
  const auto ab64 = hn::BitCast(d64, ab), ce64 = hn::BitCast(d64, ce);
  const VF s = hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, ab64, ce64)),
                       hn::BitCast(d, hn::InterleaveUpper(d64, ab64, ce64)));
  const hn::Full128<float> d4;
#if HWY_TARGET <= HWY_AVX3 && HWY_ARCH_X86
  // Sum the four blocks: [0+1, 0+1, 2+3, 2+3], then the halves.
  const VF s2 = hn::Add(s, hn::SwapAdjacentBlocks(s));
  const VF s4 = hn::Add(s2, hn::ConcatLowerUpper(d, s2, s2));
  hn::StoreU(hn::LowerHalf(d4, hn::LowerHalf(s4)), d4, out);
#elif HWY_TARGET <= HWY_AVX2 && HWY_ARCH_X86
  hn::StoreU(hn::Add(hn::LowerHalf(d4, s), hn::UpperHalf(d4, s)), d4, out);
#else
  const size_t N = hn::Lanes(d);
  if (N == 4) {
    hn::StoreU(s, d, out);
  } else {
    alignas(64) float buf[kMaxLanes];
    hn::Store(s, d, buf);
    auto sum = hn::Load(d4, buf);
    for (size_t b = 4; b < N; b += 4) sum = hn::Add(sum, hn::Load(d4, buf + b));
    hn::StoreU(sum, d4, out);
  }
#endif
#endif
}

// S[m][j] = Q[m] . Kt[j] for m < M, j < nk (a multiple of 4); rows hp floats apart, S rows
// kTileKeys apart.
HWY_INLINE void TileDots(const float* HWY_RESTRICT q, size_t M, const float* HWY_RESTRICT kt, size_t nk,
                         size_t hp, float* HWY_RESTRICT s) {
  const DF d;
  const size_t N = hn::Lanes(d);
  size_t m = 0;
  for (; m + 2 <= M; m += 2) {
    const float* q0 = q + m * hp;
    const float* q1 = q0 + hp;
    for (size_t j = 0; j < nk; j += 4) {
      const float* k0 = kt + j * hp;
      VF a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
      VF b0 = hn::Zero(d), b1 = hn::Zero(d), b2 = hn::Zero(d), b3 = hn::Zero(d);
      for (size_t v = 0; v < hp; v += N) {
        const VF x0 = hn::Load(d, q0 + v), x1 = hn::Load(d, q1 + v);
        const VF y0 = hn::Load(d, k0 + v), y1 = hn::Load(d, k0 + hp + v);
        const VF y2 = hn::Load(d, k0 + 2 * hp + v), y3 = hn::Load(d, k0 + 3 * hp + v);
        a0 = hn::MulAdd(x0, y0, a0);
        a1 = hn::MulAdd(x0, y1, a1);
        a2 = hn::MulAdd(x0, y2, a2);
        a3 = hn::MulAdd(x0, y3, a3);
        b0 = hn::MulAdd(x1, y0, b0);
        b1 = hn::MulAdd(x1, y1, b1);
        b2 = hn::MulAdd(x1, y2, b2);
        b3 = hn::MulAdd(x1, y3, b3);
      }
      Reduce4(a0, a1, a2, a3, s + m * kTileKeys + j);
      Reduce4(b0, b1, b2, b3, s + (m + 1) * kTileKeys + j);
    }
  }
  for (; m < M; ++m) {
    const float* q0 = q + m * hp;
    for (size_t j = 0; j < nk; j += 4) {
      const float* k0 = kt + j * hp;
      VF a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
      for (size_t v = 0; v < hp; v += N) {
        const VF x0 = hn::Load(d, q0 + v);
        a0 = hn::MulAdd(x0, hn::Load(d, k0 + v), a0);
        a1 = hn::MulAdd(x0, hn::Load(d, k0 + hp + v), a1);
        a2 = hn::MulAdd(x0, hn::Load(d, k0 + 2 * hp + v), a2);
        a3 = hn::MulAdd(x0, hn::Load(d, k0 + 3 * hp + v), a3);
      }
      Reduce4(a0, a1, a2, a3, s + m * kTileKeys + j);
    }
  }
}

// O[m] += sum_{j < n} P[m][j] Vt[j] for the rows m with seen[m].
HWY_INLINE void TileValues(const float* HWY_RESTRICT pm, const uint8_t* seen, size_t M, const float* HWY_RESTRICT vt,
                           size_t n, size_t hp, float* HWY_RESTRICT o) {
  const DF d;
  const size_t N = hn::Lanes(d);
  for (size_t m = 0; m < M; ++m) {
    if (!seen[m]) continue;
    // Two rows at once share the value loads where both saw the tile.
    const bool pair = m + 1 < M && seen[m + 1];
    const float* p0 = pm + m * kTileKeys;
    float* o0 = o + m * hp;
    size_t v = 0;
    if (pair) {
      const float* p1 = p0 + kTileKeys;
      float* o1 = o0 + hp;
      for (; v + 4 * N <= hp; v += 4 * N) {
        VF a0 = hn::Load(d, o0 + v), a1 = hn::Load(d, o0 + v + N);
        VF a2 = hn::Load(d, o0 + v + 2 * N), a3 = hn::Load(d, o0 + v + 3 * N);
        VF b0 = hn::Load(d, o1 + v), b1 = hn::Load(d, o1 + v + N);
        VF b2 = hn::Load(d, o1 + v + 2 * N), b3 = hn::Load(d, o1 + v + 3 * N);
        for (size_t j = 0; j < n; ++j) {
          const float* vj = vt + j * hp + v;
          const VF w0 = hn::Set(d, p0[j]), w1 = hn::Set(d, p1[j]);
          const VF y0 = hn::Load(d, vj), y1 = hn::Load(d, vj + N);
          const VF y2 = hn::Load(d, vj + 2 * N), y3 = hn::Load(d, vj + 3 * N);
          a0 = hn::MulAdd(w0, y0, a0);
          a1 = hn::MulAdd(w0, y1, a1);
          a2 = hn::MulAdd(w0, y2, a2);
          a3 = hn::MulAdd(w0, y3, a3);
          b0 = hn::MulAdd(w1, y0, b0);
          b1 = hn::MulAdd(w1, y1, b1);
          b2 = hn::MulAdd(w1, y2, b2);
          b3 = hn::MulAdd(w1, y3, b3);
        }
        hn::Store(a0, d, o0 + v);
        hn::Store(a1, d, o0 + v + N);
        hn::Store(a2, d, o0 + v + 2 * N);
        hn::Store(a3, d, o0 + v + 3 * N);
        hn::Store(b0, d, o1 + v);
        hn::Store(b1, d, o1 + v + N);
        hn::Store(b2, d, o1 + v + 2 * N);
        hn::Store(b3, d, o1 + v + 3 * N);
      }
      for (; v < hp; v += N) {
        VF a0 = hn::Load(d, o0 + v), b0 = hn::Load(d, o1 + v);
        for (size_t j = 0; j < n; ++j) {
          const VF y0 = hn::Load(d, vt + j * hp + v);
          a0 = hn::MulAdd(hn::Set(d, p0[j]), y0, a0);
          b0 = hn::MulAdd(hn::Set(d, p1[j]), y0, b0);
        }
        hn::Store(a0, d, o0 + v);
        hn::Store(b0, d, o1 + v);
      }
      ++m;
      continue;
    }
    for (; v + 4 * N <= hp; v += 4 * N) {
      VF a0 = hn::Load(d, o0 + v), a1 = hn::Load(d, o0 + v + N);
      VF a2 = hn::Load(d, o0 + v + 2 * N), a3 = hn::Load(d, o0 + v + 3 * N);
      for (size_t j = 0; j < n; ++j) {
        const float* vj = vt + j * hp + v;
        const VF w0 = hn::Set(d, p0[j]);
        a0 = hn::MulAdd(w0, hn::Load(d, vj), a0);
        a1 = hn::MulAdd(w0, hn::Load(d, vj + N), a1);
        a2 = hn::MulAdd(w0, hn::Load(d, vj + 2 * N), a2);
        a3 = hn::MulAdd(w0, hn::Load(d, vj + 3 * N), a3);
      }
      hn::Store(a0, d, o0 + v);
      hn::Store(a1, d, o0 + v + N);
      hn::Store(a2, d, o0 + v + 2 * N);
      hn::Store(a3, d, o0 + v + 3 * N);
    }
    for (; v < hp; v += N) {
      VF a0 = hn::Load(d, o0 + v);
      for (size_t j = 0; j < n; ++j) a0 = hn::MulAdd(hn::Set(d, p0[j]), hn::Load(d, vt + j * hp + v), a0);
      hn::Store(a0, d, o0 + v);
    }
  }
}

// A quantized cache's element type (csrc/common/kv_cache.h): float8_e4m3fn bits or int8.
struct Fp8E4M3 {
  uint8_t bits;
};

// Widens n elements of a quantized cache row to float32 at dst, dequantized (x = float(q) * scale,
// as kernels::float_from_float8_e4m3fn(q) * scale and float(q) * scale), and zeroes dst up to hp.
// e4m3 goes through float16: its 7 magnitude bits shifted left by 7 are a float16 of the same
// mantissa whose exponent bias (15) is 8 more than e4m3's (7), subnormals included, so the float16
// value times 2^8 is the e4m3 value exactly; the 2^8 folds into the scale (one rounding either
// way) unless that could overflow or lose bits. The NaN code 0x7F / 0xFF maps to a float16 NaN.
HWY_INLINE void WidenQuantRow(const Fp8E4M3* HWY_RESTRICT src, size_t n, size_t hp, float scale, float* HWY_RESTRICT dst) {
  const DF d;
  const hn::Rebind<uint8_t, DF> d8;
  const hn::Rebind<uint16_t, DF> d16;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const size_t N = hn::Lanes(d);
  const bool fold = scale > 0x1p-100f && scale < 0x1p100f;
  const VF s = hn::Set(d, fold ? scale * 256.0f : scale), two8 = hn::Set(d, fold ? 1.0f : 256.0f);
  const auto* bytes = reinterpret_cast<const uint8_t*>(src);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto b = hn::PromoteTo(d16, hn::LoadU(d8, bytes + i));
    const auto mag = hn::And(b, hn::Set(d16, uint16_t{0x7F}));
    auto h = hn::Or(hn::ShiftLeft<7>(mag), hn::ShiftLeft<8>(hn::And(b, hn::Set(d16, uint16_t{0x80}))));
    h = hn::IfThenElse(hn::Eq(mag, hn::Set(d16, uint16_t{0x7F})), hn::Set(d16, uint16_t{0x7E00}), h);
    const VF x = hn::PromoteTo(d, hn::BitCast(dh, h));
    hn::Store(hn::Mul(hn::Mul(x, two8), s), d, dst + i);
  }
  for (; i < n; ++i) dst[i] = kernels::float_from_float8_e4m3fn(bytes[i]) * scale;
  for (; i < hp; ++i) dst[i] = 0.0f;
}

HWY_INLINE void WidenQuantRow(const int8_t* HWY_RESTRICT src, size_t n, size_t hp, float scale, float* HWY_RESTRICT dst) {
  const DF d;
  const hn::Rebind<int8_t, DF> d8;
  const size_t N = hn::Lanes(d);
  const VF s = hn::Set(d, scale);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::Store(hn::Mul(hn::ConvertTo(d, hn::PromoteTo(DI32(), hn::LoadU(d8, src + i))), s), d, dst + i);
  }
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]) * scale;
  for (; i < hp; ++i) dst[i] = 0.0f;
}

// Walks the keys of one sequence through the block table in order: the addresses of the current
// key's rows (head 0), or null for a key whose block id is out of range (never dereferenced). One
// division at Seek, none per key. The table is read only below `blocks` (the blocks that hold the
// item's keys): Next() after the last key, when that key ends its block, steps past them, and the
// entry there may be past the table's allocation.
template <typename T>
struct KeyWalk {
  const PagedAttentionParams* p;
  const int32_t* table;
  int64_t blocks;  // table entries the walk may read: [0, blocks)
  int64_t block = 0, row = 0;
  const T* k = nullptr;  // the current key's rows (null: bad block id, or past the item's keys)
  const T* v = nullptr;
  // int8 caches: the current key's scales (KV head 0), else null.
  const float* ks = nullptr;
  const float* vs = nullptr;

  HWY_INLINE void Block() {
    if (block >= blocks) {
      k = v = nullptr;
      return;
    }
    const int64_t id = table[block];
    if (id < 0 || id >= p->num_blocks) {
      k = v = nullptr;
    } else {
      k = static_cast<const T*>(p->key_cache) + id * p->key_cache_strides.block + row * p->key_cache_strides.row;
      v = static_cast<const T*>(p->value_cache) + id * p->value_cache_strides.block + row * p->value_cache_strides.row;
      if (p->cache_format == kernels::KvCacheFormat::kInt8) {
        ks = p->key_scale + id * p->key_scale_strides.block + row * p->key_scale_strides.row;
        vs = p->value_scale + id * p->value_scale_strides.block + row * p->value_scale_strides.row;
      }
    }
  }
  HWY_INLINE void Seek(int64_t key) {
    block = key / p->block_size;
    row = key - block * p->block_size;
    Block();
  }
  HWY_INLINE void Next() {
    if (++row == p->block_size) {
      row = 0;
      ++block;
      Block();
    } else if (k != nullptr) {
      k += p->key_cache_strides.row;
      v += p->value_cache_strides.row;
      if (ks != nullptr) {
        ks += p->key_scale_strides.row;
        vs += p->value_scale_strides.row;
      }
    }
  }
};

// Keys ahead of the tile being computed whose rows are touched early: blocks are scattered, so the
// hardware prefetchers cannot know the next block (the table does). Only the first line of each
// key's rows: that starts the page walk and the miss, and the hardware's streamer follows a row's
// remaining lines (every head of a key is adjacent, read in order). Measured on the decode of 16 x
// 4096 keys, 8 KV heads of 128 bf16 (2 threads): 37 ms without, 22 ms with, the same with every
// line prefetched or 16 to 64 keys ahead.
inline constexpr int64_t kPrefetchKeys = 2 * kTileKeys;

// The scratch of one item (float32, vector aligned): queries and unnormalized outputs of every
// query vector, one tile of keys and values of every head, the tile's logits (of one head), the
// rows' running max and sum.
struct ItemScratch {
  float *q, *o, *kt, *vt, *sm, *row_max, *row_sum;
  int32_t* key_ok;
  uint8_t* seen;
};

HWY_INLINE bool MakeScratch(size_t heads, size_t vectors, size_t M, size_t hp, ItemScratch& sc) {
  constexpr size_t kT = static_cast<size_t>(kTileKeys);
  const size_t vpad = static_cast<size_t>(RoundUp(static_cast<int64_t>(vectors), 16));
  const size_t mpad = static_cast<size_t>(RoundUp(static_cast<int64_t>(M), 16));
  float* base = Scratch(2 * vectors * hp + 2 * heads * kT * hp + mpad * kT + 2 * vpad + kT + mpad);
  if (base == nullptr) return false;
  sc.q = base;
  sc.o = sc.q + vectors * hp;
  sc.kt = sc.o + vectors * hp;
  sc.vt = sc.kt + heads * kT * hp;
  sc.sm = sc.vt + heads * kT * hp;
  sc.row_max = sc.sm + mpad * kT;
  sc.row_sum = sc.row_max + vpad;
  sc.key_ok = reinterpret_cast<int32_t*>(sc.row_sum + vpad);
  sc.seen = reinterpret_cast<uint8_t*>(sc.key_ok + kT);
  return true;
}

// The online softmax of one tile for the M query vectors of one KV head: masks (causal, window,
// keys without a block), scale and soft cap, the running maximum and sum (rescaling o where the
// maximum grows), and the tile's probabilities in sm; seen[m] says whether row m saw a key.
HWY_INLINE void TileSoftmax(const PagedAttentionParams& p, int64_t G, int64_t first_pos, int64_t j0, size_t n,
                            size_t M, size_t hp, const int32_t* HWY_RESTRICT key_ok, float* HWY_RESTRICT sm,
                            float* HWY_RESTRICT row_max, float* HWY_RESTRICT row_sum, float* HWY_RESTRICT o,
                            uint8_t* HWY_RESTRICT seen) {
  const DF d;
  const DI32 di;
  const size_t N = hn::Lanes(d);
  constexpr size_t kT = static_cast<size_t>(kTileKeys);
  const VF scale = hn::Set(d, p.scale);
  const bool capped = p.soft_cap > 0.0f;
  const VF cap = hn::Set(d, p.soft_cap), inv_cap = hn::Set(d, capped ? 1.0f / p.soft_cap : 0.0f);
  const VF neg_inf = hn::Set(d, -std::numeric_limits<float>::infinity());
  const auto one = hn::Set(di, 1);
  for (size_t m = 0; m < M; ++m) {
    const int64_t pos = first_pos + static_cast<int64_t>(m) / G, lo = FirstKeyOf(p, pos);
    seen[m] = 0;
    if (j0 > pos || j0 + static_cast<int64_t>(n) <= lo) continue;  // the row sees no key here
    const auto lo_rel = hn::Set(di, static_cast<int32_t>(std::max<int64_t>(lo - j0, -1)));
    const auto pos_rel = hn::Set(di, static_cast<int32_t>(std::min<int64_t>(pos - j0, kTileKeys)));
    float* s = sm + m * kT;
    VF vmax = neg_inf;
    auto poisoned = hn::FirstN(d, 0);  // a NaN or +inf logit among the row's keys
    for (size_t c = 0; c < kT; c += N) {
      const auto rel = hn::Iota(di, static_cast<int32_t>(c));
      const auto ok = hn::And(hn::And(hn::Gt(rel, hn::Sub(lo_rel, one)), hn::Lt(rel, hn::Add(pos_rel, one))),
                              hn::Gt(hn::LoadU(di, key_ok + c), hn::Zero(di)));
      VF x = hn::Mul(hn::Load(d, s + c), scale);
      if (capped) x = hn::Mul(cap, hn::Tanh(d, hn::Mul(x, inv_cap)));
      x = hn::IfThenElse(hn::RebindMask(d, ok), x, neg_inf);
      poisoned = hn::Or(poisoned, hn::Not(hn::Lt(x, hn::Set(d, std::numeric_limits<float>::infinity()))));
      hn::Store(x, d, s + c);
      vmax = hn::Max(vmax, x);
    }
    if (!hn::AllFalse(d, poisoned)) {
      // IEEE: a NaN logit (NaN in the query or a key the row reads) is NaN through the softmax, and
      // one of +inf gives inf - inf there. The row's sum becomes NaN and stays so (its output is
      // acc / sum, and a split's sum is a weight of the merge).
      row_max[m] = std::numeric_limits<float>::infinity();
      row_sum[m] = std::numeric_limits<float>::quiet_NaN();
      seen[m] = 0;
      continue;
    }
    const float tile_max = hn::GetLane(hn::MaxOfLanes(d, vmax));
    if (!(tile_max > -std::numeric_limits<float>::infinity()) || std::isnan(row_sum[m])) continue;
    const float new_max = std::max(row_max[m], tile_max);
    if (new_max != row_max[m] && row_sum[m] > 0.0f) {
      const float alpha = std::exp(row_max[m] - new_max);
      row_sum[m] *= alpha;
      float* om = o + m * hp;
      const VF va = hn::Set(d, alpha);
      for (size_t v = 0; v < hp; v += N) hn::Store(hn::Mul(hn::Load(d, om + v), va), d, om + v);
    }
    row_max[m] = new_max;
    const VF vm = hn::Set(d, new_max), lowest = hn::Set(d, kExpInRangeMin);
    VF vsum = hn::Zero(d);
    for (size_t c = 0; c < kT; c += N) {
      const VF x = hn::Load(d, s + c);
      const VF e = ExpInRange(d, hn::Max(hn::Sub(x, vm), lowest));
      const VF pr = hn::IfThenZeroElse(hn::Eq(x, neg_inf), e);
      hn::Store(pr, d, s + c);
      vsum = hn::Add(vsum, pr);
    }
    row_sum[m] += hn::GetLane(hn::SumOfLanes(d, vsum));
    seen[m] = 1;
  }
}

// Query vector v of an item (heads x rows x group, in that order): its token and query head.
struct VectorIndex {
  int64_t token, head;
};
HWY_INLINE VectorIndex IndexOf(int64_t v, int64_t rows, int64_t G, int64_t q_begin, int64_t kv_head) {
  const int64_t M = rows * G, hi = v / M, m = v - hi * M, r = m / G;
  return {q_begin + r, (kv_head + hi) * G + (m - r * G)};
}

// T: the query's and the output's element type; TC: the caches' (T, or a quantized type whose rows
// are dequantized as they are widened).
template <typename T, typename TC = T>
void RunItem(const PagedAttentionParams& p, const AttentionItem& item, float* HWY_RESTRICT workspace) {
  constexpr bool kQuant = !std::is_same_v<T, TC>;
  const DF d;
  const size_t N = hn::Lanes(d);
  constexpr size_t kT = static_cast<size_t>(kTileKeys);
  SeqSpan span;
  if (!SeqSpanOf(p, item.seq, span)) return;
  const int64_t G = kernels::query_heads_per_kv(p);
  const size_t hs = static_cast<size_t>(p.head_size);
  const size_t hp = static_cast<size_t>(RoundUp(p.head_size, static_cast<int64_t>(N)));
  const int64_t rows = item.query_end - item.query_begin;
  const int64_t heads = item.kv_head_end - item.kv_head;
  const size_t M = static_cast<size_t>(rows * G), vectors = static_cast<size_t>(heads) * M;
  ItemScratch sc;
  if (!MakeScratch(static_cast<size_t>(heads), vectors, M, hp, sc)) return;

  const T* query = static_cast<const T*>(p.query);
  const int64_t q_begin = span.q_begin + item.query_begin;
  for (size_t v = 0; v < vectors; ++v) {
    const VectorIndex at = IndexOf(static_cast<int64_t>(v), rows, G, q_begin, item.kv_head);
    WidenRow(query + at.token * p.query_strides.token + at.head * p.query_strides.head, hs, hp, sc.q + v * hp);
  }
  std::fill(sc.o, sc.o + vectors * hp, 0.0f);
  std::fill(sc.row_max, sc.row_max + vectors, -std::numeric_limits<float>::infinity());
  std::fill(sc.row_sum, sc.row_sum + vectors, 0.0f);

  KeyWalk<TC> walk{&p, p.block_tables + item.seq * p.block_table_stride,
                   (item.key_end + p.block_size - 1) / p.block_size};
  walk.Seek(item.key_begin);
  KeyWalk<TC> ahead = walk;
  const int64_t kh = p.key_cache_strides.head, vh = p.value_cache_strides.head;
  const int64_t first_pos = PositionOf(span, item.query_begin);
  const TC* krow[kT];
  const TC* vrow[kT];
  // Quantized caches: each key's scales (int8: of KV head 0, heads key_scale_strides.head apart;
  // fp8: the per-tensor scale).
  const float* kscale[kT];
  const float* vscale[kT];
  const bool per_row = p.cache_format == kernels::KvCacheFormat::kInt8;
  const int64_t ksh = p.key_scale_strides.head, vsh = p.value_scale_strides.head;

  int64_t prefetched = item.key_begin;  // keys whose rows were prefetched: [key_begin, prefetched)
  for (int64_t j0 = item.key_begin; j0 < item.key_end; j0 += kTileKeys) {
    const size_t n = static_cast<size_t>(std::min(kTileKeys, item.key_end - j0));
    for (const int64_t until = std::min(item.key_end, j0 + kTileKeys + kPrefetchKeys); prefetched < until;
         ++prefetched, ahead.Next()) {
      if (ahead.k == nullptr) continue;
      hwy::Prefetch(ahead.k + item.kv_head * kh);
      hwy::Prefetch(ahead.v + item.kv_head * vh);
    }
    const size_t nk = (n + 3) & ~size_t{3};
    for (size_t j = 0; j < kT; ++j) {
      krow[j] = vrow[j] = nullptr;
      if (j < n) {
        krow[j] = walk.k;
        vrow[j] = walk.v;
        if constexpr (kQuant) {
          kscale[j] = per_row ? walk.ks : p.key_scale;
          vscale[j] = per_row ? walk.vs : p.value_scale;
        }
        walk.Next();
      }
      sc.key_ok[j] = krow[j] != nullptr;
    }
    // Gather and widen the tile's rows of every head in memory order (each key's heads are
    // adjacent in its cache row: one forward stream per page for the hardware prefetchers); a key
    // without a valid block is zeroed (and masked).
    for (size_t j = 0; j < nk; ++j) {
      for (int64_t hi = 0; hi < heads; ++hi) {
        float* kd = sc.kt + (static_cast<size_t>(hi) * kT + j) * hp;
        const int64_t g = item.kv_head + hi;
        if (krow[j] == nullptr) {
          std::fill(kd, kd + hp, 0.0f);
        } else if constexpr (kQuant) {
          WidenQuantRow(krow[j] + g * kh, hs, hp, per_row ? kscale[j][g * ksh] : *kscale[j], kd);
        } else {
          WidenRow(krow[j] + g * kh, hs, hp, kd);
        }
      }
      for (int64_t hi = 0; hi < heads; ++hi) {
        float* vd = sc.vt + (static_cast<size_t>(hi) * kT + j) * hp;
        const int64_t g = item.kv_head + hi;
        if (vrow[j] == nullptr) {
          std::fill(vd, vd + hp, 0.0f);
        } else if constexpr (kQuant) {
          WidenQuantRow(vrow[j] + g * vh, hs, hp, per_row ? vscale[j][g * vsh] : *vscale[j], vd);
        } else {
          WidenRow(vrow[j] + g * vh, hs, hp, vd);
        }
      }
    }
    for (int64_t hi = 0; hi < heads; ++hi) {
      const size_t off = static_cast<size_t>(hi) * M;
      const float* kt = sc.kt + static_cast<size_t>(hi) * kT * hp;
      const float* vt = sc.vt + static_cast<size_t>(hi) * kT * hp;
      TileDots(sc.q + off * hp, M, kt, nk, hp, sc.sm);
      TileSoftmax(p, G, first_pos, j0, n, M, hp, sc.key_ok, sc.sm, sc.row_max + off, sc.row_sum + off,
                  sc.o + off * hp, sc.seen);
      TileValues(sc.sm, sc.seen, M, vt, n, hp, sc.o + off * hp);
    }
  }

  if (item.split < 0) {
    T* out = static_cast<T*>(p.out);
    for (size_t v = 0; v < vectors; ++v) {
      const VectorIndex at = IndexOf(static_cast<int64_t>(v), rows, G, q_begin, item.kv_head);
      T* dst = out + at.token * p.out_strides.token + at.head * p.out_strides.head;
      const VF l = hn::Set(d, sc.row_sum[v]);
      const float* ov = sc.o + v * hp;
      size_t i = 0;
      for (; i + N <= hs; i += N) StoreF(hn::Div(hn::Load(d, ov + i), l), dst + i);
      if (i < hs) StoreTail(hn::Div(hn::Load(d, ov + i), l), dst + i, hs - i);
    }
    return;
  }
  const int64_t V = static_cast<int64_t>(vectors);
  float* state = workspace + item.state + item.split * SplitFloats(V, p.head_size);
  const size_t stride = static_cast<size_t>(StateRowStride(p.head_size));
  float* acc = state + RoundUp(2 * V, kStatePad);
  for (size_t v = 0; v < vectors; ++v) {
    state[v] = sc.row_max[v];
    state[vectors + v] = sc.row_sum[v];
    std::memcpy(acc + v * stride, sc.o + v * hp, hs * sizeof(float));
  }
}

template <typename T>
void RunMerge(const PagedAttentionParams& p, const AttentionMerge& mg, const float* HWY_RESTRICT workspace) {
  const DF d;
  const size_t N = hn::Lanes(d);
  SeqSpan span;
  if (!SeqSpanOf(p, mg.seq, span) || mg.splits < 1) return;
  const int64_t G = kernels::query_heads_per_kv(p);
  const size_t hs = static_cast<size_t>(p.head_size);
  const int64_t rows = mg.query_end - mg.query_begin;
  const int64_t V = (mg.kv_head_end - mg.kv_head) * rows * G;
  const int64_t split_floats = SplitFloats(V, p.head_size);
  const size_t stride = static_cast<size_t>(StateRowStride(p.head_size));
  const float* base = workspace + mg.state;
  const int64_t acc_offset = RoundUp(2 * V, kStatePad);
  const int64_t q_begin = span.q_begin + mg.query_begin;
  T* out = static_cast<T*>(p.out);
  constexpr int64_t kMaxWeights = 256;
  float weights[kMaxWeights];
  const int64_t splits = std::min(mg.splits, kMaxWeights);
  for (int64_t v = 0; v < V; ++v) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < splits; ++k) mx = std::max(mx, base[k * split_floats + v]);
    float total = 0.0f;
    for (int64_t k = 0; k < splits; ++k) {
      const float* st = base + k * split_floats;
      weights[k] = st[v] == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(st[v] - mx);
      total += weights[k] * st[V + v];
    }
    const VectorIndex at = IndexOf(v, rows, G, q_begin, mg.kv_head);
    T* dst = out + at.token * p.out_strides.token + at.head * p.out_strides.head;
    const VF l = hn::Set(d, total);
    for (size_t i = 0; i < hs; i += N) {
      const size_t n = std::min(N, hs - i);
      VF acc = hn::Zero(d);
      for (int64_t k = 0; k < splits; ++k) {
        const float* a = base + k * split_floats + acc_offset + v * static_cast<int64_t>(stride) + i;
        acc = hn::MulAdd(hn::Set(d, weights[k]), n == N ? hn::LoadU(d, a) : LoadTail(a, n), acc);
      }
      if (n == N) {
        StoreF(hn::Div(acc, l), dst + i);
      } else {
        StoreTail(hn::Div(acc, l), dst + i, n);
      }
    }
  }
}

template <typename T>
void RunItemOfFormat(const PagedAttentionParams& p, const AttentionItem& item, float* ws) {
  switch (p.cache_format) {
    case kernels::KvCacheFormat::kPlain: return RunItem<T>(p, item, ws);
    case kernels::KvCacheFormat::kFp8E4M3: return RunItem<T, Fp8E4M3>(p, item, ws);
    case kernels::KvCacheFormat::kInt8: return RunItem<T, int8_t>(p, item, ws);
  }
}

void RunItems(const PagedAttentionParams& p, const AttentionItem* items, int64_t count, void* workspace) {
  float* ws = static_cast<float*>(workspace);
  for (int64_t i = 0; i < count; ++i) {
    switch (p.dtype) {
      case DType::kFloat32: RunItemOfFormat<float>(p, items[i], ws); break;
      case DType::kBFloat16: RunItemOfFormat<hwy::bfloat16_t>(p, items[i], ws); break;
      case DType::kFloat16: RunItemOfFormat<hwy::float16_t>(p, items[i], ws); break;
    }
  }
}

void RunMerges(const PagedAttentionParams& p, const AttentionMerge* merges, int64_t count, const void* workspace) {
  const float* ws = static_cast<const float*>(workspace);
  for (int64_t i = 0; i < count; ++i) {
    switch (p.dtype) {
      case DType::kFloat32: RunMerge<float>(p, merges[i], ws); break;
      case DType::kBFloat16: RunMerge<hwy::bfloat16_t>(p, merges[i], ws); break;
      case DType::kFloat16: RunMerge<hwy::float16_t>(p, merges[i], ws); break;
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace xllm_kernel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace xllm_kernel::cpu {

HWY_EXPORT(RunItems);
HWY_EXPORT(RunMerges);

namespace {

using namespace attention_detail;  // NOLINT: this file's shared helpers

// Defence only: the bridge validates shapes and values before calling.
const char* InvalidParams(const PagedAttentionParams& p) {
  if (!kernels::valid_dtype(p.dtype)) return "paged_attention: unknown dtype";
  if (!kernels::valid_kv_cache_format(p.cache_format)) return "paged_attention: unknown cache format";
  if (p.cache_format != kernels::KvCacheFormat::kPlain && (p.key_scale == nullptr || p.value_scale == nullptr)) {
    return "paged_attention: null scale of a quantized cache";
  }
  if (p.num_seqs < 0 || p.query_tokens < 0 || p.num_blocks < 0 || p.max_blocks_per_seq < 0) {
    return "paged_attention: negative sizes";
  }
  if (p.q_heads < 1 || p.kv_heads < 1 || p.q_heads % p.kv_heads != 0) {
    return "paged_attention: q_heads must be a positive multiple of kv_heads";
  }
  if (p.head_size < 1 || p.head_size > 512 || p.block_size < 1) {
    return "paged_attention: head_size must be in [1, 512] and block_size >= 1";
  }
  if (p.num_seqs > 0 && (p.query_start_loc == nullptr || p.seq_lens == nullptr || p.block_tables == nullptr)) {
    return "paged_attention: null query_start_loc, seq_lens or block_tables";
  }
  return nullptr;
}

// Whether the block ids of keys [key_begin, key_end) of sequence s are all valid.
bool BlocksValid(const PagedAttentionParams& p, int64_t s, int64_t key_begin, int64_t key_end) {
  if (key_begin >= key_end) return true;
  const int32_t* table = p.block_tables + s * p.block_table_stride;
  for (int64_t b = key_begin / p.block_size; b <= (key_end - 1) / p.block_size; ++b) {
    if (table[b] < 0 || table[b] >= p.num_blocks) return false;
  }
  return true;
}

// Keys of a split are at least this many (a split costs its merge a state of the rows).
constexpr int64_t kMinSplitKeys = 256;
constexpr int64_t kMaxSplits = 64;
// Items per thread the planner aims at, so that threads taking the next item stay balanced.
constexpr int64_t kItemsPerThread = 4;
// Query vectors (rows x group heads) times head_size per query tile: 32 KiB of float32 queries.
constexpr int64_t kTileQueryFloats = 8192;
// Items with at most this many query vectors per KV head take every KV head.
constexpr int64_t kGroupHeadsVectors = 16;

// Whether the AVX-512 BF16 decode kernel may run items of p: bf16, this CPU has it, and the AVX3
// target (or a better x86 one) is allowed, so that a test restricting the targets gets the
// Highway kernel of each.
bool DecodeKernelAllowed(const PagedAttentionParams& p) {
  return p.dtype == DType::kBFloat16 && (hwy::SupportedTargets() & (HWY_AVX3 | HWY_AVX3_DL)) != 0 &&
         DecodeAvx512Bf16Supported();
}

// The AMX prefill kernel streams an item's keys and values once for all its query rows, and its
// tiles are cheap next to that stream: its items take up to kAmxTileVectors query vectors (rows x
// group heads), fewer where that would leave under 2 kItemsPerThread items per thread. Measured on
// the prefill of 2048 rows, 32 / 8 heads of 128 (one thread): 155 ms with the 16-row tiles, of which
// 82 ms the streaming of the caches alone.
constexpr int64_t kAmxTileVectors = 512;

// The prefill tile kernel's tiles here, where DecodeKernelAllowed (so AVX512_BF16 is present): AMX's,
// else (or where a test takes AMX away: ScopedCpuFeatures) the AVX-512 BF16 ones.
bool PrefillOnAmx() { return PrefillAmxBf16Supported(); }

void RunPrefillItem(const PagedAttentionParams& p, const AttentionItem& item, float* workspace) {
  if (PrefillOnAmx()) {
    RunPrefillItemAmxBf16(p, item, workspace);
  } else {
    RunPrefillItemAvx512Bf16(p, item, workspace);
  }
}

// Whether the prefill tile kernel may run items of p (those it accepts).
bool TilesAllowed(const PagedAttentionParams& p) { return DecodeKernelAllowed(p) && p.head_size <= kAmxMaxHeadSize; }

int64_t AmxTileRows(const PagedAttentionParams& p, int64_t threads, int64_t tile_rows) {
  const int64_t G = kernels::query_heads_per_kv(p);
  int64_t rows = 0;
  for (int64_t s = 0; s < p.num_seqs; ++s) {
    SeqSpan span;
    if (SeqSpanOf(p, s, span) && span.q_len * G > kDecodeMaxVectors) rows += span.q_len;
  }
  const int64_t even = rows * p.kv_heads / (2 * kItemsPerThread * threads);
  return std::max(tile_rows, std::min(kAmxTileVectors / G, even));
}

}  // namespace

PagedAttentionPlan plan_paged_attention(const PagedAttentionParams& p, int64_t threads) {
  const bool batch_invariant = p.batch_invariant;
  PagedAttentionPlan plan;
  if (InvalidParams(p) != nullptr) return plan;
  threads = std::max<int64_t>(threads, 1);
  const int64_t G = kernels::query_heads_per_kv(p);
  int64_t tile_rows = std::max<int64_t>(1, kTileQueryFloats / StateRowStride(p.head_size) / G);
  if (TilesAllowed(p)) {
    // Batch-invariant: the tile kernel's own tile, not one sized from the call's rows and threads.
    tile_rows = batch_invariant ? std::max(tile_rows, kAmxTileVectors / G) : AmxTileRows(p, threads, tile_rows);
  }

  struct Candidate {
    AttentionItem item;
    int64_t cost;
  };
  std::vector<Candidate> candidates;
  int64_t total = 0;
  for (int64_t s = 0; s < p.num_seqs; ++s) {
    SeqSpan span;
    if (!SeqSpanOf(p, s, span) || span.q_len == 0) continue;
    const int64_t first = FirstKeyOf(p, PositionOf(span, 0));
    if (!BlocksValid(p, s, first, span.context)) continue;
    for (int64_t r0 = 0; r0 < span.q_len; r0 += tile_rows) {
      const int64_t r1 = std::min(span.q_len, r0 + tile_rows);
      const int64_t kb = FirstKeyOf(p, PositionOf(span, r0)), ke = PositionOf(span, r1 - 1) + 1;
      // Cost: the rows' dot products plus the rows loaded (memory, as much as a few dots).
      const int64_t cost = (ke - kb) * ((r1 - r0) * G + 8);
      // Few query vectors per KV head (decode): one item for all KV heads, so that a tile reads
      // whole cache rows (every head, adjacent) instead of a slice of each (a page walk each).
      const int64_t group = (r1 - r0) * G <= kGroupHeadsVectors ? p.kv_heads : 1;
      for (int64_t g = 0; g < p.kv_heads; g += group) {
        candidates.push_back({{s, g, g + group, r0, r1, kb, ke, -1, 0}, cost * group});
        total += cost * group;
      }
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.cost > b.cost; });

  // Split the keys of items above the target cost when there are too few items for the threads.
  const int64_t target = threads > 1 ? std::max<int64_t>(1, total / (threads * kItemsPerThread)) : total + 1;
  std::vector<Candidate> pieces;
  int64_t floats = 0;
  for (const Candidate& c : candidates) {
    const int64_t keys = c.item.key_end - c.item.key_begin;
    int64_t splits = 1;
    int64_t chunk = 0;
    if (batch_invariant) {
      // Fixed chunks from the item's own keys, whatever the threads and the other sequences.
      chunk = std::max(kInvariantSplitKeys, RoundUp((keys + kMaxSplits - 1) / kMaxSplits, kTileKeys));
      splits = (keys + chunk - 1) / chunk;
    } else {
      if (c.cost > target) {
        splits = std::min({(c.cost + target - 1) / target, keys / kMinSplitKeys, kMaxSplits});
      }
      if (splits > 1) chunk = RoundUp((keys + splits - 1) / splits, kTileKeys);
    }
    if (splits <= 1) {
      pieces.push_back(c);
      continue;
    }
    const int64_t m = (c.item.kv_head_end - c.item.kv_head) * (c.item.query_end - c.item.query_begin) * G;
    AttentionMerge mg{c.item.seq, c.item.kv_head, c.item.kv_head_end, c.item.query_begin, c.item.query_end, 0, floats};
    for (int64_t kb = c.item.key_begin; kb < c.item.key_end; kb += chunk) {
      AttentionItem it = c.item;
      it.key_begin = kb;
      it.key_end = std::min(c.item.key_end, kb + chunk);
      it.split = mg.splits++;
      it.state = floats;
      pieces.push_back({it, c.cost * (it.key_end - it.key_begin) / keys});
    }
    floats += mg.splits * SplitFloats(m, p.head_size);
    plan.merge.push_back(mg);
  }
  std::stable_sort(pieces.begin(), pieces.end(),
                   [](const Candidate& a, const Candidate& b) { return a.cost > b.cost; });
  plan.work.reserve(pieces.size());
  for (const Candidate& c : pieces) plan.work.push_back(c.item);
  plan.items = static_cast<int64_t>(plan.work.size());
  plan.merges = static_cast<int64_t>(plan.merge.size());
  plan.workspace_bytes = RoundUp(floats * static_cast<int64_t>(sizeof(float)), 64);
  return plan;
}

Status paged_attention(const PagedAttentionParams& p, const PagedAttentionPlan& plan, void* workspace,
                       int64_t begin, int64_t end) {
  if (const char* why = InvalidParams(p)) return Status::invalid(why);
  if (begin < 0 || begin > end || end > plan.items || plan.items != static_cast<int64_t>(plan.work.size())) {
    return Status::invalid("paged_attention: item range not within [0, plan.items]");
  }
  if (begin == end) return Status::ok();
  if (plan.workspace_bytes > 0 && workspace == nullptr) return Status::invalid("paged_attention: null workspace");
  if (!DecodeKernelAllowed(p)) {
    HWY_DYNAMIC_DISPATCH(RunItems)(p, plan.work.data() + begin, end - begin, workspace);
    return Status::ok();
  }
  for (int64_t i = begin; i < end; ++i) {
    const AttentionItem& item = plan.work[i];
    if (DecodeAvx512Bf16Accepts(p, item)) {
      RunDecodeItemAvx512Bf16(p, item, static_cast<float*>(workspace));
    } else if (PrefillAmxBf16Accepts(p, item)) {
      RunPrefillItem(p, item, static_cast<float*>(workspace));
    } else {
      HWY_DYNAMIC_DISPATCH(RunItems)(p, &item, 1, workspace);
    }
  }
  return Status::ok();
}

AttentionKernel paged_attention_item_kernel(const PagedAttentionParams& p, const AttentionItem& item) {
  if (!DecodeKernelAllowed(p)) return AttentionKernel::kHighway;
  if (DecodeAvx512Bf16Accepts(p, item)) return AttentionKernel::kAvx512Bf16Decode;
  if (PrefillAmxBf16Accepts(p, item)) return PrefillOnAmx() ? AttentionKernel::kAmxBf16Prefill : AttentionKernel::kAvx512Bf16Prefill;
  return AttentionKernel::kHighway;
}

Status paged_attention_merge(const PagedAttentionParams& p, const PagedAttentionPlan& plan, void* workspace,
                             int64_t begin, int64_t end) {
  if (const char* why = InvalidParams(p)) return Status::invalid(why);
  if (begin < 0 || begin > end || end > plan.merges || plan.merges != static_cast<int64_t>(plan.merge.size())) {
    return Status::invalid("paged_attention_merge: merge range not within [0, plan.merges]");
  }
  if (begin == end) return Status::ok();
  if (workspace == nullptr) return Status::invalid("paged_attention_merge: null workspace");
  HWY_DYNAMIC_DISPATCH(RunMerges)(p, plan.merge.data() + begin, end - begin, workspace);
  return Status::ok();
}

}  // namespace xllm_kernel::cpu
#endif  // HWY_ONCE
