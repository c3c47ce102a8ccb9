#include "src/tools/report.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/version.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "csrc/cpu/common/simd.h"
#include "src/core/cpu_stream.h"
#include "src/tools/cli.h"
#include "src/tools/distributed/run.h"
#include "src/tools/distributed/test_fault.h"
#include "xllm_kernel/device_api.h"

#ifndef XLLM_KERNEL_BUILD_TYPE
#define XLLM_KERNEL_BUILD_TYPE "unknown"
#endif

namespace xllm_kernel::tools {
namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

// The system's transparent-huge-page mode: the bracketed word of its sysfs setting ("madvise").
std::string system_thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(in, line)) return "unknown";
  const auto open = line.find('['), close = line.find(']');
  return open != std::string::npos && close > open ? line.substr(open + 1, close - open - 1) : line;
}

// kB of huge pages backing the mapping that contains `address` (AnonHugePages in /proc/self/smaps);
// -1 when the mapping is not found.
int64_t huge_page_kb(uintptr_t address) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    unsigned long long begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &begin, &end) == 2 && line.find(':') > line.find('-')) {
      inside = begin <= address && address < end;
    } else if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      return std::strtoll(line.c_str() + std::strlen("AnonHugePages:"), nullptr, 10);
    }
  }
  return -1;
}

// Whether torch's large CPU allocations land on huge pages: scattered writes (a KV cache) pay a
// page walk per 4 KiB page without them. Measured on one touched 8 MiB tensor.
json cpu_pages() {
  const at::Tensor probe = at::ones({int64_t{8} << 20}, at::kByte);
  const int64_t kb = huge_page_kb(reinterpret_cast<uintptr_t>(probe.data_ptr()));
  const char* env = std::getenv("THP_MEM_ALLOC_ENABLE");
  return json{{"huge_page_kb_of_8_mib_tensor", kb},
              {"thp_mem_alloc_enable", env != nullptr ? json(env) : json(nullptr)},
              {"system_thp", system_thp_mode()}};
}

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buffer;
}

int publish_locally(const Publication& p) {
  const int code = p.report.at("summary").at("exit_code").get<int>();
  const std::string md = p.render(p.report, SIZE_MAX);
  std::cout << (p.console_rows == SIZE_MAX ? md : p.render(p.report, p.console_rows));
  if (!p.output.empty()) write_atomically(p.output, p.report.dump(2) + "\n");
  if (!p.markdown.empty()) write_atomically(p.markdown, md);
  if (code == kNothingPassed) std::cerr << p.nothing_passed;
  return code;
}

int publish_through_ranks(Publication p, distributed::DistributedRun& run) {
  const distributed::RankEnvironment& env = run.environment();
  const bool write_json = !p.output.empty(), write_markdown = !p.markdown.empty();
  p.report["distributed"] = {{"rank", env.rank},
                             {"world_size", env.world_size},
                             {"local_rank", env.local_rank},
                             {"report", write_json ? json(run.rank_path(p.output)) : json(nullptr)},
                             {"aggregate", write_json ? json(p.output) : json(nullptr)}};
  if (write_json) write_atomically(run.rank_path(p.output), p.report.dump(2) + "\n");
  if (write_markdown) write_atomically(run.rank_path(p.markdown), p.render(p.report, SIZE_MAX));
  const auto gathered = run.group().gather("reports", p.report.dump());
  std::optional<int> code;
  if (env.rank == 0) {
    std::vector<json> all;
    for (const auto& s : gathered) all.push_back(json::parse(s));
    const json aggregate = p.aggregate(all);
    std::cout << p.render_aggregate(aggregate, 20) << std::flush;
    if (write_json) write_atomically(p.output, aggregate.dump(2) + "\n");
    if (write_markdown) write_atomically(p.markdown, p.render_aggregate(aggregate, SIZE_MAX));
    code = aggregate["summary"]["exit_code"].get<int>();
  }
  return run.finish(code);
}

}  // namespace

json environment(Device device, int device_index, const std::string& revision) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) != 3) load[0] = load[1] = load[2] = -1;
  const DeviceApi* api = device_api(device);
  return json{
      {"host", host},
      {"cpu_model", cpu_model()},
      {"cpu_simd_target", cpu::simd_target()},
      {"cpu_stream_policy", detail::cpu_stream_policy()},
      {"cpu_pages", cpu_pages()},
      {"device", std::string(to_string(device)) + (device == Device::kCpu ? "" : ":" + std::to_string(device_index))},
      {"device_description", api ? api->description(device_index) : "unavailable"},
      {"torch", TORCH_VERSION},
      {"compiler", std::string("gcc ") + __VERSION__},
      {"build_type", XLLM_KERNEL_BUILD_TYPE},
      {"revision", revision},
      {"load_average", {load[0], load[1], load[2]}},
      {"threads", at::get_num_threads()},
      {"timestamp", now_utc()},
  };
}

json implementation_json(const PreparedKernel& kernel) {
  const KernelSpec& s = kernel.spec();
  std::vector<std::string> modes;
  for (ExecutionMode m : s.execution_modes) modes.push_back(to_string(m));
  return json{{"name", s.name},
              {"operation", s.contract->operation},
              {"device", to_string(s.device)},
              {"solution", s.solution},
              {"variant", s.variant},
              {"binding", s.binding},
              {"detail", kernel.detail()},
              {"priority", s.priority},
              {"execution_modes", modes},
              {"contract_version", s.contract->version}};
}

void write_atomically(const std::string& path, const std::string& text) {
  // The temporary file lies beside the report (a rename does not cross file systems), named so that
  // one a killed process leaves behind is plainly not a report: "<path>.tmp.<pid>".
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    throw std::runtime_error("cannot write report " + path + ": cannot create " + tmp + ": " + std::strerror(errno));
  }
  try {
    distributed::report_write_stall(f, tmp, text);  // TEST HOOK: returns at once unless asked to stall
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  // The data reaches the disk before the rename publishes it, and the rename itself (the
  // directory entry) before we report success: after a power loss the path holds the previous
  // report or the new one, never an empty or partial file.
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool flushed = std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  const bool closed = std::fclose(f) == 0;
  if (!written || !flushed || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write report " + path + ": " + std::strerror(error));
  }
  const std::string directory = std::filesystem::path(path).parent_path().empty()
                                    ? std::string(".")
                                    : std::filesystem::path(path).parent_path().string();
  const int dir = open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  // Some file systems cannot sync a directory (EINVAL); there the rename is as durable as it gets.
  const bool synced = dir >= 0 && (fsync(dir) == 0 || errno == EINVAL);
  const int error = errno;
  if (dir >= 0) close(dir);
  if (!synced) {
    throw std::runtime_error("report " + path + " written, but its directory " + directory +
                             " could not be synced: " + std::strerror(error));
  }
}

std::string format_number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3g", value);
  return buffer;
}

std::string format_microseconds(double seconds) { return format_number(seconds * 1e6); }

int publish(Publication publication, distributed::DistributedRun* run) {
  if (run == nullptr) return publish_locally(publication);
  return publish_through_ranks(std::move(publication), *run);
}

}  // namespace xllm_kernel::tools
