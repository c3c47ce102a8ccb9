// Memory and store logs of the torch-free CUDA host tests (test/cuda/<family>/*_host_test.cpp),
// where the kernels' per-thread code runs lane by lane on the host: aligned buffers with typed
// access, views of rows inside them, buffers between inaccessible regions, and the log of the
// stores the kernels make (the host build's store observer, csrc/cuda/common/vector.cuh).
//
//   Buffer out(DType::kBFloat16, view.extent(hidden));   // 64-byte aligned, zeroed
//   out.set(view.row_offset(r) + i, 1.5);                 // rounded once (element_codec.h)
//   StoreLog log(out.bytes.get(), out.size_bytes());
//   { StoreObserverScope observe(log); run_the_plan(); }  // log.count[b]: stores of byte b
//   GuardedBuffer table(n * 4, 4);                        // a read past either end faults
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "csrc/common/rows.h"
#include "csrc/cuda/common/vector.cuh"
#include "test/cuda/element_codec.h"

namespace xllm_kernel::cuda {

// `size` bytes, 64-byte aligned, every byte `fill`, with at least 64 bytes of slack after them
// (also `fill`) that a vector access rounding past the end lands in.
class AlignedBytes {
 public:
  AlignedBytes() = default;
  explicit AlignedBytes(size_t size, unsigned char fill = 0) : size_(size) {
    const size_t alloc = (size + 63) / 64 * 64 + 64;
    p_.reset(static_cast<unsigned char*>(std::aligned_alloc(64, alloc)));
    std::memset(p_.get(), fill, alloc);
  }
  unsigned char* get() const { return p_.get(); }
  size_t size() const { return size_; }
  // A copy of the `size` bytes (the slack zeroed).
  AlignedBytes clone() const {
    AlignedBytes b(size_);
    if (size_ > 0) std::memcpy(b.get(), get(), size_);  // a default one holds no pointer
    return b;
  }
  std::vector<unsigned char> copy() const { return {get(), get() + size_}; }

 private:
  size_t size_ = 0;
  std::unique_ptr<unsigned char, void (*)(void*)> p_{nullptr, std::free};
};

// `n` elements of a DType in AlignedBytes (zeroed), read and written through float64.
struct Buffer {
  using DType = ::xllm_kernel::kernels::DType;
  DType dtype = DType::kFloat32;
  size_t elements = 0;
  AlignedBytes bytes;

  Buffer() = default;
  Buffer(DType t, size_t n) : dtype(t), elements(n), bytes(n * elem(t)) {}
  static size_t elem(DType t) { return static_cast<size_t>(::xllm_kernel::kernels::element_size(t)); }
  void* at(int64_t i) const { return bytes.get() + i * static_cast<int64_t>(elem(dtype)); }
  double get(int64_t i) const { return to_double(at(i), dtype); }
  void set(int64_t i, double v) const { from_double(at(i), dtype, v); }
  size_t size_bytes() const { return elements * elem(dtype); }
  Buffer clone() const {
    Buffer b;
    b.dtype = dtype;
    b.elements = elements;
    b.bytes = bytes.clone();
    return b;
  }
  bool same_bits(const Buffer& o, int64_t i) const { return std::memcmp(at(i), o.at(i), elem(dtype)) == 0; }
};

// Rows of a tensor inside a buffer: the first element's offset and the leading sizes and strides
// (in elements; the last size fastest).
struct View {
  int64_t offset = 0;
  std::vector<int64_t> sizes, strides;

  int64_t rows() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
  int64_t row_offset(int64_t row) const {
    int64_t off = offset;
    for (int d = static_cast<int>(sizes.size()) - 1; d >= 0; --d) {
      off += row % sizes[d] * strides[d];
      row /= sizes[d];
    }
    return off;
  }
  // Elements a buffer needs for rows of `width`, plus `slack` after the last row to catch overruns.
  int64_t extent(int64_t width, int64_t slack = 9) const {
    int64_t last = offset;
    for (size_t d = 0; d < sizes.size(); ++d) last += (sizes[d] - 1) * strides[d];
    return last + width + slack;
  }
};

// Bytes between two inaccessible 1 MiB regions; the data ends where the upper region begins (up
// to `align` - 1 bytes before it), so a read past either end faults.
class GuardedBuffer {
 public:
  explicit GuardedBuffer(size_t bytes, size_t align = 64) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE)), guard = size_t{1} << 20;
    const size_t rounded = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
    body_ = (rounded + page - 1) / page * page;
    size_ = guard + body_ + guard;
    void* m = mmap(nullptr, size_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::runtime_error("mmap");
    map_ = static_cast<unsigned char*>(m);
    if (mprotect(map_ + guard, body_, PROT_READ | PROT_WRITE) != 0) throw std::runtime_error("mprotect");
    data_ = map_ + guard + body_ - rounded;
    bytes_ = bytes;
  }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;
  ~GuardedBuffer() { munmap(map_, size_); }
  unsigned char* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  unsigned char* map_ = nullptr;
  unsigned char* data_ = nullptr;
  size_t size_ = 0, body_ = 0, bytes_ = 0;
};

// Which bytes of [base, base + bytes) the kernels stored, how often, and in what sizes.
struct StoreLog {
  const unsigned char* base = nullptr;
  size_t bytes = 0;
  std::vector<int> count;                                      // per byte of the range
  int64_t elsewhere = 0;                                       // stores outside the range
  std::vector<int64_t> by_size = std::vector<int64_t>(17, 0);  // stores of 1..16 bytes (16: or more)

  StoreLog(const void* b, size_t n) : base(static_cast<const unsigned char*>(b)), bytes(n), count(n, 0) {}
  void record(const void* p, size_t n) {
    ++by_size[std::min<size_t>(n, 16)];
    const auto* q = static_cast<const unsigned char*>(p);
    if (q < base || q + n > base + bytes) {
      ++elsewhere;
      return;
    }
    for (size_t i = 0; i < n; ++i) ++count[q - base + i];
  }
};

// Records this thread's kernel stores in `log` while in scope.
class StoreObserverScope {
 public:
  explicit StoreObserverScope(StoreLog& log) {
    current() = &log;
    kernels::host_store_observer = &observe;
  }
  ~StoreObserverScope() {
    kernels::host_store_observer = nullptr;
    current() = nullptr;
  }
  StoreObserverScope(const StoreObserverScope&) = delete;
  StoreObserverScope& operator=(const StoreObserverScope&) = delete;

 private:
  static StoreLog*& current() {
    static thread_local StoreLog* log = nullptr;
    return log;
  }
  static void observe(const void* p, size_t bytes) { current()->record(p, bytes); }
};

}  // namespace xllm_kernel::cuda
