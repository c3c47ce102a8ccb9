// Row addressing for CUDA kernels (host and device): the leading-dimension indices of a row
// number, from which a kernel forms each tensor's element offset (csrc/common/rows.h describes the
// layout). Offsets are int64: strides may exceed 2^31 elements.
//
//   int64_t in = 0, out = 0;
//   for_each_row_index(row, shape.ndim, shape.sizes, [&](int d, int64_t i) {
//     in += i * input_strides.s[d];
//     out += i * out_strides.s[d];
//   });
#pragma once

#include <cstdint>

#include "csrc/common/rows.h"
#include "csrc/cuda/common/macros.cuh"

namespace xllm_kernel::cuda::kernels {

// Calls f(d, index[d]) for every d < ndim, innermost dimension first, where index is `row`
// decomposed over sizes (row-major: the last dimension fastest). Assumes 0 <= row < product of
// sizes and 1 <= ndim <= kMaxRowDims. The loop is unrolled over kMaxRowDims so that arrays in
// kernel parameters are indexed by constants; the outermost dimension takes the remaining
// quotient, so one leading dimension costs no division.
template <class F>
XLLM_CUDA_HD void for_each_row_index(int64_t row, int ndim, const int64_t (&sizes)[::xllm_kernel::kernels::kMaxRowDims],
                                     F&& f) {
  constexpr int kDims = ::xllm_kernel::kernels::kMaxRowDims;
XLLM_CUDA_UNROLL
  for (int d = kDims - 1; d >= 0; --d) {
    if (d >= ndim) continue;
    const int64_t index = d == 0 ? row : row % sizes[d];
    if (d != 0) row /= sizes[d];
    f(d, index);
  }
}

}  // namespace xllm_kernel::cuda::kernels
