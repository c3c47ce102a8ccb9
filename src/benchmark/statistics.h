// Summary statistics of timing samples.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace xllm_kernel::benchmark {

struct Summary {
  size_t count = 0;
  double min = 0, p10 = 0, median = 0, mean = 0, p90 = 0, max = 0, stddev = 0;  // stddev: sample (n - 1)
};

// Percentiles interpolate linearly between order statistics (p in [0, 100]).
double percentile(std::vector<double> samples, double p);
Summary summarize(const std::vector<double>& samples);
nlohmann::json to_json(const Summary& s);

// Whether a case's samples are steady enough for their median to stand for the case. Three tests,
// each against a stated bound (kSteadiness*, reported beside the figures):
//   spread     p90 / p10 above kSteadinessSpread (max / min is reported too, but one preempted
//              sample on a shared machine would trip it, and the median does not care);
//   trend      the median of the later half over that of the earlier half beyond
//              kSteadinessTrend either way (at least 4 samples);
//   two modes  a gap between consecutive sorted samples wider than kSteadinessModeGap times, with
//              at least 2 samples and 15% of them on each side (at least 4 samples).
// First touches of rotation copies inside the timed samples show as all three.
inline constexpr double kSteadinessSpread = 2.0;
inline constexpr double kSteadinessTrend = 1.25;
inline constexpr double kSteadinessModeGap = 1.5;
struct Steadiness {
  double p90_over_p10 = 1, max_over_min = 1, late_over_early = 1, widest_gap = 1;
  std::vector<std::string> reasons;  // "spread", "trend", "two modes"; empty when steady
  bool unsteady() const { return !reasons.empty(); }
};
Steadiness steadiness(const std::vector<double>& samples);
nlohmann::json to_json(const Steadiness& s);
nlohmann::json steadiness_bounds();

// A 95% bootstrap confidence interval of median(b) / median(a), with a fixed seed so reports are
// reproducible. Returns {low, point, high}.
struct Ratio {
  double low = 0, point = 0, high = 0;
};
Ratio median_ratio(const std::vector<double>& a, const std::vector<double>& b, int resamples = 2000);

// The same for paired values (a[i] and b[i] measured next to each other, as the rounds of an A/B
// run): point median(b) / median(a); the bootstrap resamples pair indices, so a drift of the machine
// that moves a pair together stays out of the interval. Needs a.size() == b.size() >= 1.
Ratio paired_median_ratio(const std::vector<double>& a, const std::vector<double>& b, int resamples = 2000);

}  // namespace xllm_kernel::benchmark
