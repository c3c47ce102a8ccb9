// The aggregate reports of a distributed run, built by rank 0 from every rank's report (index =
// rank): validation consensus per case, per-sample maximum times across ranks with the statistics
// recomputed, and per-rank skew. Field by field in docs/distributed.md.
#pragma once

#include <string>
#include <vector>

#include "src/numerics/suite.h"

namespace xllm_kernel::numerics {

// Numerics: per implementation and case, whether the ranks agree on the status, the worst error
// statistics over ranks, and which ranks dissent and how. Exit code 1 when a case failed or the
// ranks disagree, 3 when nothing passed everywhere.
json aggregate_numerics(const std::vector<json>& reports);
std::string numerics_aggregate_markdown(const json& aggregate, size_t row_limit);

// Benchmark: per case and implementation, the consensus on the status and, where every rank timed
// it, the per-sample maximum over ranks (the slowest rank of each aligned sample), its statistics,
// bandwidth against the slowest rank's copy bandwidth, and each rank's skew.
json aggregate_benchmark(const std::vector<json>& reports);
std::string benchmark_aggregate_markdown(const json& aggregate, size_t row_limit);

}  // namespace xllm_kernel::numerics
