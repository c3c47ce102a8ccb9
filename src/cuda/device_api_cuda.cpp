// The CUDA DeviceApi (synchronization, event intervals, CUDA graphs), registered when the plugin
// loads, so the numerics and benchmark tools can time and capture on "cuda".
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <sstream>

#include "xllm_kernel/device_api.h"

namespace xllm_kernel::cuda {
namespace {

class CudaGraph final : public DeviceGraph {
 public:
  explicit CudaGraph(int index) : index_(index) {}
  at::cuda::CUDAGraph& graph() { return graph_; }
  void replay() override {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index_));
    graph_.replay();
  }

 private:
  int index_;
  at::cuda::CUDAGraph graph_;
};

class CudaApi final : public DeviceApi {
 public:
  std::string description(int index) const override {
    const cudaDeviceProp* p = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(index));
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    std::ostringstream s;
    s << p->name << " (sm_" << p->major << p->minor << ", " << p->multiProcessorCount << " SMs, "
      << (p->totalGlobalMem >> 30) << " GiB, L2 " << (p->l2CacheSize >> 20) << " MiB), driver " << driver / 1000 << "."
      << (driver % 1000) / 10 << ", runtime " << runtime / 1000 << "." << (runtime % 1000) / 10;
    return s.str();
  }

  void synchronize(int index) const override {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
    at::cuda::getCurrentCUDAStream().synchronize();
  }

  bool has_device_events() const override { return true; }

  double time_interval(int index, const std::function<void()>& enqueue) const override {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
    at::cuda::CUDAEvent start(cudaEventDefault), end(cudaEventDefault);
    auto stream = at::cuda::getCurrentCUDAStream();
    start.record(stream);
    enqueue();
    end.record(stream);
    end.synchronize();
    return start.elapsed_time(end) / 1000.0;  // milliseconds -> seconds
  }

  std::optional<std::string> graph_unsupported_reason() const override { return std::nullopt; }

  std::unique_ptr<DeviceGraph> capture(int index, const std::function<void()>& enqueue, int calls) const override {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
    auto graph = std::make_unique<CudaGraph>(index);
    // Capture may not run on the legacy default stream: use a pool stream, ordered after the
    // current one so inputs prepared there are visible.
    auto current = at::cuda::getCurrentCUDAStream();
    auto side = c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(index));
    at::cuda::CUDAEvent ready;
    ready.record(current);
    ready.block(side);
    {
      c10::cuda::CUDAStreamGuard stream_guard(side);
      graph->graph().capture_begin();
      for (int i = 0; i < calls; ++i) enqueue();
      graph->graph().capture_end();
    }
    side.synchronize();
    return graph;
  }

  int64_t last_level_cache_bytes(int index) const override {
    return at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(index))->l2CacheSize;
  }
};

// Registered at load: the plugin is loaded only once CUDA is known to be usable.
const bool registered = [] {
  register_device_api(Device::kCuda, std::make_shared<CudaApi>());
  return true;
}();

}  // namespace
}  // namespace xllm_kernel::cuda
