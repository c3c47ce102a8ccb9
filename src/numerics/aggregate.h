// The numerics aggregate of a distributed run, built by rank 0 from every rank's report (index =
// rank): per implementation and case, whether the ranks agree on the status, the worst error
// statistics over ranks, and which ranks dissent and how. Field by field in docs/distributed.md.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "src/numerics/suite.h"

namespace xllm_kernel::numerics {

// Exit code 1 when a case failed or the ranks disagree, 3 when nothing passed everywhere.
json aggregate_numerics(const std::vector<json>& reports);
std::string numerics_aggregate_markdown(const json& aggregate, size_t row_limit);

// The Markdown table of the cases that did not pass, over `implementations` (a report's or an
// aggregate's), at most `row_limit` rows and then how many more; `detail` writes a row's last column.
// Shared by the single-rank report and the aggregate.
std::string not_passed_markdown(const json& implementations, size_t row_limit,
                                const std::function<std::string(const json& row)>& detail);

}  // namespace xllm_kernel::numerics
