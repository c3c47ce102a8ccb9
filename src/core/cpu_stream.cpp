#include "src/core/cpu_stream.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "xllm_kernel/device_api.h"

namespace xllm_kernel::detail {
namespace {

constexpr int64_t kPerThreadShare = int64_t{16} << 20;
constexpr int64_t kUnknownCache = int64_t{32} << 20;

int64_t last_level_cache() {
  static const int64_t bytes = [] {
    const DeviceApi* api = device_api(Device::kCpu);
    const int64_t llc = api != nullptr ? api->last_level_cache_bytes(0) : -1;
    return llc > 0 ? llc : kUnknownCache;
  }();
  return bytes;
}

// The override, or -1.
int64_t override_bytes() {
  static const int64_t bytes = [] {
    const char* value = std::getenv("XLLM_KERNEL_CPU_STREAM_BYTES");
    if (value == nullptr || *value == '\0') return int64_t{-1};
    char* end = nullptr;
    const long long v = std::strtoll(value, &end, 10);
    return end != nullptr && *end == '\0' && v >= 0 ? static_cast<int64_t>(v) : int64_t{-1};
  }();
  return bytes;
}

std::string mib(int64_t bytes) {
  std::ostringstream s;
  s << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return s.str();
}

}  // namespace

int64_t cpu_stream_threshold_bytes() {
  if (const int64_t o = override_bytes(); o >= 0) return o;
  const int64_t threads = std::max(1, at::get_num_threads());
  return std::min(last_level_cache(), kPerThreadShare * threads);
}

std::string cpu_stream_policy() {
  const int64_t threshold = cpu_stream_threshold_bytes();
  if (override_bytes() >= 0) return "outputs >= " + mib(threshold) + " streamed (XLLM_KERNEL_CPU_STREAM_BYTES)";
  return "outputs >= " + mib(threshold) + " streamed (last-level cache " + mib(last_level_cache()) + ", at most " +
         mib(kPerThreadShare) + " x " + std::to_string(std::max(1, at::get_num_threads())) + " threads)";
}

}  // namespace xllm_kernel::detail
