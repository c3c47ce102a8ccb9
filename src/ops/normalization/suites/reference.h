// Float64 references of the normalization operations: plain loops on the CPU, independent of every
// registered implementation. The suites (src/ops/normalization/suites/) and the bridge checks
// (test/ops/normalization/bridge_checks.h, on every device) validate against these.
//
//   const at::Tensor want = reference_rms_norm(input, weight, 1e-6);  // float64, input's shape
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <optional>

namespace xllm_kernel::numerics::normalization {

// A [rows, hidden] float64 copy on the CPU of any [..., hidden] tensor on any device.
inline at::Tensor rows_f64(const at::Tensor& t) {
  return t.to(at::kCPU).to(at::kDouble).contiguous().reshape({-1, t.size(-1)});
}

// rms_norm: input * rsqrt(mean(input^2) + eps) * weight, float64 of the input's shape.
inline at::Tensor reference_rms_norm(const at::Tensor& input, const at::Tensor& weight, double eps) {
  const int64_t hidden = input.size(-1);
  const at::Tensor x = rows_f64(input);
  const at::Tensor w = weight.to(at::kCPU).to(at::kDouble).contiguous();
  at::Tensor out = at::empty_like(x);
  const double* xp = x.const_data_ptr<double>();
  const double* wp = w.const_data_ptr<double>();
  double* op = out.mutable_data_ptr<double>();
  for (int64_t r = 0; r < x.size(0); ++r) {
    const double* row = xp + r * hidden;
    double sum = 0;
    for (int64_t i = 0; i < hidden; ++i) sum += row[i] * row[i];
    const double inv = 1.0 / std::sqrt(sum / hidden + eps);
    for (int64_t i = 0; i < hidden; ++i) op[r * hidden + i] = row[i] * inv * wp[i];
  }
  return out.reshape(input.sizes());
}

// fused_add_rms_norm: the residual it leaves (input + residual rounded once to the residual's
// dtype, on the CPU: the sum of two values of one dtype is exact in float64, so this is the
// correctly rounded sum) and the input it leaves (rms_norm of that residual, float64).
struct FusedAddRmsNormReference {
  at::Tensor residual;  // the residual's dtype
  at::Tensor input;     // float64
};
inline FusedAddRmsNormReference reference_fused_add_rms_norm(const at::Tensor& input, const at::Tensor& residual,
                                                             const at::Tensor& weight, double eps) {
  const at::Tensor rounded =
      (input.to(at::kCPU).to(at::kDouble) + residual.to(at::kCPU).to(at::kDouble)).to(residual.scalar_type());
  return {rounded, reference_rms_norm(rounded, weight, eps)};
}

// layer_norm: (input - mean) * rsqrt(biased variance + eps) * weight + bias (none: no bias, also
// for an undefined tensor), float64 of the input's shape.
inline at::Tensor reference_layer_norm(const at::Tensor& input, const at::Tensor& weight,
                                       const std::optional<at::Tensor>& bias, double eps) {
  const int64_t hidden = input.size(-1);
  const at::Tensor x = rows_f64(input);
  const at::Tensor w = weight.to(at::kCPU).to(at::kDouble).contiguous();
  const at::Tensor b = bias && bias->defined() ? bias->to(at::kCPU).to(at::kDouble).contiguous()
                                               : at::zeros({hidden}, at::kDouble);
  at::Tensor out = at::empty_like(x);
  const double* xp = x.const_data_ptr<double>();
  const double* wp = w.const_data_ptr<double>();
  const double* bp = b.const_data_ptr<double>();
  double* op = out.mutable_data_ptr<double>();
  for (int64_t r = 0; r < x.size(0); ++r) {
    const double* row = xp + r * hidden;
    double mean = 0;
    for (int64_t i = 0; i < hidden; ++i) mean += row[i];
    mean /= hidden;
    double var = 0;
    for (int64_t i = 0; i < hidden; ++i) var += (row[i] - mean) * (row[i] - mean);
    const double inv = 1.0 / std::sqrt(var / hidden + eps);
    for (int64_t i = 0; i < hidden; ++i) op[r * hidden + i] = (row[i] - mean) * inv * wp[i] + bp[i];
  }
  return out.reshape(input.sizes());
}

}  // namespace xllm_kernel::numerics::normalization
