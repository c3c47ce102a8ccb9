// Walks the rows of a RowShape in order and keeps each row's element offset in up to kTensors
// tensors, each with its own strides (see csrc/common/rows.h for the row layout). Target
// independent: Highway kernels use it from every target.
//
//   RowCursor<2> rc(p.shape, row_begin, {&p.input_strides, &p.out_strides});
//   for (int64_t row = row_begin; row < row_end; ++row, rc.Next()) {
//     const T* x = input + rc.offset[0];
//     T* y = out + rc.offset[1];
//   }
#pragma once

#include <cstdint>

#include "csrc/common/rows.h"

namespace xllm_kernel::cpu {

// Advancing is an odometer step, so the common case is one add per tensor and there is no
// division per row; only the constructor divides. Assumes 1 <= ndim <= kMaxRowDims, sizes >= 1
// whenever a row exists, and row < the product of the sizes (or equal to it for an empty walk).
template <int kTensors>
struct RowCursor {
  int ndim;
  const int64_t* sizes;
  const int64_t* strides[kTensors];
  int64_t index[kernels::kMaxRowDims];
  int64_t offset[kTensors];

  // sizes[0, ndim) and, per tensor, strides[t][0, ndim), in elements; both must outlive the cursor.
  RowCursor(int ndim_in, const int64_t* sizes_in, int64_t row, const int64_t* const (&s)[kTensors]) {
    Init(ndim_in, sizes_in, row, s);
  }

  RowCursor(const kernels::RowShape& shape, int64_t row, const kernels::RowStrides* const (&s)[kTensors]) {
    const int64_t* p[kTensors];
    for (int t = 0; t < kTensors; ++t) p[t] = s[t]->s;
    Init(shape.ndim, shape.sizes, row, p);
  }

  // Offset of the next row in tensor t (without advancing).
  int64_t NextOffset(int t) const {
    int64_t off = offset[t];
    for (int d = ndim - 1; d >= 0; --d) {
      if (index[d] + 1 < sizes[d]) return off + strides[t][d];
      off -= (sizes[d] - 1) * strides[t][d];
    }
    return off;
  }

  void Next() {
    for (int d = ndim - 1; d >= 0; --d) {
      if (++index[d] < sizes[d]) {
        for (int t = 0; t < kTensors; ++t) offset[t] += strides[t][d];
        return;
      }
      // Wrap this dimension and carry into the next outer one.
      index[d] = 0;
      for (int t = 0; t < kTensors; ++t) offset[t] -= (sizes[d] - 1) * strides[t][d];
    }
  }

 private:
  void Init(int ndim_in, const int64_t* sizes_in, int64_t row, const int64_t* const* s) {
    ndim = ndim_in;
    sizes = sizes_in;
    for (int t = 0; t < kTensors; ++t) {
      strides[t] = s[t];
      offset[t] = 0;
    }
    for (int d = ndim - 1; d >= 0; --d) {
      index[d] = row % sizes[d];
      row /= sizes[d];
      for (int t = 0; t < kTensors; ++t) offset[t] += index[d] * strides[t][d];
    }
  }
};

}  // namespace xllm_kernel::cpu
