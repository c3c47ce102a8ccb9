// A caching allocator for the CPU outputs of native kernels (not public).
//
// Each call of an op that returns a new tensor needs fresh output memory. Large blocks from the
// system allocator are fresh mappings: every call pays a page fault per 4 KiB page (for an
// 8192 x 4096 bfloat16 output, 16384 faults, more time than the kernel). Like torch's CUDA
// allocator, this keeps freed blocks of 1 MiB and more by size and hands them out again, and asks
// for transparent huge pages on them. Small blocks go to torch's CPU allocator.
#pragma once

#include <ATen/core/Tensor.h>

namespace xllm_kernel::detail {

// A contiguous CPU tensor like at::empty(sizes, dtype), its memory from the cache when large.
at::Tensor empty_cpu_cached(at::IntArrayRef sizes, at::ScalarType dtype);

// Bytes held in the cache (freed blocks waiting for reuse); for tests and the soak.
size_t cpu_cache_bytes();

// The bound on cpu_cache_bytes(): XLLM_KERNEL_CPU_CACHE_BYTES, default 4 GiB.
size_t cpu_cache_limit();

}  // namespace xllm_kernel::detail
