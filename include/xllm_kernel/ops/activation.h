// Activation operators. Gated: silu_and_mul, gelu_and_mul, gelu_tanh_and_mul; without the gate:
// gelu, gelu_tanh, quick_gelu.
//
//   xllm_kernel::initialize("cpu");
//   at::Tensor y = xllm_kernel::ops::silu_and_mul(x);  // x [..., 2d] -> y [..., d]
//   at::Tensor z = xllm_kernel::ops::gelu(h);          // h [..., d] -> z [..., d]
//
// Semantics (docs/operators.md), the vLLM / FlashInfer ones: out = act(x[..., :d]) * x[..., d:]
// (gated) or act(x), computed in float32 and rounded once to the input's dtype; float32, bfloat16,
// float16; any d >= 1; any strides for the leading dimensions with a contiguous last dimension;
// zero rows allowed; out is a new contiguous tensor.
#pragma once

#include <ATen/core/Tensor.h>

#include "xllm_kernel/catalog.h"

namespace xllm_kernel {

using ActivationFn = at::Tensor(const at::Tensor& input);
using SiluAndMulFn = ActivationFn;
using GeluAndMulFn = ActivationFn;
using GeluTanhAndMulFn = ActivationFn;
using GeluFn = ActivationFn;
using GeluTanhFn = ActivationFn;
using QuickGeluFn = ActivationFn;

const OpContract& silu_and_mul_contract();
const OpContract& gelu_and_mul_contract();
const OpContract& gelu_tanh_and_mul_contract();
const OpContract& gelu_contract();
const OpContract& gelu_tanh_contract();
const OpContract& quick_gelu_contract();

const TypedOperation<ActivationFn>& silu_and_mul_operation();
const TypedOperation<ActivationFn>& gelu_and_mul_operation();
const TypedOperation<ActivationFn>& gelu_tanh_and_mul_operation();
const TypedOperation<ActivationFn>& gelu_operation();
const TypedOperation<ActivationFn>& gelu_tanh_operation();
const TypedOperation<ActivationFn>& quick_gelu_operation();

// The family's group (its operations and backend modules), registered in the catalog.
const Group& activation_group();

namespace ops {

// out = silu(x[..., :d]) * x[..., d:], silu(a) = a / (1 + exp(-a)).
at::Tensor silu_and_mul(const at::Tensor& input);

// out = gelu(x[..., :d]) * x[..., d:], gelu(a) = a/2 * (1 + erf(a / sqrt(2))) (exact GELU).
at::Tensor gelu_and_mul(const at::Tensor& input);

// out = gelu_tanh(x[..., :d]) * x[..., d:], gelu_tanh(a) = a/2 * (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))).
at::Tensor gelu_tanh_and_mul(const at::Tensor& input);

// out = gelu(input) (exact GELU), elementwise: [..., d] -> [..., d].
at::Tensor gelu(const at::Tensor& input);

// out = gelu_tanh(input) (GPT-2's "gelu_new"), elementwise.
at::Tensor gelu_tanh(const at::Tensor& input);

// out = input * sigmoid(1.702 input), elementwise.
at::Tensor quick_gelu(const at::Tensor& input);

}  // namespace ops
}  // namespace xllm_kernel
