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

// Whether t is one of the DTypes (a value cast from another integer is not), for kernels'
// defensive checks.
constexpr bool valid_dtype(DType t) {
  return t == DType::kFloat32 || t == DType::kBFloat16 || t == DType::kFloat16;
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

// What a kernel or launcher reports. `reason` is a static string naming what was wrong.
//   kInvalidArgument: parameters the kernel cannot take. Kernels assume their bridge checked the
//                     arguments, so this is a bug in the bridge.
//   kDeviceError:     (CUDA launchers) the device runtime failed: `device_error` holds its error
//                     code (a cudaError_t, never cudaSuccess), `reason` the step that failed.
//
//   const Status s = cuda::rms_norm(p, stream);
//   if (s == Status::kDeviceError) print(cudaGetErrorName(static_cast<cudaError_t>(s.device_error)));
struct Status {
  enum Code : int { kOk = 0, kInvalidArgument = 1, kDeviceError = 2 } code = kOk;
  const char* reason = "";
  int device_error = 0;  // kDeviceError only

  static constexpr Status ok() { return {}; }
  static constexpr Status invalid(const char* why) { return {kInvalidArgument, why}; }
  static constexpr Status device(int error, const char* step) { return {kDeviceError, step, error}; }
  constexpr bool is_ok() const { return code == kOk; }

  // `status == Status::kOk` compares the code only (the reason is for people).
  friend constexpr bool operator==(Status s, Code c) { return s.code == c; }
};

// Why a row shape and a range of its rows [row_begin, row_end) are invalid, or nullptr when they
// are valid: 1 <= ndim <= kMaxRowDims, sizes >= 0 whose product (without overflow) is rows, and
// 0 <= row_begin <= row_end <= rows. For kernels' defensive checks; bridges check with better words.
constexpr const char* invalid_rows(int ndim, const int64_t* sizes, int64_t rows, int64_t row_begin,
                                   int64_t row_end) {
  if (ndim < 1 || ndim > kMaxRowDims) return "row shape: ndim must be in [1, kMaxRowDims]";
  int64_t product = 1;
  for (int d = 0; d < ndim; ++d) {
    if (sizes[d] < 0) return "row shape: negative size";
    if (__builtin_mul_overflow(product, sizes[d], &product)) return "row shape: the sizes' product overflows";
  }
  if (product != rows) return "row shape: rows is not the product of the sizes";
  if (row_begin < 0 || row_begin > row_end || row_end > rows) return "row range: not within [0, rows]";
  return nullptr;
}

constexpr const char* invalid_rows(const RowShape& shape, int64_t row_begin, int64_t row_end) {
  return invalid_rows(shape.ndim, shape.sizes, shape.rows, row_begin, row_end);
}

}  // namespace xllm_kernel::kernels
