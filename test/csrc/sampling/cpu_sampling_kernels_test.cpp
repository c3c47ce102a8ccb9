// Torch-free tests of csrc/cpu/sampling on every Highway target this CPU runs, against a reference
// written here from the definition in csrc/common/sampling.h (sort by logit descending and index
// ascending, w in float64 from the float32 argument, top-k, the top-p prefix in float64, min-p, the
// race with the header's uniforms and float64 logarithms), never from the kernel's code:
//   the generator (Random123 known answers), the uniforms' range and the key order;
//   rows over a grid of vocab {111, 32000, 128256} x temperature {0, 0.7, 1.3} x top_k {0, 1, 10,
//   100, 500} x top_p {0.1, 0.5, 0.9, 1} x min_p {0, 0.05, 0.2} with N(0,1), N(0,5), spiky,
//   quantized (ties everywhere) logits, -inf shares, all -inf but one, +inf tokens, NaN, ties at
//   the k-th place and at the top-p boundary, invalid parameters and all -inf rows; float32,
//   bfloat16 and float16; vocabularies around the block and vector sizes; strided rows with NaN
//   padding; each row run in batches of 1, 7 and 64 with 1, 2, 5 or 16 threads and items in
//   order, reversed, in random splits or on threads; batch invariance: the same token for a row in
//   every batch, plan and split;
//   the cuts exactly: rows and offsets (found from the reference) where the token just inside or
//   just outside a top-k, top-p or min-p cut wins the race, with cuts inside tie groups, between
//   neighbouring indices and 2e-4 from a prefix mass or a weight, on the candidate path, the radix
//   path and split plans;
//   equal quotients (equal logits, equal uniforms) go to the lower index, in one vector lane or
//   across lanes and segments;
//   the distribution of draws over many offsets (chi-squared, false alarm 1e-6, and power against
//   nearby wrong distributions), on the candidate path and on the radix path with the vectorized
//   race;
//   rows that end at an inaccessible page; plans; the kernel's rejections.
//
// When the token may differ from the reference's. The kernel's w carries ExpInRange's relative
// error (4.5e-7) and its E Highway's log (a few ulp); sums of masses differ by at most that. So
// with eps = 1e-5 (20 times those errors):
//   top-p    a position j may end the kernel's prefix when S_j >= (p - eps) W and
//            S_{j-1} < (p + eps) W (S: the reference's prefix sums): the reference keeps the
//            shortest such prefix for sure and the longest one possibly;
//   min-p    w >= m (1 + eps) is kept for sure, w >= m (1 - eps) possibly;
//   race     the token may be any possibly kept token whose quotient is within 2 eps of the best
//            quotient of the surely kept ones.
// Where that set has one token the kernel's token must be it (the exact cases, the large
// majority, counted and required); otherwise the token must be in the set.
#include "csrc/cpu/sampling/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "test/csrc/common/cpu_test_support.h"

namespace xllm_kernel::cpu {
namespace {

using namespace test;  // NOLINT: the test helpers
using kernels::kInvalidRow;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kEps = 1e-5;

// ---------------------------------------------------------------- the generator

TEST(CpuSamplingKernel, PhiloxKnownAnswers) {
  struct Kat {
    kernels::Philox4x32 ctr;
    uint32_t k0, k1;
    kernels::Philox4x32 want;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
       0xffffffffu,
       0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
       0xa4093822u,
       0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const Kat& k : kats) {
    const kernels::Philox4x32 got = kernels::philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], k.want.v[i]) << "word " << i;
  }
  // sampling_words: counter (group, 0, offset low, offset high), key (seed low, seed high).
  const int64_t seed = 0x299f31d0a4093822LL, offset = 0x0370734413198a2eLL;
  const kernels::Philox4x32 w = kernels::sampling_words(seed, offset, 0x243f6a88);
  const kernels::Philox4x32 direct =
      kernels::philox4x32_10({{0x243f6a88u, 0u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(w.v[i], direct.v[i]);
  for (int64_t token = 0x243f6a88LL * 4; token < 0x243f6a88LL * 4 + 4; ++token) {
    EXPECT_EQ(kernels::sampling_uniform(seed, offset, token), kernels::sampling_uniform_from_word(direct.v[token & 3]));
  }
}

TEST(CpuSamplingKernel, UniformRangeAndKeyOrder) {
  EXPECT_EQ(kernels::sampling_uniform_from_word(0u), 0x1p-24f);
  EXPECT_EQ(kernels::sampling_uniform_from_word(0xFFFFFFFFu), 1.0f - 0x1p-24f);
  EXPECT_EQ(kernels::sampling_uniform_from_word(0x1FFu), 0x1p-24f);  // the low 9 bits are dropped
  EXPECT_EQ(kernels::sampling_uniform_from_word(0x200u), 3 * 0x1p-24f);
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t word = rng();
    const float u = kernels::sampling_uniform_from_word(word);
    ASSERT_GT(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    ASSERT_EQ(static_cast<double>(u), ((word >> 9) + 0.5) * 0x1p-23);  // exact
  }
  const float denorm = std::numeric_limits<float>::denorm_min(), big = std::numeric_limits<float>::max();
  const std::vector<float> ascending = {-kInf, -big, -1.5f, -1.0f, -denorm, 0.0f, denorm, 1.0f, 1.5f, big, kInf};
  for (size_t i = 0; i + 1 < ascending.size(); ++i) {
    EXPECT_LT(kernels::logit_order_key(ascending[i]), kernels::logit_order_key(ascending[i + 1])) << ascending[i];
  }
  EXPECT_EQ(kernels::logit_order_key(-0.0f), kernels::logit_order_key(0.0f));
  EXPECT_EQ(kernels::logit_order_key(kNaN), kernels::logit_order_key(-kInf));
  EXPECT_EQ(kernels::logit_order_key(-kNaN), kernels::logit_order_key(-kInf));
}

// ---------------------------------------------------------------- the reference

struct RowSpec {
  float t = 1.0f;
  int32_t k = 0;
  float p = 1.0f, m = 0.0f;
  int64_t seed = 0, offset = 0;
};

struct Expect {
  std::vector<int64_t> allowed;  // the tokens the kernel may return (one: exact)
  bool nan = false;
};

double WeightRef(float l, float l_max, float t) {
  if (l_max == kInf) return l == kInf ? 1.0 : 0.0;
  const float x = (l - l_max) / t;  // float32 operations, as the definition says
  return static_cast<double>(static_cast<float>(std::exp(static_cast<double>(x))));
}

// From the definition in csrc/common/sampling.h. `l` holds the logits as the kernel reads them.
Expect Reference(const std::vector<float>& l, const RowSpec& s) {
  Expect e;
  const int64_t v = static_cast<int64_t>(l.size());
  std::vector<float> c(l);
  for (float& x : c) {
    if (std::isnan(x)) {
      e.nan = true;
      x = -kInf;
    }
  }
  const bool t_ok = s.t >= 0.0f && s.t <= std::numeric_limits<float>::max();
  const bool valid = t_ok && s.p > 0.0f && s.p <= 1.0f && s.m >= 0.0f && s.m < 1.0f;
  const float l_max = *std::max_element(c.begin(), c.end());
  if (!valid || l_max == -kInf) {
    e.allowed = {kInvalidRow};
    return e;
  }
  const int64_t K = s.k > 0 && s.k < v ? s.k : v;
  std::vector<int64_t> order(static_cast<size_t>(v));
  std::iota(order.begin(), order.end(), int64_t{0});
  auto before = [&](int64_t a, int64_t b) { return c[a] > c[b] || (c[a] == c[b] && a < b); };
  if (s.t == 0.0f) {
    e.allowed = {*std::min_element(order.begin(), order.end(), before)};
    return e;
  }
  const bool need_order = K < v || s.p < 1.0f;
  if (need_order) {
    if (K < v) {
      std::partial_sort(order.begin(), order.begin() + K, order.end(), before);
    } else {
      std::sort(order.begin(), order.end(), before);
    }
  } else {
    // No prefix is needed; put the first token first (it is always kept).
    std::iter_swap(order.begin(), std::min_element(order.begin(), order.end(), before));
  }
  std::vector<double> w(static_cast<size_t>(K));
  double W = 0;
  for (int64_t j = 0; j < K; ++j) W += (w[j] = WeightRef(c[order[j]], l_max, s.t));
  int64_t sure_end = K, maybe_end = K;  // prefix lengths
  if (s.p < 1.0f) {
    const double lo = (s.p - kEps) * W, hi = (s.p + kEps) * W;
    double cum = 0;
    sure_end = maybe_end = 0;
    for (int64_t j = 0; j < K; ++j) {
      const double prev = cum;
      cum += w[j];
      if (cum >= lo && sure_end == 0) sure_end = j + 1;
      if (prev < hi) maybe_end = j + 1;
    }
    if (sure_end == 0) sure_end = K;
  }
  struct Cand {
    int64_t token;
    double q;
    bool sure;
  };
  std::vector<Cand> cands;
  double best_sure = 0;
  for (int64_t j = 0; j < maybe_end; ++j) {
    const double wj = w[j];
    if (!(wj > 0) || wj < s.m * (1 - kEps)) continue;
    const bool sure = j == 0 || (j < sure_end && wj >= s.m * (1 + kEps));
    const double u = kernels::sampling_uniform(s.seed, s.offset, order[j]);
    const double q = wj / -std::log(u);
    cands.push_back({order[j], q, sure});
    if (sure) best_sure = std::max(best_sure, q);
  }
  for (const Cand& cd : cands) {
    if (cd.q >= best_sure * (1 - 2 * kEps)) e.allowed.push_back(cd.token);
  }
  std::sort(e.allowed.begin(), e.allowed.end());
  return e;
}

// ---------------------------------------------------------------- rows

enum class Gen {
  kNormal1,
  kNormal5,
  kSpikes,
  kQuantized,
  kNegInfShare,
  kOneFinite,
  kPosInf,
  kNaN,
  kAllNegInf,
  kTieAtK,
  kTieAtTopP,
};
constexpr int kGens = 11;

const char* GenName(Gen g) {
  static const char* names[] = {"N(0,1)", "N(0,5)", "spikes", "quantized", "-inf share", "one finite",
                                "+inf", "NaN", "all -inf", "tie at k", "tie at top-p"};
  return names[static_cast<int>(g)];
}

std::vector<float> MakeLogits(Gen g, int64_t v, const RowSpec& s, std::mt19937& rng) {
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> pos(0, v - 1);
  std::vector<float> l(static_cast<size_t>(v));
  for (float& x : l) x = n01(rng);
  switch (g) {
    case Gen::kNormal1: break;
    case Gen::kNormal5:
      for (float& x : l) x *= 5.0f;
      break;
    case Gen::kSpikes:
      for (float& x : l) x -= 6.0f;
      for (int i = 0; i < 5; ++i) l[pos(rng)] = 4.0f + 2.0f * i + n01(rng);
      break;
    case Gen::kQuantized:
      for (float& x : l) x = std::round(x * 4.0f) / 2.0f;
      break;
    case Gen::kNegInfShare:
      for (float& x : l) {
        if (rng() % 5 < 2) x = -kInf;
      }
      break;
    case Gen::kOneFinite:
      std::fill(l.begin(), l.end(), -kInf);
      l[pos(rng)] = n01(rng);
      break;
    case Gen::kPosInf:
      for (int i = 0; i < 3; ++i) l[pos(rng)] = kInf;
      l[pos(rng)] = -kInf;
      break;
    case Gen::kNaN:
      for (int i = 0; i < 3; ++i) l[pos(rng)] = kNaN;
      break;
    case Gen::kAllNegInf:
      std::fill(l.begin(), l.end(), -kInf);
      if (v > 1) l[pos(rng)] = kNaN;
      break;
    case Gen::kTieAtK: {
      // The logits at order places k-3 .. k+2 all equal the k-th: the cut falls inside a tie group.
      const int64_t k = s.k > 0 && s.k < v ? s.k : std::min<int64_t>(50, v);
      std::vector<float> sorted(l);
      std::sort(sorted.begin(), sorted.end(), std::greater<float>());
      const float at = sorted[k - 1];
      const float hi = sorted[std::max<int64_t>(0, k - 4)], lo = sorted[std::min<int64_t>(v - 1, k + 2)];
      for (float& x : l) {
        if (x <= hi && x >= lo) x = at;
      }
      break;
    }
    case Gen::kTieAtTopP: {
      // 23 equal tokens above a tail of negligible mass: p * W falls inside the group (23 p is
      // not an integer for the grid's p), so the prefix ends on a tie broken by index.
      for (float& x : l) x -= 40.0f;
      for (int i = 0; i < 23; ++i) l[pos(rng)] = 1.0f;
      break;
    }
  }
  return l;
}

// A row of a test: its logits as stored (dtype) and as read (decoded), its parameters, the
// reference's verdict.
struct Row {
  std::vector<uint32_t> bits;
  std::vector<float> values;
  RowSpec spec;
  Gen gen = Gen::kNormal1;
  DType dtype = DType::kFloat32;
  Expect expect;
};

std::string Describe(const Row& r) {
  return std::string(GenName(r.gen)) + " T " + std::to_string(r.spec.t) + " k " + std::to_string(r.spec.k) + " p " +
         std::to_string(r.spec.p) + " m " + std::to_string(r.spec.m) + " seed " + std::to_string(r.spec.seed) +
         " offset " + std::to_string(r.spec.offset);
}

Row MakeRow(DType dtype, int64_t v, Gen g, const RowSpec& s, std::mt19937& rng) {
  Row r;
  r.spec = s;
  r.gen = g;
  r.dtype = dtype;
  const std::vector<float> l = MakeLogits(g, v, s, rng);
  r.bits.resize(l.size());
  r.values.resize(l.size());
  for (size_t i = 0; i < l.size(); ++i) {
    r.bits[i] = EncodeBits(dtype, l[i]);
    r.values[i] = DecodeBits(dtype, r.bits[i]);
  }
  r.expect = Reference(r.values, s);
  return r;
}

// ---------------------------------------------------------------- running the kernel

enum class Order { kOneCall, kReversed, kRandomSplits, kThreads };

struct Run {
  int threads = 1;
  Order order = Order::kOneCall;
  int64_t pad = 0;  // extra elements per row (NaN), so rows are strided
};

struct Outcome {
  std::vector<int64_t> out;
  std::vector<uint8_t> nan;
};

// Runs `rows` as one batch: every phase's items in the run's order, a garbage-filled workspace.
Outcome RunBatch(DType dtype, int64_t v, const std::vector<const Row*>& rows, const Run& run, std::mt19937& rng) {
  const int64_t batch = static_cast<int64_t>(rows.size());
  const int64_t stride = v + run.pad;
  const size_t es = ElemSize(dtype);
  std::vector<uint8_t> logits(static_cast<size_t>(std::max<int64_t>(batch * stride, 1)) * es);
  const uint32_t nan_bits = EncodeBits(dtype, kNaN);
  std::vector<float> t(batch), p(batch), m(batch);
  std::vector<int32_t> k(batch);
  std::vector<int64_t> seeds(batch), offsets(batch);
  for (int64_t r = 0; r < batch; ++r) {
    if (dtype == DType::kFloat32) {
      std::memcpy(logits.data() + r * stride * 4, rows[r]->bits.data(), static_cast<size_t>(v) * 4);
    } else {
      uint16_t* dst = reinterpret_cast<uint16_t*>(logits.data()) + r * stride;
      for (int64_t i = 0; i < v; ++i) dst[i] = static_cast<uint16_t>(rows[r]->bits[i]);
    }
    for (int64_t i = v; i < stride; ++i) StoreBits(dtype, logits.data(), r * stride + i, nan_bits);
    const RowSpec& s = rows[r]->spec;
    t[r] = s.t;
    k[r] = s.k;
    p[r] = s.p;
    m[r] = s.m;
    seeds[r] = s.seed;
    offsets[r] = s.offset;
  }
  Outcome o;
  o.out.assign(static_cast<size_t>(batch), -7);
  o.nan.assign(static_cast<size_t>(batch), 7);
  SamplingParams sp;
  sp.dtype = dtype;
  sp.batch = batch;
  sp.vocab = v;
  sp.logits = logits.data();
  sp.logits_row_stride = stride;
  sp.temperature = t.data();
  sp.top_k = k.data();
  sp.top_p = p.data();
  sp.min_p = m.data();
  sp.seeds = seeds.data();
  sp.offsets = offsets.data();
  sp.out = o.out.data();
  sp.row_nan = o.nan.data();
  const SamplePlan plan = plan_sample(sp, run.threads);
  auto ws = hwy::AllocateAligned<uint8_t>(static_cast<size_t>(std::max<int64_t>(plan.workspace_bytes, 64)));
  std::memset(ws.get(), 0xA5, static_cast<size_t>(std::max<int64_t>(plan.workspace_bytes, 64)));
  for (size_t phase = 0; phase < plan.phase_items.size(); ++phase) {
    const int64_t items = plan.phase_items[phase];
    const int ph = static_cast<int>(phase);
    switch (run.order) {
      case Order::kOneCall: EXPECT_TRUE(sample(sp, plan, ws.get(), ph, 0, items).is_ok()); break;
      case Order::kReversed:
        for (int64_t i = items - 1; i >= 0; --i) EXPECT_TRUE(sample(sp, plan, ws.get(), ph, i, i + 1).is_ok());
        break;
      case Order::kRandomSplits: {
        std::vector<std::pair<int64_t, int64_t>> ranges;
        for (int64_t b = 0; b < items;) {
          const int64_t e = std::min<int64_t>(items, b + 1 + static_cast<int64_t>(rng() % 4));
          ranges.push_back({b, e});
          b = e;
        }
        std::shuffle(ranges.begin(), ranges.end(), rng);
        for (auto [b, e] : ranges) EXPECT_TRUE(sample(sp, plan, ws.get(), ph, b, e).is_ok());
        break;
      }
      case Order::kThreads: {
        std::atomic<int64_t> next{0};
        std::atomic<int> failures{0};
        std::vector<std::thread> pool;
        for (int th = 0; th < run.threads; ++th) {
          pool.emplace_back([&] {
            for (int64_t i; (i = next.fetch_add(1)) < items;) {
              if (!sample(sp, plan, ws.get(), ph, i, i + 1).is_ok()) ++failures;
            }
          });
        }
        for (auto& th : pool) th.join();
        EXPECT_EQ(failures.load(), 0);
        break;
      }
    }
  }
  return o;
}

struct Tally {
  int64_t rows = 0, exact = 0;
};

// Checks one run's tokens and NaN flags against the references.
void CheckOutcome(const std::vector<const Row*>& rows, const Outcome& o, Tally& tally, const std::string& what) {
  for (size_t r = 0; r < rows.size(); ++r) {
    const Expect& e = rows[r]->expect;
    const int64_t got = o.out[r];
    SCOPED_TRACE(what + " row " + std::to_string(r) + ": " + Describe(*rows[r]));
    EXPECT_EQ(o.nan[r], e.nan ? 1 : 0);
    if (e.allowed.size() == 1) {
      EXPECT_EQ(got, e.allowed[0]);
      ++tally.exact;
    } else {
      EXPECT_TRUE(std::binary_search(e.allowed.begin(), e.allowed.end(), got))
          << "token " << got << " outside the " << e.allowed.size() << " allowed";
    }
    ++tally.rows;
  }
}

// The grid of row parameters, with invalid rows mixed in.
std::vector<RowSpec> Grid(std::mt19937& rng) {
  std::vector<RowSpec> specs;
  std::uniform_int_distribution<int64_t> any(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  for (float t : {0.0f, 0.7f, 1.3f}) {
    for (int32_t k : {0, 1, 10, 100, 500}) {
      for (float p : {0.1f, 0.5f, 0.9f, 1.0f}) {
        for (float m : {0.0f, 0.05f, 0.2f}) specs.push_back({t, k, p, m, any(rng), any(rng)});
      }
    }
  }
  // Invalid parameters (-1), and top_k off by being negative or at least vocab.
  const float bad_t[] = {-1.0f, kNaN, kInf};
  for (float t : bad_t) specs.push_back({t, 10, 0.9f, 0.0f, 1, 2});
  for (float p : {0.0f, 1.5f, kNaN, -0.5f}) specs.push_back({0.7f, 10, p, 0.0f, 3, 4});
  for (float m : {1.0f, -0.1f, kNaN}) specs.push_back({0.7f, 0, 0.9f, m, 5, 6});
  specs.push_back({0.0f, 0, 0.0f, 0.0f, 0, 0});  // greedy with an invalid top_p: -1
  specs.push_back({0.8f, -5, 0.9f, 0.0f, 7, 8});
  specs.push_back({0.8f, std::numeric_limits<int32_t>::max(), 0.95f, 0.05f, 9, 10});
  specs.push_back({1e-30f, 0, 0.9f, 0.0f, 11, 12});  // tiny temperature: the argmax
  specs.push_back({1e30f, 0, 0.5f, 0.0f, 13, 14});   // huge temperature: nearly uniform
  return specs;
}

// Rows of one (dtype, vocab): `count` rows cycling through the grid and the generators.
std::vector<Row> MakeRows(DType dtype, int64_t v, size_t count, std::mt19937& rng) {
  const std::vector<RowSpec> grid = Grid(rng);
  std::vector<size_t> pick(grid.size());
  std::iota(pick.begin(), pick.end(), size_t{0});
  std::shuffle(pick.begin(), pick.end(), rng);
  std::vector<Row> rows;
  for (size_t i = 0; i < count; ++i) {
    const RowSpec& s = grid[pick[i % pick.size()]];
    rows.push_back(MakeRow(dtype, v, static_cast<Gen>(i % kGens), s, rng));
  }
  return rows;
}

// Every row in batches of 1, 7 and 64 (plans split and unsplit), different thread counts,
// orders and strides; every token checked and equal across the runs.
void CheckRows(DType dtype, int64_t v, const std::vector<Row>& rows, Tally& tally, std::mt19937& rng) {
  const Run runs[] = {{2, Order::kOneCall, 0}, {16, Order::kRandomSplits, 3}, {5, Order::kThreads, 0},
                      {16, Order::kReversed, 1}, {1, Order::kOneCall, 17}};
  const int64_t batches[] = {64, 7, 1};
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    std::vector<std::vector<int64_t>> tokens(rows.size());
    int run_index = 0;
    for (int64_t batch : batches) {
      for (size_t b0 = 0; b0 < rows.size(); b0 += static_cast<size_t>(batch)) {
        std::vector<const Row*> part;
        for (size_t i = b0; i < std::min(rows.size(), b0 + static_cast<size_t>(batch)); ++i) part.push_back(&rows[i]);
        const Run& run = runs[run_index++ % std::size(runs)];
        const Outcome o = RunBatch(dtype, v, part, run, rng);
        CheckOutcome(part, o, tally,
                     std::string(hwy::TargetName(target)) + " " + ShortName(dtype) + " vocab " + std::to_string(v) +
                         " batch " + std::to_string(batch) + " threads " + std::to_string(run.threads));
        for (size_t i = 0; i < part.size(); ++i) tokens[b0 + i].push_back(o.out[i]);
      }
    }
    // Batch invariance: one token per row whatever the batch, plan and split.
    for (size_t i = 0; i < rows.size(); ++i) {
      for (int64_t tok : tokens[i]) {
        EXPECT_EQ(tok, tokens[i][0]) << hwy::TargetName(target) << " row " << i << " " << Describe(rows[i]);
      }
    }
  }
}

void ExpectMostlyExact(const Tally& t) {
  std::string targets;
  for (int64_t target : KernelTargets()) targets += std::string(" ") + hwy::TargetName(target);
  std::printf("  %lld row runs on%s, %lld with a single allowed token\n", static_cast<long long>(t.rows),
              targets.c_str(), static_cast<long long>(t.exact));
  // The ambiguous cases are the rare near-ties; if most rows were ambiguous the test would prove
  // little.
  EXPECT_GE(t.exact, t.rows * 9 / 10) << t.exact << " of " << t.rows << " rows had a single allowed token";
}

TEST(CpuSamplingKernel, SmallVocabMatchesReference) {
  std::mt19937 rng(1);
  Tally tally;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    const std::vector<Row> rows = MakeRows(dtype, 111, 220, rng);
    CheckRows(dtype, 111, rows, tally, rng);
  }
  ExpectMostlyExact(tally);
}

TEST(CpuSamplingKernel, MediumVocabMatchesReference) {
  std::mt19937 rng(2);
  Tally tally;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    const std::vector<Row> rows = MakeRows(dtype, 32000, dtype == DType::kFloat32 ? 128 : 64, rng);
    CheckRows(dtype, 32000, rows, tally, rng);
  }
  ExpectMostlyExact(tally);
}

TEST(CpuSamplingKernel, LargeVocabMatchesReference) {
  std::mt19937 rng(3);
  Tally tally;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const std::vector<Row> rows = MakeRows(dtype, 128256, dtype == DType::kFloat32 ? 64 : 24, rng);
    CheckRows(dtype, 128256, rows, tally, rng);
  }
  ExpectMostlyExact(tally);
}

// Vocabularies around the block and vector sizes, one token and tails.
TEST(CpuSamplingKernel, OddVocabsMatchReference) {
  std::mt19937 rng(4);
  Tally tally;
  for (int64_t v : {1, 2, 3, 17, 255, 256, 257, 4097, 4352, 5000}) {
    const std::vector<Row> rows = MakeRows(DType::kFloat32, v, 33, rng);
    CheckRows(DType::kFloat32, v, rows, tally, rng);
  }
  ExpectMostlyExact(tally);
}

// Greedy, top_k = 1 and a tiny temperature are the argmax with ties to the lowest index, always
// exactly.
TEST(CpuSamplingKernel, GreedyAndTopOneAreTheFirstArgmax) {
  std::mt19937 rng(5);
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (int64_t v : {5, 300, 40000}) {
      std::vector<Row> rows;
      for (int rep = 0; rep < 6; ++rep) {
        // Quantized logits: the maximum is shared by several tokens.
        for (const RowSpec& s : {RowSpec{0.0f, 0, 1.0f, 0.0f, 1, 2}, RowSpec{1.0f, 1, 0.5f, 0.1f, 3, 4}}) {
          Row r = MakeRow(DType::kFloat32, v, Gen::kQuantized, s, rng);
          const auto mx = std::max_element(r.values.begin(), r.values.end());
          ASSERT_EQ(r.expect.allowed.size(), 1u);
          EXPECT_EQ(r.expect.allowed[0], mx - r.values.begin());
          rows.push_back(std::move(r));
        }
      }
      std::vector<const Row*> part;
      for (const Row& r : rows) part.push_back(&r);
      for (int threads : {1, 16}) {
        const Outcome o = RunBatch(DType::kFloat32, v, part, {threads, Order::kOneCall, 0}, rng);
        for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(o.out[i], rows[i].expect.allowed[0]) << v << " " << i;
      }
    }
  }
}

// ---------------------------------------------------------------- boundaries

// A row's kept set by the definition in exact arithmetic (no ambiguity margin), in order, and the
// tokens just outside it: the next token of the order after the top-k / top-p prefix, and the
// first token of the prefix that min-p drops (each only when w > 0).
struct KeptSet {
  std::vector<int64_t> kept, outside;
  std::vector<double> kept_w, outside_w;
  double min_p_dropped_w = 0;  // w of the first token min-p drops (0: none)
};

KeptSet ExactKept(const std::vector<float>& values, const RowSpec& s) {
  KeptSet ks;
  const int64_t v = static_cast<int64_t>(values.size());
  std::vector<float> c(values);
  for (float& x : c) x = std::isnan(x) ? -kInf : x;
  std::vector<int64_t> order(static_cast<size_t>(v));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return c[a] > c[b] || (c[a] == c[b] && a < b); });
  const float l_max = c[order[0]];
  const int64_t K = s.k > 0 && s.k < v ? s.k : v;
  std::vector<double> w(static_cast<size_t>(v));
  double W = 0;
  for (int64_t j = 0; j < v; ++j) {
    w[j] = WeightRef(c[order[j]], l_max, s.t);
    if (j < K) W += w[j];
  }
  int64_t end = K;
  if (s.p < 1.0f) {
    double cum = 0;
    for (int64_t j = 0; j < K; ++j) {
      cum += w[j];
      if (cum >= s.p * W) {
        end = j + 1;
        break;
      }
    }
  }
  bool min_p_outside = false;
  for (int64_t j = 0; j < end; ++j) {
    if (!(w[j] > 0)) continue;
    if (w[j] >= s.m) {
      ks.kept.push_back(order[j]);
      ks.kept_w.push_back(w[j]);
    } else if (!min_p_outside) {
      min_p_outside = true;
      ks.min_p_dropped_w = w[j];
      ks.outside.push_back(order[j]);
      ks.outside_w.push_back(w[j]);
    }
  }
  if (end < v && w[end] > 0) {
    ks.outside.push_back(order[end]);
    ks.outside_w.push_back(w[end]);
  }
  return ks;
}

// w of the first K tokens of the order.
std::vector<double> ExactWeightsInOrder(const std::vector<float>& values, const RowSpec& s) {
  const int64_t v = static_cast<int64_t>(values.size());
  std::vector<float> c(values);
  for (float& x : c) x = std::isnan(x) ? -kInf : x;
  std::sort(c.begin(), c.end(), std::greater<float>());
  const int64_t K = s.k > 0 && s.k < v ? s.k : v;
  std::vector<double> w(static_cast<size_t>(K));
  for (int64_t j = 0; j < K; ++j) w[j] = WeightRef(c[j], c[0], s.t);
  return w;
}

// Offsets at which a token next to the kept set's boundary decides the draw: each outside token's
// quotient beats every kept one (the kernel must still return a kept token), and the last kept
// token of the order wins (the kernel must return it). Each with a margin of 1e-4 over the
// runner-up, far above the kernel's rounding. Searches offsets [0, tries); those it finds.
std::vector<int64_t> DecidingOffsets(const KeptSet& ks, const RowSpec& s, int64_t tries) {
  std::vector<int64_t> found;
  std::vector<bool> outside_done(ks.outside.size(), false);
  bool last_done = ks.kept.size() < 2;
  auto q = [&](int64_t token, double w, int64_t offset) {
    return w / -std::log(static_cast<double>(kernels::sampling_uniform(s.seed, offset, token)));
  };
  for (int64_t o = 0; o < tries; ++o) {
    double best = 0, second = 0;
    size_t arg = 0;
    for (size_t i = 0; i < ks.kept.size(); ++i) {
      const double x = q(ks.kept[i], ks.kept_w[i], o);
      if (x > best) {
        second = best;
        best = x;
        arg = i;
      } else {
        second = std::max(second, x);
      }
    }
    if (!last_done && arg + 1 == ks.kept.size() && best > second * (1 + 1e-4)) {
      last_done = true;
      found.push_back(o);
    }
    for (size_t i = 0; i < ks.outside.size(); ++i) {
      if (!outside_done[i] && q(ks.outside[i], ks.outside_w[i], o) > best * (1 + 1e-4) && best > second * (1 + 1e-4)) {
        outside_done[i] = true;
        found.push_back(o);
      }
    }
    if (last_done && std::all_of(outside_done.begin(), outside_done.end(), [](bool b) { return b; })) return found;
  }
  return found;
}

// The kept set's edges exactly: top-k, top-p and min-p cuts (inside tie groups too, and among
// +inf tokens) on the candidate path (vocab 111) and on the radix path (vocab 6000, 32000, 128256
// with live tokens among -inf or a far finite background; K above kMaxCandidateK), in float32 and
// bfloat16, at offsets where the token just inside or just outside each cut wins the race. Rows
// run together (2 threads) and alone (16 threads: split plans for the large vocabularies).
TEST(CpuSamplingKernel, BoundaryTokensDecideExactly) {
  std::mt19937 rng(8);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  enum Tighten { kAsIs, kTightP, kTightM, kTightMDrop };
  struct Config {
    int64_t vocab;
    int live;          // tokens drawn N(0, spread^2) (0: every token)
    int tied;          // live tokens set to one value (a tie group at the top)
    float background;  // the other tokens
    RowSpec spec;
    DType dtype = DType::kFloat32;
    int inf = 0;                // +inf tokens
    bool contiguous = false;    // the live tokens at consecutive indices (a tie group's cut between neighbours)
    // kTightP: p 2e-4 (relative) below the cut's prefix mass; kTightM: m 2e-4 above the last kept
    // w (below the first dropped one); kTightMDrop: m 2e-4 above the second token's w.
    Tighten tighten = kAsIs;
    float spread = 2.0f;  // the live tokens' standard deviation (small: similar weights, cheap searches)
  };
  const Config configs[] = {
      {111, 0, 0, 0.0f, {1.0f, 10, 1.0f, 0.0f}},             // candidates: top-k
      {111, 0, 0, 0.0f, {0.8f, 0, 0.6f, 0.0f}},              // candidates: top-p
      {111, 0, 0, 0.0f, {0.8f, 0, 0.6f, 0.0f}, DType::kFloat32, 0, false, kTightP},
      {111, 0, 0, 0.0f, {1.0f, 0, 1.0f, 0.3f}},              // candidates: min-p
      {111, 0, 0, 0.0f, {1.0f, 0, 1.0f, 0.3f}, DType::kFloat32, 0, false, kTightM},
      {111, 0, 0, 0.0f, {1.0f, 30, 0.8f, 0.1f}},             // candidates: all three
      {111, 40, 12, -kInf, {1.0f, 10, 1.0f, 0.0f}},          // candidates: top-k inside a tie group
      {111, 40, 12, -kInf, {1.0f, 10, 1.0f, 0.0f}, DType::kFloat32, 0, true},
      {111, 23, 23, -40.0f, {1.0f, 0, 0.5f, 0.0f}},          // candidates: top-p inside a tie group
      {111, 20, 0, 0.0f, {1.0f, 3, 1.0f, 0.0f}, DType::kFloat32, 5},   // +inf: top-k among them
      {111, 20, 0, 0.0f, {1.0f, 0, 0.5f, 0.0f}, DType::kFloat32, 5},   // +inf: top-p among them
      {6000, 40, 0, -kInf, {0.8f, 0, 0.6f, 0.0f}},           // radix: top-p
      {6000, 40, 0, -kInf, {0.8f, 0, 0.6f, 0.0f}, DType::kFloat32, 0, false, kTightP},
      {6000, 40, 0, -kInf, {1.0f, 0, 1.0f, 0.3f}},           // race only: min-p
      {6000, 40, 0, -kInf, {1.0f, 0, 1.0f, 0.3f}, DType::kFloat32, 0, true, kTightM},  // one block
      {6000, 40, 0, -kInf, {1.0f, 0, 1.0f, 0.3f}, DType::kFloat32, 0, true, kTightMDrop},
      {6000, 40, 0, -kInf, {1.0f, 0, 0.7f, 0.2f}},           // radix: top-p and min-p
      {6000, 23, 23, -kInf, {1.0f, 0, 0.5f, 0.0f}},          // radix: top-p inside a tie group
      {6000, 23, 23, -kInf, {1.0f, 0, 0.5f, 0.0f}, DType::kFloat32, 0, true},
      {6000, 1500, 1500, -kInf, {1.0f, 1200, 1.0f, 0.0f}},   // radix: K > kMaxCandidateK in a tie group
      {6000, 1500, 1500, -kInf, {1.0f, 1200, 1.0f, 0.0f}, DType::kFloat32, 0, true},
      {6000, 1500, 0, -kInf, {1.0f, 1200, 1.0f, 0.0f}, DType::kFloat32, 0, false, kAsIs, 0.2f},  // radix: top-k, no ties
      {6000, 1500, 0, -kInf, {1.0f, 1100, 0.9f, 0.0f}, DType::kFloat32, 0, false, kAsIs, 0.5f},  // top-k and top-p
      {6000, 60, 0, -kInf, {0.9f, 0, 0.75f, 0.0f}, DType::kBFloat16},  // radix, bf16 (ties)
      {32000, 60, 0, -30.0f, {0.7f, 0, 0.8f, 0.0f}},         // radix over a finite background
      {32000, 60, 0, -30.0f, {0.7f, 0, 0.8f, 0.0f}, DType::kFloat32, 0, false, kTightP},
      {128256, 40, 0, -kInf, {0.8f, 0, 0.6f, 0.0f}},         // radix, split plans
      {128256, 40, 0, -kInf, {1.0f, 0, 1.0f, 0.25f}},        // race only, split plans
      {128256, 0, 0, 0.0f, {0.8f, 30, 1.0f, 0.0f}},          // candidates, split plans
      {128256, 1200, 0, -kInf, {1.0f, 1050, 1.0f, 0.0f}, DType::kFloat32, 0, false, kAsIs, 0.1f},  // radix top-k, split
  };
  std::vector<Row> rows;
  for (const Config& cf : configs) {
    std::vector<float> l(static_cast<size_t>(cf.vocab), cf.background);
    std::vector<int64_t> live(static_cast<size_t>(cf.vocab));
    std::iota(live.begin(), live.end(), int64_t{0});
    if (cf.contiguous) {
      // Within one block where they fit: 7 past a block start.
      const int64_t blocks = cf.vocab / 256;
      const int64_t start = cf.live <= 249 && blocks > 0 ? 256 * static_cast<int64_t>(rng() % blocks) + 7
                                                          : static_cast<int64_t>(rng() % (cf.vocab - cf.live));
      std::rotate(live.begin(), live.begin() + start, live.end());
    } else {
      std::shuffle(live.begin(), live.end(), rng);
    }
    const int n = cf.live > 0 ? cf.live : static_cast<int>(cf.vocab);
    for (int i = 0; i < n; ++i) l[live[i]] = i < cf.tied ? 1.0f : cf.spread * n01(rng);
    for (int i = 0; i < cf.inf; ++i) l[live[n - 1 - i]] = kInf;
    RowSpec spec = cf.spec;
    spec.seed = static_cast<int64_t>(rng()) << 20;
    Row row;
    row.spec = spec;
    row.dtype = cf.dtype;
    for (float x : l) row.bits.push_back(EncodeBits(cf.dtype, x));
    for (uint32_t b : row.bits) row.values.push_back(DecodeBits(cf.dtype, b));
    if (cf.tighten != kAsIs) {
      const KeptSet loose = ExactKept(row.values, spec);
      if (cf.tighten == kTightP) {
        // p W 2e-4 below the prefix mass of the cut: the same cut, a target 1.001 p would move it.
        double W = 0, S = 0;
        for (double w : ExactWeightsInOrder(row.values, spec)) W += w;
        for (double w : loose.kept_w) S += w;
        spec.p = static_cast<float>(S / W * (1 - 2e-4));
      } else if (cf.tighten == kTightMDrop) {
        // m 2e-4 above the second token's w: only the first (and its ties) stays.
        const std::vector<double> w = ExactWeightsInOrder(row.values, spec);
        ASSERT_LT(w[1], 1.0);
        spec.m = static_cast<float>(w[1] * (1 + 2e-4));
      } else if (loose.kept.size() >= 2) {
        // m 2e-4 above the last kept token's w: it is now dropped, by a hair.
        spec.m = static_cast<float>(loose.kept_w.back() * (1 + 2e-4));
      } else {
        // m 2e-4 below the first dropped token's w: it is now kept, by a hair.
        ASSERT_GT(loose.min_p_dropped_w, 0.0);
        spec.m = static_cast<float>(loose.min_p_dropped_w * (1 - 2e-4));
      }
      row.spec = spec;
    }
    const KeptSet ks = ExactKept(row.values, spec);
    ASSERT_FALSE(ks.outside.empty()) << "vocab " << cf.vocab << ": no boundary in this configuration";
    // About 4e6 quotients per configuration.
    const int64_t tries = 4000000 / static_cast<int64_t>(ks.kept.size() + ks.outside.size());
    // Offsets where the reference itself is ambiguous (a cut within its margin) are left out; every
    // configuration keeps at least one.
    size_t taken = 0;
    for (int64_t o : DecidingOffsets(ks, spec, tries)) {
      row.spec.offset = o;
      row.expect = Reference(row.values, row.spec);
      if (row.expect.allowed.size() != 1) continue;
      rows.push_back(row);
      ++taken;
    }
    EXPECT_GE(taken, 1u) << "vocab " << cf.vocab << " " << Describe(row);
  }
  std::printf("  %zu rows at deciding offsets for %zu configurations\n", rows.size(), std::size(configs));
  EXPECT_GE(rows.size(), 2 * std::size(configs) * 9 / 10);
  std::map<std::pair<int, int64_t>, std::vector<const Row*>> groups;  // (dtype, vocab)
  for (const Row& r : rows) groups[{static_cast<int>(r.dtype), static_cast<int64_t>(r.values.size())}].push_back(&r);
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (const auto& [key, part] : groups) {
      const DType dtype = static_cast<DType>(key.first);
      const int64_t v = key.second;
      const std::string what = std::string(hwy::TargetName(target)) + " " + ShortName(dtype) + " vocab " + std::to_string(v);
      const Outcome together = RunBatch(dtype, v, part, {2, Order::kOneCall, 0}, rng);
      for (size_t i = 0; i < part.size(); ++i) {
        EXPECT_EQ(together.out[i], part[i]->expect.allowed[0]) << what << " " << Describe(*part[i]);
        const Outcome alone = RunBatch(dtype, v, {part[i]}, {16, Order::kRandomSplits, 0}, rng);
        EXPECT_EQ(alone.out[0], part[i]->expect.allowed[0]) << what << " alone " << Describe(*part[i]);
      }
    }
  }
}

// Equal quotients go to the lower index. Every logit equal (w = 1 exactly), so q = 1 / -log u and
// two tokens tie where their uniforms do: (seed, offset) pairs found by a search over offsets
// (checked here) where the largest u of the row belongs to two tokens a < b, in the same vector
// lane (b - a a multiple of 16) or not, on the candidate path (vocab 3000), the vectorized race
// (6000) and split rows where a and b fall in different segments (128256, 16 threads).
TEST(CpuSamplingKernel, EqualQuotientsGoToTheLowerIndex) {
  struct Tie {
    int64_t vocab, seed, offset, a, b;
  };
  const Tie ties[] = {
      {3000, 11, 5312, 2007, 2953},       {3000, 12, 38731, 424, 1272},      {6000, 13, 1561, 833, 1847},
      {6000, 14, 52308, 533, 5525},       {128256, 15, 102, 114308, 122512}, {128256, 16, 3615, 6761, 15609},
  };
  std::mt19937 rng(9);
  for (const Tie& tie : ties) {
    // The claim: u_a == u_b, and every other token's u is smaller.
    const float ua = kernels::sampling_uniform(tie.seed, tie.offset, tie.a);
    ASSERT_EQ(ua, kernels::sampling_uniform(tie.seed, tie.offset, tie.b));
    for (int64_t i = 0; i < tie.vocab; ++i) {
      if (i != tie.a && i != tie.b) {
        ASSERT_LT(kernels::sampling_uniform(tie.seed, tie.offset, i), ua) << i;
      }
    }
    Row row;
    row.spec = {1.0f, 0, 1.0f, 0.0f, tie.seed, tie.offset};
    row.values.assign(static_cast<size_t>(tie.vocab), 0.5f);
    row.bits.assign(static_cast<size_t>(tie.vocab), EncodeBits(DType::kFloat32, 0.5f));
    Row other = row;
    other.spec.offset = tie.offset + 1;
    for (int64_t target : KernelTargets()) {
      TargetScope scope(target);
      EXPECT_EQ(RunBatch(DType::kFloat32, tie.vocab, {&row}, {16, Order::kRandomSplits, 0}, rng).out[0], tie.a)
          << hwy::TargetName(target) << " vocab " << tie.vocab << " alone";
      EXPECT_EQ(RunBatch(DType::kFloat32, tie.vocab, {&other, &row, &other}, {2, Order::kThreads, 0}, rng).out[1], tie.a)
          << hwy::TargetName(target) << " vocab " << tie.vocab << " in a batch";
    }
  }
}

// ---------------------------------------------------------------- distribution

// Q(a, x), the regularized upper incomplete gamma function: the chi-squared survival function is
// Q(df / 2, x / 2). A series below a + 1, a continued fraction (modified Lentz) above.
double UpperGammaQ(double a, double x) {
  if (x <= 0) return 1.0;
  const double log_front = a * std::log(x) - x - std::lgamma(a);
  if (x < a + 1) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 1000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (term < sum * 1e-16) break;
    }
    return 1.0 - std::exp(log_front) * sum;
  }
  double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
  for (int n = 1; n < 1000; ++n) {
    const double an = -n * (n - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (std::fabs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < 1e-16) break;
  }
  return std::exp(log_front) * h;
}

// The expected probabilities of the tokens under s (exact arithmetic in float64).
std::vector<double> Distribution(const std::vector<float>& l, const RowSpec& s) {
  const int64_t v = static_cast<int64_t>(l.size());
  std::vector<int64_t> order(static_cast<size_t>(v));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return l[a] > l[b]; });
  const double l_max = l[order[0]];
  const int64_t K = s.k > 0 && s.k < v ? s.k : v;
  std::vector<double> w(static_cast<size_t>(v), 0.0);
  double W = 0;
  for (int64_t j = 0; j < K; ++j) W += w[order[j]] = std::exp((l[order[j]] - l_max) / s.t);
  std::vector<double> prob(static_cast<size_t>(v), 0.0);
  double cum = 0, kept = 0;
  for (int64_t j = 0; j < K; ++j) {
    const double wj = w[order[j]];
    if (j > 0 && s.p < 1.0f && cum >= s.p * W) break;
    cum += wj;
    if (wj < s.m) continue;
    prob[order[j]] = wj;
    kept += wj;
  }
  for (double& x : prob) x /= kept;
  return prob;
}

// The chi-squared statistic of counts against probabilities, over the tokens of positive
// probability (a count on a token of probability 0 gives infinity); df = those tokens - 1.
double ChiSquared(const std::vector<int64_t>& counts, const std::vector<double>& prob, int64_t n, int& df) {
  double x = 0;
  df = -1;
  for (size_t i = 0; i < prob.size(); ++i) {
    if (prob[i] == 0) {
      if (counts[i] > 0) return INFINITY;
      continue;
    }
    const double e = prob[i] * static_cast<double>(n);
    x += (counts[i] - e) * (counts[i] - e) / e;
    ++df;
  }
  return x;
}

// Draws of one row's token over offsets 0 .. n - 1 (rows of one batch differ only in offset): on
// the candidate path (vocab 6) and on the radix path with the vectorized race (vocab 5000: six
// finite tokens among -inf, top_k off). A chi-squared test at false-alarm rate 1e-6 (fixed seeds:
// deterministic) must accept the definition's distribution and reject each nearby wrong one (no
// temperature, no min-p, no top-p, no top-k), which a biased uniform or a wrong renormalization
// would look like; at least `distinct` of those differ from it (by 0.05 in L1) in this configuration.
void CheckDistribution(int64_t v, const std::vector<int64_t>& positions, const RowSpec& spec, int64_t draws,
                       size_t distinct) {
  const std::vector<float> finite = {2.0f, 1.6f, 1.6f, 0.9f, -0.5f, 0.2f};
  std::vector<float> l(static_cast<size_t>(v), -kInf);
  for (size_t i = 0; i < positions.size(); ++i) l[positions[i]] = finite[i];
  const std::vector<double> prob = Distribution(l, spec);
  std::vector<std::vector<double>> wrong;
  for (RowSpec alt : {RowSpec{1.0f, spec.k, spec.p, spec.m}, RowSpec{spec.t, spec.k, spec.p, 0.0f},
                      RowSpec{spec.t, spec.k, 1.0f, spec.m}, RowSpec{spec.t, 0, spec.p, spec.m}}) {
    const std::vector<double> q = Distribution(l, alt);
    double diff = 0;
    for (size_t i = 0; i < q.size(); ++i) diff += std::fabs(q[i] - prob[i]);
    if (diff > 0.05) wrong.push_back(q);
  }
  ASSERT_GE(wrong.size(), distinct) << "the configuration must tell the alternatives apart";
  Row row;
  row.values = l;
  for (float x : l) row.bits.push_back(EncodeBits(DType::kFloat32, x));
  std::mt19937 rng(11);
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    const int64_t batch = 256;
    std::vector<Row> rows(static_cast<size_t>(batch), row);
    std::vector<int64_t> counts(static_cast<size_t>(v), 0);
    for (int64_t o0 = 0; o0 < draws; o0 += batch) {
      std::vector<const Row*> part;
      for (int64_t r = 0; r < batch && o0 + r < draws; ++r) {
        rows[r].spec = spec;
        rows[r].spec.seed = 0x5eed;
        rows[r].spec.offset = o0 + r;
        part.push_back(&rows[r]);
      }
      const Outcome o = RunBatch(DType::kFloat32, v, part, {2, Order::kOneCall, 0}, rng);
      for (int64_t tok : o.out) {
        ASSERT_GE(tok, 0);
        ASSERT_LT(tok, v);
        ++counts[tok];
      }
    }
    int df = 0;
    const double x = ChiSquared(counts, prob, draws, df);
    const double pvalue = UpperGammaQ(df / 2.0, x / 2.0);
    EXPECT_GT(pvalue, 1e-6) << hwy::TargetName(target) << " vocab " << v << ": chi-squared " << x << " df " << df;
    for (const auto& q : wrong) {
      int dfw = 0;
      const double xw = ChiSquared(counts, q, draws, dfw);
      EXPECT_LT(std::isinf(xw) ? 0.0 : UpperGammaQ(dfw / 2.0, xw / 2.0), 1e-6)
          << hwy::TargetName(target) << " vocab " << v << ": a wrong distribution was not rejected";
    }
  }
}

TEST(CpuSamplingKernel, DrawsFollowTheKeptDistribution) {
  // Logits {2, 1.6, 1.6, 0.9, -0.5, 0.2}. T 0.8: w = {1, .61, .61, .25, .04, .11}; top-k 5 drops
  // -0.5; W = 2.57 and the prefix 1, 1.61, 2.21, 2.47 reaches 0.95 W = 2.44 at 0.9: top-p drops
  // 0.2, min-p 0.05 keeps the four. Distinct: no temperature, no top-p, no top-k.
  CheckDistribution(6, {0, 1, 2, 3, 4, 5}, RowSpec{0.8f, 5, 0.95f, 0.05f}, 40000, 3);
  // Top-k off: the radix path (vocab > kMaxCandidates) and the vectorized race. T 0.7, top-p 0.95
  // keeps four. Distinct: no temperature, no top-p (min-p and top-p both cut the tail, so only
  // one of them can matter).
  CheckDistribution(5000, {3, 1000, 1001, 2050, 4095, 4999}, RowSpec{0.7f, 0, 0.95f, 0.05f}, 20000, 2);
}

// The chi-squared machinery itself: known quantiles.
TEST(CpuSamplingKernel, ChiSquaredSurvivalFunction) {
  EXPECT_NEAR(UpperGammaQ(1.0, 27.631021 / 2), 1e-6, 1e-9);  // df 2: exp(-x / 2)
  EXPECT_NEAR(UpperGammaQ(0.5, 3.841459 / 2), 0.05, 1e-6);   // df 1
  EXPECT_NEAR(UpperGammaQ(2.5, 11.070498 / 2), 0.05, 1e-6);  // df 5
  EXPECT_NEAR(UpperGammaQ(5.0, 2.558212 / 2), 0.99, 1e-6);   // df 10
}

// ---------------------------------------------------------------- memory and rejections

// Rows and the per-row arrays (temperature, top-k, top-p, min-p, seeds, offsets, out) that end right
// before an inaccessible page (tails of every dtype are read exactly).
TEST(CpuSamplingKernel, ReadsNothingPastTheRow) {
  std::mt19937 rng(6);
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      for (int64_t v : {1, 111, 257, 32001}) {
        for (const RowSpec& s : {RowSpec{0.0f, 0, 1.0f, 0.0f}, RowSpec{0.9f, 40, 0.9f, 0.0f, 5, 6},
                                 RowSpec{1.1f, 0, 0.7f, 0.0f, 7, 8}, RowSpec{1.0f, 0, 1.0f, 0.1f, 9, 10}}) {
          const Row row = MakeRow(dtype, v, Gen::kNormal1, s, rng);
          const size_t bytes = static_cast<size_t>(v) * ElemSize(dtype);
          GuardedRegion region(bytes);
          ASSERT_TRUE(region.ok());
          char* data = region.tail(bytes);
          for (int64_t i = 0; i < v; ++i) StoreBits(dtype, data, i, row.bits[i]);
          // The per-row arrays (one row) end at guard pages too.
          GuardedArray<float> t(&s.t, 1), p(&s.p, 1), m(&s.m, 1);
          GuardedArray<int32_t> k(&s.k, 1);
          const int64_t minus7 = -7;
          GuardedArray<int64_t> seed(&s.seed, 1), offset(&s.offset, 1), out(&minus7, 1);
          ASSERT_TRUE(t.ok() && p.ok() && m.ok() && k.ok() && seed.ok() && offset.ok() && out.ok());
          SamplingParams sp;
          sp.dtype = dtype;
          sp.batch = 1;
          sp.vocab = v;
          sp.logits = data;
          sp.logits_row_stride = 0;
          sp.temperature = t.data();
          sp.top_k = k.data();
          sp.top_p = p.data();
          sp.min_p = m.data();
          sp.seeds = seed.data();
          sp.offsets = offset.data();
          sp.out = out.data();
          for (int threads : {1, 16}) {
            const SamplePlan plan = plan_sample(sp, threads);
            auto ws = hwy::AllocateAligned<uint8_t>(static_cast<size_t>(std::max<int64_t>(plan.workspace_bytes, 64)));
            for (size_t ph = 0; ph < plan.phase_items.size(); ++ph) {
              ASSERT_TRUE(sample(sp, plan, ws.get(), static_cast<int>(ph), 0, plan.phase_items[ph]).is_ok());
            }
            ASSERT_EQ(row.expect.allowed.size(), 1u) << "a near-tie; change the seed";
            EXPECT_EQ(out[0], row.expect.allowed[0]) << ShortName(dtype) << " vocab " << v;
          }
        }
      }
    }
  }
}

TEST(CpuSamplingKernel, PlansFollowTheShapes) {
  SamplingParams sp;
  sp.vocab = 128256;
  sp.batch = 64;
  sp.logits_row_stride = sp.vocab;
  SamplePlan plan = plan_sample(sp, 2);
  EXPECT_EQ(plan.phase_items, std::vector<int64_t>{64});  // rows >= threads: one item per row
  EXPECT_EQ(plan.segments, 1);
  EXPECT_EQ(plan.blocks, 501);
  sp.batch = 3;
  plan = plan_sample(sp, 16);  // fewer rows than threads: rows split into segments
  EXPECT_EQ(plan.segments, 6);
  EXPECT_EQ(plan.phase_items, (std::vector<int64_t>{18, 3, 18, 3, 18, 3}));
  EXPECT_GE(plan.segments * plan.segment_blocks, plan.blocks);
  EXPECT_GT(plan.workspace_bytes, 0);
  sp.vocab = 2000;  // too short to split
  sp.logits_row_stride = 2000;
  EXPECT_EQ(plan_sample(sp, 16).phase_items, std::vector<int64_t>{3});
  sp.batch = 0;
  EXPECT_EQ(plan_sample(sp, 4).phase_items, std::vector<int64_t>{0});
}

TEST(CpuSamplingKernel, RejectsInvalidArguments) {
  std::vector<float> logits(64, 0.0f), t(2, 1.0f), p(2, 1.0f), m(2, 0.0f);
  std::vector<int32_t> k(2, 0);
  std::vector<int64_t> seeds(2, 0), offsets(2, 0), out(2, -7);
  auto valid = [&] {
    SamplingParams sp;
    sp.batch = 2;
    sp.vocab = 32;
    sp.logits = logits.data();
    sp.logits_row_stride = 32;
    sp.temperature = t.data();
    sp.top_k = k.data();
    sp.top_p = p.data();
    sp.min_p = m.data();
    sp.seeds = seeds.data();
    sp.offsets = offsets.data();
    sp.out = out.data();
    return sp;
  };
  auto expect_rejected = [&](const SamplingParams& sp, const std::string& what) {
    const SamplePlan plan = plan_sample(sp, 1);
    std::vector<int64_t> before = out;
    for (size_t ph = 0; ph < plan.phase_items.size(); ++ph) {
      const Status st = sample(sp, plan, nullptr, static_cast<int>(ph), 0, std::max<int64_t>(plan.phase_items[ph], 1));
      EXPECT_EQ(st, Status::kInvalidArgument) << what;
      EXPECT_EQ(std::string(st.reason).rfind("sample: ", 0), 0u) << what << ": " << st.reason;
    }
    EXPECT_EQ(out, before) << what << ": out written";
  };
  SamplingParams sp = valid();
  sp.logits = nullptr;
  expect_rejected(sp, "null logits");
  for (int f = 0; f < 7; ++f) {
    sp = valid();
    switch (f) {
      case 0: sp.temperature = nullptr; break;
      case 1: sp.top_k = nullptr; break;
      case 2: sp.top_p = nullptr; break;
      case 3: sp.min_p = nullptr; break;
      case 4: sp.seeds = nullptr; break;
      case 5: sp.offsets = nullptr; break;
      case 6: sp.out = nullptr; break;
    }
    expect_rejected(sp, "null pointer " + std::to_string(f));
  }
  sp = valid();
  sp.vocab = 0;
  expect_rejected(sp, "vocab 0");
  sp = valid();
  sp.vocab = int64_t{1} << 31;
  sp.logits_row_stride = sp.vocab;
  expect_rejected(sp, "vocab 2^31");
  sp = valid();
  sp.dtype = static_cast<DType>(7);
  expect_rejected(sp, "dtype");
  sp = valid();
  sp.batch = -1;
  expect_rejected(sp, "negative batch");
  sp = valid();
  sp.logits_row_stride = 31;
  expect_rejected(sp, "stride below vocab");

  // Plans and ranges.
  sp = valid();
  SamplePlan plan = plan_sample(sp, 1);
  EXPECT_TRUE(sample(sp, plan, nullptr, 0, 0, 2).is_ok());
  EXPECT_EQ(sample(sp, plan, nullptr, 1, 0, 1), Status::kInvalidArgument);   // no phase 1
  EXPECT_EQ(sample(sp, plan, nullptr, -1, 0, 1), Status::kInvalidArgument);
  EXPECT_EQ(sample(sp, plan, nullptr, 0, 0, 3), Status::kInvalidArgument);   // past the items
  EXPECT_EQ(sample(sp, plan, nullptr, 0, 2, 1), Status::kInvalidArgument);   // begin > end
  EXPECT_EQ(sample(sp, plan, nullptr, 0, -1, 1), Status::kInvalidArgument);
  SamplingParams other = sp;
  other.batch = 1;
  EXPECT_EQ(sample(other, plan, nullptr, 0, 0, 1), Status::kInvalidArgument);  // plan of other shapes
  SamplePlan tampered = plan;
  tampered.phase_items = {2, 2, 2, 2, 2, 2};
  EXPECT_EQ(sample(sp, tampered, nullptr, 3, 0, 1), Status::kInvalidArgument);
  // A split plan needs its workspace.
  std::vector<float> big(2 * 8192, 0.0f);
  sp.logits = big.data();
  sp.vocab = 8192;
  sp.logits_row_stride = 8192;
  plan = plan_sample(sp, 16);
  ASSERT_GT(plan.workspace_bytes, 0);
  EXPECT_EQ(sample(sp, plan, nullptr, 0, 0, 1), Status::kInvalidArgument);
  tampered = plan;
  tampered.histogram_offset += 64;
  auto ws = hwy::AllocateAligned<uint8_t>(static_cast<size_t>(plan.workspace_bytes) + 64);
  EXPECT_EQ(sample(sp, tampered, ws.get(), 0, 0, 1), Status::kInvalidArgument);
  EXPECT_EQ(sample(sp, plan, ws.get() + 8, 0, 0, 1), Status::kInvalidArgument);  // misaligned
  EXPECT_TRUE(sample(sp, plan, ws.get(), 0, 0, 1).is_ok());
  // No rows: nothing to read, null pointers are fine.
  SamplingParams empty;
  empty.vocab = 10;
  plan = plan_sample(empty, 4);
  EXPECT_TRUE(sample(empty, plan, nullptr, 0, 0, 0).is_ok());
}

}  // namespace
}  // namespace xllm_kernel::cpu
