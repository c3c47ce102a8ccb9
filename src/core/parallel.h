// Row-parallel loops for the native CPU kernels, on torch's intra-op thread pool (not public).
//
// at::parallel_for is a header template: with an OpenMP build of torch (the PyPI wheels), its
// body is a `#pragma omp parallel` compiled into the caller's translation unit. A caller built
// without -fopenmp silently runs every range on one thread. This wrapper is the one place the
// library calls it, and parallel.cpp is built with OpenMP against torch's own libgomp, so
// torch.set_num_threads / at::set_num_threads govern our kernels too.
#pragma once

#include <c10/util/FunctionRef.h>

#include <cstdint>

namespace xllm_kernel::detail {

// Calls fn(begin, end) on contiguous, disjoint ranges covering [0, n), concurrently on up to
// at::get_num_threads() threads, each range at least `grain` long (except a shorter last one).
// Runs inline when n < grain, with one thread, or inside another parallel region. The first
// exception thrown by fn is rethrown after all ranges finish.
void parallel_rows(int64_t n, int64_t grain, c10::function_ref<void(int64_t, int64_t)> fn);

}  // namespace xllm_kernel::detail
