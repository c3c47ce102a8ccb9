#include "src/core/parallel.h"

#include <ATen/Config.h>
#include <ATen/Parallel.h>

#if AT_PARALLEL_OPENMP && !defined(_OPENMP)
#error "src/core/parallel.cpp must be compiled with -fopenmp: this torch parallelizes with OpenMP"
#endif

namespace xllm_kernel::detail {

void parallel_rows(int64_t n, int64_t grain, c10::function_ref<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) { fn(begin, end); });
}

}  // namespace xllm_kernel::detail
