// Torch-free types every kernel family shares, on the CPU and in CUDA host code: element types,
// the row layout of a tensor's leading dimensions, and a status with a reason.
//
// Rows are the leading dimensions of a tensor, flattened in row-major order; the last dimension
// is contiguous. A row's element offset in a tensor is sum(index[d] * strides[d]) for d < ndim,
// where index is the row number decomposed over sizes (last leading dimension fastest). Strides
// are in elements and may exceed 2^31. Bridges fill a RowLayout with describe_rows()
// (src/ops/common/bridge.h), which drops size-1 dimensions and merges neighbours.
#pragma once

#include <cstdint>

namespace xllm_kernel::kernels {

enum class DType : int { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };

inline constexpr int kMaxRowDims = 8;

// Bytes per element of a DType.
constexpr int element_size(DType t) { return t == DType::kFloat32 ? 4 : 2; }

constexpr const char* dtype_name(DType t) {
  return t == DType::kFloat32 ? "float32" : t == DType::kBFloat16 ? "bfloat16" : "float16";
}

// The shape of the rows: sizes[0, ndim) with their product in rows (0 rows when any size is 0).
struct RowShape {
  int64_t rows = 0;
  int ndim = 0;  // 1..kMaxRowDims
  int64_t sizes[kMaxRowDims] = {};
};

// One tensor's strides (in elements) over a RowShape's dimensions.
struct RowStrides {
  int64_t s[kMaxRowDims] = {};
};

// What a kernel or launcher reports. `reason` is a static string naming what was wrong; kernels
// assume their bridge checked the arguments, so a non-kOk status is a bug in the bridge.
struct Status {
  enum Code : int { kOk = 0, kInvalidArgument = 1 } code = kOk;
  const char* reason = "";

  static constexpr Status ok() { return {}; }
  static constexpr Status invalid(const char* why) { return {kInvalidArgument, why}; }
  constexpr bool is_ok() const { return code == kOk; }
};

}  // namespace xllm_kernel::kernels
