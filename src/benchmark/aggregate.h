// The benchmark aggregate of a distributed run, built by rank 0 from every rank's report (index =
// rank): per case and implementation, the consensus on the status and, where every rank timed it,
// the per-sample maximum over ranks (the slowest rank of each aligned sample), its statistics,
// bandwidth against the slowest rank's copy bandwidth, and each rank's skew. Field by field in
// docs/distributed.md.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace xllm_kernel::benchmark {

// Exit code 1 when a case failed validation or the ranks disagree, 3 when nothing was timed.
nlohmann::json aggregate_benchmark(const std::vector<nlohmann::json>& reports);
std::string benchmark_aggregate_markdown(const nlohmann::json& aggregate, size_t row_limit);

}  // namespace xllm_kernel::benchmark
