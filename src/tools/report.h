// Reports of both tools: the environment a run happened in, the implementation block, atomic
// writing, numbers for tables, and the one way a finished report leaves the tool (`publish`):
// locally (printed, JSON and Markdown written) or, in a distributed run, through the rank group
// (every rank writes its own, rank 0 the aggregate).
//
//   return tools::publish({report, common.output, common.markdown, markdown, 20,
//                          "xllm-kernel-numerics: no case passed; that is a failure\n",
//                          aggregate_numerics, numerics_aggregate_markdown},
//                         dist.get());
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "xllm_kernel/registry.h"

namespace xllm_kernel::tools {

using nlohmann::json;

namespace distributed {
class DistributedRun;
}

// Host, CPU model and SIMD target, device, torch, compiler, build type, revision, load, threads.
json environment(Device device, int device_index, const std::string& revision);

// The implementation block every report carries.
json implementation_json(const PreparedKernel& kernel);

// Writes `text` to `path` atomically: a temporary file beside it ("<path>.tmp.<pid>"), written,
// flushed and fsynced, renamed over `path`, then the directory fsynced. Throws std::runtime_error
// naming the path on any failure, and removes the temporary file. A process killed meanwhile
// leaves `path` as it was (the previous report, or none) and at most its temporary file.
void write_atomically(const std::string& path, const std::string& text);

// A number for tables: fixed or scientific, whichever is shorter and exact enough.
std::string format_number(double value);
// A time in seconds, in microseconds, for tables.
std::string format_microseconds(double seconds);

// Markdown of a report: (report, at most this many rows of the long tables; SIZE_MAX: all).
using MarkdownRenderer = std::function<std::string(const json& report, size_t row_limit)>;

// A finished report and where it goes.
struct Publication {
  json report;           // its summary.exit_code is the run's exit code
  std::string output;    // --output (JSON) and --markdown as given; empty: not written. In a distributed
  std::string markdown;  // run each rank writes them with .rankN, rank 0 the aggregate at these paths
  MarkdownRenderer render;
  size_t console_rows;          // rows of `render` printed on stdout (the files get every row)
  std::string nothing_passed;   // printed on stderr when a local run ends kNothingPassed
  std::function<json(const std::vector<json>& reports)> aggregate;  // rank 0: every rank's, by rank
  MarkdownRenderer render_aggregate;
};

// Without `run`: prints the report's Markdown, writes --output and --markdown atomically and
// returns the report's exit code. With `run`: adds the report's "distributed" block, writes this
// rank's reports, gathers every rank's on rank 0, which prints and writes the aggregate; returns the
// aggregate's exit code on every rank.
int publish(Publication publication, distributed::DistributedRun* run);

}  // namespace xllm_kernel::tools
