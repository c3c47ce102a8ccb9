// The NPU DeviceApi: synchronization and device-time intervals through c10's device-generic
// interfaces (the device guard and events torch_npu registers for PrivateUse1), so it needs no
// torch_npu header and is part of the library: it serves the npu implementations whichever front
// door registered them (the plugin or the Python package). ACLGraph capture needs torch_npu's
// NPUGraph: it lives in libxllm_kernel_npu_graph.so (src/npu/aclgraph.cpp), loaded on first use.
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <mutex>
#include <stdexcept>

#include "src/core/modules.h"
#include "src/npu/graph_abi.h"
#include "xllm_kernel/device_api.h"

namespace xllm_kernel::npu {
namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;
constexpr const char* kGraphLibrary = "libxllm_kernel_npu_graph.so";

c10::Device device_of(int index) { return c10::Device(kType, static_cast<c10::DeviceIndex>(index)); }

const c10::impl::DeviceGuardImplInterface& guard_impl() {
  if (!c10::impl::hasDeviceGuardImpl(kType)) {
    throw std::runtime_error("device npu: torch_npu is not loaded in this process (no PrivateUse1 device guard)");
  }
  return *c10::impl::getDeviceGuardImpl(kType);
}

c10::Stream current_stream(int index) { return guard_impl().getStream(device_of(index)); }

// Events that record device time (BACKEND_DEFAULT enables timing), made once per timer.
class NpuTimer final : public DeviceTimer {
 public:
  explicit NpuTimer(int index)
      : index_(index), start_(kType, c10::EventFlag::BACKEND_DEFAULT), end_(kType, c10::EventFlag::BACKEND_DEFAULT) {}

  // No hold (the CUDA timer's host-function spin has no device-generic form): the interval starts
  // when the device reaches the start event, so host gaps between enqueued calls count where a
  // call takes less device time than the host needs to enqueue it.
  void start() override { start_.record(current_stream(index_)); }

  double stop() override {
    end_.record(current_stream(index_));
    end_.synchronize();
    return start_.elapsedTime(end_) / 1000.0;  // milliseconds -> seconds
  }

 private:
  int index_;
  c10::Event start_, end_;
};

class NpuGraph final : public DeviceGraph {
 public:
  using Replay = int (*)(void*, char*, size_t);
  using Destroy = void (*)(void*);
  NpuGraph(void* graph, Replay replay, Destroy destroy) : graph_(graph), replay_(replay), destroy_(destroy) {}
  ~NpuGraph() override { destroy_(graph_); }
  NpuGraph(const NpuGraph&) = delete;
  NpuGraph& operator=(const NpuGraph&) = delete;

  void replay() override {
    char error[512] = {0};
    if (replay_(graph_, error, sizeof error) != 0) throw std::runtime_error(std::string("ACLGraph replay: ") + error);
  }

 private:
  void* graph_;
  Replay replay_;
  Destroy destroy_;
};

// libxllm_kernel_npu_graph.so, loaded once; `missing` says why graphs are unavailable.
struct GraphLibrary {
  std::string missing;
  int (*abi)() = nullptr;
  void* (*capture)(int, void (*)(void*), void*, int, char*, size_t) = nullptr;
  NpuGraph::Replay replay = nullptr;
  NpuGraph::Destroy destroy = nullptr;
};

const GraphLibrary& graph_library() {
  static const GraphLibrary library = [] {
    GraphLibrary g;
    const std::string path = detail::library_directory() + "/" + kGraphLibrary;
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
      g.missing = std::string("ACLGraph needs ") + kGraphLibrary +
                  ", which this build does not have (built without the torch-npu wheel's headers; see "
                  "cmake/npu.cmake, XLLM_KERNEL_TORCH_NPU_DIR)";
      return g;
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr) {
      const char* message = dlerror();
      g.missing = std::string("ACLGraph: ") + kGraphLibrary + " cannot load (it needs torch_npu and the CANN runtime): " +
                  (message ? message : "unknown error");
      return g;
    }
    g.abi = reinterpret_cast<int (*)()>(dlsym(handle, "xllm_kernel_npu_graph_abi"));
    g.capture = reinterpret_cast<decltype(g.capture)>(dlsym(handle, "xllm_kernel_npu_graph_capture"));
    g.replay = reinterpret_cast<NpuGraph::Replay>(dlsym(handle, "xllm_kernel_npu_graph_replay"));
    g.destroy = reinterpret_cast<NpuGraph::Destroy>(dlsym(handle, "xllm_kernel_npu_graph_destroy"));
    if (!g.abi || !g.capture || !g.replay || !g.destroy || g.abi() != XLLM_KERNEL_NPU_GRAPH_ABI) {
      // Ours and broken: an installation error, not a missing dependency.
      throw std::runtime_error(std::string("device npu: ") + path + " is present but is not this library's " +
                               kGraphLibrary + " (interface version " + std::to_string(XLLM_KERNEL_NPU_GRAPH_ABI) +
                               ")");
    }
    return g;
  }();
  return library;
}

class NpuApi final : public DeviceApi {
 public:
  std::string description(int index) const override {
    const int devices = guard_impl().deviceCount();
    return "npu:" + std::to_string(index) + " (torch_npu, PrivateUse1 '" + c10::get_privateuse1_backend() + "', " +
           std::to_string(devices) + " device" + (devices == 1 ? "" : "s") + ")";
  }

  void synchronize(int index) const override { guard_impl().synchronizeDevice(static_cast<c10::DeviceIndex>(index)); }

  bool has_device_events() const override { return true; }

  double time_interval(int index, const std::function<void()>& enqueue) const override {
    const c10::DeviceGuard guard(device_of(index));  // restores the previous device, also on a throw
    NpuTimer timer(index);
    timer.start();
    enqueue();
    return timer.stop();
  }

  std::unique_ptr<DeviceTimer> timer(int index) const override { return std::make_unique<NpuTimer>(index); }

  std::optional<std::string> graph_unsupported_reason() const override {
    const GraphLibrary& g = graph_library();
    if (!g.missing.empty()) return g.missing;
    return std::nullopt;
  }

  std::unique_ptr<DeviceGraph> capture(int index, const std::function<void()>& enqueue, int calls) const override {
    const GraphLibrary& g = graph_library();
    if (!g.missing.empty()) throw std::runtime_error("capture on npu: " + g.missing);
    char error[512] = {0};
    auto trampoline = [](void* context) { (*static_cast<const std::function<void()>*>(context))(); };
    void* graph = g.capture(index, trampoline, const_cast<std::function<void()>*>(&enqueue), calls, error, sizeof error);
    if (graph == nullptr) throw std::runtime_error(std::string("ACLGraph capture on npu:") + std::to_string(index) + ": " + error);
    return std::make_unique<NpuGraph>(graph, g.replay, g.destroy);
  }
};

const bool registered = [] {
  register_device_api(Device::kNpu, std::make_shared<NpuApi>());
  return true;
}();

}  // namespace
}  // namespace xllm_kernel::npu
