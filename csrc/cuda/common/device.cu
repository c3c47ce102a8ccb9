// Host-side helpers of the CUDA launchers (csrc/cuda/common/device.h).
#include <atomic>

#include "csrc/cuda/common/device.h"

namespace xllm_kernel::cuda {

cudaError_t current_sm_count(int* count) {
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  constexpr int kCachedDevices = 64;
  static std::atomic<int> cache[kCachedDevices] = {};
  if (device >= 0 && device < kCachedDevices) {
    if (const int cached = cache[device].load(std::memory_order_relaxed); cached > 0) {
      *count = cached;
      return cudaSuccess;
    }
  }
  if (cudaError_t e = cudaDeviceGetAttribute(count, cudaDevAttrMultiProcessorCount, device); e != cudaSuccess) {
    return e;
  }
  if (device >= 0 && device < kCachedDevices) cache[device].store(*count, std::memory_order_relaxed);
  return cudaSuccess;
}

}  // namespace xllm_kernel::cuda
