// baseline / candidate / baseline comparison of benchmark reports.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace xllm_kernel::benchmark {

// Per (case, implementation) present in all three: candidate / baseline median ratio with a 95%
// bootstrap interval, the same for baseline2 / baseline, and a verdict: "faster", "slower",
// "same" (interval contains 1), or "drift" when the two baselines disagree beyond their noise
// (their interval excludes 1 by more than `tolerance`).
nlohmann::json compare_reports(const nlohmann::json& baseline, const nlohmann::json& candidate,
                               const nlohmann::json& baseline2, double tolerance = 0.02);

std::string compare_markdown(const nlohmann::json& comparison);

// `xllm-kernel-benchmark compare BASELINE CANDIDATE BASELINE2 [--output F] [--markdown F]`.
int compare_main(const std::vector<std::string>& argv);

}  // namespace xllm_kernel::benchmark
