// What the native CPU bridges of every family share (not public): running a torch-free kernel
// over row ranges on torch's intra-op threads and turning a rejection into an error.
#pragma once

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "csrc/common/rows.h"
#include "src/core/parallel.h"

namespace xllm_kernel::bridge {

// Runs kernel(params, begin, end) over [0, rows) split on torch's intra-op threads, tasks of about
// 16K elements of `row_elements` each (fewer tasks keep the fork cheap for narrow rows). A kernel
// that rejects its parameters is a bug in the bridge: the error names the op and the reason.
template <class Params, class Kernel>
void run_rows(const char* op, const Params& params, int64_t rows, int64_t row_elements, Kernel kernel) {
  if (rows == 0) return;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, row_elements));
  std::atomic<const char*> rejected{nullptr};
  detail::parallel_rows(rows, grain, [&](int64_t begin, int64_t end) {
    const kernels::Status s = kernel(params, begin, end);
    if (!s.is_ok()) rejected.store(s.reason);
  });
  const char* reason = rejected.load();
  TORCH_CHECK(reason == nullptr, op, ": native cpu kernel rejected its parameters (", reason == nullptr ? "" : reason,
              "); this is a bug in the bridge");
}

}  // namespace xllm_kernel::bridge
