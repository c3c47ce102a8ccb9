#include "src/benchmark/statistics.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

namespace xllm_kernel::benchmark {

double percentile(std::vector<double> samples, double p) {
  if (samples.empty()) throw std::invalid_argument("percentile: no samples");
  std::sort(samples.begin(), samples.end());
  const double rank = p / 100.0 * static_cast<double>(samples.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, samples.size() - 1);
  return samples[lo] + (rank - static_cast<double>(lo)) * (samples[hi] - samples[lo]);
}

Summary summarize(const std::vector<double>& samples) {
  Summary s;
  s.count = samples.size();
  if (samples.empty()) return s;
  s.min = *std::min_element(samples.begin(), samples.end());
  s.max = *std::max_element(samples.begin(), samples.end());
  s.p10 = percentile(samples, 10);
  s.median = percentile(samples, 50);
  s.p90 = percentile(samples, 90);
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(samples.size());
  if (samples.size() > 1) {
    double sq = 0;
    for (double x : samples) sq += (x - s.mean) * (x - s.mean);
    s.stddev = std::sqrt(sq / static_cast<double>(samples.size() - 1));
  }
  return s;
}

nlohmann::json to_json(const Summary& s) {
  return {{"count", s.count}, {"min", s.min},   {"p10", s.p10},       {"median", s.median},
          {"mean", s.mean},   {"p90", s.p90},   {"max", s.max},       {"stddev", s.stddev}};
}

Steadiness steadiness(const std::vector<double>& samples) {
  Steadiness s;
  if (samples.size() < 2) return s;
  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  if (sorted.front() > 0) s.max_over_min = sorted.back() / sorted.front();
  const double p10 = percentile(sorted, 10);
  if (p10 > 0) s.p90_over_p10 = percentile(sorted, 90) / p10;
  if (s.p90_over_p10 > kSteadinessSpread) s.reasons.push_back("spread");
  if (samples.size() < 4) return s;
  const size_t half = samples.size() / 2;
  const double early = percentile({samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(half)}, 50);
  const double late = percentile({samples.end() - static_cast<std::ptrdiff_t>(half), samples.end()}, 50);
  if (early > 0) s.late_over_early = late / early;
  if (s.late_over_early > kSteadinessTrend || s.late_over_early * kSteadinessTrend < 1) s.reasons.push_back("trend");
  // The widest ratio between neighbours in sorted order, among splits that leave enough samples
  // on both sides to count as a mode.
  const size_t side = std::max<size_t>(2, (samples.size() * 15 + 99) / 100);
  for (size_t i = side; i + side <= sorted.size(); ++i) {
    if (sorted[i - 1] > 0) s.widest_gap = std::max(s.widest_gap, sorted[i] / sorted[i - 1]);
  }
  if (s.widest_gap > kSteadinessModeGap) s.reasons.push_back("two modes");
  return s;
}

nlohmann::json to_json(const Steadiness& s) {
  return {{"unsteady", s.unsteady()},
          {"reasons", s.reasons},
          {"p90_over_p10", s.p90_over_p10},
          {"max_over_min", s.max_over_min},
          {"late_over_early", s.late_over_early},
          {"widest_gap", s.widest_gap}};
}

nlohmann::json steadiness_bounds() {
  return {{"p90_over_p10", kSteadinessSpread}, {"late_over_early", kSteadinessTrend}, {"widest_gap", kSteadinessModeGap}};
}

namespace {

// point median(b) / median(a) and the 2.5th and 97.5th percentiles of that ratio over `resamples`
// bootstrap draws; draw(rng, ra, rb) fills the resampled sets (fixed seed: reproducible reports).
template <typename Draw>
Ratio bootstrap_ratio(const std::vector<double>& a, const std::vector<double>& b, int resamples, Draw draw) {
  Ratio r;
  r.point = percentile(b, 50) / percentile(a, 50);
  std::mt19937_64 rng(12345);
  std::vector<double> ratios;
  ratios.reserve(resamples);
  std::vector<double> ra(a.size()), rb(b.size());
  for (int i = 0; i < resamples; ++i) {
    draw(rng, ra, rb);
    ratios.push_back(percentile(rb, 50) / percentile(ra, 50));
  }
  r.low = percentile(ratios, 2.5);
  r.high = percentile(ratios, 97.5);
  return r;
}

}  // namespace

Ratio median_ratio(const std::vector<double>& a, const std::vector<double>& b, int resamples) {
  if (a.empty() || b.empty()) throw std::invalid_argument("median_ratio: both sample sets must be non-empty");
  std::uniform_int_distribution<size_t> pick_a(0, a.size() - 1), pick_b(0, b.size() - 1);
  return bootstrap_ratio(a, b, resamples, [&](std::mt19937_64& rng, std::vector<double>& ra, std::vector<double>& rb) {
    for (auto& x : ra) x = a[pick_a(rng)];
    for (auto& x : rb) x = b[pick_b(rng)];
  });
}

Ratio paired_median_ratio(const std::vector<double>& a, const std::vector<double>& b, int resamples) {
  if (a.empty() || a.size() != b.size()) {
    throw std::invalid_argument("paired_median_ratio: expected as many values in b as in a (at least 1); given " +
                                std::to_string(a.size()) + " and " + std::to_string(b.size()));
  }
  std::uniform_int_distribution<size_t> pick(0, a.size() - 1);
  return bootstrap_ratio(a, b, resamples, [&](std::mt19937_64& rng, std::vector<double>& ra, std::vector<double>& rb) {
    for (size_t k = 0; k < a.size(); ++k) {
      const size_t j = pick(rng);
      ra[k] = a[j];
      rb[k] = b[j];
    }
  });
}

}  // namespace xllm_kernel::benchmark
