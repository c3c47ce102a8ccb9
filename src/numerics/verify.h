// Comparison of results with float64 references: absolute, relative and ULP errors and headroom.
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "src/numerics/suite.h"

namespace xllm_kernel::numerics {

struct Tolerance {
  double atol = 0;
  double rtol = 0;
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

}  // namespace xllm_kernel::numerics
