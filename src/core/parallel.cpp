#include "src/core/parallel.h"

#include <ATen/Config.h>
#include <ATen/Parallel.h>

#include <algorithm>

#if AT_PARALLEL_OPENMP && !defined(_OPENMP) && !defined(XLLM_KERNEL_SERIAL_ROWS)
#error "src/core/parallel.cpp must be compiled with -fopenmp: this torch parallelizes with OpenMP"
#endif

namespace xllm_kernel::detail {

#ifdef XLLM_KERNEL_SERIAL_ROWS
// Sanitizer builds (clang, whose OpenMP runtime is not torch's libgomp): the ranges four threads
// would get, run one after another, so the kernels' range boundaries are still exercised.
void parallel_rows(int64_t n, int64_t grain, c10::function_ref<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  const int64_t parts = std::clamp<int64_t>(n / std::max<int64_t>(grain, 1), 1, 4);
  const int64_t chunk = (n + parts - 1) / parts;
  for (int64_t begin = 0; begin < n; begin += chunk) fn(begin, std::min(n, begin + chunk));
}
#else

void parallel_rows(int64_t n, int64_t grain, c10::function_ref<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  // One range (at::parallel_for would run it inline too): called directly, so that a small call
  // does not go through torch's and OpenMP's thread queries, code and thread-local state it does
  // not need (after a large memory sweep each of them is a cache and TLB miss).
  if (n <= grain) return fn(0, n);
  at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) { fn(begin, end); });
}
#endif

}  // namespace xllm_kernel::detail
