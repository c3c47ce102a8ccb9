#include "xllm_kernel/device_api.h"

#include <chrono>
#include <mutex>
#include <stdexcept>

namespace xllm_kernel {
namespace {

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
