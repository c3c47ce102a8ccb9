// Torch-free CPU copy with non-temporal stores (Highway, runtime ISA dispatch).
//
// A plain copy reads every destination line before overwriting it (write-allocate), so it moves
// 3 bytes per byte copied; non-temporal stores skip that read. The benchmark measures both to
// find the device's copy bandwidth.
#pragma once

#include <cstddef>

namespace xllm_kernel::cpu {

// Copies `bytes` from src to dst (no overlap; any alignment) with non-temporal stores for the
// aligned middle, and orders those stores before returning. Safe to run concurrently on
// disjoint ranges.
void stream_copy(void* dst, const void* src, size_t bytes);

}  // namespace xllm_kernel::cpu
