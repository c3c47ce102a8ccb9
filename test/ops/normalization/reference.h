// Float64 references for the normalization group: plain loops, independent of every registered
// implementation.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <optional>

namespace xllm_kernel::testing {

// [rows, hidden] float64 copies of any [..., hidden] tensor.
inline at::Tensor rows_f64(const at::Tensor& t) {
  return t.to(at::kDouble).contiguous().reshape({-1, t.size(-1)});
}

inline at::Tensor reference_rms_norm(const at::Tensor& input, const at::Tensor& weight, double eps) {
  at::Tensor x = rows_f64(input), w = weight.to(at::kDouble).contiguous();
  at::Tensor out = at::empty_like(x);
  const int64_t rows = x.size(0), hidden = x.size(1);
  const double* xp = x.const_data_ptr<double>();
  const double* wp = w.const_data_ptr<double>();
  double* op = out.mutable_data_ptr<double>();
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t i = 0; i < hidden; ++i) sum += xp[r * hidden + i] * xp[r * hidden + i];
    const double inv = 1.0 / std::sqrt(sum / hidden + eps);
    for (int64_t i = 0; i < hidden; ++i) op[r * hidden + i] = xp[r * hidden + i] * inv * wp[i];
  }
  return out.reshape(input.sizes());
}

inline at::Tensor reference_layer_norm(const at::Tensor& input, const at::Tensor& weight,
                                       const std::optional<at::Tensor>& bias, double eps) {
  at::Tensor x = rows_f64(input), w = weight.to(at::kDouble).contiguous();
  at::Tensor b = bias ? bias->to(at::kDouble).contiguous() : at::zeros_like(w);
  at::Tensor out = at::empty_like(x);
  const int64_t rows = x.size(0), hidden = x.size(1);
  const double* xp = x.const_data_ptr<double>();
  const double* wp = w.const_data_ptr<double>();
  const double* bp = b.const_data_ptr<double>();
  double* op = out.mutable_data_ptr<double>();
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0;
    for (int64_t i = 0; i < hidden; ++i) mean += xp[r * hidden + i];
    mean /= hidden;
    double var = 0;
    for (int64_t i = 0; i < hidden; ++i) var += (xp[r * hidden + i] - mean) * (xp[r * hidden + i] - mean);
    var /= hidden;  // biased
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < hidden; ++i) op[r * hidden + i] = (xp[r * hidden + i] - mean) * inv * wp[i] + bp[i];
  }
  return out.reshape(input.sizes());
}

// Tolerance of one rounding to `dtype` plus float32 accumulation over the hidden size.
struct Tolerance {
  double atol, rtol;
};
inline Tolerance tolerance_for(at::ScalarType dtype) {
  switch (dtype) {
    case at::kBFloat16: return {1.0 / 128, 1.0 / 128};   // 2^-8 rounding, doubled for accumulation
    case at::kHalf: return {1.0 / 1024, 1.0 / 1024};     // 2^-11 rounding, doubled
    default: return {1e-4, 1e-4};                         // fp32 sums of 4k terms with offsets ~50
  }
}

// Max over elements of |got - want| / (atol + rtol |want|): <= 1 passes.
inline double headroom(const at::Tensor& got, const at::Tensor& want, Tolerance tol) {
  if (got.numel() == 0) return 0;
  at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  at::Tensor ratio = (g - w).abs() / (w.abs() * tol.rtol + tol.atol);
  return ratio.max().item<double>();
}

}  // namespace xllm_kernel::testing
