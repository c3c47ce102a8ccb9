#include "src/numerics/distributed.h"

// Why the store alone and not a gloo ProcessGroup: the torch wheel ships ProcessGroupGloo.hpp but
// not the gloo headers it includes (gloo/algorithm.h, gloo/context.h, gloo/rendezvous/store.h,
// gloo/transport/device.h), so it does not compile from the wheel. The only other gloo here is
// Debian's libgloo-dev, a 2022 snapshot that is not the gloo torch was built with: compiling
// ProcessGroupGloo's inline GlooStore (a subclass of gloo's store) against it would silently
// disagree with libtorch about that class's layout. The tools only need barriers and gathers of a
// few JSON strings, which the store does well, and a store-polling wait can notice a peer's
// published error while it waits, which a blocking collective cannot.
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "src/numerics/arguments.h"
#include "src/numerics/distributed_report.h"
#include "src/numerics/report.h"

namespace xllm_kernel::numerics {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr const char* kErrorKey = "error";  // "RANK\nmessage" of the first rank that failed
constexpr const char* kLeftKey = "left";    // how many ranks have finished or given up
constexpr const char* kGoneKey = "gone";    // a failed rank is about to exit
constexpr const char* kReleasedKey = "released";  // ranks that made their last call to the store

// A failing rank waits at most this long for the others to read its error.
constexpr milliseconds kMaxGrace{30000};

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

std::string seconds_text(milliseconds d) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", static_cast<double>(d.count()) / 1000.0);
  return buffer;
}

int parse_int(const std::string& name, const std::string& value, int min, int max) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || v < min || v > max) {
    throw UsageError("--distributed: " + name + "='" + value + "' is not an integer in [" + std::to_string(min) + ", " +
                     std::to_string(max) + "]");
  }
  return static_cast<int>(v);
}

}  // namespace

RankEnvironment rank_environment(const std::function<const char*(const char*)>& getenv) {
  std::vector<std::string> missing;
  auto get = [&](const char* name) -> std::string {
    const char* v = getenv(name);
    if (v == nullptr || *v == '\0') {
      missing.push_back(name);
      return "";
    }
    return v;
  };
  const std::string rank = get("RANK"), world = get("WORLD_SIZE"), local = get("LOCAL_RANK");
  const std::string addr = get("MASTER_ADDR"), port = get("MASTER_PORT");
  if (!missing.empty()) {
    std::string names;
    for (const auto& m : missing) names += (names.empty() ? "" : ", ") + m;
    throw UsageError("--distributed runs under torchrun, which sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and "
                     "MASTER_PORT; not set here: " + names +
                     ". Launch it as `torchrun --nproc-per-node 2 --no-python <tool> --distributed ...`");
  }
  RankEnvironment env;
  env.world_size = parse_int("WORLD_SIZE", world, 1, 1 << 20);
  if (env.world_size < 2) {
    throw UsageError("--distributed needs at least 2 ranks, but WORLD_SIZE is " + world +
                     " (torchrun --nproc-per-node 2 or more)");
  }
  env.rank = parse_int("RANK", rank, 0, env.world_size - 1);
  env.local_rank = parse_int("LOCAL_RANK", local, 0, env.world_size - 1);
  env.master_addr = addr;
  env.master_port = parse_int("MASTER_PORT", port, 1, 65535);
  const char* agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
  env.agent_store = agent != nullptr && (std::string(agent) == "True" || std::string(agent) == "true" ||
                                         std::string(agent) == "1");
  const char* run_id = getenv("TORCHELASTIC_RUN_ID");
  env.run_id = run_id != nullptr && *run_id != '\0' ? run_id : "none";
  const char* restarts = getenv("TORCHELASTIC_RESTART_COUNT");
  env.restart_count = restarts != nullptr && *restarts != '\0' ? parse_int("TORCHELASTIC_RESTART_COUNT", restarts, 0, 1 << 30) : 0;
  return env;
}

TestFault TestFault::parse(const char* value) {
  TestFault f;
  if (value == nullptr || *value == '\0') return f;
  const std::string s = value;
  const auto colon = s.find(':');
  const std::string kind = s.substr(0, colon);
  if (kind == "disagree") f.kind = Kind::kDisagree;
  else if (kind == "fail") f.kind = Kind::kFail;
  else if (kind == "hang") f.kind = Kind::kHang;
  else if (kind == "mismatch") f.kind = Kind::kMismatch;
  if (f.kind == Kind::kNone || colon == std::string::npos) {
    throw UsageError("XLLM_KERNEL_TEST_FAULT='" + s + "': expected KIND:RANK with KIND one of disagree, fail, hang, mismatch");
  }
  size_t used = 0;
  try {
    f.rank = std::stoi(s.substr(colon + 1), &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size() - colon - 1 || f.rank < 0) {
    throw UsageError("XLLM_KERNEL_TEST_FAULT='" + s + "': RANK must be a non-negative integer");
  }
  return f;
}

// ---- Group ----

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

// ---- DistributedRun ----

void DistributedRun::start(const std::string& tool, milliseconds timeout, std::unique_ptr<DistributedRun>& out) {
  std::unique_ptr<DistributedRun> run(new DistributedRun);
  run->env_ = rank_environment([](const char* name) { return std::getenv(name); });
  run->fault_ = TestFault::parse(std::getenv("XLLM_KERNEL_TEST_FAULT"));
  const RankEnvironment& env = run->env_;
  // torchrun's agent hosts a TCPStore at MASTER_ADDR:MASTER_PORT and says so; without it (a
  // launcher that only sets the variables) rank 0 hosts one there.
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(env.master_port);
  options.isServer = !env.agent_store && env.rank == 0;
  options.waitWorkers = false;  // the start barrier below waits, and notices failures while it does
  options.timeout = timeout;
  run->hosts_store_ = options.isServer;
  c10::intrusive_ptr<c10d::Store> tcp;
  try {
    tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
  } catch (const c10::Error& e) {
    throw std::runtime_error("rank " + std::to_string(env.rank) + " cannot " + (options.isServer ? "host" : "reach") +
                             " the c10d store at " + env.master_addr + ":" + std::to_string(env.master_port) +
                             " within " + seconds_text(timeout) + " s: " + e.what_without_backtrace());
  }
  // A key space of this run: torchrun's agent store outlives restarts, and one process (Python)
  // may run the tools more than once; every rank counts its invocations alike.
  static std::atomic<int> invocation{0};
  const std::string prefix = "xllm_kernel/" + tool + "/" + env.run_id + "/attempt_" +
                             std::to_string(env.restart_count) + "/" + std::to_string(invocation++);
  run->store_ = c10::make_intrusive<c10d::PrefixStore>(prefix, tcp);
  run->group_ = std::make_unique<Group>(run->store_, env.rank, env.world_size, timeout);
  out = std::move(run);
  out->group_->barrier("start");
}

int DistributedRun::device_index(Device device, const std::string& device_flag) const {
  if (device_flag.find(':') != std::string::npos) {
    throw UsageError("--device " + device_flag + " with --distributed: each rank uses its own device (" +
                     to_string(device) + ":LOCAL_RANK); pass --device " + to_string(device));
  }
  return device == Device::kCpu ? 0 : env_.local_rank;
}

std::string DistributedRun::rank_path(const std::string& path) const { return insert_rank(path, env_.rank); }

void DistributedRun::check_same_configuration(const json& configuration) {
  json mine = configuration;
  if (fault_.on(env_.rank, TestFault::Kind::kMismatch) && mine.contains("cases")) {
    mine["cases"]["count"] = mine["cases"].value("count", 0) + 1;
    mine["cases"]["hash"] = "XLLM_KERNEL_TEST_FAULT=mismatch";
  }
  const auto all = group_->all_gather("configuration", mine.dump());
  const json reference = json::parse(all[0]);
  std::string differences;
  for (size_t r = 1; r < all.size(); ++r) {
    const json other = json::parse(all[r]);
    json keys = json::object();
    for (const auto& [k, v] : reference.items()) keys[k] = true;
    for (const auto& [k, v] : other.items()) keys[k] = true;
    for (const auto& [k, unused] : keys.items()) {
      const json a = reference.value(k, json()), b = other.value(k, json());
      if (a == b) continue;
      differences += (differences.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " has " + k + " " +
                     b.dump() + " where rank 0 has " + a.dump();
    }
  }
  if (!differences.empty()) throw UsageError("every rank must run the same configuration: " + differences);
}

std::optional<std::string> DistributedRun::agree_to_time(const std::string& case_label,
                                                         const std::optional<std::string>& problem) {
  const auto all = group_->all_gather("can_time " + case_label, problem ? "1" + *problem : "0");
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    if (r != env_.rank && !all[r].empty() && all[r][0] == '1') return "rank " + std::to_string(r) + ": " + all[r].substr(1);
  }
  return std::nullopt;
}

void DistributedRun::before_case(size_t index, size_t count) {
  // "Mid-run": before the second case (the first when there is only one).
  if (count == 0 || index != std::min<size_t>(1, count - 1) || fault_fired_) return;
  const std::string hook = "XLLM_KERNEL_TEST_FAULT=" + std::string(fault_.kind == TestFault::Kind::kFail ? "fail:" : "hang:") +
                           std::to_string(fault_.rank);
  if (fault_.on(env_.rank, TestFault::Kind::kFail)) {
    fault_fired_ = true;
    throw std::runtime_error(hook + ": injected failure on rank " + std::to_string(env_.rank) + " before case " +
                             std::to_string(index + 1) + " of " + std::to_string(count));
  }
  if (fault_.on(env_.rank, TestFault::Kind::kHang)) {
    fault_fired_ = true;
    // Past every peer's timeout, yet bounded, so an orphaned process still ends.
    std::this_thread::sleep_for(group_->timeout() + std::chrono::seconds(60));
    throw std::runtime_error(hook + ": rank " + std::to_string(env_.rank) + " stopped hanging");
  }
}

void DistributedRun::after_validation(Validation& v) {
  if (!fault_.on(env_.rank, TestFault::Kind::kDisagree) || disagreed_) return;
  disagreed_ = true;
  v.passed = false;
  v.failures.insert(v.failures.begin(), "XLLM_KERNEL_TEST_FAULT=disagree:" + std::to_string(env_.rank) +
                                            ": rank " + std::to_string(env_.rank) + " reports this case as failed");
}

int DistributedRun::finish(Reports reports) {
  const bool write_json = !reports.output.empty(), write_markdown = !reports.markdown.empty();
  reports.report["distributed"] = {
      {"rank", env_.rank},
      {"world_size", env_.world_size},
      {"local_rank", env_.local_rank},
      {"report", write_json ? json(rank_path(reports.output)) : json(nullptr)},
      {"aggregate", write_json ? json(reports.output) : json(nullptr)}};
  if (write_json) write_atomically(rank_path(reports.output), reports.report.dump(2) + "\n");
  if (write_markdown) write_atomically(rank_path(reports.markdown), reports.rank_markdown(reports.report, SIZE_MAX));
  const auto gathered = group_->gather("reports", reports.report.dump());
  std::string code;
  if (env_.rank == 0) {
    std::vector<json> all;
    for (const auto& s : gathered) all.push_back(json::parse(s));
    const json aggregate = reports.aggregate(all);
    std::cout << reports.aggregate_markdown(aggregate, 20) << std::flush;
    if (write_json) write_atomically(reports.output, aggregate.dump(2) + "\n");
    if (write_markdown) write_atomically(reports.markdown, reports.aggregate_markdown(aggregate, SIZE_MAX));
    code = std::to_string(aggregate["summary"]["exit_code"].get<int>());
  }
  // Every rank ends with the aggregate's code, so torchrun's verdict is the run's.
  code = group_->broadcast("exit_code", code);
  finished_ = true;
  // Leave together: a rank that ends early with a non-zero code would make torchrun stop the others.
  group_->leave(group_->timeout());
  group_->release_store(hosts_store_, group_->timeout());
  return std::stoi(code);
}

void DistributedRun::abort(const std::string& error, bool peer_failed) noexcept {
  if (!group_ || finished_) return;
  finished_ = true;
  const milliseconds grace = std::min(group_->timeout(), kMaxGrace);
  if (peer_failed) {
    group_->leave(milliseconds(0));
    group_->outlast_failed_rank(grace);
    group_->release_store(hosts_store_, grace);
    // Long enough for the failed rank's exit to be seen first (torchrun checks every 0.1 s by
    // default), so torchrun names it as the root cause and stops the rest.
    std::this_thread::sleep_for(milliseconds(500));
  } else {
    group_->fail(error, grace);
    group_->release_store(hosts_store_, grace);
  }
}

std::string insert_rank(const std::string& path, int rank) {
  const std::string tag = ".rank" + std::to_string(rank);
  const auto slash = path.rfind('/');
  const auto name_start = slash == std::string::npos ? 0 : slash + 1;
  const auto dot = path.rfind('.');
  if (dot == std::string::npos || dot <= name_start) return path + tag;  // no extension, or a dot file
  return path.substr(0, dot) + tag + path.substr(dot);
}

json case_list_digest(const std::vector<std::string>& case_ids) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: stable across processes and builds
  for (const auto& id : case_ids) {
    for (unsigned char c : id + "\n") {
      h ^= c;
      h *= 1099511628211ull;
    }
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return {{"count", case_ids.size()}, {"hash", hex}};
}

int run_tool(const std::string& program, const std::function<int(std::unique_ptr<DistributedRun>&)>& body) {
  std::unique_ptr<DistributedRun> run;
  auto end = [&](int code, const std::string& kind, const std::string& message, bool peer_failed) {
    const std::string where = run ? "rank " + std::to_string(run->rank()) + ": " : "";
    std::cout << std::flush;
    std::cerr << program << ": " << where << kind << message << std::endl;
    if (run) run->abort(message, peer_failed);
    return code;
  };
  try {
    return body(run);
  } catch (const UsageError& e) {
    return end(kUsage, "", e.what(), false);
  } catch (const PeerFailure& e) {
    return end(kCaseFailed, "error: ", e.what(), true);
  } catch (const c10::Error& e) {
    return end(kCaseFailed, "error: ", e.what_without_backtrace(), false);
  } catch (const std::exception& e) {
    return end(kCaseFailed, "error: ", e.what(), false);
  }
}

}  // namespace xllm_kernel::numerics
