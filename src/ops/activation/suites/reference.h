// The gated activation operations and their float64 references, shared by the suites
// (src/ops/activation/suites/activation.cpp: one suite per entry of kGatedActivations) and the
// bridge checks (test/ops/activation/bridge_checks.h, on every device). Plain float64 on the CPU,
// independent of every registered implementation.
//
// Adding an activation: its float64 function here and one entry in kGatedActivations or, without
// the gate (out = act(x)), in kPlainActivations; its suite and its bridge checks follow.
//
//   const at::Tensor want = reference_gated(silu, input);  // [..., 2d] -> float64 [..., d]
//   const at::Tensor got = reference_plain(gelu, input);   // [..., d] -> float64 [..., d]
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "xllm_kernel/ops/activation.h"

namespace xllm_kernel::numerics::activation {

using ActivationFunction = double (*)(double);

inline double silu(double a) { return a / (1 + std::exp(-a)); }
inline double gelu(double a) { return 0.5 * a * (1 + std::erf(a / std::sqrt(2.0))); }
inline double gelu_tanh(double a) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * a * (1 + std::tanh(k * (a + 0.044715 * a * a * a)));
}
inline double quick_gelu(double a) { return a / (1 + std::exp(-1.702 * a)); }

// act(a) with the contracts' limits at the infinities (act(+inf) = +inf, act(-inf) = 0), where the
// formulas give inf / inf or -inf * 0; NaN stays NaN.
inline double limited(ActivationFunction act, double a) {
  if (std::isinf(a)) return a > 0 ? a : 0.0;
  return act(a);
}

// An activation operation: out = act(x[..., :d]) * x[..., d:] (kGatedActivations) or act(x)
// (kPlainActivations).
struct GatedActivation {
  const OpContract& (*contract)();
  ActivationFunction act;
  const char* description;  // the suite's, for people
};

inline constexpr GatedActivation kGatedActivations[] = {
    {&silu_and_mul_contract, &silu, "silu(x[..., :d]) * x[..., d:]"},
    {&gelu_and_mul_contract, &gelu, "gelu(x[..., :d]) * x[..., d:], exact (erf) GELU"},
    {&gelu_tanh_and_mul_contract, &gelu_tanh, "gelu_tanh(x[..., :d]) * x[..., d:], tanh approximation"},
};

// Without the gate (GPT-NeoX, Falcon, BERT; GPT-2's gelu_new, GPT-J, Phi-2, StarCoder; CLIP).
inline constexpr GatedActivation kPlainActivations[] = {
    {&gelu_contract, &gelu, "gelu(x), exact (erf) GELU, elementwise"},
    {&gelu_tanh_contract, &gelu_tanh, "gelu_tanh(x), tanh approximation (gelu_new), elementwise"},
    {&quick_gelu_contract, &quick_gelu, "x * sigmoid(1.702 x), elementwise"},
};

// The entry of `operation`; std::invalid_argument for an operation the table lacks.
inline const GatedActivation& gated_activation(const std::string& operation) {
  for (const GatedActivation& a : kGatedActivations) {
    if (a.contract().operation == operation) return a;
  }
  throw std::invalid_argument("not a gated activation: " + operation);
}

// [..., 2d] on any device -> float64 [..., d] on the CPU: act(gate) * up (IEEE product).
inline at::Tensor reference_gated(ActivationFunction act, const at::Tensor& input) {
  const int64_t width = input.size(-1), d = width / 2;
  const at::Tensor x = input.to(at::kCPU).to(at::kDouble).contiguous().reshape({-1, width});
  at::Tensor out = at::empty({x.size(0), d}, at::kDouble);
  const double* xp = x.const_data_ptr<double>();
  double* op = out.mutable_data_ptr<double>();
  for (int64_t r = 0; r < x.size(0); ++r) {
    for (int64_t i = 0; i < d; ++i) op[r * d + i] = limited(act, xp[r * width + i]) * xp[r * width + d + i];
  }
  std::vector<int64_t> shape(input.sizes().begin(), input.sizes().end());
  shape.back() = d;
  return out.reshape(shape);
}

// [..., d] on any device -> float64 [..., d] on the CPU: act(x).
inline at::Tensor reference_plain(ActivationFunction act, const at::Tensor& input) {
  const at::Tensor x = input.to(at::kCPU).to(at::kDouble).contiguous();
  at::Tensor out = at::empty(x.sizes(), at::kDouble);
  const double* xp = x.const_data_ptr<double>();
  double* op = out.mutable_data_ptr<double>();
  for (int64_t i = 0; i < x.numel(); ++i) op[i] = limited(act, xp[i]);
  return out;
}

}  // namespace xllm_kernel::numerics::activation
