// Distributed runs of the numerics and benchmark tools (`--distributed`, launched by torchrun with
// two or more ranks): every rank runs the same cases on its own device (cuda:LOCAL_RANK,
// npu:LOCAL_RANK, or the CPU), writes its own report, and rank 0 writes the aggregate (validation
// consensus, per-sample maximum times, skew; docs/distributed.md).
//
// The parts: torchrun's environment (environment.h), the store-backed Group (group.h), this rank's
// part in a run (DistributedRun, here), what both aggregates share (aggregate.h), and the test hook
// (test_fault.h). tools::publish (report.h) hands the finished report to the rank group.
//
//   std::unique_ptr<DistributedRun> dist;
//   DistributedRun::start("numerics", timeout, dist);  // the aligned start
//   dist->check_same_configuration({{"operation", ...}, {"cases", case_list_digest(ids)}});
//   ... run the cases ...
//   return tools::publish({...}, dist.get());          // per-rank reports, rank 0 the aggregate
#pragma once

#include <nlohmann/json.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/tools/distributed/environment.h"
#include "src/tools/distributed/group.h"
#include "src/tools/distributed/test_fault.h"
#include "xllm_kernel/contract.h"

namespace xllm_kernel::tools::distributed {

using nlohmann::json;

// One rank's part in a distributed run of a tool: torchrun's environment, the connection to its
// store, the test hook, and the end of the run.
class DistributedRun {
 public:
  // Reads torchrun's environment (UsageError without it), connects to the store (rank 0 hosts it
  // unless torchrun's agent does) and waits for every rank: the aligned start.
  // `run` is set as soon as the store is reached, so that a failure in the start barrier is
  // published too.
  static void start(const std::string& tool, std::chrono::milliseconds timeout, std::unique_ptr<DistributedRun>& run);

  const RankEnvironment& environment() const { return env_; }
  Group& group() { return *group_; }
  int rank() const { return env_.rank; }

  // The device index of this rank: LOCAL_RANK on cuda and npu, 0 on the CPU. A --device with an
  // explicit index is a UsageError (each rank picks its own).
  int device_index(Device device, const std::string& device_flag) const;
  // `path` with ".rankN" before its extension (report.json -> report.rank1.json).
  std::string rank_path(const std::string& path) const;

  // Every rank must run what rank 0 runs: `configuration` (an object of named fields: operation,
  // case ids, iteration counts, ...) is gathered and compared; a difference is a UsageError naming
  // the ranks and fields.
  void check_same_configuration(const json& configuration);

  // In the benchmark, a case is timed only where every rank validated it (the per-sample barriers
  // need every rank). `problem`: why this rank cannot time it, or nothing. Returns the first other
  // rank's problem ("rank 1: validation failed: ..."), or nothing when all ranks can time it.
  std::optional<std::string> agree_to_time(const std::string& case_label, const std::optional<std::string>& problem);

  // The TEST HOOK (XLLM_KERNEL_TEST_FAULT, test_fault.h): a no-op unless it names this rank.
  FaultInjector& test_fault() { return fault_; }

  // The end of a run whose reports are written: every rank ends with rank 0's `code` (`code` is
  // ignored elsewhere), leaving together. Returns that code.
  int finish(std::optional<int> code);

  // The end of a run that threw: publishes this rank's error (or, for a PeerFailure, only leaves).
  void abort(const std::string& error, bool peer_failed) noexcept;

 private:
  DistributedRun() = default;
  RankEnvironment env_;
  FaultInjector fault_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::unique_ptr<Group> group_;
  bool hosts_store_ = false;  // rank 0 when torchrun's agent does not host the store
  bool finished_ = false;
};

// `path` with ".rankN" before the extension of its file name, or appended when it has none.
std::string insert_rank(const std::string& path, int rank);

// A short, stable digest of a case list, for check_same_configuration: {"count", "hash"}.
json case_list_digest(const std::vector<std::string>& case_ids);

}  // namespace xllm_kernel::tools::distributed
