// What the numerics and benchmark aggregates of a distributed run share (each tool builds its own
// aggregate: numerics/aggregate.h, benchmark/aggregate.h): the header and per-rank block, rows
// matched across ranks, the consensus on a status, and the Markdown of ranks and dissent.
// Inputs are every rank's report, indexed by rank. Field by field in docs/distributed.md.
//
//   json out = aggregate_header(reports, "xllm-kernel/numerics-distributed-report/1", "numerics");
//   const auto rows = match_rows(tables, row, [](const json& r) { return r.at("case_id").get<std::string>(); });
//   const Consensus c = consensus(rows);
//   json result = c.to_json();  // status, consensus, majority_status, statuses
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace xllm_kernel::tools::distributed {

using nlohmann::json;

// schema, tool, operation, device (the type the ranks share: "cuda" of "cuda:1"), mode, seed,
// world_size, and ranks[] (per rank: rank, local_rank, device, host, report path, summary,
// environment, and copy_bandwidth_gbps where the report has it). Throws on no reports.
json aggregate_header(const std::vector<json>& reports, const char* schema, const char* tool);

// The rows of every rank (one table per rank) matching `row` by `key`. Ranks checked their
// configurations against each other at the start, so a missing row is a bug (std::runtime_error).
using RowKey = std::function<std::string(const json& row)>;
std::vector<const json*> match_rows(const std::vector<const json*>& tables, const json& row, const RowKey& key);

// The status most ranks report; a tie goes to the status of the lowest rank among the tied.
std::string majority(const std::vector<std::string>& statuses);

// The ranks' statuses of one row and what they agree on.
struct Consensus {
  std::vector<std::string> statuses;  // by rank
  std::string majority;
  bool agreed = false;  // every rank reports `majority`
  std::string status() const { return agreed ? majority : "disagreed"; }
  bool dissents(size_t rank) const { return statuses[rank] != majority; }
  // {status, consensus ("agreed" | "disagreed"), majority_status, statuses}
  json to_json() const;
};
// From each row's "status" (rows by rank, as match_rows returns them).
Consensus consensus(const std::vector<const json*>& rows);

// "# <Title>: <operation> on <N> <device> ranks (<mode>)" and a blank line.
std::string aggregate_title(const json& aggregate, const std::string& title);
// The ranks table: rank, device, host, three columns of the tool's (`columns`: "a | b | c"; `cells`
// gives a rank's three cells alike), report path.
std::string ranks_table(const json& aggregate, const std::string& columns,
                        const std::function<std::string(const json& rank)>& cells);
// "majority passed; rank 2 failed (headroom 3): ..." for a result that has majority_status and
// dissent[].
std::string dissent_text(const json& result);

}  // namespace xllm_kernel::tools::distributed
