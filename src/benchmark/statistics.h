// Summary statistics of timing samples.
#pragma once

#include <nlohmann/json.hpp>

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

// A 95% bootstrap confidence interval of median(b) / median(a), with a fixed seed so reports are
// reproducible. Returns {low, point, high}.
struct Ratio {
  double low = 0, point = 0, high = 0;
};
Ratio median_ratio(const std::vector<double>& a, const std::vector<double>& b, int resamples = 2000);

}  // namespace xllm_kernel::benchmark
