// Distributed runs of the numerics and benchmark tools (`--distributed`, launched by torchrun with
// two or more ranks): every rank runs the same cases on its own device (cuda:LOCAL_RANK,
// npu:LOCAL_RANK, or the CPU), writes its own report, and rank 0 writes the aggregate (validation
// consensus, per-sample maximum times, skew; see distributed_report.h and docs/distributed.md).
//
// Coordination goes through torchrun's c10d store alone (barriers, gathers, a shared error key);
// distributed.cpp says why not through a gloo ProcessGroup. Every wait polls for a failed peer and
// has a deadline, so one rank's error ends every rank promptly, and nothing waits forever.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/numerics/suite.h"

namespace xllm_kernel::numerics {

// torchrun's description of this process.
struct RankEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;
  int master_port = 0;
  bool agent_store = false;   // TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent hosts the store
  std::string run_id;         // TORCHELASTIC_RUN_ID ("none" for a static rendezvous)
  int restart_count = 0;      // TORCHELASTIC_RESTART_COUNT
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (and torchrun's optional
// TORCHELASTIC_* variables) through `getenv`. Throws UsageError naming what is missing or wrong,
// and when WORLD_SIZE < 2.
RankEnvironment rank_environment(const std::function<const char*(const char*)>& getenv);

// Another rank failed; what() names that rank and its error.
struct PeerFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// TEST HOOK, not a feature: XLLM_KERNEL_TEST_FAULT=KIND:RANK makes rank RANK misbehave so the
// tests can check how the others react. Kinds: disagree (the first case it validates reports
// failed), fail (throws before its second case), hang (sleeps before its second case, past the
// timeout), mismatch (claims a different case list). Read only with --distributed.
struct TestFault {
  enum class Kind { kNone, kDisagree, kFail, kHang, kMismatch };
  Kind kind = Kind::kNone;
  int rank = -1;
  // Null or empty: no fault. Throws UsageError on anything else that is not KIND:RANK.
  static TestFault parse(const char* value);
  bool on(int this_rank, Kind k) const { return kind == k && rank == this_rank; }
};

// Barriers and gathers among `world_size` ranks over a c10d store, every rank making the same calls
// in the same order. Every wait polls the store for a published error (PeerFailure) and gives up
// after `timeout` (std::runtime_error naming what it waited for and who had not arrived).
class Group {
 public:
  Group(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size, std::chrono::milliseconds timeout);

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  void barrier(const std::string& what);
  // Every rank's value, indexed by rank, on every rank.
  std::vector<std::string> all_gather(const std::string& what, const std::string& value);
  // Every rank's value on rank 0; an empty vector elsewhere.
  std::vector<std::string> gather(const std::string& what, const std::string& value);
  // Rank 0's value on every rank (`value` is ignored elsewhere).
  std::string broadcast(const std::string& what, const std::string& value);

  // Publishes this rank's error (the first error published wins), then leaves waiting at most
  // `grace`, so the others can say who failed before torchrun stops them. Never throws.
  void fail(const std::string& error, std::chrono::milliseconds grace) noexcept;
  // Counts this rank out and waits, at most `wait`, until every rank has: ranks end together, and
  // the process hosting the store outlives the others' last calls. Never throws.
  void leave(std::chrono::milliseconds wait) noexcept;
  // After a PeerFailure: waits, at most `wait`, until the failed rank is leaving, and a little
  // longer, so that it exits first. Never throws.
  void outlast_failed_rank(std::chrono::milliseconds wait) noexcept;
  // The last call to the store. The rank whose process hosts it waits, at most `wait`, until every
  // other rank has made theirs, so none loses the store mid-call. Never throws.
  void release_store(bool hosts_store, std::chrono::milliseconds wait) noexcept;

 private:
  std::string next_key(const std::string& what);
  void wait_until(const std::string& what, const std::function<bool()>& ready,
                  const std::function<std::string()>& missing);
  void throw_if_peer_failed();
  void forget_after_next_barrier(std::string key);

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  int world_size_;
  std::chrono::milliseconds timeout_;
  uint64_t sequence_ = 0;
  std::vector<std::string> stale_keys_;  // rank 0 deletes them once every rank is past them
  bool left_ = false;
};

// One rank's part in a distributed run of a tool: torchrun's environment, the connection to its
// store, the test fault, and the end of the run (reports gathered, aggregate written by rank 0).
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

  // Test hooks (XLLM_KERNEL_TEST_FAULT): called before each case; and after each validation, which
  // the disagreeing rank turns into a failure (once).
  void before_case(size_t index, size_t count);
  void after_validation(Validation& validation);

  struct Reports {
    json report;           // this rank's report; gains a "distributed" block
    std::string output;    // --output and --markdown as given: this rank writes them with .rankN,
    std::string markdown;  // rank 0 writes the aggregate at the paths themselves
    std::function<std::string(const json&, size_t)> rank_markdown;  // (report, row limit)
    std::function<json(const std::vector<json>&)> aggregate;
    std::function<std::string(const json&, size_t)> aggregate_markdown;
  };
  // Writes this rank's reports, gathers every rank's on rank 0, which writes and prints the
  // aggregate; returns the aggregate's exit code on every rank.
  int finish(Reports reports);

  // The end of a run that threw: publishes this rank's error (or, for a PeerFailure, only leaves).
  void abort(const std::string& error, bool peer_failed) noexcept;

 private:
  DistributedRun() = default;
  RankEnvironment env_;
  TestFault fault_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::unique_ptr<Group> group_;
  bool hosts_store_ = false;  // rank 0 when torchrun's agent does not host the store
  bool disagreed_ = false;
  bool fault_fired_ = false;
  bool finished_ = false;
};

// `path` with ".rankN" before the extension of its file name, or appended when it has none.
std::string insert_rank(const std::string& path, int rank);

// A short, stable digest of a case list, for check_same_configuration: {"count", "hash"}.
json case_list_digest(const std::vector<std::string>& case_ids);

// Both tools' outer layer: runs `body`, turns exceptions into exit codes and "<program>: ..."
// messages on stderr (usage 2, errors 1), and in a distributed run (`body` sets `run` once
// connected) publishes the error to the other ranks first.
int run_tool(const std::string& program, const std::function<int(std::unique_ptr<DistributedRun>& run)>& body);

}  // namespace xllm_kernel::numerics
