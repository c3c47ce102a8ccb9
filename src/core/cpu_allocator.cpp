#include "src/core/cpu_allocator.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <sys/mman.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>

namespace xllm_kernel::detail {
namespace {

constexpr size_t kMinCached = size_t{1} << 20;
constexpr size_t kAlignment = size_t{2} << 20;  // huge-page aligned

size_t cache_limit() {
  // XLLM_KERNEL_CPU_CACHE_BYTES bounds the memory kept for reuse (default 4 GiB).
  static const size_t limit = [] {
    const char* v = std::getenv("XLLM_KERNEL_CPU_CACHE_BYTES");
    return v ? static_cast<size_t>(std::strtoull(v, nullptr, 10)) : size_t{4} << 30;
  }();
  return limit;
}

class BlockCache {
 public:
  void* take(size_t size) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(size);
      if (it != free_.end()) {
        void* p = it->second;
        free_.erase(it);
        cached_ -= size;
        live_[p] = size;
        return p;
      }
    }
    void* p = std::aligned_alloc(kAlignment, size);
    if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    madvise(p, size, MADV_HUGEPAGE);  // fewer faults and TLB misses; a hint, failures are harmless
#endif
    std::lock_guard<std::mutex> lock(mutex_);
    live_[p] = size;
    return p;
  }

  void give_back(void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(p);
    const size_t size = it->second;
    live_.erase(it);
    if (cached_ + size <= cache_limit()) {
      free_.emplace(size, p);
      cached_ += size;
    } else {
      std::free(p);
    }
  }

  size_t cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cached_;
  }

 private:
  std::mutex mutex_;
  std::multimap<size_t, void*> free_;
  std::map<void*, size_t> live_;
  size_t cached_ = 0;
};

BlockCache& cache() {
  static auto* c = new BlockCache();  // never destroyed: tensors may outlive static destruction
  return *c;
}

}  // namespace

at::Tensor empty_cpu_cached(at::IntArrayRef sizes, at::ScalarType dtype) {
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  const size_t bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  const auto options = at::TensorOptions().dtype(dtype).device(at::kCPU);
  if (bytes < kMinCached) return at::empty(sizes, options);
  const size_t size = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = cache().take(size);
  return at::from_blob(p, sizes, [](void* block) { cache().give_back(block); }, options);
}

size_t cpu_cache_bytes() { return cache().cached(); }

size_t cpu_cache_limit() { return cache_limit(); }

}  // namespace xllm_kernel::detail
