// The normalization bridge checks' float64 references, the suites' own (one reference per
// operation: src/ops/normalization/suites/reference.h), and the tolerance the checks allow.
#pragma once

#include <ATen/ATen.h>

#include "src/ops/normalization/suites/reference.h"

namespace xllm_kernel::testing {

using numerics::normalization::FusedAddRmsNormReference;
using numerics::normalization::reference_fused_add_rms_norm;
using numerics::normalization::reference_layer_norm;
using numerics::normalization::reference_rms_norm;

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
