// Memory that ends right before an inaccessible page, for the torch-free kernel tests (CPU:
// test/csrc/, CUDA host runs: test/cuda/): a kernel reading or writing one byte past a row or an
// index array crashes the plain test run, not only a sanitizer build. No Highway, no torch.
//
//   GuardedRegion rows(bytes);                    // rows.tail(bytes): the last `bytes` before the guard
//   GuardedArray<int32_t> table(values);          // table.data(): a copy of values, ending at the guard
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

namespace xllm_kernel::test {

// `bytes` of memory that end right before a PROT_NONE page: a kernel reading or writing past
// the end crashes. Large sizes only reserve address space (pages are committed when touched).
class GuardedRegion {
 public:
  explicit GuardedRegion(size_t bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t data_pages = (bytes + page - 1) / page;
    len_ = (data_pages + 1) * page;
    base_ = mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base_ == MAP_FAILED) {
      base_ = nullptr;
      return;
    }
    char* guard = static_cast<char*>(base_) + data_pages * page;
    if (mprotect(guard, page, PROT_NONE) != 0) return;
    end_ = guard;
  }
  ~GuardedRegion() {
    if (base_ != nullptr) munmap(base_, len_);
  }
  GuardedRegion(const GuardedRegion&) = delete;
  GuardedRegion& operator=(const GuardedRegion&) = delete;
  bool ok() const { return end_ != nullptr; }
  // Start of the last `bytes` before the guard page.
  char* tail(size_t bytes) const { return end_ - bytes; }

 private:
  void* base_ = nullptr;
  size_t len_ = 0;
  char* end_ = nullptr;
};

// A copy of an index or scalar array (block tables, slot mappings, lengths, positions, per-row
// parameters, scales) that ends right before an inaccessible page, like the rows of GuardedRegion:
// a kernel reading one entry past the end crashes in the plain test run, not only under ASan.
template <typename T>
class GuardedArray {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  explicit GuardedArray(const std::vector<T>& values) : GuardedArray(values.data(), values.size()) {}
  GuardedArray(const T* values, size_t n) : region_(std::max<size_t>(n, 1) * sizeof(T)), n_(n) {
    if (region_.ok() && n > 0) std::memcpy(data(), values, n * sizeof(T));
  }
  bool ok() const { return region_.ok(); }
  T* data() const { return reinterpret_cast<T*>(region_.tail(n_ * sizeof(T))); }
  size_t size() const { return n_; }
  T& operator[](size_t i) const { return data()[i]; }

 private:
  GuardedRegion region_;
  size_t n_;
};

}  // namespace xllm_kernel::test
