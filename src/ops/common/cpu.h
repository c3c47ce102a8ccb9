// What the native CPU bridges of every family share (not public): running a torch-free kernel
// over row ranges or a plan's items on torch's intra-op threads and turning a rejection into an
// error.
#pragma once

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "csrc/common/rows.h"
#include "src/core/parallel.h"

namespace xllm_kernel::bridge {

// A kernel that rejected its parameters (`reason` non-null) is a bug in the bridge: an error naming
// the op and the reason.
inline void check_not_rejected(const char* op, const char* reason) {
  TORCH_CHECK(reason == nullptr, op, ": native cpu kernel rejected its parameters (", reason == nullptr ? "" : reason,
              "); this is a bug in the bridge");
}

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
  check_not_rejected(op, rejected.load());
}

// Runs kernel(i) (a kernels::Status) for every i in [0, items) on up to `threads` of torch's
// intra-op threads, each taking the next unstarted item until none is left: for items of unequal
// cost (a plan's, longest first), which equal ranges would not balance. Rejections as run_rows.
template <class Kernel>
void run_items(const char* op, int64_t items, int64_t threads, Kernel kernel) {
  if (items == 0) return;
  std::atomic<int64_t> next{0};
  std::atomic<const char*> rejected{nullptr};
  detail::parallel_rows(std::min(items, threads), 1, [&](int64_t begin, int64_t end) {
    for (int64_t w = begin; w < end; ++w) {
      for (int64_t i = next.fetch_add(1); i < items; i = next.fetch_add(1)) {
        const kernels::Status s = kernel(i);
        if (!s.is_ok()) rejected.store(s.reason);
      }
    }
  });
  check_not_rejected(op, rejected.load());
}

}  // namespace xllm_kernel::bridge
