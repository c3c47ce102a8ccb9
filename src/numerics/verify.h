// Comparison of results with float64 references: absolute, relative and ULP errors and headroom;
// and the validation of a tensor case after a call (check_tensors): outputs, declared and
// undeclared mutations, aliasing.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "src/numerics/suite.h"

namespace xllm_kernel::numerics {

// |got - want| <= atol + rtol * |want| + elementwise_atol, element by element. elementwise_atol is
// optional (undefined: none): float64 with the reference's shape, for a bound that scales with each
// element's own inputs rather than with the largest of the tensor.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
  at::Tensor elementwise_atol = {};
};

// The unit roundoff of `dtype` (half an ulp relative): 2^-24 for float32, 2^-8 bfloat16, 2^-11 float16.
double unit_roundoff(at::ScalarType dtype);

// Tolerance of one rounding to `dtype` after float32 accumulation over `reduction` elements:
// twice the unit roundoff of the output, plus a sqrt(n) float32 accumulation term.
Tolerance accumulate_tolerance(at::ScalarType dtype, int64_t reduction);

// Compares `got` (any device, any dtype) with `want` (float64) and folds the statistics into
// `validation` under `name`. `kind` says what is checked ("output", "mutation").
void compare(Validation& validation, const std::string& name, const std::string& kind, const at::Tensor& got,
             const at::Tensor& want, Tolerance tolerance);

// Bitwise equality of two tensors' bytes (NaN-safe); used for undeclared mutations.
bool bitwise_equal(const at::Tensor& a, const at::Tensor& b);

// A copy of `t` on `device` with the same sizes, strides and storage offset (the whole storage is
// copied, so padding between rows is defined and checkable).
at::Tensor copy_with_layout(const at::Tensor& t, const at::Device& device);

// The whole storage of t as a flat tensor of t's dtype.
at::Tensor whole_storage(const at::Tensor& t);

// Float64 CPU values the implementation must produce.
struct Expected {
  std::vector<at::Tensor> outputs;
  std::map<std::string, at::Tensor> mutated;  // final value of each mutated argument
  // Where an output has no single right value (a sampled token may be any of an allowed set): the
  // suite's own check of the returned outputs, folded into the validation, instead of comparing
  // them with `outputs` (which is then empty). Mutations, untouched inputs and aliasing are checked
  // as for any case.
  std::function<void(Validation& validation, const std::vector<at::Tensor>& returned)> check_outputs{};
};

// What a tensor case's validation looks at after a call: the arguments as the implementation saw
// them (undefined: not a tensor), their values before any call, what it returned, and what the
// float64 reference expects. TensorCase (src/numerics/tensor_case.h) and the Python package's
// tensor_case.TensorCase both validate through check_tensors.
struct TensorCheck {
  std::vector<std::string> names;  // argument names, in schema order
  std::vector<std::string> mutates;
  bool aliases_inputs = false;
  Tolerance tolerance;
  std::map<std::string, Tolerance> tolerance_overrides;
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> pristine;
  std::vector<at::Tensor> outputs;
  Expected expected;
};

// Outputs against the reference, declared mutations against it (and within their elements),
// every other input bitwise unchanged (padding included), aliasing only where declared. Throws
// std::invalid_argument unless names, inputs and pristine have one entry per argument.
Validation check_tensors(const TensorCheck& check);

}  // namespace xllm_kernel::numerics
