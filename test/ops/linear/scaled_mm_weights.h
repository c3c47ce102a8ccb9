// What the scaled_mm tests share (test/ops/linear/scaled_mm_test.cpp on the CPU implementations,
// test/cuda/linear/scaled_mm_cuda_test.cpp on the GPU): a weight of each scheme in its canonical form,
// the contract's output for int8 activations computed here, and the float32 bound of an fp8 result.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "test/ops/common/bits.h"

namespace xllm_kernel::testing {

// A weight of one scheme in its canonical form.
struct Weight {
  std::string scheme;
  at::Tensor q, scales;
  std::optional<at::Tensor> zeros;
  int64_t group_size = 0;  // linear_pack's
  int64_t group = 0;       // K per scale group
};

inline Weight make_weight(const std::string& scheme, int64_t n, int64_t k, int64_t group = 0, bool zeros = false) {
  Weight w;
  w.scheme = scheme;
  auto rand_scales = [](std::vector<int64_t> shape) { return at::rand(shape, at::kFloat).mul_(0.02).add_(0.004); };
  if (scheme == "w8a8-int8") {
    w.q = at::randint(-127, 128, {n, k}, at::kChar);
    w.scales = rand_scales({n});
    w.group = k;
  } else if (scheme == "w4a8") {
    w.group = group == 0 ? k : group;
    w.group_size = group == 0 ? -1 : group;
    w.q = (zeros ? at::randint(0, 16, {n, k}, at::kLong) : at::randint(-8, 8, {n, k}, at::kLong)).to(at::kChar);
    w.scales = rand_scales({n, k / w.group});
    if (zeros) w.zeros = at::randint(0, 16, {n, k / w.group}, at::kInt);
  } else {  // w8a8-fp8, per channel (group 0) or in 128 x 128 blocks (group 128)
    w.q = at::randn({n, k}, at::kFloat).mul_(8).to(at::kFloat8_e4m3fn);
    w.group = group == 0 ? k : 128;
    w.scales = group == 0 ? rand_scales({n})
                          : rand_scales({(n + 127) / 128, (k + 127) / 128});
  }
  return w;
}

// The contract's output for int8 a: acc in int64 per group, then float32 steps in order.
inline at::Tensor formula(const Weight& w, const at::Tensor& a, const at::Tensor& sa, const std::optional<at::Tensor>& azp,
                   const std::optional<at::Tensor>& bias, at::ScalarType out) {
  const int64_t m = a.size(0), n = w.q.size(0), k = w.q.size(1);
  at::Tensor centered = w.q.to(at::kLong);
  if (w.zeros) centered = centered - w.zeros->to(at::kLong).repeat_interleave(w.group, 1);
  at::Tensor al = a.to(at::kLong);
  if (azp) al = al - azp->to(at::kLong).view({-1, 1});
  const at::Tensor s = w.scales.reshape({n, -1});
  const at::Tensor sa2 = sa.reshape({-1, 1});
  at::Tensor t;
  for (int64_t g = 0; g < k / w.group; ++g) {
    // int64 has no matmul on the CPU: float64 is exact for these sums (|acc| < 2^31).
    const at::Tensor acc = al.narrow(1, g * w.group, w.group).to(at::kDouble)
                               .matmul(centered.narrow(1, g * w.group, w.group).to(at::kDouble).t());
    at::Tensor term = acc.to(at::kFloat) * sa2;
    term = term * s.narrow(1, g, 1).t();
    t = g == 0 ? term : t + term;
  }
  if (m == 0) t = at::zeros({0, n}, at::kFloat);
  if (bias) t = t + bias->to(at::kFloat);
  return t.to(out);
}

// How far an fp8 result `got` ([m, n], out float32) lies beyond the float32 bound of the float64 value
// sum over groups of (sum a q) scale_a s: |got - want| - (K + 4) 2^-24 sum |a q s| |scale_a| - 2^-23 |want|,
// the largest over the outputs (<= 0: within the bound).
inline double fp8_bound_excess(const Weight& w, const at::Tensor& a, const at::Tensor& sa, const at::Tensor& got) {
  const int64_t n = w.q.size(0), k = w.q.size(1);
  const at::Tensor q64 = w.q.to(at::kDouble), a64 = a.to(at::kDouble);
  const at::Tensor s64 = w.scales.dim() == 1 ? w.scales.to(at::kDouble).view({n, 1}).expand({n, k})
                                      : w.scales.to(at::kDouble).repeat_interleave(128, 0).repeat_interleave(128, 1)
                                            .narrow(0, 0, n).narrow(1, 0, k);
  const at::Tensor want = a64.matmul((q64 * s64).t()) * sa.to(at::kDouble);
  const at::Tensor mag = a64.abs().matmul((q64 * s64).abs().t()) * sa.to(at::kDouble);
  const at::Tensor excess =
      (got.to(at::kDouble) - want).abs() - mag * ((k + 4) * std::ldexp(1.0, -24)) - want.abs() * std::ldexp(1.0, -23);
  return excess.max().item<double>();
}

}  // namespace xllm_kernel::testing
