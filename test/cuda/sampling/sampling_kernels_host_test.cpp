// Torch-free host tests of csrc/cuda/sampling: every block and thread of the plans that plan_sample
// picks runs on the CPU (kernels::sample_run_block with a team that runs each step for every thread
// in turn: the code the device runs, shared memory filled with garbage first), against a scalar
// reference written here from csrc/common/sampling.h (sort by logit descending and index ascending,
// top-k, the top-p prefix by long double sums, min-p, the race with the header's uniforms). The
// grid: vocabularies 111, 32000 and 128256 x temperature {0, 0.7, 1.3} x top_p {0.1, 0.5, 0.9, 1} x
// top_k {0, 1, 10, 100, 500} x min_p {0, 0.05, 0.2} x logits N(0, 1), N(0, 5), a few spikes, shares
// of -inf, all -inf but one, +inf, NaN and heavy ties; both paths of the kernel (candidates gathered
// in shared memory, and every pass over the row); float32, bfloat16 and float16, 16-byte and element
// loads, strided batches with a grid smaller than the batch. Also the non-finite and invalid-parameter
// rules, the race's distribution, Philox's known answers, the fixed-point arithmetic, the plan and the
// launcher's argument checks. The logits lie in buffers between inaccessible pages, so a read outside
// a row crashes the test.
//
// Where the reference's exact masses put the top-p boundary within the kernel's fixed-point rounding
// of it (2 (vocab + 1) 2^-mass_shift), every boundary in that window is accepted; the tests count
// these cases and require them to be rare.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "csrc/common/sampling.h"
#include "csrc/cuda/common/device.h"
#include "csrc/cuda/sampling/sampling.cuh"
#include "csrc/cuda/sampling/sampling.h"
#include "test/cuda/common/host_buffers.h"
#include "test/cuda/element_codec.h"
#include "test/cuda/launcher_status.h"

namespace xllm_kernel::cuda {
namespace {

using ::xllm_kernel::cuda::name_of;  // the dtype's (test/cuda/element_codec.h), beside this file's own
using ::xllm_kernel::kernels::kInvalidRow;
using ::xllm_kernel::kernels::logit_order_key;
using ::xllm_kernel::kernels::Philox4x32;
using ::xllm_kernel::kernels::philox4x32_10;
using ::xllm_kernel::kernels::sampling_uniform;
using ::xllm_kernel::kernels::sampling_words;
using kernels::SampleArgs;
using kernels::SampleShared;

constexpr int kSms = 132;
constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// Logits of `batch` rows of `vocab` tokens, row r at element r * stride, after `lead` elements (a
// base that is not 16-byte aligned when lead is not a multiple of 16 bytes).
struct Logits {
  DType dtype;
  int64_t batch, vocab, stride, lead;
  GuardedBuffer mem;
  Logits(DType t, int64_t rows, int64_t v, int64_t s, int64_t lead_elements = 0)
      : dtype(t), batch(rows), vocab(v), stride(s), lead(lead_elements),
        mem(static_cast<size_t>((lead_elements + (rows - 1) * s + v) * es(t))) {
    std::memset(mem.data(), 0xFF, static_cast<size_t>((lead + (batch - 1) * stride + vocab) * es(dtype)));
  }
  static int64_t es(DType t) { return ::xllm_kernel::kernels::element_size(t); }
  void* base() const { return mem.data() + lead * es(dtype); }
  void* at(int64_t r, int64_t i) const { return static_cast<unsigned char*>(base()) + (r * stride + i) * es(dtype); }
  void set(int64_t r, int64_t i, float v) const { from_double(at(r, i), dtype, v); }
  float get(int64_t r, int64_t i) const { return static_cast<float>(to_double(at(r, i), dtype)); }
  // Row r as the kernel reads it (rounded to the dtype).
  std::vector<float> row(int64_t r) const {
    std::vector<float> v(static_cast<size_t>(vocab));
    for (int64_t i = 0; i < vocab; ++i) v[i] = get(r, i);
    return v;
  }
};

// Per-row parameters and results.
struct Rows {
  std::vector<float> temperature, top_p, min_p;
  std::vector<int32_t> top_k;
  std::vector<int64_t> seeds, offsets, out;
  std::vector<uint8_t> row_nan;
  explicit Rows(int64_t n)
      : temperature(n, 1.0f), top_p(n, 1.0f), min_p(n, 0.0f), top_k(n, 0), seeds(n, 0), offsets(n, 0),
        out(n + 1, -7), row_nan(n + 1, 0xEE) {}
};

SamplingParams params_of(const Logits& l, Rows& r) {
  SamplingParams p;
  p.dtype = l.dtype;
  p.batch = l.batch;
  p.vocab = l.vocab;
  p.logits = l.base();
  p.logits_row_stride = l.stride;
  p.temperature = r.temperature.data();
  p.top_k = r.top_k.data();
  p.top_p = r.top_p.data();
  p.min_p = r.min_p.data();
  p.seeds = r.seeds.data();
  p.offsets = r.offsets.data();
  p.out = r.out.data();
  p.row_nan = r.row_nan.data();
  return p;
}

// A block on the host: each step runs for every thread in turn (the barrier is the end of the loop).
struct HostTeam {
  template <class F>
  void step(F&& f) {
    for (int t = 0; t < kernels::kSampleThreads; ++t) f(t);
  }
};

// What the last row of the last block left in shared memory: which path it took.
struct RunInfo {
  int32_t action = -1;
  int32_t use_candidates = -1;
};

// Runs every block of `plan` on the host, shared memory garbage at the start of each block.
RunInfo run_plan(const SamplingParams& p, const SamplePlan& plan) {
  static std::unique_ptr<SampleShared> shared(new SampleShared);
  SampleArgs a;
  a.p = p;
  a.plan = plan;
  HostTeam team;
  const bool ran = kernels::dispatch_dtype(p.dtype, false, [&](auto element) {
    using T = typename decltype(element)::type;
    for (int64_t b = 0; b < plan.blocks; ++b) {
      std::memset(shared.get(), 0xA5, sizeof(SampleShared));
      if (plan.vector) {
        kernels::sample_run_block<T, true>(a, b, plan.blocks, *shared, team);
      } else {
        kernels::sample_run_block<T, false>(a, b, plan.blocks, *shared, team);
      }
    }
    return true;
  });
  EXPECT_TRUE(ran);
  return RunInfo{shared->row.action, shared->row.use_candidates};
}

// ---- The reference (csrc/common/sampling.h, written out) ----------------------------------------

// A row prepared for the reference: NaN as -inf, the order by sorting, and per temperature the
// weights along the order with their long double prefix sums.
struct RefRow {
  std::vector<float> l;        // NaN -> -inf
  std::vector<int32_t> order;  // logit descending, index ascending
  float cached_t = -1.0f;
  std::vector<float> w;              // w of order[j]
  std::vector<long double> prefix;   // prefix[n] = sum of w[0, n)

  explicit RefRow(const std::vector<float>& logits) : l(logits), order(logits.size()) {
    for (float& x : l) {
      if (std::isnan(x)) x = -kInf;
    }
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  }
  void weights(float t) {
    if (t == cached_t) return;
    cached_t = t;
    const size_t v = l.size();
    w.assign(v, 0.0f);
    prefix.assign(v + 1, 0.0L);
    const float lmax = l[order[0]];
    for (size_t j = 0; j < v; ++j) {
      const float x = l[order[j]];
      if (lmax == kInf) {
        w[j] = x == kInf ? 1.0f : 0.0f;
      } else {
        w[j] = x == -kInf ? 0.0f : std::exp((x - lmax) / t);
      }
      prefix[j + 1] = prefix[j] + w[j];
    }
  }
};

struct Expected {
  std::vector<int64_t> tokens;  // the acceptable results
  bool ambiguous = false;       // the top-p boundary lies within the fixed-point rounding window
  int64_t kept = 0;             // the prefix length (the window's lower end)
};

bool reference_valid(float t, float p, float m) {
  return t >= 0.0f && t <= std::numeric_limits<float>::max() && p > 0.0f && p <= 1.0f && m >= 0.0f && m < 1.0f;
}

Expected reference(RefRow& row, float t, int32_t k, float p, float m, int64_t seed, int64_t offset, int mass_shift) {
  Expected e;
  const int64_t v = static_cast<int64_t>(row.l.size());
  const int32_t first = row.order[0];
  if (!reference_valid(t, p, m) || row.l[first] == -kInf) {
    e.tokens = {kInvalidRow};
    return e;
  }
  if (t == 0.0f) {
    e.tokens = {first};
    return e;
  }
  row.weights(t);
  const int64_t kk = k > 0 && k < v ? k : v;
  int64_t n_lo = kk, n_hi = kk;
  if (p < 1.0f) {
    const long double total = row.prefix[kk];
    const long double target = static_cast<long double>(p) * total;
    const long double eps = 2.0L * (v + 1) * std::ldexp(1.0L, -mass_shift) + 1e-15L * total;
    auto first_reaching = [&](long double x) {
      int64_t n = 1;
      while (n < kk && row.prefix[n] < x) ++n;
      return n;
    };
    n_lo = first_reaching(target - eps);
    n_hi = first_reaching(target + eps);
  }
  e.ambiguous = n_lo != n_hi;
  e.kept = n_lo;
  // The race over the first n tokens of the order, for every n in [n_lo, n_hi].
  float best_q = -1.0f;
  int64_t best = kInvalidRow;
  for (int64_t j = 0; j < n_hi; ++j) {
    const int32_t i = row.order[j];
    const float w = row.w[j];
    if (w > 0.0f && !(w < m)) {
      const float u = sampling_uniform(seed, offset, i);
      const float q = w / -std::log(u);
      if (q > best_q || (q == best_q && i < best)) {
        best_q = q;
        best = i;
      }
    }
    if (j + 1 >= n_lo && (e.tokens.empty() || e.tokens.back() != best)) e.tokens.push_back(best);
  }
  return e;
}

// ---- Logits ---------------------------------------------------------------------------------------

enum class Dist { kNormal1, kNormal5, kSpikes, kMinusInfShare, kOneFinite, kPlusInf, kNaN, kTies };
constexpr Dist kDists[] = {Dist::kNormal1,   Dist::kNormal5, Dist::kSpikes, Dist::kMinusInfShare,
                           Dist::kOneFinite, Dist::kPlusInf, Dist::kNaN,    Dist::kTies};

const char* name_of(Dist d) {
  switch (d) {
    case Dist::kNormal1: return "N(0,1)";
    case Dist::kNormal5: return "N(0,5)";
    case Dist::kSpikes: return "spikes";
    case Dist::kMinusInfShare: return "-inf share";
    case Dist::kOneFinite: return "all -inf but one";
    case Dist::kPlusInf: return "+inf";
    case Dist::kNaN: return "NaN";
    case Dist::kTies: return "ties";
  }
  return "?";
}

std::vector<float> make_logits(Dist d, int64_t vocab, std::mt19937& rng) {
  std::vector<float> x(static_cast<size_t>(vocab));
  std::normal_distribution<float> n1(0.0f, 1.0f), n2(0.0f, 2.0f), n5(0.0f, 5.0f);
  std::uniform_int_distribution<int64_t> any(0, vocab - 1);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  switch (d) {
    case Dist::kNormal1:
      for (float& v : x) v = n1(rng);
      break;
    case Dist::kNormal5:
      for (float& v : x) v = n5(rng);
      break;
    case Dist::kSpikes:  // a few tokens far above the rest, two of them tied
      for (float& v : x) v = n1(rng);
      x[any(rng)] = 12.0f;
      x[any(rng)] = 9.0f;
      x[any(rng)] = 9.0f;
      x[any(rng)] = 8.0f;
      break;
    case Dist::kMinusInfShare:
      for (float& v : x) v = unit(rng) < 0.4f ? -kInf : n2(rng);
      break;
    case Dist::kOneFinite:
      for (float& v : x) v = -kInf;
      x[any(rng)] = n1(rng);
      break;
    case Dist::kPlusInf:
      for (float& v : x) v = unit(rng) < 0.1f ? -kInf : n1(rng);
      for (int j = 0; j < 3; ++j) x[any(rng)] = kInf;
      break;
    case Dist::kNaN:
      for (float& v : x) v = n1(rng);
      for (int j = 0; j < 5; ++j) x[any(rng)] = kNaN;
      x[0] = kNaN;
      break;
    case Dist::kTies:  // values on a grid of 0.5: every boundary falls into a group of equal logits
      for (float& v : x) v = std::round(n2(rng) * 2.0f) / 2.0f;
      break;
  }
  return x;
}

// ---- The grid -------------------------------------------------------------------------------------

constexpr float kTemperatures[] = {0.0f, 0.7f, 1.3f};
constexpr float kTopPs[] = {0.1f, 0.5f, 0.9f, 1.0f};
constexpr int32_t kTopKs[] = {0, 1, 10, 100, 500};
constexpr float kMinPs[] = {0.0f, 0.05f, 0.2f};

struct Stats {
  int64_t rows = 0, ambiguous = 0, gathered = 0, whole_row = 0, race_all = 0, done = 0, failures = 0;
};

std::string describe(int64_t vocab, DType dtype, const char* dist, float t, int32_t k, float p, float m,
                     int64_t seed, int64_t candidates) {
  return std::string(name_of(dtype)) + " vocab " + std::to_string(vocab) + " " + dist + " T " + std::to_string(t) +
         " k " + std::to_string(k) + " p " + std::to_string(p) + " min_p " + std::to_string(m) + " seed " +
         std::to_string(seed) + " candidates " + std::to_string(candidates);
}

// One row (batch 1) of `logits` under every parameter combination of the grid (540), with the
// kernel's candidate capacity set to `candidates`.
void run_grid(const Logits& logits, const char* dist, int64_t candidates, std::mt19937& rng, Stats& stats) {
  RefRow ref(logits.row(0));
  bool has_nan = false;
  for (int64_t i = 0; i < logits.vocab; ++i) has_nan = has_nan || std::isnan(logits.get(0, i));
  for (float t : kTemperatures) {
    for (float p : kTopPs) {
      for (int32_t k : kTopKs) {
        for (float m : kMinPs) {
          Rows r(1);
          r.temperature[0] = t;
          r.top_p[0] = p;
          r.top_k[0] = k;
          r.min_p[0] = m;
          r.seeds[0] = static_cast<int64_t>(rng()) << 20 ^ static_cast<int64_t>(rng());
          r.offsets[0] = static_cast<int64_t>(rng() % 100000);
          const SamplingParams sp = params_of(logits, r);
          SamplePlan plan = plan_sample(sp, kSms);
          plan.candidates = candidates;
          const RunInfo info = run_plan(sp, plan);
          const Expected e = reference(ref, t, k, p, m, r.seeds[0], r.offsets[0], plan.mass_shift);
          ++stats.rows;
          stats.ambiguous += e.ambiguous ? 1 : 0;
          if (info.action == kernels::kSampleDone) ++stats.done;
          if (info.action == kernels::kSampleRaceAll) ++stats.race_all;
          if (info.action == kernels::kSampleSelect) ++(info.use_candidates != 0 ? stats.gathered : stats.whole_row);
          const bool ok = std::find(e.tokens.begin(), e.tokens.end(), r.out[0]) != e.tokens.end();
          const bool nan_ok = r.row_nan[0] == (has_nan ? 1 : 0) && r.out[1] == -7 && r.row_nan[1] == 0xEE;
          if ((!ok || !nan_ok) && ++stats.failures <= 10) {
            ADD_FAILURE() << describe(logits.vocab, logits.dtype, dist, t, k, p, m, r.seeds[0], candidates)
                          << ": token " << r.out[0] << ", expected " << e.tokens.front()
                          << (e.tokens.size() > 1 ? " (or another in the window)" : "") << ", row_nan "
                          << int{r.row_nan[0]} << " (expected " << has_nan << ")";
          }
        }
      }
    }
  }
}

void fill(const Logits& l, int64_t r, const std::vector<float>& x) {
  for (int64_t i = 0; i < l.vocab; ++i) l.set(r, i, x[i]);
}

void expect_coverage(const Stats& s, bool both_paths) {
  EXPECT_EQ(s.failures, 0);
  EXPECT_GT(s.done, 0);
  EXPECT_GT(s.race_all, 0);
  EXPECT_GT(s.gathered, 0);
  if (both_paths) EXPECT_GT(s.whole_row, 0);
  // Boundaries within the rounding window are rare: at most 1% of the rows.
  EXPECT_LE(s.ambiguous * 100, s.rows) << s.ambiguous << " of " << s.rows;
  std::printf("  %lld rows: %lld greedy/invalid, %lld race over the row, %lld gathered, %lld over the row; "
              "%lld top-p boundaries within rounding\n",
              static_cast<long long>(s.rows), static_cast<long long>(s.done), static_cast<long long>(s.race_all),
              static_cast<long long>(s.gathered), static_cast<long long>(s.whole_row),
              static_cast<long long>(s.ambiguous));
}

void grid_for_vocab(int64_t vocab, DType dtype) {
  std::mt19937 rng(static_cast<uint32_t>(vocab + 101 * static_cast<int>(dtype)));
  Stats stats;
  for (Dist d : kDists) {
    Logits l(dtype, 1, vocab, vocab);
    fill(l, 0, make_logits(d, vocab, rng));
    run_grid(l, name_of(d), kernels::kSampleCandidates, rng, stats);
  }
  // A vocabulary of 111 always fits the candidates; the larger ones also take the row path.
  expect_coverage(stats, vocab > kernels::kSampleCandidates);
}

TEST(SamplingHost, GridVocab111MatchesTheReference) { grid_for_vocab(111, DType::kFloat32); }
TEST(SamplingHost, GridVocab32000MatchesTheReference) { grid_for_vocab(32000, DType::kFloat32); }
TEST(SamplingHost, GridVocab128256MatchesTheReference) { grid_for_vocab(128256, DType::kFloat32); }
TEST(SamplingHost, GridVocab128256BFloat16MatchesTheReference) { grid_for_vocab(128256, DType::kBFloat16); }

// Every pass over the row (no candidates), a few candidates, and the full capacity: the same tokens.
TEST(SamplingHost, RowPathAndCandidatePathsMatchTheReference) {
  for (int64_t vocab : {int64_t{111}, int64_t{32000}}) {
    for (int64_t candidates : {int64_t{0}, int64_t{1}, int64_t{64}, int64_t{kernels::kSampleCandidates}}) {
      std::mt19937 rng(static_cast<uint32_t>(vocab * 7 + candidates));
      Stats stats;
      for (Dist d : kDists) {
        Logits l(DType::kFloat32, 1, vocab, vocab);
        fill(l, 0, make_logits(d, vocab, rng));
        run_grid(l, name_of(d), candidates, rng, stats);
      }
      EXPECT_EQ(stats.failures, 0) << "candidates " << candidates;
      if (candidates == 0) EXPECT_EQ(stats.gathered, 0);
      if (candidates > 0) EXPECT_GT(stats.gathered, 0) << "candidates " << candidates;
      if (candidates < vocab) EXPECT_GT(stats.whole_row, 0) << "candidates " << candidates;
      EXPECT_EQ(stats.ambiguous, 0);
    }
  }
}

// bfloat16 and float16 (exact in float32; many ties), 16-byte loads and element loads.
TEST(SamplingHost, HalfPrecisionAndBothLoadPathsMatchTheReference) {
  for (DType dtype : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    for (int64_t lead : {int64_t{0}, int64_t{1}}) {
      for (int64_t vocab : {int64_t{111}, int64_t{32000}}) {
        std::mt19937 rng(static_cast<uint32_t>(vocab + 3 * lead + 17 * static_cast<int>(dtype)));
        Stats stats;
        for (Dist d : kDists) {
          Logits l(dtype, 1, vocab, vocab, lead);
          fill(l, 0, make_logits(d, vocab, rng));
          const SamplingParams sp = [&] {
            Rows r(1);
            return params_of(l, r);
          }();
          EXPECT_EQ(plan_sample(sp, kSms).vector, lead == 0);
          run_grid(l, name_of(d), kernels::kSampleCandidates, rng, stats);
        }
        EXPECT_EQ(stats.failures, 0) << name_of(dtype) << " lead " << lead << " vocab " << vocab;
      }
    }
  }
}

// Vocabularies of a few tokens, around the piece sizes and the digit widths.
TEST(SamplingHost, SmallAndOddVocabulariesMatchTheReference) {
  for (int64_t vocab : {1, 2, 3, 4, 5, 7, 8, 9, 31, 33, 2047, 2049, 4100}) {
    std::mt19937 rng(static_cast<uint32_t>(vocab));
    Stats stats;
    for (Dist d : kDists) {
      Logits l(DType::kBFloat16, 1, vocab, vocab);
      fill(l, 0, make_logits(d, vocab, rng));
      run_grid(l, name_of(d), kernels::kSampleCandidates, rng, stats);
    }
    EXPECT_EQ(stats.failures, 0) << "vocab " << vocab;
  }
}

// ---- Batches ----------------------------------------------------------------------------------------

// Strided rows with their own parameters, a grid smaller than the batch (blocks loop over rows), and
// a row's token independent of its position and of the other rows.
TEST(SamplingHost, StridedBatchesWithPerRowParameters) {
  constexpr int64_t kBatch = 23, kVocab = 5000;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (int64_t stride : {kVocab, kVocab + 8, kVocab + 3}) {
      std::mt19937 rng(static_cast<uint32_t>(stride + static_cast<int>(dtype)));
      Logits l(dtype, kBatch, kVocab, stride);
      Rows r(kBatch);
      std::vector<std::vector<float>> rows;
      for (int64_t b = 0; b < kBatch; ++b) {
        // Rows 11 and 17 repeat row 3 with its parameters and seed.
        const bool repeat = b == 11 || b == 17;
        rows.push_back(repeat ? rows[3] : make_logits(kDists[b % 8], kVocab, rng));
        fill(l, b, rows.back());
        const int64_t from = repeat ? 3 : b;
        if (!repeat) {
          r.temperature[b] = kTemperatures[rng() % 3];
          r.top_p[b] = kTopPs[rng() % 4];
          r.top_k[b] = kTopKs[rng() % 5];
          r.min_p[b] = kMinPs[rng() % 3];
          r.seeds[b] = static_cast<int64_t>(rng());
          r.offsets[b] = static_cast<int64_t>(rng() % 1000);
          if (b == 3) r.temperature[b] = 0.9f;  // row 3 (and its repeats) samples
        } else {
          r.temperature[b] = r.temperature[from];
          r.top_p[b] = r.top_p[from];
          r.top_k[b] = r.top_k[from];
          r.min_p[b] = r.min_p[from];
          r.seeds[b] = r.seeds[from];
          r.offsets[b] = r.offsets[from];
        }
      }
      const SamplingParams sp = params_of(l, r);
      SamplePlan plan = plan_sample(sp, kSms);
      EXPECT_EQ(plan.vector, (stride * Logits::es(dtype)) % 16 == 0);
      EXPECT_EQ(plan.blocks, kBatch);
      plan.blocks = 4;  // as on a small GPU: every block takes several rows
      run_plan(sp, plan);
      for (int64_t b = 0; b < kBatch; ++b) {
        RefRow ref(l.row(b));
        const Expected e = reference(ref, r.temperature[b], r.top_k[b], r.top_p[b], r.min_p[b], r.seeds[b],
                                     r.offsets[b], plan.mass_shift);
        EXPECT_NE(std::find(e.tokens.begin(), e.tokens.end(), r.out[b]), e.tokens.end())
            << name_of(dtype) << " stride " << stride << " row " << b << ": " << r.out[b] << " vs "
            << e.tokens.front();
        bool nan = false;
        for (int64_t i = 0; i < kVocab; ++i) nan = nan || std::isnan(l.get(b, i));
        EXPECT_EQ(r.row_nan[b], nan ? 1 : 0) << "row " << b;
      }
      EXPECT_EQ(r.out[11], r.out[3]);
      EXPECT_EQ(r.out[17], r.out[3]);
      EXPECT_EQ(r.out[kBatch], -7) << "wrote past the batch";
      EXPECT_EQ(r.row_nan[kBatch], 0xEE) << "wrote past the batch";
    }
  }
}

// ---- Non-finite logits and invalid parameters ----------------------------------------------------

struct One {
  std::vector<float> x;
  float t = 1.0f, p = 1.0f, m = 0.0f;
  int32_t k = 0;
  int64_t seed = 1, offset = 0;
  DType dtype = DType::kFloat32;
  int64_t candidates = kernels::kSampleCandidates;
};

// Runs one row; returns (token, row_nan).
std::pair<int64_t, int> run_one(const One& o) {
  const int64_t vocab = static_cast<int64_t>(o.x.size());
  Logits l(o.dtype, 1, vocab, vocab);
  fill(l, 0, o.x);
  Rows r(1);
  r.temperature[0] = o.t;
  r.top_p[0] = o.p;
  r.min_p[0] = o.m;
  r.top_k[0] = o.k;
  r.seeds[0] = o.seed;
  r.offsets[0] = o.offset;
  const SamplingParams sp = params_of(l, r);
  SamplePlan plan = plan_sample(sp, kSms);
  plan.candidates = o.candidates;
  run_plan(sp, plan);
  return {r.out[0], r.row_nan[0]};
}

TEST(SamplingHost, RowsWithoutALogitAboveMinusInfAreInvalid) {
  for (float t : {0.0f, 1.0f}) {
    for (int32_t k : {0, 3}) {
      One o;
      o.t = t;
      o.k = k;
      o.x.assign(300, -kInf);
      EXPECT_EQ(run_one(o), std::make_pair(kInvalidRow, 0));
      o.x.assign(300, kNaN);
      EXPECT_EQ(run_one(o), std::make_pair(kInvalidRow, 1));
      for (size_t i = 0; i < o.x.size(); ++i) o.x[i] = i % 2 ? kNaN : -kInf;
      EXPECT_EQ(run_one(o), std::make_pair(kInvalidRow, 1));
    }
  }
}

TEST(SamplingHost, NaNCountsAsMinusInfAndIsReported) {
  One o;
  o.x.assign(1000, kNaN);
  o.x[613] = -50.0f;
  for (float t : {0.0f, 0.5f, 2.0f}) {
    for (int32_t k : {0, 1, 5}) {
      for (float p : {0.1f, 1.0f}) {
        o.t = t;
        o.k = k;
        o.p = p;
        for (int64_t seed = 0; seed < 5; ++seed) {
          o.seed = seed;
          EXPECT_EQ(run_one(o), std::make_pair(int64_t{613}, 1));
        }
      }
    }
  }
  // A NaN never beats a number, also not the smallest one.
  o.x.assign(64, kNaN);
  o.x[40] = -std::numeric_limits<float>::max();
  o.x[50] = -std::numeric_limits<float>::max();
  o.t = 0.0f;
  EXPECT_EQ(run_one(o), std::make_pair(int64_t{40}, 1));
}

TEST(SamplingHost, GreedyTakesTheFirstOfTheOrder) {
  One o;
  o.t = 0.0f;
  o.x.assign(5000, 1.0f);
  o.x[4000] = 3.0f;
  o.x[17] = 3.0f;
  o.x[2500] = 3.0f;
  EXPECT_EQ(run_one(o).first, 17);  // ties: the lowest index
  o.x.assign(100, -1.0f);
  o.x[9] = 0.0f;
  o.x[2] = -0.0f;  // -0 == +0: the lower index
  EXPECT_EQ(run_one(o).first, 2);
  o.x[1] = kInf;
  o.x[0] = kNaN;
  EXPECT_EQ(run_one(o), std::make_pair(int64_t{1}, 1));
  // Greedy ignores k, p, m, seed and offset (when valid).
  o.x.assign(777, 0.0f);
  o.x[300] = 0.5f;
  for (int32_t k : {1, 2, 700}) {
    for (float p : {0.01f, 1.0f}) {
      o.k = k;
      o.p = p;
      o.m = 0.5f;
      o.seed = k;
      EXPECT_EQ(run_one(o).first, 300);
    }
  }
}

// l_max == +inf: the limit of the softmax, uniform among the +inf tokens that are kept.
TEST(SamplingHost, PlusInfIsUniformAmongTheKeptPlusInfTokens) {
  One o;
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.0f, 3.0f);
  o.x.resize(3000);
  for (float& v : o.x) v = n(rng);
  o.x[2999] = kInf;
  o.x[5] = kInf;
  o.x[1700] = kInf;
  o.x[6] = std::numeric_limits<float>::max();
  struct Case {
    int32_t k;
    float p;
    std::vector<int64_t> allowed;
  };
  for (const Case& c : {Case{0, 1.0f, {5, 1700, 2999}}, Case{2, 1.0f, {5, 1700}}, Case{0, 0.5f, {5, 1700}},
                        Case{0, 0.3f, {5}}, Case{1, 1.0f, {5}}, Case{10, 0.9f, {5, 1700, 2999}}}) {
    std::vector<int> hits(3000, 0);
    const int draws = 600;
    for (int s = 0; s < draws; ++s) {
      o.k = c.k;
      o.p = c.p;
      o.seed = s;
      o.offset = s * 3;
      const auto [token, nan] = run_one(o);
      ASSERT_EQ(nan, 0);
      ASSERT_NE(std::find(c.allowed.begin(), c.allowed.end(), token), c.allowed.end())
          << "k " << c.k << " p " << c.p << ": token " << token;
      hits[token] += 1;
    }
    for (int64_t a : c.allowed) {
      const double share = hits[a] / static_cast<double>(draws), expected = 1.0 / c.allowed.size();
      EXPECT_NEAR(share, expected, 5 * std::sqrt(expected * (1 - expected) / draws) + 1e-9)
          << "k " << c.k << " p " << c.p << " token " << a;
    }
  }
}

TEST(SamplingHost, InvalidParametersGiveMinusOneAndStillReportNaN) {
  const float inf = kInf;
  struct Case {
    float t, p, m;
  };
  const Case bad[] = {{-1.0f, 1.0f, 0.0f}, {kNaN, 1.0f, 0.0f},  {inf, 1.0f, 0.0f},   {-inf, 1.0f, 0.0f},
                      {1.0f, 0.0f, 0.0f},  {1.0f, -0.0f, 0.0f}, {1.0f, -0.5f, 0.0f}, {1.0f, 1.5f, 0.0f},
                      {1.0f, kNaN, 0.0f},  {1.0f, 1.0f, -0.1f}, {1.0f, 1.0f, 1.0f},  {1.0f, 1.0f, kNaN},
                      {0.0f, 0.0f, 0.0f},  {0.0f, 1.0f, 1.0f},  {-0.5f, 0.9f, 0.1f}, {1.0f, inf, 0.0f}};
  for (const Case& c : bad) {
    One o;
    o.x.assign(200, 0.5f);
    o.x[7] = kNaN;
    o.t = c.t;
    o.p = c.p;
    o.m = c.m;
    EXPECT_EQ(run_one(o), std::make_pair(kInvalidRow, 1)) << c.t << " " << c.p << " " << c.m;
    o.x[7] = 1.0f;
    EXPECT_EQ(run_one(o), std::make_pair(kInvalidRow, 0)) << c.t << " " << c.p << " " << c.m;
  }
  // The edges of the domains are valid.
  const Case good[] = {{0.0f, 1.0f, 0.0f},
                       {-0.0f, 1.0f, 0.0f},
                       {std::numeric_limits<float>::max(), 1.0f, 0.0f},
                       {std::numeric_limits<float>::denorm_min(), 1.0f, 0.0f},
                       {1.0f, std::numeric_limits<float>::denorm_min(), 0.0f},
                       {1.0f, 1.0f, 0.99999994f}};
  for (const Case& c : good) {
    One o;
    o.x.assign(200, 0.5f);
    o.x[150] = 0.75f;
    o.t = c.t;
    o.p = c.p;
    o.m = c.m;
    const int64_t token = run_one(o).first;
    EXPECT_GE(token, 0) << c.t << " " << c.p << " " << c.m;
    // Greedy, a vanishing temperature, a vanishing top-p or a min-p next to 1 all keep the first.
    if (c.t == 0.0f || c.t < 1e-30f || c.p < 1e-30f || c.m > 0.5f) EXPECT_EQ(token, 150);
  }
}

// Ties are ordered by index: top-k over equal logits keeps exactly the K lowest indices.
TEST(SamplingHost, TopKCountsTiedTokensByIndex) {
  One o;
  o.x.assign(4096, 1.0f);  // every token tied: the order is the index order
  for (int32_t k : {1, 2, 3, 100, 2049, 4095}) {
    for (int64_t candidates : {int64_t{0}, int64_t{kernels::kSampleCandidates}}) {
      for (int64_t seed = 0; seed < 8; ++seed) {
        o.k = k;
        o.seed = seed;
        o.candidates = candidates;
        const int64_t token = run_one(o).first;
        EXPECT_GE(token, 0);
        EXPECT_LT(token, k) << "k " << k << " candidates " << candidates;
      }
    }
  }
  // top-p over equal weights: p = 0.25 of 4096 tied tokens keeps exactly the first 1024.
  o.k = 0;
  o.p = 0.25f;
  int64_t largest = 0;
  for (int64_t seed = 0; seed < 200; ++seed) {
    o.seed = seed;
    const int64_t token = run_one(o).first;
    ASSERT_GE(token, 0);
    ASSERT_LT(token, 1024);
    largest = std::max(largest, token);
  }
  EXPECT_GT(largest, 900);  // and the draw spreads over them
}

// ---- The race's distribution ---------------------------------------------------------------------

// Draws over many seeds follow w / sum(w) over the kept set (a chi-square test, fixed seeds).
TEST(SamplingHost, DrawsFollowTheRenormalizedDistribution) {
  const std::vector<float> logits = {0.3f, 2.0f, -1.0f, 1.2f, 1.9f, -kInf, 0.0f, 2.0f, -3.0f, 0.7f, kNaN, 1.5f};
  struct Case {
    float t, p, m;
    int32_t k;
  };
  const Case cases[] = {{1.0f, 1.0f, 0.0f, 0}, {0.7f, 1.0f, 0.0f, 4}, {1.3f, 0.8f, 0.0f, 0},
                        {1.0f, 1.0f, 0.2f, 0}, {2.0f, 0.9f, 0.1f, 6}};
  constexpr int kDraws = 6000;
  for (const Case& c : cases) {
    RefRow ref(logits);
    ref.weights(c.t);
    const int64_t v = static_cast<int64_t>(logits.size());
    const int64_t kk = c.k > 0 && c.k < v ? c.k : v;
    int64_t n = kk;
    if (c.p < 1.0f) {
      n = 1;
      while (n < kk && ref.prefix[n] < c.p * ref.prefix[kk]) ++n;
    }
    std::vector<double> prob(v, 0.0);
    double total = 0;
    for (int64_t j = 0; j < n; ++j) {
      if (ref.w[j] > 0.0f && !(ref.w[j] < c.m)) {
        prob[ref.order[j]] = ref.w[j];
        total += ref.w[j];
      }
    }
    std::vector<int> hits(v, 0);
    for (int s = 0; s < kDraws; ++s) {
      One o;
      o.x = logits;
      o.t = c.t;
      o.p = c.p;
      o.m = c.m;
      o.k = c.k;
      o.seed = int64_t{1000003} * s + 17;
      o.offset = s;
      const int64_t token = run_one(o).first;
      ASSERT_GE(token, 0);
      ASSERT_GT(prob[token], 0.0) << "drew token " << token << ", which is not kept";
      hits[token] += 1;
    }
    double chi2 = 0;
    int cells = 0;
    for (int64_t i = 0; i < v; ++i) {
      if (prob[i] == 0) continue;
      const double expected = kDraws * prob[i] / total;
      chi2 += (hits[i] - expected) * (hits[i] - expected) / expected;
      ++cells;
    }
    // 99.99th percentile of chi-square with up to 10 degrees of freedom is about 35.6.
    EXPECT_LT(chi2, 36.0) << "T " << c.t << " p " << c.p << " m " << c.m << " k " << c.k << " cells " << cells;
  }
}

// ---- Arithmetic ----------------------------------------------------------------------------------

TEST(SamplingHost, PhiloxKnownAnswers) {
  const Philox4x32 zero = philox4x32_10(Philox4x32{{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(zero.v[0], 0x6627e8d5u);
  EXPECT_EQ(zero.v[1], 0xe169c58du);
  EXPECT_EQ(zero.v[2], 0xbc57ac4cu);
  EXPECT_EQ(zero.v[3], 0x9b00dbd8u);
  const Philox4x32 ones =
      philox4x32_10(Philox4x32{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(ones.v[0], 0x408f276du);
  EXPECT_EQ(ones.v[1], 0x41c83b0eu);
  EXPECT_EQ(ones.v[2], 0xa20bc7c6u);
  EXPECT_EQ(ones.v[3], 0x6d5451fdu);
  // The kernel's word selection and the header's per-token uniform agree.
  for (int64_t i = 0; i < 64; ++i) {
    const Philox4x32 w = sampling_words(-5, int64_t{1} << 40, i >> 2);
    EXPECT_EQ(kernels::sample_word(w, static_cast<uint32_t>(i & 3)), w.v[i & 3]);
    EXPECT_EQ(kernels::sampling_uniform_from_word(kernels::sample_word(w, static_cast<uint32_t>(i & 3))),
              sampling_uniform(-5, int64_t{1} << 40, i));
    const float u = sampling_uniform(-5, int64_t{1} << 40, i);
    EXPECT_GT(u, 0.0f);
    EXPECT_LT(u, 1.0f);
  }
}

TEST(SamplingHost, KeyValueInvertsTheOrderKey) {
  const float specials[] = {0.0f, 1.0f, -1.0f, kInf, -kInf, std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min()};
  for (float x : specials) EXPECT_EQ(kernels::sample_key_value(logit_order_key(x)), x) << x;
  EXPECT_EQ(kernels::float_bits(kernels::sample_key_value(logit_order_key(-0.0f))), 0u);  // -0 as +0
  EXPECT_EQ(kernels::sample_key_value(logit_order_key(kNaN)), -kInf);
  EXPECT_EQ(logit_order_key(-kInf), kernels::kSampleMinusInfKey);
  EXPECT_EQ(logit_order_key(kInf), kernels::kSamplePlusInfKey);
  std::mt19937 rng(3);
  for (int j = 0; j < 100000; ++j) {
    const float x = kernels::float_from_bits(static_cast<uint32_t>(rng()));
    const uint32_t key = logit_order_key(x);
    if (std::isnan(x)) {
      EXPECT_EQ(key, kernels::kSampleMinusInfKey);
      continue;
    }
    EXPECT_EQ(kernels::sample_key_value(key), x == 0.0f ? 0.0f : x);
    const float y = kernels::float_from_bits(static_cast<uint32_t>(rng()));
    if (!std::isnan(y)) EXPECT_EQ(x < y, key < logit_order_key(y)) << x << " " << y;
  }
}

// ceil(p * W) against its definition: the least t with t * 2^shift >= mantissa * W.
TEST(SamplingHost, MassTargetIsTheExactCeiling) {
  std::mt19937_64 rng(9);
  auto check = [](float p, unsigned long long w) {
    const unsigned long long t = kernels::sample_mass_target(p, w);
    int e = 0;
    const double f = std::frexp(static_cast<double>(p), &e);  // p = f 2^e, f in [0.5, 1)
    const unsigned long long mantissa = static_cast<unsigned long long>(std::ldexp(f, 24));
    const int shift = 24 - e;  // p = mantissa 2^-shift
    const unsigned __int128 product = static_cast<unsigned __int128>(mantissa) * w;
    if (shift <= 38) {
      const unsigned __int128 hi = static_cast<unsigned __int128>(t) << shift;
      EXPECT_GE(hi, product) << p << " " << w;
      if (t > 0) EXPECT_LT(static_cast<unsigned __int128>(t - 1) << shift, product) << p << " " << w;
    } else {
      // The exact quotient is below 2^88 / 2^39 = 2^49: long double (64-bit mantissa) holds it.
      const long double q = std::ldexp(static_cast<long double>(product), -shift);
      EXPECT_EQ(static_cast<long double>(t), std::ceil(q)) << p << " " << w;
    }
  };
  const float ps[] = {0.1f, 0.5f, 0.9f, 0.99999994f, 1e-7f, 1e-30f, std::numeric_limits<float>::denorm_min(),
                      std::numeric_limits<float>::min(), 0.75f, 0.3333333f};
  const unsigned long long ws[] = {1, 2, 3, 10, 1ull << 46, (1ull << 46) + 1, (1ull << 63) - 1, 1ull << 63,
                                   0x123456789abcdefull, 999999999999ull};
  for (float p : ps) {
    for (unsigned long long w : ws) check(p, w);
  }
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int j = 0; j < 20000; ++j) {
    float p = unit(rng);
    if (p == 0.0f) continue;
    if (j % 3 == 0) p = std::ldexp(p, -static_cast<int>(rng() % 120));
    if (p == 0.0f) continue;
    const unsigned long long w = rng() >> (rng() % 64);
    check(p, w);
  }
  // p * W exactly an integer: no rounding up.
  EXPECT_EQ(kernels::sample_mass_target(0.5f, 10), 5u);
  EXPECT_EQ(kernels::sample_mass_target(0.25f, 1ull << 63), 1ull << 61);
  EXPECT_EQ(kernels::sample_mass_target(0.5f, 11), 6u);
}

TEST(SamplingHost, MassesAreExactFixedPoint) {
  const float scale = kernels::sample_mass_scale(46);
  EXPECT_EQ(scale, std::ldexp(1.0f, 46));
  EXPECT_EQ(kernels::sample_mass_scale(63), std::ldexp(1.0f, 63));
  EXPECT_EQ(kernels::sample_mass(1.0f, scale), 1ull << 46);
  EXPECT_EQ(kernels::sample_mass(0.0f, scale), 0u);
  EXPECT_EQ(kernels::sample_mass(1.0f, kernels::sample_mass_scale(63)), 1ull << 63);
  EXPECT_EQ(kernels::sample_mass(std::ldexp(1.0f, -47), scale), 0u);  // truncated
  EXPECT_EQ(kernels::sample_mass(0.75f, scale), 3ull << 44);
  // The two 32-bit halves of a bucket carry exactly.
  static SampleShared s;
  kernels::sample_clear_buckets(s, 0);
  unsigned long long sum = 0;
  std::mt19937_64 rng(1);
  for (int j = 0; j < 100000; ++j) {
    const unsigned long long m = rng() >> 17;  // < 2^47
    kernels::sample_add_mass(s, 1, m);
    sum += m;
  }
  EXPECT_EQ(kernels::sample_bucket_mass(s, 1), sum);
}

// ---- The plan and the launcher's checks --------------------------------------------------------

SamplingParams valid_params(const void* logits, int64_t batch, int64_t vocab) {
  static float t[4] = {1, 1, 1, 1}, p[4] = {1, 1, 1, 1}, m[4] = {0, 0, 0, 0};
  static int32_t k[4] = {0, 0, 0, 0};
  static int64_t seeds[4] = {}, offsets[4] = {}, out[4] = {};
  SamplingParams s;
  s.dtype = DType::kBFloat16;
  s.batch = batch;
  s.vocab = vocab;
  s.logits = logits;
  s.logits_row_stride = vocab;
  s.temperature = t;
  s.top_k = k;
  s.top_p = p;
  s.min_p = m;
  s.seeds = seeds;
  s.offsets = offsets;
  s.out = out;
  return s;
}

TEST(SamplingHost, PlanRules) {
  alignas(16) static unsigned char buf[64];
  SamplingParams p = valid_params(buf, 4, 128256);
  SamplePlan plan = plan_sample(p, kSms);
  EXPECT_TRUE(plan.vector);
  EXPECT_EQ(plan.piece, 8);
  EXPECT_EQ(plan.threads, kernels::kSampleThreads);
  EXPECT_EQ(plan.blocks, 4);
  EXPECT_EQ(plan.candidates, kernels::kSampleCandidates);
  EXPECT_EQ(plan.index_bits, 17);
  EXPECT_EQ(plan.mass_shift, 46);
  EXPECT_EQ(plan.workspace_bytes, 0);
  EXPECT_EQ(sample_workspace_bytes(p, kSms), 0);
  p.dtype = DType::kFloat32;
  EXPECT_EQ(plan_sample(p, kSms).piece, 4);
  EXPECT_TRUE(plan_sample(p, kSms).vector);
  // Rows that are not 16-byte aligned: element loads.
  p.logits_row_stride = 128257;
  EXPECT_FALSE(plan_sample(p, kSms).vector);
  EXPECT_EQ(plan_sample(p, kSms).piece, 4);
  p.batch = 1;  // one row: the stride is not used
  EXPECT_TRUE(plan_sample(p, kSms).vector);
  p.logits = buf + 4;
  EXPECT_FALSE(plan_sample(p, kSms).vector);
  // The grid: at most 16 waves of 2 blocks per SM.
  p = valid_params(buf, int64_t{1} << 20, 1000);
  EXPECT_EQ(plan_sample(p, kSms).blocks, kSms * kernels::kSampleMinBlocksPerSm * kMaxWaves);
  EXPECT_EQ(plan_sample(p, 0).blocks, kernels::kSampleMinBlocksPerSm * kMaxWaves);
  // Index bits: those of vocab - 1.
  for (auto [vocab, bits] : {std::pair<int64_t, int>{1, 0}, {2, 1}, {3, 2}, {4, 2}, {5, 3}, {111, 7}, {32000, 15},
                             {65536, 16}, {65537, 17}, {(int64_t{1} << 31) - 1, 31}}) {
    p = valid_params(buf, 1, vocab);
    EXPECT_EQ(plan_sample(p, kSms).index_bits, bits) << vocab;
    EXPECT_EQ(plan_sample(p, kSms).mass_shift, 63 - bits) << vocab;
    // A row's whole mass (every w = 1) stays below 2^64.
    EXPECT_LE(static_cast<long double>(vocab) * std::ldexp(1.0L, 63 - bits), std::ldexp(1.0L, 63));
  }
  // Nothing to plan: batch 0, or parameters the launcher rejects.
  p = valid_params(buf, 0, 1000);
  EXPECT_EQ(plan_sample(p, kSms).blocks, 0);
  p = valid_params(buf, 2, 0);
  EXPECT_EQ(plan_sample(p, kSms).blocks, 0);
  EXPECT_EQ(plan_sample(p, kSms).threads, 0);
}

TEST(SamplingHost, LauncherRejectsInvalidParametersWithoutTouchingTheDevice) {
  alignas(16) static unsigned char buf[64];
  const SamplingParams good = valid_params(buf, 2, 1000);
  using P = SamplingParams;
  auto bad = [&](auto&& change, const char* reason) {
    P p = good;
    change(p);
    EXPECT_TRUE(rejected(sample(p, nullptr, 0, nullptr), reason));
    EXPECT_TRUE(rejected(sample_check(p, nullptr, 0, kSms), reason));
    EXPECT_EQ(plan_sample(p, kSms).blocks, 0);
  };
  bad([](P& p) { p.dtype = static_cast<DType>(7); }, "unknown dtype");
  bad([](P& p) { p.batch = -1; }, "batch must be >= 0");
  bad([](P& p) { p.vocab = 0; }, "vocab must be in [1, 2^31)");
  bad([](P& p) { p.vocab = int64_t{1} << 31; }, "vocab must be in [1, 2^31)");
  bad([](P& p) { p.logits_row_stride = 999; }, "logits_row_stride must be >= vocab");
  bad([](P& p) { p.logits_row_stride = -1000; }, "logits_row_stride must be >= vocab");
  bad([](P& p) {
    p.batch = int64_t{1} << 40;
    p.logits_row_stride = int64_t{1} << 30;
  }, "offsets beyond int64");
  bad([](P& p) { p.logits = nullptr; }, "null logits");
  bad([](P& p) { p.out = nullptr; }, "null logits or out");
  bad([](P& p) { p.temperature = nullptr; }, "null temperature");
  bad([](P& p) { p.top_k = nullptr; }, "top_k");
  bad([](P& p) { p.top_p = nullptr; }, "top_p");
  bad([](P& p) { p.min_p = nullptr; }, "min_p");
  bad([](P& p) { p.seeds = nullptr; }, "null seeds");
  bad([](P& p) { p.offsets = nullptr; }, "offsets");
  EXPECT_TRUE(rejected(sample(good, nullptr, -1, nullptr), "workspace_bytes must be >= 0"));
  EXPECT_TRUE(rejected(sample_check(good, nullptr, -1, kSms), "workspace_bytes must be >= 0"));
  // No workspace is needed: null and 0 are fine; row_nan is optional; one row needs no stride.
  EXPECT_TRUE(accepted(sample_check(good, nullptr, 0, kSms)));
  P one = good;
  one.batch = 1;
  one.logits_row_stride = 0;
  one.row_nan = nullptr;
  EXPECT_TRUE(accepted(sample_check(one, nullptr, 0, kSms)));
  // Zero rows: success without a launch (no device needed), even without pointers.
  P none = good;
  none.batch = 0;
  none.logits = nullptr;
  none.out = nullptr;
  none.temperature = nullptr;
  none.seeds = nullptr;
  EXPECT_TRUE(accepted(sample(none, nullptr, 0, nullptr)));
  // Valid parameters without a usable device: the runtime's error, nothing launched.
  if (!cuda_device_present()) EXPECT_TRUE(device_failure(sample(good, nullptr, 0, nullptr)));
}

}  // namespace
}  // namespace xllm_kernel::cuda
