// baseline / candidate / baseline comparison of benchmark reports.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace xllm_kernel::benchmark {

// Per (case, implementation) present in all three: candidate / baseline median ratio with a 95%
// bootstrap interval, the same for baseline2 / baseline, and a verdict: "faster", "slower",
// "same" (interval contains 1), or "drift" when the two baselines disagree beyond their noise
// (their interval excludes 1 by more than `tolerance`).
// Also counts the slower rows ("slower"). The command adds "mismatches" (configuration_mismatches),
// "fail_on" and "exit_code"; compare_markdown lists the mismatches where there are any.
nlohmann::json compare_reports(const nlohmann::json& baseline, const nlohmann::json& candidate,
                               const nlohmann::json& baseline2, double tolerance = 0.02);

// Where the three reports' configurations differ: operation, device, mode, timing.iterations, seed,
// the dtypes of their cases, environment.host, cpu_model and torch. One entry per field that is not
// the same in all three: {field, baseline, candidate, baseline2} (null where a report lacks it).
nlohmann::json configuration_mismatches(const nlohmann::json& baseline, const nlohmann::json& candidate,
                                        const nlohmann::json& baseline2);
// The same fields over any number of reports: one entry per field not the same in all of them,
// {field, values} with one value per report, in order.
nlohmann::json configuration_mismatches(const std::vector<nlohmann::json>& reports);

// Appends the reports in `files` to `out`; false, with "<who>: cannot read F" or "<who>: F is not a
// benchmark report: ..." on stderr, where one cannot be read or has no "results".
bool read_benchmark_reports(const std::vector<std::string>& files, const std::string& who,
                            std::vector<nlohmann::json>& out);

// The command's exit codes beyond 0 and 2 (usage, unreadable reports).
inline constexpr int kCompareNothing = 3;   // no (case, implementation) in all three
inline constexpr int kCompareSlower = 4;    // --fail-on slower: a candidate slower beyond its interval
inline constexpr int kCompareDrift = 5;     // --fail-on drift: the two baselines disagree
inline constexpr int kCompareMismatch = 6;  // configurations differ, without --allow-mismatch
// The exit code of a comparison: nothing compared, then slower, then drift (each where it fails).
int comparison_exit_code(const nlohmann::json& comparison, bool fail_on_slower, bool fail_on_drift);

std::string mismatch_text(const nlohmann::json& mismatches);  // one "- field: ..." line each
std::string compare_markdown(const nlohmann::json& comparison);

// `xllm-kernel-benchmark compare BASELINE CANDIDATE BASELINE2 [--output F] [--markdown F]
//  [--tolerance T] [--fail-on slower,drift|none] [--allow-mismatch]`.
int compare_main(const std::vector<std::string>& argv);

}  // namespace xllm_kernel::benchmark
