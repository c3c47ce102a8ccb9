#include "xllm_kernel/device_api.h"

#include <chrono>
#include <fstream>
#include <string>
#include <mutex>
#include <stdexcept>

namespace xllm_kernel {
namespace {

class WallTimer final : public DeviceTimer {
 public:
  void start() override { start_ = std::chrono::steady_clock::now(); }
  double stop() override { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

class CpuApi final : public DeviceApi {
 public:
  std::string description(int) const override { return "cpu"; }
  void synchronize(int) const override {}
  bool has_device_events() const override { return false; }
  double time_interval(int, const std::function<void()>& enqueue) const override {
    const auto start = std::chrono::steady_clock::now();
    enqueue();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  std::optional<std::string> graph_unsupported_reason() const override { return "device cpu has no graph API"; }
  std::unique_ptr<DeviceGraph> capture(int, const std::function<void()>&, int) const override {
    throw std::logic_error("capture: device cpu has no graph API");
  }
  int64_t last_level_cache_bytes(int) const override {
    // The largest cache level sysfs lists for cpu0 (shared L3 on current x86 and Arm servers).
    int64_t best = -1;
    int best_level = 0;
    for (int i = 0; i < 8; ++i) {
      const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
      std::ifstream level_file(dir + "level"), size_file(dir + "size");
      int level = 0;
      std::string size;
      if (!(level_file >> level) || !(size_file >> size) || size.empty()) continue;
      int64_t bytes = std::stoll(size);
      if (size.back() == 'K') bytes <<= 10;
      if (size.back() == 'M') bytes <<= 20;
      if (level >= best_level) {
        best_level = level;
        best = bytes;
      }
    }
    return best;
  }
};

struct Apis {
  std::mutex mutex;
  std::shared_ptr<const DeviceApi> apis[kNumDevices];
};

Apis& apis() {
  static Apis* instance = [] {
    auto* a = new Apis();
    a->apis[static_cast<int>(Device::kCpu)] = std::make_shared<CpuApi>();
    return a;
  }();
  return *instance;
}

}  // namespace

std::unique_ptr<DeviceTimer> DeviceApi::timer(int) const { return std::make_unique<WallTimer>(); }

const DeviceApi* device_api(Device device) {
  Apis& a = apis();
  std::lock_guard<std::mutex> lock(a.mutex);
  return a.apis[static_cast<int>(device)].get();
}

void register_device_api(Device device, std::shared_ptr<const DeviceApi> api) {
  Apis& a = apis();
  std::lock_guard<std::mutex> lock(a.mutex);
  a.apis[static_cast<int>(device)] = std::move(api);
}

}  // namespace xllm_kernel
