// The speed ratios of a benchmark report, per case from the device medians: each timed row's
// ratio_to_fastest (its median / the fastest implementation's) and speedup_vs_torch (the torch
// solution's median / its own, null without a timed torch row). One definition for a rank's report
// and for the distributed aggregate.
//
//   add_ratios(results, first_row_of_case, results.size());
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>

namespace xllm_kernel::benchmark {

// Over rows [first, last) of `results`, grouped by case_id: sets ratio_to_fastest and
// speedup_vs_torch on every row whose status is "timed" (rows need device.median and
// implementation_detail.solution).
void add_ratios(nlohmann::json& results, size_t first, size_t last);

// The flags a timed row's "% of copy" carries in Markdown: " (warm cache)" when it beat the copy
// bandwidth, " (unsteady: spread, trend, two modes)" with the reasons its samples failed; "" for none.
std::string row_flags(const nlohmann::json& row);

}  // namespace xllm_kernel::benchmark
