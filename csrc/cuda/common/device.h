// Host-side helpers the CUDA launchers share: the current device's SM count (cached, for launch
// shapes on the serving path), what an SM holds, integer arithmetic of launch shapes, and a CUDA
// error as a launcher's status.
//
//   int sm_count = 0;
//   if (cudaError_t e = current_sm_count(&sm_count); e != cudaSuccess) return cuda_status(e, "...");
//   const int64_t blocks = ceil_div(rows, rows_per_block);
//   ...  // launch
//   return cuda_status(cudaGetLastError(), "launching the kernel");
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "csrc/common/rows.h"

namespace xllm_kernel::cuda {

// Threads an SM keeps resident (sm_80, sm_90) and blocks it keeps at most.
inline constexpr int64_t kResidentThreadsPerSm = 2048;
inline constexpr int64_t kResidentBlocksPerSm = 32;
// A grid holds at most this many full waves of resident blocks; blocks loop over the remaining
// work, which also keeps gridDim.x far below its 2^31 - 1 limit.
inline constexpr int64_t kMaxWaves = 16;

// SM count of the current device. Cached per device after the first query (thread-safe), so a
// launcher may call it on every launch.
cudaError_t current_sm_count(int* count);

// ceil(a / b) for a >= 0, b > 0.
constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A launcher's status for the CUDA runtime's answer `e` at `step` (a static string naming what
// was done): ok for cudaSuccess, else kDeviceError carrying e.
inline ::xllm_kernel::kernels::Status cuda_status(cudaError_t e, const char* step) {
  return e == cudaSuccess ? ::xllm_kernel::kernels::Status::ok()
                          : ::xllm_kernel::kernels::Status::device(static_cast<int>(e), step);
}

}  // namespace xllm_kernel::cuda
