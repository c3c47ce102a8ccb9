#include "src/tools/distributed/group.h"

// Why the store alone and not a gloo ProcessGroup: the torch wheel ships ProcessGroupGloo.hpp but
// not the gloo headers it includes (gloo/algorithm.h, gloo/context.h, gloo/rendezvous/store.h,
// gloo/transport/device.h), so it does not compile from the wheel. The only other gloo here is
// Debian's libgloo-dev, a 2022 snapshot that is not the gloo torch was built with: compiling
// ProcessGroupGloo's inline GlooStore (a subclass of gloo's store) against it would silently
// disagree with libtorch about that class's layout. The tools only need barriers and gathers of a
// few JSON strings, which the store does well, and a store-polling wait can notice a peer's
// published error while it waits, which a blocking collective cannot.
#include <algorithm>
#include <cstdio>
#include <thread>

namespace xllm_kernel::tools::distributed {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr const char* kErrorKey = "error";  // "RANK\nmessage" of the first rank that failed
constexpr const char* kLeftKey = "left";    // how many ranks have finished or given up
constexpr const char* kGoneKey = "gone";    // a failed rank is about to exit
constexpr const char* kReleasedKey = "released";  // ranks that made their last call to the store

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

}  // namespace

std::string seconds_text(milliseconds d) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", static_cast<double>(d.count()) / 1000.0);
  return buffer;
}

Group::Group(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size, milliseconds timeout)
    : store_(std::move(store)), rank_(rank), world_size_(world_size), timeout_(timeout) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw std::invalid_argument("Group: rank " + std::to_string(rank) + " of " + std::to_string(world_size));
  }
}

std::string Group::next_key(const std::string& what) {
  // The sequence number keeps keys of repeated collectives apart; `what` makes ranks that drift
  // out of step wait on different keys (and time out naming them) rather than pair up wrongly.
  return std::to_string(sequence_++) + "/" + what;
}

void Group::throw_if_peer_failed() {
  if (!store_->check({kErrorKey})) return;
  const std::string value = text(store_->get(kErrorKey));
  const auto newline = value.find('\n');
  const std::string who = value.substr(0, newline);
  if (who == std::to_string(rank_)) return;
  throw PeerFailure("rank " + who + " failed: " + (newline == std::string::npos ? value : value.substr(newline + 1)));
}

void Group::wait_until(const std::string& what, const std::function<bool()>& ready,
                       const std::function<std::string()>& missing) {
  const auto start = Clock::now();
  // Short sleeps first: per-sample barriers in the benchmark should release quickly.
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    if (ready()) return;
    throw_if_peer_failed();
    if (Clock::now() - start > timeout_) {
      throw std::runtime_error("rank " + std::to_string(rank_) + " timed out after " + seconds_text(timeout_) +
                               " s waiting for " + what + " (" + missing() + "); --distributed-timeout sets the limit");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}

void Group::forget_after_next_barrier(std::string key) {
  if (rank_ == 0) stale_keys_.push_back(std::move(key));
}

void Group::barrier(const std::string& what) {
  const std::string key = next_key("barrier/" + what);
  int64_t arrived = store_->add(key, 1);
  if (arrived < world_size_) {
    wait_until("barrier '" + what + "'", [&] { return (arrived = store_->add(key, 0)) >= world_size_; },
               [&] { return std::to_string(arrived) + " of " + std::to_string(world_size_) + " ranks arrived"; });
  }
  if (rank_ == 0) {
    // Every rank has arrived here, so every rank is past the keys of earlier collectives.
    for (const auto& k : stale_keys_) store_->deleteKey(k);
    stale_keys_ = {key};
  }
}

namespace {

std::string missing_ranks(c10d::Store& store, const std::vector<std::string>& keys, const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!store.check({keys[i]})) out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]);
  }
  return out.empty() ? "all ranks arrived" : "not arrived: rank " + out;
}

}  // namespace

std::vector<std::string> Group::all_gather(const std::string& what, const std::string& value) {
  const std::string base = next_key("all_gather/" + what);
  std::vector<std::string> keys;
  std::vector<int> ranks;
  for (int r = 0; r < world_size_; ++r) {
    keys.push_back(base + "/" + std::to_string(r));
    ranks.push_back(r);
  }
  store_->set(keys[rank_], bytes(value));
  wait_until("all_gather '" + what + "'", [&] { return store_->check(keys); },
             [&] { return missing_ranks(*store_, keys, ranks); });
  std::vector<std::string> values;
  for (const auto& k : keys) values.push_back(text(store_->get(k)));
  for (auto& k : keys) forget_after_next_barrier(k);
  return values;
}

std::vector<std::string> Group::gather(const std::string& what, const std::string& value) {
  const std::string base = next_key("gather/" + what);
  if (rank_ != 0) {
    store_->set(base + "/" + std::to_string(rank_), bytes(value));
    return {};
  }
  std::vector<std::string> keys;
  std::vector<int> ranks;
  for (int r = 1; r < world_size_; ++r) {
    keys.push_back(base + "/" + std::to_string(r));
    ranks.push_back(r);
  }
  wait_until("gather '" + what + "'", [&] { return store_->check(keys); },
             [&] { return missing_ranks(*store_, keys, ranks); });
  std::vector<std::string> values{value};
  for (const auto& k : keys) {
    values.push_back(text(store_->get(k)));
    store_->deleteKey(k);  // only rank 0 reads them
  }
  return values;
}

std::string Group::broadcast(const std::string& what, const std::string& value) {
  const std::string key = next_key("broadcast/" + what);
  if (rank_ == 0) {
    store_->set(key, bytes(value));
    forget_after_next_barrier(key);
    return value;
  }
  wait_until("broadcast '" + what + "' from rank 0", [&] { return store_->check({key}); },
             [] { return std::string("rank 0 has not sent it"); });
  return text(store_->get(key));
}

void Group::fail(const std::string& error, milliseconds grace) noexcept {
  try {
    // compareSet with an empty expected value sets only a missing key: the first error stays.
    store_->compareSet(kErrorKey, std::vector<uint8_t>{}, bytes(std::to_string(rank_) + "\n" + error));
  } catch (...) {
    try {
      if (!store_->check({kErrorKey})) store_->set(kErrorKey, bytes(std::to_string(rank_) + "\n" + error));
    } catch (...) {
    }
  }
  leave(grace);
  try {
    store_->set(kGoneKey, bytes(std::to_string(rank_)));
  } catch (...) {
  }
}

void Group::release_store(bool hosts_store, milliseconds wait) noexcept {
  try {
    if (!hosts_store) {
      store_->add(kReleasedKey, 1);
      return;
    }
    const auto start = Clock::now();
    while (store_->add(kReleasedKey, 0) < world_size_ - 1 && Clock::now() - start < wait) {
      std::this_thread::sleep_for(milliseconds(2));
    }
  } catch (...) {
  }
}

void Group::outlast_failed_rank(milliseconds wait) noexcept {
  try {
    const auto start = Clock::now();
    while (!store_->check({kGoneKey}) && Clock::now() - start < wait) std::this_thread::sleep_for(milliseconds(2));
  } catch (...) {
    return;  // the store went with the failed rank (it hosted it): it is gone
  }
}

void Group::leave(milliseconds wait) noexcept {
  if (left_) return;
  left_ = true;
  try {
    int64_t left = store_->add(kLeftKey, 1);
    const auto start = Clock::now();
    while (left < world_size_ && Clock::now() - start < wait) {
      std::this_thread::sleep_for(milliseconds(2));
      left = store_->add(kLeftKey, 0);
    }
  } catch (...) {
    // The store is gone (its host exited): nobody is left to wait for.
  }
}

}  // namespace xllm_kernel::tools::distributed
