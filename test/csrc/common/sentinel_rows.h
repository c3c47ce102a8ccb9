// Rows of a tensor inside a buffer whose every other byte holds a sentinel, for the CPU kernel
// tests of row-wise operations (test/csrc/<family>/): a kernel writing between rows, between
// outer rows or up to kSentinelTail elements past the last row changes a sentinel, which
// ExpectGuardsIntact reports. (A read or write further past the end: GuardedRegion,
// guarded_memory.h.) Rows are cache-line aligned where the strides allow, so non-temporal stores
// can take them.
//
//   const int64_t sizes[2] = {4, 3};              // 12 rows as [4, 3]
//   SentinelRows x = MakeSentinelRows(ElemSize(t), 2, sizes, hidden, hidden + 5, /*gap=*/3);
//   Store(t, x.data(), x.row_offsets[r] + j, v);  // element j of row r (x.data(): row 0)
//   ... the kernel writes the rows ...
//   ExpectGuardsIntact(x, "out");
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "csrc/common/rows.h"

namespace xllm_kernel::cpu::test {

// Cache-line aligned storage, so rows can meet the alignment of non-temporal stores.
template <typename T>
struct LineAligned {
  using value_type = T;
  LineAligned() = default;
  template <typename U>
  LineAligned(const LineAligned<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t{64}); }
  bool operator==(const LineAligned&) const { return true; }
};

inline constexpr unsigned char kSentinel = 0x5A;
// Elements of sentinel after the last row.
inline constexpr int64_t kSentinelTail = 9;

// Rows over one or two leading dimensions; strides and offsets in elements.
struct SentinelRows {
  size_t elem = 1;                     // bytes per element
  int64_t strides[2] = {0, 0};         // 1-D: [row]; 2-D: [outer, inner]
  std::vector<int64_t> row_offsets;    // per row, from bytes.data()
  std::vector<unsigned char, LineAligned<unsigned char>> bytes;
  std::vector<bool> in_row;            // per element: inside some row

  // The first row (the kernels' base pointer: row offsets relative to it are the strides').
  void* data() { return bytes.data() + (row_offsets.empty() ? 0 : row_offsets[0] * elem); }
  const void* data() const { return bytes.data() + (row_offsets.empty() ? 0 : row_offsets[0] * elem); }
  unsigned char* row(int64_t r) { return bytes.data() + row_offsets[r] * elem; }
  const unsigned char* row(int64_t r) const { return bytes.data() + row_offsets[r] * elem; }
  // The strides as a kernel's RowStrides (csrc/common/rows.h).
  kernels::RowStrides row_strides() const {
    kernels::RowStrides s;
    s.s[0] = strides[0];
    s.s[1] = strides[1];
    return s;
  }
};

// Rows of `width` elements of `elem` bytes over sizes[0, ndim) (ndim 1 or 2, the last fastest):
// `row_stride` elements apart, outer rows `gap` more apart (2-D), the first after `lead` elements.
// Every byte outside the rows holds kSentinel.
inline SentinelRows MakeSentinelRows(size_t elem, int ndim, const int64_t* sizes, int64_t width, int64_t row_stride,
                                     int64_t gap, int64_t lead = 0) {
  SentinelRows x;
  x.elem = elem;
  if (ndim == 1) {
    x.strides[0] = row_stride;
  } else {
    x.strides[1] = row_stride;
    x.strides[0] = sizes[1] * row_stride + gap;
  }
  const int64_t rows = ndim == 1 ? sizes[0] : sizes[0] * sizes[1];
  int64_t end = lead;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t off =
        lead + (ndim == 1 ? r * x.strides[0] : (r / sizes[1]) * x.strides[0] + (r % sizes[1]) * x.strides[1]);
    x.row_offsets.push_back(off);
    end = std::max(end, off + width);
  }
  const int64_t elems = end + kSentinelTail;
  x.bytes.assign(static_cast<size_t>(elems) * elem, kSentinel);
  x.in_row.assign(static_cast<size_t>(elems), false);
  for (int64_t off : x.row_offsets) {
    for (int64_t j = 0; j < width; ++j) x.in_row[off + j] = true;
  }
  return x;
}

// The layouts of the row-wise kernel tests: contiguous rows, rows with padding between them, and
// two leading dimensions whose strides cannot merge (padding between rows and between outer rows).
enum class RowLayout { kContiguous, kStrided, k3D };

inline const char* Name(RowLayout l) {
  switch (l) {
    case RowLayout::kContiguous: return "contiguous";
    case RowLayout::kStrided: return "strided";
    case RowLayout::k3D: return "3d";
  }
  return "?";
}

// Rows of `width` elements in layout `l` over sizes[0, ndim): `pad` elements between rows (none
// when contiguous), `gap` more between outer rows.
inline SentinelRows MakeSentinelRows(size_t elem, RowLayout l, int ndim, const int64_t* sizes, int64_t width,
                                     int64_t pad, int64_t gap) {
  return MakeSentinelRows(elem, ndim, sizes, width, l == RowLayout::kContiguous ? width : width + pad, gap);
}

// Bytes outside the rows still hold the sentinel.
inline void ExpectGuardsIntact(const SentinelRows& x, const char* what) {
  int64_t bad = 0;
  for (size_t i = 0; i < x.in_row.size(); ++i) {
    if (x.in_row[i]) continue;
    for (size_t b = 0; b < x.elem; ++b) bad += x.bytes[i * x.elem + b] != kSentinel;
  }
  EXPECT_EQ(bad, 0) << what << ": bytes outside the rows were written";
}

}  // namespace xllm_kernel::cpu::test
