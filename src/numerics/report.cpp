#include "src/numerics/report.h"

#include <ATen/Parallel.h>
#include <torch/version.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "csrc/cpu/common/simd.h"
#include "src/core/cpu_stream.h"
#include "xllm_kernel/device_api.h"

#ifndef XLLM_KERNEL_BUILD_TYPE
#define XLLM_KERNEL_BUILD_TYPE "unknown"
#endif

namespace xllm_kernel::numerics {
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

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buffer;
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
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("cannot write report " + path + ": cannot create " + tmp);
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool flushed = std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  const bool closed = std::fclose(f) == 0;
  if (!written || !flushed || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write report " + path);
  }
}

std::string format_number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3g", value);
  return buffer;
}

}  // namespace xllm_kernel::numerics
