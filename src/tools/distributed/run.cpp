#include "src/tools/distributed/run.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "src/tools/cli.h"

namespace xllm_kernel::tools::distributed {
namespace {

using std::chrono::milliseconds;

// A failing rank waits at most this long for the others to read its error.
constexpr milliseconds kMaxGrace{30000};

}  // namespace

void DistributedRun::start(const std::string& tool, milliseconds timeout, std::unique_ptr<DistributedRun>& out) {
  std::unique_ptr<DistributedRun> run(new DistributedRun);
  run->env_ = rank_environment([](const char* name) { return std::getenv(name); });
  run->fault_ = FaultInjector::from_environment(run->env_.rank, timeout);
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
  fault_.on_configuration(mine);
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

int DistributedRun::finish(std::optional<int> code) {
  // Every rank ends with the aggregate's code, so torchrun's verdict is the run's.
  const std::string agreed = group_->broadcast("exit_code", code ? std::to_string(*code) : "");
  finished_ = true;
  // Leave together: a rank that ends early with a non-zero code would make torchrun stop the others.
  group_->leave(group_->timeout());
  group_->release_store(hosts_store_, group_->timeout());
  return std::stoi(agreed);
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
}  // namespace xllm_kernel::tools::distributed
