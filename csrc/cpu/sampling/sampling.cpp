// Torch-free CPU kernel of sample (csrc/common/sampling.h). This translation unit is compiled once
// per Highway target (foreach_target) and the entry point picks the best one at runtime.
//
// Per row (T = temperature, K = the top-k count, p = top_p, m = min_p):
//   scan      one pass from memory: the maximum of every 256-token block (NaN noted and cleaned
//             only where a block holds one). l_max is the largest block maximum.
//   greedy    T == 0: the first block whose maximum is l_max, then its first token equal to it.
//   candidates (K <= kMaxCandidateK and K <= blocks, or vocab <= kMaxCandidates): the K-th largest
//             block maximum t is at most the K-th largest logit (K blocks hold a token >= t), so
//             the tokens >= t, compressed out of the blocks whose maximum is >= t, hold the first K
//             of the order. If they are at most kMaxCandidates: an exact selection of the first K
//             by (key, index) (nth_element), and where p < 1 those K put in order for the prefix;
//             w, top-p and min-p on them, the race with scalar Philox words. (Top-k 50 over 128256
//             N(0, 2) logits: about 53 candidates from 50 blocks.)
//   radix     otherwise, when K < vocab or p < 1: one histogram pass of the top 11 key bits with
//             counts (K < vocab) and integer masses (p < 1); per descent one pass collecting the
//             tokens of the chosen bin (blocks whose maximum is below it skipped), whose bits
//             20..10 and 9..0 and, among equal keys, indices finish it: the K-th token and W, then
//             the first token of the order whose prefix mass reaches p W, limited to the first K.
//             The kept set is "the tokens up to that boundary token in the order".
//   race      the kept tokens with w > 0 and w >= m, vectorized: Philox over four groups of four
//             tokens per 512-bit vector (the words of a group are the four 32-bit lanes of a
//             128-bit block: one MulEven, one in-block reverse and two xors per round), four
//             vectors interleaved; E = -log u, q = w / E, the largest q with ties to the lower
//             index. Blocks wholly outside the kept set (by their maximum) are not read, and
//             tokens that cannot beat their lane's best (E >= 1 - u) skip exp, log and divisions.
// w_i = exp((l_i - l_max) / T) with an IEEE subtraction and division and ExpInRange (relative
// error 4.5e-7), extended below e^-87.5 to the subnormals and 0 below e^-104. The integer masses
// (w 2^s truncated, s from vocab) add up in any order to the same sum, so split rows get the bits
// of unsplit ones.
#include "csrc/cpu/sampling/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "csrc/cpu/sampling/sampling_internal.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "csrc/cpu/sampling/sampling.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

#include "csrc/cpu/common/convert-inl.h"
#include "csrc/cpu/common/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace xllm_kernel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
// Every kernel family defines its helpers in this target's namespace; this family's are in their
// own, so that a same-named inline helper of another translation unit cannot replace one (ODR).
namespace sample_impl {
using namespace sampling_detail;  // NOLINT: this family's shared layout

using DI32 = hn::RebindToSigned<DF>;
using VI32 = hn::Vec<DI32>;
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------- logits

// NaN as -inf and -0 as +0 (x + 0 is +0 for x = -0 and x otherwise): the values whose float
// order is the order key's.
HWY_INLINE VF Clean(VF v) {
  const DF d;
  return hn::IfThenElse(hn::IsNaN(v), hn::Set(d, -kInf), hn::Add(v, hn::Zero(d)));
}

// n <= N valid elements from p, cleaned; the other lanes -inf.
template <typename T>
HWY_INLINE VF LoadClean(const T* HWY_RESTRICT p, size_t n) {
  const DF d;
  if (n == hn::Lanes(d)) return Clean(LoadF(p));
  return hn::IfThenElse(hn::FirstN(d, n), Clean(LoadTail(p, n)), hn::Set(d, -kInf));
}

// kernels::logit_order_key of cleaned values.
HWY_INLINE VU KeyOf(VF clean) {
  const DU du;
  const DI di;
  const VU b = hn::BitCast(du, clean);
  const VU sign = hn::BitCast(du, hn::BroadcastSignBit(hn::BitCast(di, b)));
  return hn::Xor(b, hn::Or(sign, hn::Set(du, 0x80000000u)));
}

// A row's logits as the passes read them: the row, its vocabulary and its block maxima (the
// maximum of each kSampleBlock tokens: written by ScanBlocks, read by the later passes). The passes
// copy the fields into locals before their loops.
template <typename T>
struct RowView {
  const T* logits = nullptr;
  int64_t vocab = 0;
  float* bmax = nullptr;
  int64_t blocks = 0;
};

// Row r of the call, with its block maxima at bmax.
template <typename T>
HWY_INLINE RowView<T> ViewOf(const SamplingParams& p, int64_t r, float* bmax, int64_t blocks) {
  return {.logits = static_cast<const T*>(p.logits) + r * p.logits_row_stride,
          .vocab = p.vocab,
          .bmax = bmax,
          .blocks = blocks};
}

// ---------------------------------------------------------------- weights

// e^x for x <= 0 (or -inf): ExpInRange down to kExpInRangeMin, below it e^(x + 64 ln2) 2^-64
// (rounded once to the subnormal), and 0 below -104 (e^-104 < 2^-150, which rounds to 0).
HWY_INLINE VF ExpNonPositive(VF x) {
  const DF d;
  const auto small = hn::Lt(x, hn::Set(d, kExpInRangeMin));
  const VF xs = hn::IfThenElse(small, hn::Add(hn::Max(x, hn::Set(d, -104.0f)), hn::Set(d, 44.3614196f)), x);
  VF e = ExpInRange(d, xs);
  e = hn::IfThenElse(small, hn::Mul(e, hn::Set(d, 0x1p-64f)), e);
  return hn::IfThenZeroElse(hn::Lt(x, hn::Set(d, -104.0f)), e);
}

// A row's w as a function of its (cleaned) logit.
struct Weigher {
  float l_max = 0.0f;
  float t = 1.0f;
  bool inf = false;  // l_max == +inf: w = 1 for the +inf tokens, 0 for the others
};

HWY_INLINE VF WeightOf(const Weigher& wg, VF v) {
  const DF d;
  if (wg.inf) return hn::IfThenElseZero(hn::Eq(v, hn::Set(d, kInf)), hn::Set(d, 1.0f));
  return ExpNonPositive(hn::Div(hn::Sub(v, hn::Set(d, wg.l_max)), hn::Set(d, wg.t)));
}

HWY_INLINE float WeightOne(const Weigher& wg, float l) { return hn::GetLane(WeightOf(wg, hn::Set(DF(), l))); }

// Whether every token of a block whose maximum is bmax has w == 0 (exact: the subtraction and
// the division are monotone, and w is 0 below -104).
HWY_INLINE bool BlockWeightless(const Weigher& wg, float bmax) {
  if (wg.inf) return bmax != kInf;
  return (bmax - wg.l_max) / wg.t < -104.0f;
}

HWY_INLINE uint64_t MassOf(float w, float scale) { return static_cast<uint64_t>(static_cast<int64_t>(w * scale)); }

// The integer masses' scale 2^mass_shift(vocab).
HWY_INLINE float MassScale(int64_t vocab) { return std::ldexp(1.0f, mass_shift(vocab)); }

// Whether a prefix of integer mass `mass` reaches the top-p target p * W.
HWY_INLINE bool Reaches(uint64_t mass, double target) { return static_cast<double>(mass) >= target; }

// ---------------------------------------------------------------- per-thread scratch

// A token of the radix select's chosen level-1 bin.
struct Match {
  uint32_t key;
  int32_t index;
  uint64_t mass;
};

struct Scratch {
  std::vector<float> bmax;  // a row's block maxima (unsplit plans)
  std::vector<Match> matches;
  std::vector<float> sel;   // a copy for the K-th largest
  // Candidates: room for kMaxCandidates plus one block and a vector of compress slack.
  static constexpr size_t kCap = kMaxCandidates + kSampleBlock + 64;
  alignas(64) float vals[kCap];
  alignas(64) int32_t idx[kCap];
  alignas(64) uint64_t ord[kCap];
  alignas(64) float w[kCap];
  alignas(64) float u[kCap];
  alignas(64) float q[kCap];
  alignas(64) int32_t kept[kCap];
  Histogram1 h1;
  alignas(64) uint32_t count2[kBins2];
  alignas(64) uint64_t mass2[kBins2];
};

Scratch& GetScratch() {
  thread_local std::unique_ptr<Scratch> s;
  if (!s) s = std::make_unique<Scratch>();
  return *s;
}

// ---------------------------------------------------------------- per-row parameters

struct RowParams {
  float t = 0.0f, top_p = 1.0f, min_p = 0.0f;
  int64_t k = 0;  // K
  int64_t seed = 0, offset = 0;
  bool valid = false;
};

HWY_INLINE RowParams ParamsOf(const SamplingParams& p, int64_t r) {
  RowParams rp;
  rp.t = p.temperature[r];
  rp.top_p = p.top_p[r];
  rp.min_p = p.min_p[r];
  rp.k = kernels::sampling_top_k(p.top_k[r], p.vocab);
  rp.seed = p.seeds[r];
  rp.offset = p.offsets[r];
  rp.valid = kernels::sampling_parameters_valid(rp.t, rp.top_p, rp.min_p);
  return rp;
}

// The weigher of a row whose largest (cleaned) logit is l_max.
HWY_INLINE Weigher WeigherOf(const RowParams& rp, float l_max) { return {l_max, rp.t, l_max == kInf}; }

// A row of the call as the steps after the scan see it: its logits, its parameters and where its
// results go. Filled once per row (unsplit plans) or per item (split plans).
template <typename T>
struct Row {
  RowView<T> view;
  RowParams rp;
  int64_t* out = nullptr;      // out[r]
  uint8_t* row_nan = nullptr;  // row_nan[r]; null: not reported
};

template <typename T>
HWY_INLINE Row<T> RowAt(const SamplingParams& p, int64_t r, float* bmax, int64_t blocks) {
  return {.view = ViewOf<T>(p, r, bmax, blocks),
          .rp = ParamsOf(p, r),
          .out = p.out + r,
          .row_nan = p.row_nan == nullptr ? nullptr : p.row_nan + r};
}

// What the radix select's passes record of each token: its count (want_count: K < vocab) and its
// integer mass, w from wg times scale, truncated (want_mass: p < 1).
struct Tally {
  Weigher wg;
  float scale = 1.0f;
  bool want_count = false;
  bool want_mass = false;
};

// The tally of a row whose largest (cleaned) logit is l_max.
template <typename T>
HWY_INLINE Tally TallyOf(const Row<T>& row, float l_max) {
  return {.wg = WeigherOf(row.rp, l_max),
          .scale = MassScale(row.view.vocab),
          .want_count = row.rp.k < row.view.vocab,
          .want_mass = row.rp.top_p < 1.0f};
}

// ---------------------------------------------------------------- scan

// Some blocks' maximum (NaN counted as -inf) and whether they hold a NaN.
struct Scan {
  float max = -kInf;
  bool nan = false;
};

// The maxima of blocks [b0, b1) of a row into its bmax[b]; their maximum and whether they hold a
// NaN.
template <typename T>
Scan ScanBlocks(const RowView<T>& view, int64_t b0, int64_t b1) {
  const T* HWY_RESTRICT row = view.logits;
  const int64_t vocab = view.vocab;
  float* HWY_RESTRICT bmax = view.bmax;
  const DF d;
  const size_t N = hn::Lanes(d);
  float smax = -kInf;
  bool snan = false;
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t begin = b * kSampleBlock;
    const size_t n = static_cast<size_t>(std::min<int64_t>(kSampleBlock, vocab - begin));
    const T* x = row + begin;
    bool exact = false;  // the block's maximum still needs the cleaned pass
    VF m0 = hn::Set(d, -kInf), m1 = m0, m2 = m0, m3 = m0;
    if (n == static_cast<size_t>(kSampleBlock)) {
      // A NaN propagates through the sums (as can inf - inf, which then costs a recheck only).
      VF s0 = hn::Zero(d), s1 = s0;
      for (size_t i = 0; i < n; i += 4 * N) {
        const VF a0 = LoadF(x + i), a1 = LoadF(x + i + N), a2 = LoadF(x + i + 2 * N), a3 = LoadF(x + i + 3 * N);
        s0 = hn::Add(s0, hn::Add(a0, a1));
        s1 = hn::Add(s1, hn::Add(a2, a3));
        m0 = hn::Max(a0, m0);
        m1 = hn::Max(a1, m1);
        m2 = hn::Max(a2, m2);
        m3 = hn::Max(a3, m3);
      }
      exact = hn::AllFalse(d, hn::IsNaN(hn::Add(s0, s1)));
    }
    if (!exact) {
      // Cleaned values and an exact NaN test (tails, and blocks that may hold a NaN).
      VF bad = hn::Zero(d);
      m0 = m1 = m2 = m3 = hn::Set(d, -kInf);
      for (size_t i = 0; i < n; i += N) {
        const size_t nn = std::min(N, n - i);
        const VF raw = nn == N ? LoadF(x + i) : LoadTail(x + i, nn);
        bad = hn::Or(bad, hn::VecFromMask(d, hn::IsNaN(raw)));
        m0 = hn::Max(m0, LoadClean(x + i, nn));
      }
      snan = snan || !hn::AllFalse(d, hn::MaskFromVec(bad));
    }
    const float bm = hn::GetLane(hn::MaxOfLanes(d, hn::Max(hn::Max(m0, m1), hn::Max(m2, m3))));
    bmax[b] = bm;
    smax = std::max(smax, bm);
  }
  return {.max = smax, .nan = snan};
}

// ---------------------------------------------------------------- greedy

// The first token whose cleaned logit equals v, a block maximum.
template <typename T>
int64_t FirstEqual(const RowView<T>& view, float v) {
  const T* HWY_RESTRICT row = view.logits;
  const int64_t vocab = view.vocab, blocks = view.blocks;
  const float* bmax = view.bmax;
  const DF d;
  const size_t N = hn::Lanes(d);
  for (int64_t b = 0; b < blocks; ++b) {
    if (!(bmax[b] == v)) continue;
    const int64_t begin = b * kSampleBlock, end = std::min(vocab, begin + kSampleBlock);
    for (int64_t i = begin; i < end; i += static_cast<int64_t>(N)) {
      const size_t nn = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(N), end - i));
      const intptr_t pos = hn::FindFirstTrue(d, hn::Eq(LoadClean(row + i, nn), hn::Set(d, v)));
      if (pos >= 0) return i + pos;
    }
  }
  return kernels::kInvalidRow;  // unreachable when v is one of the block maxima
}

// ---------------------------------------------------------------- race

// The uniforms of 4-token groups g0, g0 + 1, ... (one per 128-bit block of u32 lanes): lane j is
// word j % 4 of group g0 + j / 4, as sampling_words gives them.
struct PhiloxLanes {
  VU mul, key0, step, base, gmask;
  int64_t seed = 0, offset = 0;

  explicit PhiloxLanes(int64_t seed_, int64_t offset_) : seed(seed_), offset(offset_) {
    const DU du;
    const VU iota = hn::Iota(du, 0);
    const VU lane = hn::And(iota, hn::Set(du, 3u));
    const auto w0 = hn::Eq(lane, hn::Zero(du));
    const auto w2 = hn::Eq(lane, hn::Set(du, 2u)), w3 = hn::Eq(lane, hn::Set(du, 3u));
    const uint64_t s = static_cast<uint64_t>(seed_), o = static_cast<uint64_t>(offset_);
    auto pair = [&](uint32_t a, uint32_t b) {
      return hn::IfThenElse(w0, hn::Set(du, a), hn::IfThenElseZero(w2, hn::Set(du, b)));
    };
    mul = pair(0xD2511F53u, 0xCD9E8D57u);
    key0 = pair(static_cast<uint32_t>(s), static_cast<uint32_t>(s >> 32));
    step = pair(0x9E3779B9u, 0xBB67AE85u);
    base = hn::IfThenElse(w2, hn::Set(du, static_cast<uint32_t>(o)),
                          hn::IfThenElseZero(w3, hn::Set(du, static_cast<uint32_t>(o >> 32))));
    base = hn::Add(base, hn::IfThenElseZero(w0, hn::ShiftRight<2>(iota)));
    gmask = hn::IfThenElseZero(w0, hn::Set(du, 0xFFFFFFFFu));
  }

  // u of tokens first .. first + kV N - 1 into u[0, kV) (first a multiple of 4 where N >= 4). The kV
  // vectors' rounds are interleaved: each is a chain of 10 dependent multiplications.
  template <int kV>
  HWY_INLINE void Uniforms(int64_t first, VF* u) const {
    const DF d;
#if HWY_TARGET == HWY_SCALAR
    for (int j = 0; j < kV; ++j) u[j] = hn::Set(d, kernels::sampling_uniform(seed, offset, first + j));
#else
    const DU du;
    const DI di;
    const hn::Repartition<uint64_t, DU> d64;
    const uint32_t groups = static_cast<uint32_t>(hn::Lanes(du) / 4);
    VU v[kV];
    for (int j = 0; j < kV; ++j) {
      v[j] = hn::Add(base, hn::And(hn::Set(du, static_cast<uint32_t>(first >> 2) + j * groups), gmask));
    }
    VU key = key0;
    for (int round = 0; round < 10; ++round) {
      // Per block [v0, v1, v2, v3]: the products [lo0, hi0, lo1, hi1] reversed are
      // [hi1, lo1, hi0, lo0]; v >> 32 per u64 lane is [v1, 0, v3, 0].
      for (int j = 0; j < kV; ++j) {
        const VU prod = hn::BitCast(du, hn::MulEven(v[j], mul));
        const VU shifted = hn::BitCast(du, hn::ShiftRight<32>(hn::BitCast(d64, v[j])));
        v[j] = hn::Xor(hn::Xor(hn::Shuffle0123(prod), shifted), key);
      }
      key = hn::Add(key, step);
    }
    for (int j = 0; j < kV; ++j) {
      const VF n = hn::ConvertTo(d, hn::BitCast(di, hn::ShiftRight<9>(v[j])));
      u[j] = hn::Mul(hn::Add(n, hn::Set(d, 0.5f)), hn::Set(d, 1.0f / 8388608.0f));
    }
#endif
  }
};

// The race's quotient w / E with E = -log u (u in (0, 1), so E > 0).
HWY_INLINE VF Quotient(VF w, VF u) {
  const DF d;
  return hn::Div(w, hn::Neg(hn::Log(d, u)));
}

struct Best {
  float q = 0.0f;
  int64_t index = kernels::kInvalidRow;
};

// The larger quotient, ties to the lower index.
HWY_INLINE void Take(Best& best, float q, int64_t index) {
  if (q > best.q || (q == best.q && q > 0.0f && index < best.index)) best = {q, index};
}

// The best quotient among the kept tokens of blocks [b0, b1): l > bound, or l == bound and index
// <= bound_index, with w > 0 and w >= min_p. Full blocks go kRaceVectors vectors at a time (their
// chains interleaved, one best accumulator each), a row's last block one vector at a time.
//
// A shortcut that changes no result: E = -log u >= 1 - u, so a token with w <= w_hi (a bound of
// its block's w) and (1 - u) best >= w_hi, best its lane's best quotient so far, has q < best and
// cannot win its lane: its w, E and q are not computed. Margins: w_hi = w(block maximum)
// (1 + 1e-5) + 1e-37 covers ExpInRange's non-monotonicity (relative 1e-6, and an absolute 2^-149
// where w is subnormal); with the roundings of (1 - u) best (exact 1 - u), of log (a few ulp) and of
// the division, a skipped token's computed q would be below best by a relative 6e-6 at least.
constexpr int kRaceVectors = 4;

// Who runs in a row's race and with which uniforms: the kept set (l > bound, or l == bound and
// index <= bound_index), of it the tokens with w > 0 and w >= min_p (w from wg), and the row's
// Philox seed and offset.
struct Entrants {
  Weigher wg;
  float bound = -kInf;
  int64_t bound_index = 0;
  float min_p = 0.0f;
  int64_t seed = 0, offset = 0;
};

template <typename T>
Best RaceBlocks(const RowView<T>& view, int64_t b0, int64_t b1, const Entrants& e) {
  const T* HWY_RESTRICT row = view.logits;
  const int64_t vocab = view.vocab;
  const float* bmax = view.bmax;
  const Weigher& wg = e.wg;
  const float bound = e.bound, min_p = e.min_p;
  const int64_t bound_index = e.bound_index;
  const DF d;
  const DI32 di;
  const size_t N = hn::Lanes(d);
  const PhiloxLanes philox(e.seed, e.offset);
  const VF vbound = hn::Set(d, bound);
  const VI32 vlimit = hn::Set(di, static_cast<int32_t>(bound_index + 1));
  const VF vmin = hn::Set(d, min_p);
  const VF one = hn::Set(d, 1.0f);
  const VI32 iota = hn::Iota(di, 0);  // hoisted: Highway 1.0.3 builds it through memory
  using MF = decltype(hn::FirstN(d, 0));
  VF best_q[kRaceVectors];
  VI32 best_i[kRaceVectors];
  for (int j = 0; j < kRaceVectors; ++j) {
    best_q[j] = hn::Zero(d);
    best_i[j] = hn::Set(di, -1);
  }
  auto keep = [&](VF v, VI32 index) {
    return hn::Or(hn::Gt(v, vbound), hn::And(hn::Eq(v, vbound), hn::RebindMask(d, hn::Lt(index, vlimit))));
  };
  // Lanes that may still beat their best: (1 - u) best < w_hi.
  auto may_win = [&](int j, MF kept, VF u, VF w_hi) {
    return hn::And(kept, hn::Lt(hn::Mul(hn::Sub(one, u), best_q[j]), w_hi));
  };
  auto drawable = [&](MF kept, VF w) { return hn::And(kept, hn::And(hn::Gt(w, hn::Zero(d)), hn::Ge(w, vmin))); };
  auto update = [&](int j, MF kept, VF q, VI32 index) {
    q = hn::IfThenElseZero(kept, q);
    const auto better = hn::Gt(q, best_q[j]);  // strictly: the lower index stays on a tie
    best_q[j] = hn::IfThenElse(better, q, best_q[j]);
    best_i[j] = hn::IfThenElse(hn::RebindMask(di, better), index, best_i[j]);
  };
  // Below 1e-30 the w of a block maximum is not used to skip (subnormal w round non-monotonically).
  const bool skip_min_p = min_p >= 1e-30f;
  const int64_t step = static_cast<int64_t>(N) * kRaceVectors;
  for (int64_t b = b0; b < b1; ++b) {
    const float bm = bmax[b];
    const int64_t begin = b * kSampleBlock, end = std::min(vocab, begin + kSampleBlock);
    if (bm < bound || (bm == bound && begin > bound_index) || BlockWeightless(wg, bm)) continue;
    const float w_block = WeightOne(wg, bm);
    // ExpInRange is monotone up to its relative error (4.5e-7), so a block whose maximum's w is
    // below min_p (1 - 1e-5) has no token with w >= min_p.
    if (skip_min_p && w_block < min_p * (1.0f - 1e-5f)) continue;
    const VF w_hi = hn::Set(d, w_block * (1.0f + 1e-5f) + 1e-37f);
    int64_t i = begin;
    if (end - begin == kSampleBlock) {  // a multiple of step: N * kRaceVectors divides 256
      for (; i < end; i += step) {
        VF v[kRaceVectors], u[kRaceVectors];
        VI32 index[kRaceVectors];
        MF kept[kRaceVectors];
        bool any = false;
        for (int j = 0; j < kRaceVectors; ++j) {
          v[j] = Clean(LoadF(row + i + j * static_cast<int64_t>(N)));
          index[j] = hn::Add(iota, hn::Set(di, static_cast<int32_t>(i + j * static_cast<int64_t>(N))));
          kept[j] = keep(v[j], index[j]);
          any = any || !hn::AllFalse(d, kept[j]);
        }
        if (!any) continue;
        philox.Uniforms<kRaceVectors>(i, u);
        any = false;
        for (int j = 0; j < kRaceVectors; ++j) {
          kept[j] = may_win(j, kept[j], u[j], w_hi);
          any = any || !hn::AllFalse(d, kept[j]);
        }
        if (!any) continue;
        for (int j = 0; j < kRaceVectors; ++j) {
          if (hn::AllFalse(d, kept[j])) continue;
          const VF w = WeightOf(wg, v[j]);
          update(j, drawable(kept[j], w), Quotient(w, u[j]), index[j]);
        }
      }
    }
    for (; i < end; i += static_cast<int64_t>(N)) {
      const size_t nn = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(N), end - i));
      const VF v = LoadClean(row + i, nn);
      const VI32 index = hn::Add(iota, hn::Set(di, static_cast<int32_t>(i)));
      MF kept = keep(v, index);
      if (hn::AllFalse(d, kept)) continue;
      VF u;
      philox.Uniforms<1>(i, &u);
      kept = may_win(0, kept, u, w_hi);
      if (hn::AllFalse(d, kept)) continue;
      const VF w = WeightOf(wg, v);
      update(0, drawable(kept, w), Quotient(w, u), index);
    }
  }
  Best best;
  VF all_q = best_q[0];
  for (int j = 1; j < kRaceVectors; ++j) all_q = hn::Max(all_q, best_q[j]);
  const float mq = hn::GetLane(hn::MaxOfLanes(d, all_q));
  if (!(mq > 0.0f)) return best;
  VI32 cand = hn::Set(di, std::numeric_limits<int32_t>::max());
  for (int j = 0; j < kRaceVectors; ++j) {
    const auto at = hn::RebindMask(di, hn::Eq(best_q[j], hn::Set(d, mq)));
    cand = hn::Min(cand, hn::IfThenElse(at, best_i[j], hn::Set(di, std::numeric_limits<int32_t>::max())));
  }
  best.q = mq;
  best.index = hn::GetLane(hn::MinOfLanes(di, cand));
  return best;
}

// ---------------------------------------------------------------- candidate path

// The K-th largest of the block maxima.
float KthLargest(const float* bmax, int64_t blocks, int64_t k, Scratch& s) {
  s.sel.assign(bmax, bmax + blocks);
  std::nth_element(s.sel.begin(), s.sel.begin() + (k - 1), s.sel.end(), std::greater<float>());
  return s.sel[static_cast<size_t>(k - 1)];
}

// The tokens with cleaned logit >= t into s.vals / s.idx, from the blocks whose maximum is >= t;
// false when they are more than kMaxCandidates.
template <typename T>
bool Gather(const RowView<T>& view, float t, Scratch& s, int64_t& count) {
  const T* HWY_RESTRICT row = view.logits;
  const int64_t vocab = view.vocab, blocks = view.blocks;
  const float* bmax = view.bmax;
  const DF d;
  const DI32 di;
  const size_t N = hn::Lanes(d);
  const VF vt = hn::Set(d, t);
  const VI32 iota = hn::Iota(di, 0);  // hoisted: Highway 1.0.3 builds it through memory
  size_t n = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    if (!(bmax[b] >= t)) continue;
    if (n > static_cast<size_t>(kMaxCandidates)) return false;
    const int64_t begin = b * kSampleBlock, end = std::min(vocab, begin + kSampleBlock);
    for (int64_t i = begin; i < end; i += static_cast<int64_t>(N)) {
      const size_t nn = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(N), end - i));
      const VF v = LoadClean(row + i, nn);
      const auto m = hn::And(hn::Ge(v, vt), hn::FirstN(d, nn));
      // Compressed in registers and stored whole (the buffers have a vector of slack): a compress
      // to memory is slow on AVX-512, and a branch on the mask mispredicts where candidates are
      // dense.
      const VI32 index = hn::Add(iota, hn::Set(di, static_cast<int32_t>(i)));
      hn::StoreU(hn::Compress(index, hn::RebindMask(di, m)), di, s.idx + n);
      hn::StoreU(hn::Compress(v, m), d, s.vals + n);
      n += hn::CountTrue(d, m);
    }
  }
  count = static_cast<int64_t>(n);
  return n <= static_cast<size_t>(kMaxCandidates);
}

// w of n values (arrays with room for a whole last vector).
HWY_INLINE void Weights(const Weigher& wg, const float* l, size_t n, float* w) {
  const DF d;
  const size_t N = hn::Lanes(d);
  for (size_t i = 0; i < n; i += N) {
    const size_t nn = std::min(N, n - i);
    hn::Store(WeightOf(wg, LoadClean(l + i, nn)), d, w + i);
  }
}

// The token of a row from its candidate set (count >= K tokens that hold the first K of the
// order).
int64_t FinishCandidates(const RowParams& rp, const Weigher& wg, float scale, int64_t count, Scratch& s) {
  const DF d;
  const size_t N = hn::Lanes(d);
  // (key, ~index): descending is the order.
  for (int64_t j = 0; j < count; ++j) {
    s.ord[j] = (static_cast<uint64_t>(kernels::logit_order_key(s.vals[j])) << 32) |
               (0xFFFFFFFFu - static_cast<uint32_t>(s.idx[j]));
  }
  const int64_t k = std::min(rp.k, count);
  if (k < count) std::nth_element(s.ord, s.ord + k, s.ord + count, std::greater<uint64_t>());
  // Only the top-p prefix needs the K in order (min-p and the race do not).
  if (rp.top_p < 1.0f) std::sort(s.ord, s.ord + k, std::greater<uint64_t>());
  for (int64_t j = 0; j < k; ++j) {
    s.vals[j] = float_of_key(static_cast<uint32_t>(s.ord[j] >> 32));
    s.idx[j] = static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(s.ord[j]));
  }
  Weights(wg, s.vals, static_cast<size_t>(k), s.w);
  int64_t end = k;
  if (rp.top_p < 1.0f) {
    uint64_t total = 0;
    for (int64_t j = 0; j < k; ++j) total += MassOf(s.w[j], scale);
    const double target = static_cast<double>(rp.top_p) * static_cast<double>(total);
    uint64_t cum = 0;
    for (int64_t j = 0; j < k; ++j) {
      cum += MassOf(s.w[j], scale);
      if (Reaches(cum, target)) {
        end = j + 1;
        break;
      }
    }
  }
  // The kept tokens that can be drawn, their uniforms (one Philox call per group of four).
  size_t n = 0;
  for (int64_t j = 0; j < end; ++j) {
    if (!(s.w[j] > 0.0f) || s.w[j] < rp.min_p) continue;
    s.kept[n] = s.idx[j];
    s.q[n] = s.w[j];
    ++n;
  }
  int64_t group = -1;
  kernels::Philox4x32 words{};
  for (size_t j = 0; j < n; ++j) {
    const int64_t g = s.kept[j] >> 2;
    if (g != group) {
      group = g;
      words = kernels::sampling_words(rp.seed, rp.offset, g);
    }
    s.u[j] = kernels::sampling_uniform_from_word(words.v[s.kept[j] & 3]);
  }
  for (size_t j = 0; j < n; j += N) {
    const size_t nn = std::min(N, n - j);
    // Padding lanes: w = 0, u = 1/2.
    const VF w = nn == N ? hn::Load(d, s.q + j) : hn::IfThenElseZero(hn::FirstN(d, nn), hn::Load(d, s.q + j));
    const VF u = nn == N ? hn::Load(d, s.u + j) : hn::IfThenElse(hn::FirstN(d, nn), hn::Load(d, s.u + j), hn::Set(d, 0.5f));
    hn::Store(Quotient(w, u), d, s.q + j);
  }
  Best best;
  for (size_t j = 0; j < n; ++j) Take(best, s.q[j], s.kept[j]);
  return best.index;
}

// ---------------------------------------------------------------- radix select

// Adds the tokens of blocks [b0, b1) of a row to a level-1 histogram: counts when
// tally.want_count (K < vocab), masses when tally.want_mass (p < 1). Without counts, blocks whose
// tokens all have w = 0 add nothing and are skipped (rows masked with -inf).
template <typename T>
void HistogramTokens(const RowView<T>& view, int64_t b0, int64_t b1, const Tally& tally, Histogram1& h) {
  const T* HWY_RESTRICT row = view.logits;
  const int64_t vocab = view.vocab;
  const float* bmax = view.bmax;
  const Weigher& wg = tally.wg;
  const float scale = tally.scale;
  const bool want_count = tally.want_count, want_mass = tally.want_mass;
  const DF d;
  const DU du;
  const size_t N = hn::Lanes(d);
  // Four vectors' bins and weights first (their exp chains interleave), then their tokens.
  constexpr size_t kVectors = 4;
  alignas(64) uint32_t bins[kVectors * kMaxLanes];
  alignas(64) float w[kVectors * kMaxLanes];
  for (int64_t b = b0; b < b1; ++b) {
    if (!want_count && BlockWeightless(wg, bmax[b])) continue;
    const int64_t t1 = std::min(vocab, (b + 1) * kSampleBlock);
    for (int64_t i = b * kSampleBlock; i < t1; i += static_cast<int64_t>(kVectors * N)) {
      const size_t nn = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(kVectors * N), t1 - i));
      for (size_t j = 0; j * N < nn; ++j) {
        const VF v = LoadClean(row + i + j * N, std::min(N, nn - j * N));
        hn::Store(hn::ShiftRight<kShift1>(KeyOf(v)), du, bins + j * N);
        if (want_mass) hn::Store(WeightOf(wg, v), d, w + j * N);
      }
      if (want_count && want_mass) {
        for (size_t j = 0; j < nn; ++j) {
          ++h.count[bins[j]];
          h.mass[bins[j]] += MassOf(w[j], scale);
        }
      } else if (want_mass) {
        for (size_t j = 0; j < nn; ++j) h.mass[bins[j]] += MassOf(w[j], scale);
      } else {
        for (size_t j = 0; j < nn; ++j) ++h.count[bins[j]];
      }
    }
  }
}

// The tokens whose key >> kShift1 == prefix, in index order, with their masses (0 unless
// tally.want_mass), into s.matches; blocks whose maximum's key is below the prefix's range are
// skipped.
template <typename T>
void CollectBin(const RowView<T>& view, uint32_t prefix, const Tally& tally, Scratch& s) {
  const T* HWY_RESTRICT row = view.logits;
  const int64_t vocab = view.vocab, blocks = view.blocks;
  const float* bmax = view.bmax;
  const Weigher& wg = tally.wg;
  const float scale = tally.scale;
  const bool want_mass = tally.want_mass;
  const DF d;
  const DU du;
  const size_t N = hn::Lanes(d);
  alignas(64) uint32_t keys[kMaxLanes];
  alignas(64) float w[kMaxLanes];
  const VU vprefix = hn::Set(du, prefix);
  s.matches.clear();
  for (int64_t b = 0; b < blocks; ++b) {
    if ((kernels::logit_order_key(bmax[b]) >> kShift1) < prefix) continue;
    const int64_t begin = b * kSampleBlock, end = std::min(vocab, begin + kSampleBlock);
    for (int64_t i = begin; i < end; i += static_cast<int64_t>(N)) {
      const size_t nn = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(N), end - i));
      const VF v = LoadClean(row + i, nn);
      const VU key = KeyOf(v);
      const auto m = hn::And(hn::Eq(hn::ShiftRight<kShift1>(key), vprefix), hn::RebindMask(du, hn::FirstN(d, nn)));
      if (hn::AllFalse(du, m)) continue;
      // The matching lanes by their mask bits (plain stores: a compress to memory is slow on
      // AVX-512).
      hn::Store(key, du, keys);
      if (want_mass) hn::Store(WeightOf(wg, v), d, w);
      uint8_t bits[(kMaxLanes + 7) / 8] = {};
      hn::StoreMaskBits(du, m, bits);
      uint64_t lanes = 0;
      std::memcpy(&lanes, bits, std::min(sizeof lanes, sizeof bits));
      for (; lanes != 0; lanes &= lanes - 1) {
        const int j = __builtin_ctzll(lanes);
        s.matches.push_back({keys[j], static_cast<int32_t>(i + j), want_mass ? MassOf(w[j], scale) : 0});
      }
    }
  }
}

// Where a prefix of the order ends: at `limit` tokens or, use_target, where its mass reaches
// target, whichever comes first.
struct Cutoff {
  uint64_t limit = 0;
  bool use_target = false;
  double target = 0.0;
};

// The last token of the order's shortest prefix that the cutoff ends: its key and index, and the
// prefix's count and mass.
struct Boundary {
  uint32_t key = 0;
  int64_t index = 0;
  uint64_t count = 0;
  uint64_t mass = 0;
};

template <typename T>
Boundary Descend(const RowView<T>& view, const Histogram1& h1, const Cutoff& cut, const Tally& tally, Scratch& s) {
  const int64_t vocab = view.vocab;
  const uint64_t limit = cut.limit;
  const bool use_target = cut.use_target;
  const double target = cut.target;
  uint64_t cum_c = 0, cum_m = 0;
  // The level-1 counts are all 0 when K == vocab (not counted): bins are then walked by mass.
  auto pick = [&](const uint32_t* count, const uint64_t* mass, int bins) {
    int last = -1;
    for (int b = bins - 1; b >= 0; --b) {
      if (count[b] == 0 && mass[b] == 0) continue;
      last = b;
      if (cum_c + count[b] >= limit || (use_target && Reaches(cum_m + mass[b], target))) return b;
      cum_c += count[b];
      cum_m += mass[b];
    }
    // Unreachable (the counts sum to vocab >= limit and the masses to a total >= target): the
    // lowest non-empty bin, taken back out of the sums.
    if (last >= 0) {
      cum_c -= count[last];
      cum_m -= mass[last];
    }
    return std::max(last, 0);
  };
  const int b1 = pick(h1.count, h1.mass, kBins1);
  // Levels 2 and 3 on the tokens of bin b1, collected once (in index order).
  CollectBin(view, static_cast<uint32_t>(b1), tally, s);
  std::fill(s.count2, s.count2 + kBins2, 0u);
  std::fill(s.mass2, s.mass2 + kBins2, uint64_t{0});
  for (const Match& m : s.matches) {
    const uint32_t bin = (m.key >> kShift2) & (kBins2 - 1);
    ++s.count2[bin];
    s.mass2[bin] += m.mass;
  }
  const int b2 = pick(s.count2, s.mass2, kBins2);
  const uint32_t prefix = (static_cast<uint32_t>(b1) << (kShift1 - kShift2)) | static_cast<uint32_t>(b2);
  std::fill(s.count2, s.count2 + kBins3, 0u);
  std::fill(s.mass2, s.mass2 + kBins3, uint64_t{0});
  for (const Match& m : s.matches) {
    if ((m.key >> kShift2) != prefix) continue;
    ++s.count2[m.key & (kBins3 - 1)];
    s.mass2[m.key & (kBins3 - 1)] += m.mass;
  }
  const int b3 = pick(s.count2, s.mass2, kBins3);
  Boundary out;
  out.key = (prefix << kShift2) | static_cast<uint32_t>(b3);
  // Tokens of one key have one logit, so one w and one mass.
  const uint64_t c = std::max<uint32_t>(s.count2[b3], 1u);
  const uint64_t each = s.mass2[b3] / c;
  uint64_t take = c;
  if (cum_c + c >= limit) take = limit - cum_c;
  if (use_target && each > 0) {
    const double need = (target - static_cast<double>(cum_m)) / static_cast<double>(each);
    uint64_t t = need <= 1.0 ? 1 : std::min<uint64_t>(c, static_cast<uint64_t>(std::ceil(need)));
    while (t > 1 && Reaches(cum_m + (t - 1) * each, target)) --t;
    while (t < c && !Reaches(cum_m + t * each, target)) ++t;
    take = std::min(take, t);
  }
  take = std::max<uint64_t>(take, 1);
  // The take-th token of the key, in index order.
  out.index = vocab - 1;  // unreachable: the histograms counted take such tokens
  uint64_t seen = 0;
  for (const Match& m : s.matches) {
    if (m.key == out.key && ++seen == take) {
      out.index = m.index;
      break;
    }
  }
  out.count = cum_c + take;
  out.mass = cum_m + take * each;
  return out;
}

// The kept set's boundary of a row whose level-1 histogram is h1 (stage kStageHistogram).
template <typename T>
void Select(const Row<T>& row, const Histogram1& h1, RowState& st, Scratch& s) {
  const RowParams& rp = row.rp;
  const Tally tally = TallyOf(row, st.l_max);
  const uint64_t limit = static_cast<uint64_t>(rp.k);
  Boundary b;
  uint64_t total = 0;
  if (tally.want_count) {
    b = Descend(row.view, h1, {.limit = limit}, tally, s);
    total = b.mass;
  } else {
    for (int i = 0; i < kBins1; ++i) total += h1.mass[i];
  }
  if (tally.want_mass) {
    const double target = static_cast<double>(rp.top_p) * static_cast<double>(total);
    b = Descend(row.view, h1, {.limit = limit, .use_target = true, .target = target}, tally, s);
  }
  st.bound = float_of_key(b.key);
  st.bound_index = b.index;
  st.stage = kStageRace;
}

// ---------------------------------------------------------------- a row's steps

// After the scan of the whole row: the row's flags, and its token where no later phase is needed.
template <typename T>
void Prepare(const Row<T>& row, const Scan& scan, RowState& st, Scratch& s) {
  const float l_max = scan.max;
  if (row.row_nan != nullptr) *row.row_nan = scan.nan ? 1 : 0;
  st.stage = kStageDone;
  st.l_max = l_max;
  const RowParams& rp = row.rp;
  if (!rp.valid || !(l_max > -kInf)) {
    *row.out = kernels::kInvalidRow;
    return;
  }
  if (rp.t == 0.0f) {
    *row.out = FirstEqual(row.view, l_max);
    return;
  }
  const int64_t vocab = row.view.vocab, blocks = row.view.blocks;
  bool candidates = false;
  float t = -kInf;
  if (rp.k <= blocks && rp.k <= kMaxCandidateK) {
    t = KthLargest(row.view.bmax, blocks, rp.k, s);
    candidates = true;
  } else if (vocab <= kMaxCandidates) {
    candidates = true;
  }
  int64_t count = 0;
  if (candidates && Gather(row.view, t, s, count)) {
    *row.out = FinishCandidates(rp, WeigherOf(rp, l_max), MassScale(vocab), count, s);
    return;
  }
  st.bound = -kInf;
  st.bound_index = vocab - 1;
  st.stage = rp.k < vocab || rp.top_p < 1.0f ? kStageHistogram : kStageRace;
}

// The best race quotient among the row's kept tokens of blocks [b0, b1) (stage kStageRace).
template <typename T>
Best Race(const Row<T>& row, int64_t b0, int64_t b1, const RowState& st) {
  const RowParams& rp = row.rp;
  return RaceBlocks(row.view, b0, b1,
                    {.wg = WeigherOf(rp, st.l_max),
                     .bound = st.bound,
                     .bound_index = st.bound_index,
                     .min_p = rp.min_p > 0.0f ? rp.min_p : 0.0f,
                     .seed = rp.seed,
                     .offset = rp.offset});
}

// The level-1 histogram of the row's blocks [b0, b1) into h (stage kStageHistogram).
template <typename T>
void Histogram(const Row<T>& row, int64_t b0, int64_t b1, const RowState& st, Histogram1& h) {
  std::fill(h.count, h.count + kBins1, 0u);
  std::fill(h.mass, h.mass + kBins1, uint64_t{0});
  HistogramTokens(row.view, b0, b1, TallyOf(row, st.l_max), h);
}

// An unsplit plan's item: a row from the scan to its token.
template <typename T>
void RunRow(const SamplingParams& p, const SamplePlan& plan, int64_t r) {
  Scratch& s = GetScratch();
  if (s.bmax.size() < static_cast<size_t>(plan.blocks)) s.bmax.resize(static_cast<size_t>(plan.blocks));
  const Row<T> row = RowAt<T>(p, r, s.bmax.data(), plan.blocks);
  const Scan scan = ScanBlocks(row.view, 0, plan.blocks);
  RowState st;
  Prepare(row, scan, st, s);
  if (st.stage == kStageHistogram) {
    Histogram(row, 0, plan.blocks, st, s.h1);
    Select(row, s.h1, st, s);
  }
  if (st.stage == kStageRace) *row.out = Race(row, 0, plan.blocks, st).index;
}

// ---------------------------------------------------------------- split plans

struct Layout {
  char* base;
  const SamplePlan& plan;
  RowState& row(int64_t r) const {
    return reinterpret_cast<RowState*>(base + plan.row_state_offset)[r];
  }
  float* bmax(int64_t r) const {
    return reinterpret_cast<float*>(base + plan.block_max_offset) + r * plan.block_stride;
  }
  SegmentState& seg(int64_t r, int64_t g) const {
    return reinterpret_cast<SegmentState*>(base + plan.segment_state_offset)[r * plan.segments + g];
  }
  Histogram1& hist(int64_t r, int64_t g) const {
    return reinterpret_cast<Histogram1*>(base + plan.histogram_offset)[r * plan.segments + g];
  }
};

template <typename T>
void RunSplitItem(const SamplingParams& p, const SamplePlan& plan, const Layout& ws, int phase, int64_t item) {
  const bool per_segment = phase % 2 == 0;
  const int64_t r = per_segment ? item / plan.segments : item;
  const int64_t g = per_segment ? item % plan.segments : 0;
  const int64_t b0 = g * plan.segment_blocks, b1 = std::min(plan.blocks, b0 + plan.segment_blocks);
  switch (phase) {
    case 0: {
      const Scan scan = ScanBlocks(ViewOf<T>(p, r, ws.bmax(r), plan.blocks), b0, b1);
      ws.seg(r, g).max = scan.max;
      ws.seg(r, g).nan = scan.nan ? 1u : 0u;
      break;
    }
    case 1: {
      Scan scan;
      for (int64_t k = 0; k < plan.segments; ++k) {
        scan.max = std::max(scan.max, ws.seg(r, k).max);
        scan.nan = scan.nan || ws.seg(r, k).nan != 0;
      }
      Prepare(RowAt<T>(p, r, ws.bmax(r), plan.blocks), scan, ws.row(r), GetScratch());
      break;
    }
    case 2: {
      RowState& st = ws.row(r);
      if (st.stage != kStageHistogram) break;
      Histogram(RowAt<T>(p, r, ws.bmax(r), plan.blocks), b0, b1, st, ws.hist(r, g));
      break;
    }
    case 3: {
      RowState& st = ws.row(r);
      if (st.stage != kStageHistogram) break;
      Scratch& s = GetScratch();
      s.h1 = ws.hist(r, 0);
      for (int64_t k = 1; k < plan.segments; ++k) {
        const Histogram1& h = ws.hist(r, k);
        for (int i = 0; i < kBins1; ++i) {
          s.h1.count[i] += h.count[i];
          s.h1.mass[i] += h.mass[i];
        }
      }
      Select(RowAt<T>(p, r, ws.bmax(r), plan.blocks), s.h1, st, s);
      break;
    }
    case 4: {
      const RowState& st = ws.row(r);
      if (st.stage != kStageRace) break;
      const Best best = Race(RowAt<T>(p, r, ws.bmax(r), plan.blocks), b0, b1, st);
      ws.seg(r, g).best_q = best.q;
      ws.seg(r, g).best_index = static_cast<int32_t>(best.index);
      break;
    }
    case 5: {
      RowState& st = ws.row(r);
      if (st.stage != kStageRace) break;
      Best best;
      for (int64_t k = 0; k < plan.segments; ++k) Take(best, ws.seg(r, k).best_q, ws.seg(r, k).best_index);
      p.out[r] = best.index;
      st.stage = kStageDone;
      break;
    }
    default: break;
  }
}

template <typename T>
void RunTyped(const SamplingParams& p, const SamplePlan& plan, void* workspace, int phase, int64_t begin,
              int64_t end) {
  if (plan.segments <= 1) {
    for (int64_t r = begin; r < end; ++r) RunRow<T>(p, plan, r);
    return;
  }
  const Layout ws{static_cast<char*>(workspace), plan};
  for (int64_t item = begin; item < end; ++item) RunSplitItem<T>(p, plan, ws, phase, item);
}

}  // namespace sample_impl

void RunSample(const SamplingParams& p, const SamplePlan& plan, void* workspace, int phase, int64_t begin,
               int64_t end) {
  using sample_impl::RunTyped;
  switch (p.dtype) {
    case DType::kFloat32: RunTyped<float>(p, plan, workspace, phase, begin, end); break;
    case DType::kBFloat16: RunTyped<hwy::bfloat16_t>(p, plan, workspace, phase, begin, end); break;
    case DType::kFloat16: RunTyped<hwy::float16_t>(p, plan, workspace, phase, begin, end); break;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace xllm_kernel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace xllm_kernel::cpu {

HWY_EXPORT(RunSample);

namespace {

using namespace sampling_detail;  // NOLINT: this family's shared layout

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Defence only: the bridge validates the tensors before calling.
const char* InvalidShapes(const SamplingParams& p) {
  if (!kernels::valid_dtype(p.dtype)) return "sample: unknown logits dtype";
  if (p.batch < 0) return "sample: negative batch";
  if (p.vocab < 1 || p.vocab >= (int64_t{1} << 31)) return "sample: vocab must be in [1, 2^31)";
  if (p.batch > 1 && p.logits_row_stride < p.vocab) return "sample: logits_row_stride below vocab";
  return nullptr;
}

const char* InvalidPointers(const SamplingParams& p) {
  if (p.batch == 0) return nullptr;
  if (p.logits == nullptr) return "sample: null logits";
  if (p.temperature == nullptr || p.top_k == nullptr || p.top_p == nullptr || p.min_p == nullptr) {
    return "sample: null temperature, top_k, top_p or min_p";
  }
  if (p.seeds == nullptr || p.offsets == nullptr) return "sample: null seeds or offsets";
  if (p.out == nullptr) return "sample: null out";
  return nullptr;
}

// The plan of p's shapes with segments of segment_blocks blocks (>= 1): unsplit when they make
// one segment.
SamplePlan PlanWith(const SamplingParams& p, int64_t segment_blocks) {
  SamplePlan plan;
  plan.batch = p.batch;
  plan.vocab = p.vocab;
  plan.blocks = (p.vocab + kSampleBlock - 1) / kSampleBlock;
  plan.segment_blocks = std::min(std::max<int64_t>(segment_blocks, 1), plan.blocks);
  plan.segments = (plan.blocks + plan.segment_blocks - 1) / plan.segment_blocks;
  if (plan.segments <= 1 || p.batch == 0) {
    plan.segments = 1;
    plan.segment_blocks = plan.blocks;
    plan.phase_items = {p.batch};
    return plan;
  }
  const int64_t rows = p.batch, items = p.batch * plan.segments;
  plan.phase_items = {items, rows, items, rows, items, rows};
  plan.block_stride = RoundUp(plan.blocks, 16);
  int64_t bytes = 0;
  plan.row_state_offset = bytes;
  bytes += RoundUp(rows * static_cast<int64_t>(sizeof(RowState)), 64);
  plan.block_max_offset = bytes;
  bytes += RoundUp(rows * plan.block_stride * static_cast<int64_t>(sizeof(float)), 64);
  plan.segment_state_offset = bytes;
  bytes += RoundUp(items * static_cast<int64_t>(sizeof(SegmentState)), 64);
  plan.histogram_offset = bytes;
  bytes += items * static_cast<int64_t>(sizeof(Histogram1));
  plan.workspace_bytes = bytes;
  return plan;
}

bool SameLayout(const SamplePlan& a, const SamplePlan& b) {
  return a.batch == b.batch && a.vocab == b.vocab && a.blocks == b.blocks && a.segments == b.segments &&
         a.segment_blocks == b.segment_blocks && a.phase_items == b.phase_items &&
         a.workspace_bytes == b.workspace_bytes &&
         a.row_state_offset == b.row_state_offset && a.block_max_offset == b.block_max_offset &&
         a.block_stride == b.block_stride && a.segment_state_offset == b.segment_state_offset &&
         a.histogram_offset == b.histogram_offset;
}

}  // namespace

SamplePlan plan_sample(const SamplingParams& p, int threads) {
  if (InvalidShapes(p) != nullptr) {
    SamplePlan plan;
    plan.batch = p.batch;
    plan.vocab = p.vocab;
    plan.phase_items = {std::max<int64_t>(p.batch, 0)};
    return plan;
  }
  const int64_t t = std::max(threads, 1);
  const int64_t blocks = (p.vocab + kSampleBlock - 1) / kSampleBlock;
  // Fewer rows than threads: split each row into segments of at least kMinSegmentBlocks blocks,
  // about one per thread.
  int64_t segments = 1;
  if (p.batch > 0 && p.batch < t) segments = std::min((t + p.batch - 1) / p.batch, blocks / kMinSegmentBlocks);
  return PlanWith(p, segments <= 1 ? blocks : (blocks + segments - 1) / segments);
}

Status sample(const SamplingParams& p, const SamplePlan& plan, void* workspace, int phase, int64_t begin,
              int64_t end) {
  if (const char* why = InvalidShapes(p)) return Status::invalid(why);
  if (const char* why = InvalidPointers(p)) return Status::invalid(why);
  // The plan must be plan_sample's for these shapes (some thread count): its layout is rebuilt from
  // its segment size and compared, so that a plan of other shapes never indexes the workspace.
  if (plan.batch != p.batch || plan.vocab != p.vocab || !SameLayout(plan, PlanWith(p, plan.segment_blocks))) {
    return Status::invalid("sample: the plan was made for other shapes");
  }
  if (phase < 0 || static_cast<size_t>(phase) >= plan.phase_items.size()) {
    return Status::invalid("sample: phase not within the plan's phases");
  }
  if (begin < 0 || begin > end || end > plan.phase_items[static_cast<size_t>(phase)]) {
    return Status::invalid("sample: item range not within [0, plan.phase_items[phase]]");
  }
  if (begin == end) return Status::ok();
  if (plan.workspace_bytes > 0 && workspace == nullptr) return Status::invalid("sample: null workspace");
  if (plan.workspace_bytes > 0 && reinterpret_cast<uintptr_t>(workspace) % 64 != 0) {
    return Status::invalid("sample: workspace not 64-byte aligned");
  }
  HWY_DYNAMIC_DISPATCH(RunSample)(p, plan, workspace, phase, begin, end);
  return Status::ok();
}

}  // namespace xllm_kernel::cpu
#endif  // HWY_ONCE
