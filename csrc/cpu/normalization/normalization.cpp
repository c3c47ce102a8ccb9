// Torch-free CPU normalization kernels. This translation unit is compiled once per Highway
// target (foreach_target) and the entry points pick the best one at runtime, so no global
// -m flags are needed.
#include "csrc/cpu/normalization/normalization.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "csrc/cpu/normalization/normalization.cpp"
#include "hwy/aligned_allocator.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "csrc/cpu/common/convert-inl.h"
#include "csrc/cpu/common/row_cursor.h"
#include "csrc/cpu/common/stream-inl.h"
#include "csrc/cpu/normalization/normalization-inl.h"


HWY_BEFORE_NAMESPACE();
namespace xllm_kernel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---------------------------------------------------------------- kernels

template <typename T, typename W>
void RmsNormT(const NormParams& p, int64_t row_begin, int64_t row_end) {
  const size_t hidden = static_cast<size_t>(p.hidden);
  const PreparedWeights<T, W> weights(static_cast<const W*>(p.weight), nullptr, hidden, row_end - row_begin);
  const float inv_hidden = 1.0f / static_cast<float>(p.hidden);
  const float eps = static_cast<float>(p.eps);
  RowCursor<2> rc(p.row_ndim, p.row_sizes, row_begin, {p.input_strides, p.out_strides});
  for (int64_t row = row_begin; row < row_end; ++row, rc.Next()) {
    const T* x = static_cast<const T*>(p.input) + rc.offset[0];
    T* y = static_cast<T*>(p.out) + rc.offset[1];
    const T* next = row + 1 < row_end ? static_cast<const T*>(p.input) + rc.NextOffset(0) : x;
    const float ss = ReduceRow(x, hidden, SquareOp());
    const float inv = RmsInverse(ss, inv_hidden, eps);
    weights.template Row<false, false>(x, 0.0f, inv, y, hidden, next, std::isnan(ss), p.stream_out);
  }
  if (p.stream_out) hwy::FlushStream();  // order the non-temporal stores before returning
}

template <typename T, typename W>
void FusedAddRmsNormT(const NormParams& p, int64_t row_begin, int64_t row_end) {
  const size_t hidden = static_cast<size_t>(p.hidden);
  const PreparedWeights<T, W> weights(static_cast<const W*>(p.weight), nullptr, hidden, row_end - row_begin);
  const float inv_hidden = 1.0f / static_cast<float>(p.hidden);
  const float eps = static_cast<float>(p.eps);
  RowCursor<2> rc(p.row_ndim, p.row_sizes, row_begin, {p.input_strides, p.residual_strides});
  for (int64_t row = row_begin; row < row_end; ++row, rc.Next()) {
    T* x = static_cast<T*>(const_cast<void*>(p.input)) + rc.offset[0];
    T* r = static_cast<T*>(p.residual) + rc.offset[1];
    const T* next = row + 1 < row_end ? static_cast<const T*>(p.residual) + rc.NextOffset(1) : r;
    float ss;
    if constexpr (std::is_same_v<T, bfloat16_t>) {
      ss = AddRoundSumSquaresEvenOdd(x, r, hidden);
    } else {
      ss = AddRoundSumSquares(x, r, hidden);
    }
    const float inv = RmsInverse(ss, inv_hidden, eps);
    // Normalizes the rounded residual as stored, so the result matches rms_norm(residual).
    // In place: x was just read, so its lines are cached and are written normally.
    weights.template Row<false, false>(static_cast<const T*>(r), 0.0f, inv, x, hidden, next, std::isnan(ss),
                                       /*stream=*/false);
  }
}

template <bool kBias, typename T, typename W>
void LayerNormT(const NormParams& p, int64_t row_begin, int64_t row_end) {
  const size_t hidden = static_cast<size_t>(p.hidden);
  const PreparedWeights<T, W> weights(static_cast<const W*>(p.weight), kBias ? static_cast<const W*>(p.bias) : nullptr,
                                      hidden, row_end - row_begin);
  const float inv_hidden = 1.0f / static_cast<float>(p.hidden);
  const float eps = static_cast<float>(p.eps);
  RowCursor<2> rc(p.row_ndim, p.row_sizes, row_begin, {p.input_strides, p.out_strides});
  for (int64_t row = row_begin; row < row_end; ++row, rc.Next()) {
    const T* x = static_cast<const T*>(p.input) + rc.offset[0];
    T* y = static_cast<T*>(p.out) + rc.offset[1];
    const T* next = row + 1 < row_end ? static_cast<const T*>(p.input) + rc.NextOffset(0) : x;
    float mean, var;
    bool nan;
    RowMeanVar(x, hidden, inv_hidden, mean, var, nan);
    const float inv = 1.0f / std::sqrt(var + eps);
    weights.template Row<true, kBias>(x, mean, inv, y, hidden, next, nan, p.stream_out);
  }
  if (p.stream_out) hwy::FlushStream();
}

// Calls K<T, W> for the dtype pair in p.
template <template <typename, typename> class K>
void ForDTypes(const NormParams& p, int64_t row_begin, int64_t row_end) {
  const bool w32 = p.weight_dtype == DType::kFloat32;
  switch (p.dtype) {
    case DType::kFloat32:
      K<float, float>::Run(p, row_begin, row_end);
      break;
    case DType::kBFloat16:
      w32 ? K<bfloat16_t, float>::Run(p, row_begin, row_end)
          : K<bfloat16_t, bfloat16_t>::Run(p, row_begin, row_end);
      break;
    case DType::kFloat16:
      w32 ? K<float16_t, float>::Run(p, row_begin, row_end)
          : K<float16_t, float16_t>::Run(p, row_begin, row_end);
      break;
  }
}

template <typename T, typename W>
struct RmsNormK {
  static void Run(const NormParams& p, int64_t b, int64_t e) { RmsNormT<T, W>(p, b, e); }
};
template <typename T, typename W>
struct FusedAddRmsNormK {
  static void Run(const NormParams& p, int64_t b, int64_t e) { FusedAddRmsNormT<T, W>(p, b, e); }
};
template <typename T, typename W>
struct LayerNormK {
  static void Run(const NormParams& p, int64_t b, int64_t e) {
    if (p.bias != nullptr) {
      LayerNormT<true, T, W>(p, b, e);
    } else {
      LayerNormT<false, T, W>(p, b, e);
    }
  }
};

void RmsNormRows(const NormParams& p, int64_t b, int64_t e) { ForDTypes<RmsNormK>(p, b, e); }
void FusedAddRmsNormRows(const NormParams& p, int64_t b, int64_t e) {
  ForDTypes<FusedAddRmsNormK>(p, b, e);
}
void LayerNormRows(const NormParams& p, int64_t b, int64_t e) { ForDTypes<LayerNormK>(p, b, e); }

}  // namespace HWY_NAMESPACE
}  // namespace xllm_kernel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace xllm_kernel::cpu {

HWY_EXPORT(RmsNormRows);
HWY_EXPORT(FusedAddRmsNormRows);
HWY_EXPORT(LayerNormRows);

namespace {

// Defence only: the bridge validates shapes, dtypes and pointers before calling.
Status CheckCommon(const NormParams& p, int64_t row_begin, int64_t row_end) {
  if (!kernels::valid_dtype(p.dtype)) return Status::invalid("normalization: unknown dtype");
  if (p.weight_dtype != DType::kFloat32 && p.weight_dtype != p.dtype) {
    return Status::invalid("normalization: weight_dtype must be float32 or dtype");
  }
  if (p.hidden < 1) return Status::invalid("normalization: hidden must be >= 1");
  if (const char* why = kernels::invalid_rows(p.row_ndim, p.row_sizes, p.rows, row_begin, row_end)) {
    return Status::invalid(why);
  }
  if (!(std::isfinite(p.eps) && p.eps >= 0.0)) return Status::invalid("normalization: eps must be finite and >= 0");
  if (p.input == nullptr || p.weight == nullptr) return Status::invalid("normalization: null input or weight");
  return Status::ok();
}

}  // namespace

Status rms_norm(const NormParams& p, int64_t row_begin, int64_t row_end) {
  Status s = CheckCommon(p, row_begin, row_end);
  if (s.is_ok() && p.out == nullptr) s = Status::invalid("rms_norm: null out");
  if (s.is_ok() && row_begin < row_end) HWY_DYNAMIC_DISPATCH(RmsNormRows)(p, row_begin, row_end);
  return s;
}

Status fused_add_rms_norm(const NormParams& p, int64_t row_begin, int64_t row_end) {
  Status s = CheckCommon(p, row_begin, row_end);
  if (s.is_ok() && p.residual == nullptr) s = Status::invalid("fused_add_rms_norm: null residual");
  if (s.is_ok() && row_begin < row_end) HWY_DYNAMIC_DISPATCH(FusedAddRmsNormRows)(p, row_begin, row_end);
  return s;
}

Status layer_norm(const NormParams& p, int64_t row_begin, int64_t row_end) {
  Status s = CheckCommon(p, row_begin, row_end);
  if (s.is_ok() && p.out == nullptr) s = Status::invalid("layer_norm: null out");
  if (s.is_ok() && row_begin < row_end) HWY_DYNAMIC_DISPATCH(LayerNormRows)(p, row_begin, row_end);
  return s;
}

}  // namespace xllm_kernel::cpu
#endif  // HWY_ONCE
