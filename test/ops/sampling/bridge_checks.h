// One body per check of a sample bridge, for every device: the CPU tests (test/ops) and the CUDA
// tests (test/cuda) call the same functions with their device. Logits are drawn on the CPU and
// moved; the allowed tokens come from the suite's float64 reference
// (src/ops/sampling/suites/reference.h). The numerics suite covers the full grid.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "csrc/common/sampling.h"
#include "src/ops/sampling/suites/reference.h"
#include "test/ops/common/registered.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing::sampling {

inline constexpr const char* kOperation = "sample";
inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Call {
  at::Tensor logits, temperature, top_k, top_p, min_p, seeds, offsets;
};

// One row's parameters.
struct Row {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  int64_t seed = 0;
  int64_t offset = 0;
};

inline at::Tensor call(const std::string& impl, const Call& c) {
  return function_of<SampleFn>(impl)(c.logits, c.temperature, c.top_k, c.top_p, c.min_p, c.seeds, c.offsets);
}

// A call on `device`: logits (CPU, any float dtype, kept as given) and one Row per logits row.
inline Call make_call(const at::Tensor& logits, const std::vector<Row>& rows, at::Device device) {
  std::vector<float> t, p, m;
  std::vector<int32_t> k;
  std::vector<int64_t> s, o;
  for (const Row& r : rows) {
    t.push_back(r.temperature);
    k.push_back(r.top_k);
    p.push_back(r.top_p);
    m.push_back(r.min_p);
    s.push_back(r.seed);
    o.push_back(r.offset);
  }
  const auto n = static_cast<int64_t>(rows.size());
  auto f32 = [&](const std::vector<float>& v) { return at::tensor(v, at::kFloat).reshape({n}).to(device); };
  return {logits.to(device),
          f32(t),
          at::tensor(k, at::kInt).reshape({n}).to(device),
          f32(p),
          f32(m),
          at::tensor(s, at::kLong).reshape({n}).to(device),
          at::tensor(o, at::kLong).reshape({n}).to(device)};
}

// The same parameters for every row of logits, row r with offset base + r.
inline std::vector<Row> same_rows(int64_t n, Row row, int64_t base = 0) {
  std::vector<Row> rows(static_cast<size_t>(n), row);
  for (int64_t r = 0; r < n; ++r) rows[r].offset = base + r;
  return rows;
}

inline std::vector<xllm_kernel::sampling::ReferenceRow> reference(const Call& c) {
  return xllm_kernel::sampling::reference_sample(c.logits, c.temperature, c.top_k, c.top_p, c.min_p, c.seeds,
                                                 c.offsets);
}

inline std::vector<int64_t> tokens_of(const at::Tensor& t) {
  const at::Tensor h = t.to(at::kCPU).contiguous();
  return std::vector<int64_t>(h.const_data_ptr<int64_t>(), h.const_data_ptr<int64_t>() + h.numel());
}

// Every row's token is one the reference allows; returns how many rows had exactly one.
inline int64_t expect_allowed(const at::Tensor& got, const Call& c) {
  EXPECT_EQ(got.scalar_type(), at::kLong);
  EXPECT_EQ(got.dim(), 1);
  EXPECT_EQ(got.size(0), c.logits.size(0));
  const auto rows = reference(c);
  const auto tokens = tokens_of(got);
  int64_t exact = 0;
  for (size_t r = 0; r < rows.size() && r < tokens.size(); ++r) {
    const auto& a = rows[r].allowed;
    EXPECT_TRUE(std::binary_search(a.begin(), a.end(), tokens[r]))
        << "row " << r << ": token " << tokens[r] << ", " << a.size() << " allowed (first " << a.front() << ")";
    exact += rows[r].exact ? 1 : 0;
  }
  return exact;
}

// P(X >= x) for X chi-squared with `df` degrees of freedom (closed forms for integer df).
inline double chi2_survival(double x, int df) {
  const double h = x / 2;
  double q = 0;
  if (df % 2 == 0) {
    double term = 1;
    for (int i = 0; i < df / 2; ++i) {
      if (i > 0) term *= h / i;
      q += term;
    }
    return std::exp(-h) * q;
  }
  q = std::erfc(std::sqrt(h));
  double term = std::sqrt(h) / std::tgamma(1.5);  // h^(i - 1/2) / Gamma(i + 1/2), i = 1
  for (int i = 1; i <= df / 2; ++i) {
    q += std::exp(-h) * term;
    term *= h / (i + 0.5);
  }
  return q;
}

// Pearson's statistic of `counts` against probabilities `p` (same length) over n draws.
inline double chi2_statistic(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t n) {
  double x = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * static_cast<double>(n);
    x += (counts[i] - e) * (counts[i] - e) / e;
  }
  return x;
}

// ---------------------------------------------------------------- the checks

// Greedy, top_k = 1 and ties: the first token of the order (the lowest index among equal maxima).
inline void check_greedy_and_ties(const std::string& impl, at::Device device) {
  at::Tensor l = at::randn({4, 300}, at::TensorOptions().dtype(at::kFloat));
  for (int64_t r = 0; r < 4; ++r) {
    const float top = l[r].max().item<float>() + 1;
    for (const int64_t i : {200 - r, 17 + r, int64_t{250}}) l[r][i] = top;  // the lowest is 17 + r
  }
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    SCOPED_TRACE(c10::toString(dtype));
    const std::vector<Row> rows = {{0.0f}, {1.0f, 1}, {0.5f, 1, 0.3f, 0.1f}, {2.0f, 0, 1e-6f, 0.0f}};
    const auto got = tokens_of(call(impl, make_call(l.to(dtype), rows, device)));
    for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(got[r], 17 + r) << "row " << r;
  }
}

// Ties at the top-k and top-p boundaries, exact in float32: the lower indices are kept, and every
// kept token is drawn over many offsets.
inline void check_boundaries(const std::string& impl, at::Device device) {
  const int64_t n = 400;
  // top-k: logits 5, 4, then 3 at tokens 9, 2, 7 (order 0, 1, 2, 7, 9); top_k 3 keeps {0, 1, 2}.
  at::Tensor l = at::full({1, 12}, -kInf, at::TensorOptions().dtype(at::kFloat));
  l[0][0] = 5;
  l[0][1] = 4;
  for (const int64_t i : {9, 2, 7}) l[0][i] = 3;
  const auto k_tokens = tokens_of(call(impl, make_call(l.expand({n, 12}).contiguous(), same_rows(n, {3.0f, 3}), device)));
  EXPECT_EQ(std::set<int64_t>(k_tokens.begin(), k_tokens.end()), (std::set<int64_t>{0, 1, 2}));
  // top-p: eight equal logits (w = 1 exactly, sums exact): top_p 0.5 keeps the four lowest indices.
  at::Tensor u = at::full({1, 20}, -kInf, at::TensorOptions().dtype(at::kFloat));
  for (const int64_t i : {19, 3, 11, 5, 0, 14, 8, 16}) u[0][i] = 1.5f;
  const auto p_tokens =
      tokens_of(call(impl, make_call(u.expand({n, 20}).contiguous(), same_rows(n, {0.7f, 0, 0.5f}), device)));
  EXPECT_EQ(std::set<int64_t>(p_tokens.begin(), p_tokens.end()), (std::set<int64_t>{0, 3, 5, 8}));
  // min-p: w of the second token is e^-1 < 0.5 (dropped), the rest e^-0.25 (kept).
  at::Tensor m = at::full({1, 6}, -kInf, at::TensorOptions().dtype(at::kFloat));
  m[0][4] = 2;
  m[0][1] = 1;
  m[0][3] = 1.75f;
  const auto m_tokens =
      tokens_of(call(impl, make_call(m.expand({n, 6}).contiguous(), same_rows(n, {1.0f, 0, 1.0f, 0.5f}), device)));
  EXPECT_EQ(std::set<int64_t>(m_tokens.begin(), m_tokens.end()), (std::set<int64_t>{3, 4}));
}

// Infinities: a row of -inf but one gives that one; +inf tokens share the draw (the softmax's
// limit), whatever the other logits.
inline void check_infinities(const std::string& impl, at::Device device) {
  const int64_t n = 200;
  at::Tensor one = at::full({n, 50}, -kInf, at::TensorOptions().dtype(at::kFloat));
  one.select(1, 37).fill_(-3);
  for (const Row& row : {Row{0.0f}, Row{1.0f}, Row{0.3f, 10, 0.2f, 0.5f}}) {
    const auto got = tokens_of(call(impl, make_call(one, same_rows(n, row), device)));
    EXPECT_EQ(std::set<int64_t>(got.begin(), got.end()), (std::set<int64_t>{37}));
  }
  at::Tensor inf = at::randn({1, 64}, at::TensorOptions().dtype(at::kFloat)).mul_(3);
  inf[0][40] = kInf;
  inf[0][6] = kInf;
  inf[0][20] = -kInf;
  const auto got = tokens_of(call(impl, make_call(inf.expand({n, 64}).contiguous(), same_rows(n, {1.0f}), device)));
  EXPECT_EQ(std::set<int64_t>(got.begin(), got.end()), (std::set<int64_t>{6, 40}));
  EXPECT_EQ(tokens_of(call(impl, make_call(inf, {{0.0f}}, device))), (std::vector<int64_t>{6}));
}

// Random grids against the reference, every dtype, strided logits, and the same tokens for a
// strided and a contiguous call.
inline void check_grid(const std::string& impl, at::Device device) {
  int64_t rows = 0, exact = 0;
  for (const int64_t vocab : {111, 4099, 32000}) {
    for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      SCOPED_TRACE("vocab " + std::to_string(vocab) + " " + c10::toString(dtype));
      const int64_t batch = 40;
      at::Tensor l = at::randn({batch, vocab}, at::TensorOptions().dtype(at::kFloat)).mul_(vocab == 4099 ? 4 : 1);
      std::vector<Row> params;
      for (int64_t r = 0; r < batch; ++r) {
        const float t[] = {0.0f, 0.6f, 1.0f, 1.7f};
        const int32_t k[] = {0, 1, 7, 50, -3, 100000};
        const float p[] = {1.0f, 0.9f, 0.5f, 0.1f, 0.999f};
        const float m[] = {0.0f, 0.05f, 0.2f};
        params.push_back({t[r % 4], k[r % 6], p[r % 5], m[r % 3], r * 7919 - 100, r * 31});
      }
      const Call c = make_call(l.to(dtype), params, device);
      const at::Tensor got = call(impl, c);
      exact += expect_allowed(got, c);
      rows += batch;
      // Strided logits (a slice of a wider tensor) and strided parameters give the same tokens.
      Call s = c;
      at::Tensor wide = at::empty({batch, vocab + 5}, c.logits.options());
      s.logits = wide.narrow(1, 3, vocab);
      s.logits.copy_(c.logits);
      auto every_other = [](const at::Tensor& t) {
        at::Tensor w = at::zeros({2 * t.size(0)}, t.options());
        at::Tensor v = w.slice(0, 0, 2 * t.size(0), 2);
        v.copy_(t);
        return v;
      };
      s.temperature = every_other(c.temperature);
      s.top_k = every_other(c.top_k);
      s.seeds = every_other(c.seeds);
      EXPECT_TRUE(at::equal(call(impl, s).cpu(), got.cpu()));
    }
  }
  // Nearly every row has one allowed token: the check is exact, not a range.
  EXPECT_GE(exact, rows * 9 / 10);
}

// A row's token depends on that row alone: the same in a batch of one, in another batch at
// another place, and in a second call; the inputs are unchanged.
inline void check_invariance(const std::string& impl, at::Device device) {
  const int64_t batch = 24, vocab = 5000;
  const at::Tensor l = at::randn({batch, vocab}, at::TensorOptions().dtype(at::kFloat)).mul_(2);
  std::vector<Row> params;
  for (int64_t r = 0; r < batch; ++r) params.push_back({0.5f + 0.1f * (r % 7), r % 3 == 0 ? 0 : 40, 0.92f, 0.02f, 1234, r});
  const Call c = make_call(l, params, device);
  const Call before{c.logits.clone(), c.temperature.clone(), c.top_k.clone(), c.top_p.clone(),
                    c.min_p.clone(),  c.seeds.clone(),       c.offsets.clone()};
  const auto all = tokens_of(call(impl, c));
  EXPECT_EQ(tokens_of(call(impl, c)), all);
  EXPECT_TRUE(at::equal(c.logits, before.logits) && at::equal(c.temperature, before.temperature) &&
              at::equal(c.top_k, before.top_k) && at::equal(c.seeds, before.seeds) && at::equal(c.offsets, before.offsets));
  for (const int64_t r : {int64_t{0}, int64_t{13}, batch - 1}) {
    EXPECT_EQ(tokens_of(call(impl, make_call(l.narrow(0, r, 1), {params[r]}, device))),
              (std::vector<int64_t>{all[r]}))
        << "row " << r << " alone";
  }
  // Rows 5..11 reversed, as their own batch.
  std::vector<Row> some;
  std::vector<int64_t> index;
  for (int64_t r = 11; r >= 5; --r) {
    some.push_back(params[r]);
    index.push_back(r);
  }
  const auto part = tokens_of(call(impl, make_call(l.index_select(0, at::tensor(index, at::kLong)), some, device)));
  for (size_t i = 0; i < index.size(); ++i) EXPECT_EQ(part[i], all[index[i]]) << "row " << index[i];
}

// The frequencies of many draws (one row repeated with offsets 0..n-1) against the renormalized
// distribution of the kept set, by Pearson's chi-squared at a false-alarm rate of 1e-6 (the seeds
// are fixed, so the test is deterministic); the statistic against the distribution without the
// renormalization is checked to be rejected, so the test has the power to see a wrong sampler.
inline void check_distribution(const std::string& impl, at::Device device) {
  const std::vector<float> logits = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f};
  const Row row{0.9f, 5, 0.9f, 0.05f, 20261201};
  // The kept set in float64: top-5 {0..4}; top-p 0.9 of their mass; min-p 0.05.
  std::vector<double> w;
  for (int i = 0; i < 5; ++i) w.push_back(std::exp((logits[i] - logits[0]) / 0.9));
  double mass = 0;
  for (double x : w) mass += x;
  std::vector<double> kept;
  double before = 0;
  for (double x : w) {
    if (before < 0.9 * mass && x >= 0.05) kept.push_back(x);
    before += x;
  }
  ASSERT_EQ(kept.size(), 4u);  // token 4 is past the top-p prefix
  double kept_mass = 0;
  for (double x : kept) kept_mass += x;
  std::vector<double> p, unrenormalized;
  double full = 0;
  for (int i = 0; i < 7; ++i) full += std::exp((logits[i] - logits[0]) / 0.9);
  for (double x : kept) {
    p.push_back(x / kept_mass);
    unrenormalized.push_back(x / full);
  }
  const int64_t n = 40000;
  const at::Tensor l = at::tensor(logits, at::kFloat).reshape({1, 7}).expand({n, 7}).contiguous();
  const auto got = tokens_of(call(impl, make_call(l, same_rows(n, row), device)));
  std::vector<int64_t> counts(kept.size(), 0);
  for (const int64_t t : got) {
    ASSERT_TRUE(t >= 0 && t < static_cast<int64_t>(kept.size())) << "token " << t << " is not kept";
    ++counts[t];
  }
  const int df = static_cast<int>(kept.size()) - 1;
  const double x = chi2_statistic(counts, p, n);
  EXPECT_GT(chi2_survival(x, df), 1e-6) << "chi-squared " << x << " with " << df << " degrees of freedom";
  // The power: the same counts against the distribution before renormalization (which sums to less
  // than 1, so it is scaled to the kept set's share) are rejected.
  std::vector<double> wrong(unrenormalized);
  double s = 0;
  for (double v : wrong) s += v;
  wrong[0] += 1 - s;  // the missing mass on the first token, as a sampler that ignores top-p's cut might
  EXPECT_LT(chi2_survival(chi2_statistic(counts, wrong, n), df), 1e-6);
}

// Values the contract rejects: on the CPU errors naming the argument or the row, before any token
// is returned; on CUDA the row gets -1 (a NaN counts as -inf) and the other rows their tokens.
inline void check_values(const std::string& impl, at::Device device) {
  const at::Tensor l = at::randn({3, 40}, at::TensorOptions().dtype(at::kFloat));
  const bool cpu = device.is_cpu();
  struct Bad {
    Row row;
    const char* argument;
  };
  for (const Bad& b : {Bad{{-0.5f}, "temperature[1]"}, Bad{{kNaN}, "temperature[1]"}, Bad{{kInf}, "temperature[1]"},
                       Bad{{1.0f, 0, 0.0f}, "top_p[1]"}, Bad{{1.0f, 0, 1.5f}, "top_p[1]"},
                       Bad{{1.0f, 0, kNaN}, "top_p[1]"}, Bad{{1.0f, 0, 1.0f, 1.0f}, "min_p[1]"},
                       Bad{{1.0f, 0, 1.0f, -0.1f}, "min_p[1]"}}) {
    SCOPED_TRACE(b.argument);
    const Call c = make_call(l, {{0.0f}, b.row, {0.0f}}, device);
    if (cpu) {
      const std::string e = error_message([&] { call(impl, c); });
      EXPECT_NE(e.find(std::string("sample: ") + b.argument), std::string::npos) << e;
    } else {
      const auto got = tokens_of(call(impl, c));
      EXPECT_EQ(got[1], kernels::kInvalidRow);
      EXPECT_EQ(got[0], l[0].argmax().item<int64_t>());
      EXPECT_EQ(got[2], l[2].argmax().item<int64_t>());
    }
  }
  at::Tensor nan = l.clone();
  nan[1][5] = kNaN;
  nan[1][7] = 50;  // the largest number: greedy takes it on CUDA
  at::Tensor empty = l.clone();
  empty[2].fill_(-kInf);
  for (const Row& row : {Row{0.0f}, Row{1.0f, 3}}) {
    const Call cn = make_call(nan, same_rows(3, row), device);
    const Call ce = make_call(empty, same_rows(3, row), device);
    if (cpu) {
      std::string e = error_message([&] { call(impl, cn); });
      EXPECT_NE(e.find("sample: logits row 1 must not hold NaN"), std::string::npos) << e;
      e = error_message([&] { call(impl, ce); });
      EXPECT_NE(e.find("sample: logits row 2 must hold a logit above -inf"), std::string::npos) << e;
    } else {
      if (row.temperature == 0) EXPECT_EQ(tokens_of(call(impl, cn))[1], 7);
      const auto got = tokens_of(call(impl, cn));
      EXPECT_TRUE(got[1] >= 0 && got[1] != 5) << got[1];  // a NaN is never drawn
      EXPECT_EQ(tokens_of(call(impl, ce))[2], kernels::kInvalidRow);
    }
  }
}

// Argument errors name the operation, the argument, what was expected and what was given.
inline void check_errors(const std::string& impl, at::Device device) {
  const at::Tensor l = at::randn({3, 40}, at::TensorOptions().dtype(at::kFloat));
  const Call c = make_call(l, same_rows(3, {1.0f}), device);
  auto expect = [&](Call bad, const std::string& needle) {
    const std::string e = error_message([&] { call(impl, bad); });
    EXPECT_NE(e.find(needle), std::string::npos) << e;
  };
  Call b = c;
  b.logits = c.logits.unsqueeze(0);
  expect(b, "sample: logits must be [batch, vocab], got shape [1, 3, 40]");
  b = c;
  b.logits = c.logits.to(at::kDouble);
  expect(b, "sample: logits must be float32, bfloat16 or float16, got float64");
  b = c;
  b.logits = c.logits.narrow(1, 0, 0);
  expect(b, "sample: logits' vocab (last dimension) must be in [1, 2^31 - 1), got shape [3, 0]");
  b = c;
  b.top_k = c.top_k.to(at::kLong);
  expect(b, "sample: top_k must be int32, got int64");
  b = c;
  b.seeds = c.seeds.to(at::kInt);
  expect(b, "sample: seeds must be int64, got int32");
  b = c;
  b.temperature = c.temperature.narrow(0, 0, 2);
  expect(b, "sample: temperature must be [batch] with logits' batch 3, got shape [2]");
  b = c;
  b.offsets = at::Tensor();
  expect(b, "sample: offsets must be a defined tensor");
  // An empty batch is a valid call.
  const Call e = make_call(l.narrow(0, 0, 0), {}, device);
  const at::Tensor none = call(impl, e);
  EXPECT_EQ(none.numel(), 0);
  EXPECT_EQ(none.scalar_type(), at::kLong);
}

inline void check_bridge(const std::string& impl, at::Device device) {
  at::manual_seed(7);
  {
    SCOPED_TRACE("greedy and ties");
    check_greedy_and_ties(impl, device);
  }
  {
    SCOPED_TRACE("boundaries");
    check_boundaries(impl, device);
  }
  {
    SCOPED_TRACE("infinities");
    check_infinities(impl, device);
  }
  {
    SCOPED_TRACE("grid");
    check_grid(impl, device);
  }
  {
    SCOPED_TRACE("invariance");
    check_invariance(impl, device);
  }
  {
    SCOPED_TRACE("distribution");
    check_distribution(impl, device);
  }
  {
    SCOPED_TRACE("values");
    check_values(impl, device);
  }
  {
    SCOPED_TRACE("errors");
    check_errors(impl, device);
  }
}

}  // namespace xllm_kernel::testing::sampling
