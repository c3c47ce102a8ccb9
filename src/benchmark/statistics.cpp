#include "src/benchmark/statistics.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>

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

Ratio median_ratio(const std::vector<double>& a, const std::vector<double>& b, int resamples) {
  if (a.empty() || b.empty()) throw std::invalid_argument("median_ratio: both sample sets must be non-empty");
  Ratio r;
  r.point = percentile(b, 50) / percentile(a, 50);
  std::mt19937_64 rng(12345);
  std::vector<double> ratios;
  ratios.reserve(resamples);
  std::vector<double> ra(a.size()), rb(b.size());
  std::uniform_int_distribution<size_t> pick_a(0, a.size() - 1), pick_b(0, b.size() - 1);
  for (int i = 0; i < resamples; ++i) {
    for (auto& x : ra) x = a[pick_a(rng)];
    for (auto& x : rb) x = b[pick_b(rng)];
    ratios.push_back(percentile(rb, 50) / percentile(ra, 50));
  }
  r.low = percentile(ratios, 2.5);
  r.high = percentile(ratios, 97.5);
  return r;
}

}  // namespace xllm_kernel::benchmark
