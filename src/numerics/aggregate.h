// The numerics aggregate of a distributed run, built by rank 0 from every rank's report (index =
// rank): per implementation and case, whether the ranks agree on the status, the worst error
// statistics over ranks, and which ranks dissent and how. Field by field in docs/distributed.md.
#pragma once

#include <string>
#include <vector>

#include "src/numerics/suite.h"

namespace xllm_kernel::numerics {

// Exit code 1 when a case failed or the ranks disagree, 3 when nothing passed everywhere.
json aggregate_numerics(const std::vector<json>& reports);
std::string numerics_aggregate_markdown(const json& aggregate, size_t row_limit);

}  // namespace xllm_kernel::numerics
