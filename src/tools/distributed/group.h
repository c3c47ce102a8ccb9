// Barriers and gathers among the ranks of a distributed tool run, over a c10d store alone (group.cpp
// says why not through a gloo ProcessGroup). Every wait polls for a failed peer and has a deadline,
// so one rank's error ends every rank promptly, and nothing waits forever.
//
//   Group group(store, rank, world_size, std::chrono::seconds(300));
//   group.barrier("start");
//   const std::vector<std::string> all = group.all_gather("configuration", mine);  // by rank
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace xllm_kernel::tools::distributed {

// Another rank failed; what() names that rank and its error.
struct PeerFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
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

// A duration in seconds for messages ("0.3", "300").
std::string seconds_text(std::chrono::milliseconds duration);

}  // namespace xllm_kernel::tools::distributed
