// The CUDA DeviceApi (synchronization, event intervals and timers, CUDA graphs), registered when the plugin
// loads, so the numerics and benchmark tools can time and capture on "cuda".
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
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

// A stream held by a host function that spins until released. Bounded: a call that waits for the
// device while it is held (a synchronizing allocation, say) would otherwise wait forever.
struct Hold {
  static constexpr std::chrono::seconds kLimit{1};
  std::atomic<bool> released{true};
  std::atomic<bool> expired{false};
};

void CUDART_CB hold_stream(void* data) {
  auto* hold = static_cast<Hold*>(data);
  const auto deadline = std::chrono::steady_clock::now() + Hold::kLimit;
  while (!hold->released.load(std::memory_order_acquire)) {
    if (std::chrono::steady_clock::now() > deadline) {
      hold->expired.store(true, std::memory_order_relaxed);
      return;
    }
  }
}

// Two events made once per timer, not per sample; the current stream is held while the timed
// calls are enqueued (see DeviceTimer::start).
class CudaTimer final : public DeviceTimer {
 public:
  explicit CudaTimer(int index) : index_(static_cast<c10::DeviceIndex>(index)) {
    const c10::cuda::CUDAGuard guard(index_);
    C10_CUDA_CHECK(cudaEventCreate(&start_));
    C10_CUDA_CHECK(cudaEventCreate(&end_));
  }
  ~CudaTimer() override {
    if (held_) {  // stop() never came (a timed call threw): let the host function return first
      hold_.released.store(true, std::memory_order_release);
      cudaStreamSynchronize(stream_);
    }
    cudaEventDestroy(start_);
    cudaEventDestroy(end_);
  }
  CudaTimer(const CudaTimer&) = delete;
  CudaTimer& operator=(const CudaTimer&) = delete;

  void start() override {
    const c10::cuda::CUDAGuard guard(index_);
    stream_ = at::cuda::getCurrentCUDAStream().stream();
    hold_.released.store(false, std::memory_order_relaxed);
    hold_.expired.store(false, std::memory_order_relaxed);
    C10_CUDA_CHECK(cudaLaunchHostFunc(stream_, &hold_stream, &hold_));
    held_ = true;
    C10_CUDA_CHECK(cudaEventRecord(start_, stream_));
  }

  double stop() override {
    const c10::cuda::CUDAGuard guard(index_);
    const cudaError_t recorded = cudaEventRecord(end_, stream_);
    hold_.released.store(true, std::memory_order_release);
    held_ = false;
    C10_CUDA_CHECK(recorded);
    C10_CUDA_CHECK(cudaEventSynchronize(end_));
    float milliseconds = 0;
    C10_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, start_, end_));
    return milliseconds / 1000.0;
  }

  bool hold_expired() const override { return hold_.expired.load(std::memory_order_relaxed); }

 private:
  c10::DeviceIndex index_;
  cudaEvent_t start_ = nullptr, end_ = nullptr;
  cudaStream_t stream_ = nullptr;
  Hold hold_;
  bool held_ = false;
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
  bool timer_holds_device() const override { return true; }

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

  std::unique_ptr<DeviceTimer> timer(int index) const override { return std::make_unique<CudaTimer>(index); }

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
