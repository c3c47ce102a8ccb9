// 16-byte memory access for CUDA kernels, usable on the host too: a host build of a kernel's
// per-thread work (the GPU-free tests) copies bytes instead of punning and throws on a
// misaligned address, so a wrong vectorization decision fails a host test instead of faulting
// (or silently splitting accesses) on the device.
//
//   if (aligned16(p) && aligned16(q)) store16(q, load16(p));  // kVec<__half> == 8 elements
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "csrc/cuda/common/macros.cuh"

namespace xllm_kernel::cuda::kernels {

inline constexpr int kVectorBytes = 16;

// Elements per 16-byte access.
template <class T>
inline constexpr int kVec = kVectorBytes / static_cast<int>(sizeof(T));

#ifndef __CUDA_ARCH__
// Host builds only (tests): when set, called with the address and size of every store that
// store16 and codec.cuh's store<N> make, so that a test can check which bytes a kernel's
// per-thread work writes, and how often. Null (no call) by default.
inline thread_local void (*host_store_observer)(const void* p, size_t bytes) = nullptr;
#endif

// True for null too (a pointer that is not used constrains nothing).
XLLM_CUDA_HD bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % kVectorBytes == 0; }

XLLM_CUDA_HD uint4 load16(const void* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint4*>(p);
#else
  if (!aligned16(p)) throw std::logic_error("16-byte load from a misaligned address");
  uint4 q;
  std::memcpy(&q, p, sizeof(q));
  return q;
#endif
}

XLLM_CUDA_HD void store16(void* p, uint4 q) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<uint4*>(p) = q;
#else
  if (!aligned16(p)) throw std::logic_error("16-byte store to a misaligned address");
  std::memcpy(p, &q, sizeof(q));
  if (host_store_observer != nullptr) host_store_observer(p, sizeof(q));
#endif
}

}  // namespace xllm_kernel::cuda::kernels
