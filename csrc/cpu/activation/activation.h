// Torch-free CPU kernels of the activations (Highway, runtime ISA dispatch). Gated:
//   silu_and_mul:       out = silu(x[..., :d]) * x[..., d:]       silu(a) = a / (1 + e^-a)
//   gelu_and_mul:       out = gelu(x[..., :d]) * x[..., d:]       gelu(a) = 0.5 a (1 + erf(a / sqrt(2)))
//   gelu_tanh_and_mul:  out = gelu_tanh(x[..., :d]) * x[..., d:]
//                       gelu_tanh(a) = 0.5 a (1 + tanh(sqrt(2 / pi) (a + 0.044715 a^3)))
// and without the gate (input and out both [..., d]):
//   gelu, gelu_tanh:    out = gelu(x), gelu_tanh(x)
//   quick_gelu:         out = x * sigmoid(1.702 x) = x / (1 + e^(-1.702 x))
//
// The at::Tensor side (a bridge) checks every argument, fills an ActivationParams and splits the
// rows over threads. Kernels assume valid arguments; a status other than ok names what a buggy
// bridge got wrong.
//
//   xllm_kernel::cpu::ActivationParams p;
//   p.dtype = DType::kBFloat16; p.d = 14336;                        // input [tokens, 2 * d]
//   p.shape.rows = tokens; p.shape.ndim = 1; p.shape.sizes[0] = tokens;
//   p.input = x; p.input_strides.s[0] = 2 * p.d;
//   p.out = y; p.out_strides.s[0] = p.d;                            // out [tokens, d]
//   xllm_kernel::cpu::silu_and_mul(p, 0, tokens);
//
// Numerics. Input and out share the dtype (float32, bfloat16 or float16). All arithmetic is in
// float32: f(a) as below, times b (b = x[..., d:]) rounded to float32, then rounded once to the
// dtype (round to nearest even). The float32 f(a) is within these relative errors of the exact
// value wherever |f(a)| >= 2^-126 max(1, |a|), and within 2^-126 max(1, |a|) absolute below that
// (bounds measured over dense sweeps on every compiled Highway target, with margin, by
// test/csrc/activation/cpu_activation_kernels_test.cpp):
//   silu       5e-7 (8 ulp; measured 4.1e-7, at a = -87): a / (1 + e^-a), e^-a
//              within 4.5e-7 (ExpInRange in csrc/cpu/common/math-inl.h)
//   gelu       2e-6 (measured 6e-7 with FMA, 1.4e-6 without): a * Phi(a), Phi(a) =
//              0.5 (1 + erf(a / sqrt(2))) within 2e-6 relative, lower tail included (NormalCdf
//              in csrc/cpu/common/math-inl.h, a polynomial in 1 / (1 + |a| / 4) times e^(-a^2/2);
//              as an erf within 8e-7 absolute)
//   gelu_tanh  (8 + 4 |u|) ulp, u = 2 sqrt(2 / pi) (a + 0.044715 a^3): a / (1 + e^-u), where u's
//              own rounding (a few ulps) is scaled by |u| in e^-u; |u| > 20 only where the
//              result is below 2e-9 |a|
//   quick_gelu (8 + 4 |u|) ulp, u = 1.702 a: a / (1 + e^-u), as gelu_tanh
// bfloat16 results (unit roundoff 2^-8) come from cheaper forms of the same functions, a degree-3
// e^x and, for gelu, a degree-4 R(t) (ExpNegBf16Parts and
// NormalCdfBf16NotNaN in csrc/cpu/common/math-inl.h): silu 1.5e-4, gelu 2.5e-4, gelu_tanh
// 1.5e-4 + (8 + 4 |u|) float32 ulps (quick_gelu as silu), all below 2^-10, so a bf16 result is within 0.75 ulp of the
// exact value (the float32 forms: 0.5 ulp plus a few float32 ulps). float32 and float16 results use the
// forms above. On AVX-512 the bfloat16 forms are others within the same bounds (measured: silu
// 1.1e-4, gelu 1.8e-4, gelu_tanh and quick_gelu 1.1e-4 + their float32 ulps): a / (1 + 2^y) with
// 2^y from vreduceps/vscalefps and a degree-3 polynomial and the reciprocal from vrcp14ps, and for
// gelu Phi(-|a|) = 2^Y with Y = log2 Phi piecewise quadratic from register tables (Exp2Bf16,
// NormalTailBf16 in csrc/cpu/common/math-inl.h, TimesSigmoidExp2 in activation.cpp).
// None of these cancels: results keep their relative accuracy where they are tiny (large
// negative a), unlike 1 + erf or 1 + tanh evaluated in float32.
//
// Special values. NaN in a or b gives NaN. a = +inf gives inf * b (NaN for b = 0); a = -inf gives
// the limit -0 (times b: +-0, NaN for b = +-inf), as do large negative a where the exact result
// is below 2^-126 |a b|: silu for a < -88, gelu for a < -13.25, gelu_tanh and quick_gelu for
// u < -88 (bfloat16 on AVX-512: silu and these from u < -88.7 on, gelu from a < -14.5 on; the
// values between are below 2^-126 |a b| and kept as such). Finite a and b never give NaN (the
// result is finite, or +-inf where it overflows the dtype). The functions without the gate are the
// same with b = 1.

#pragma once

#include <cstddef>
#include <cstdint>

#include "csrc/common/activation.h"
#include "csrc/common/rows.h"

namespace xllm_kernel::cpu {

using kernels::DType;
using kernels::RowShape;
using kernels::RowStrides;
using kernels::Status;

// The parameters, shared with the CUDA launchers (csrc/common/activation.h).
using kernels::ActivationParams;

// Each processes rows [row_begin, row_end) and may run concurrently on disjoint ranges. Pointers
// may be null when the range is empty.
Status silu_and_mul(const ActivationParams& p, int64_t row_begin, int64_t row_end);
Status gelu_and_mul(const ActivationParams& p, int64_t row_begin, int64_t row_end);
Status gelu_tanh_and_mul(const ActivationParams& p, int64_t row_begin, int64_t row_end);
// Without the gate: input rows hold d elements.
Status gelu(const ActivationParams& p, int64_t row_begin, int64_t row_end);
Status gelu_tanh(const ActivationParams& p, int64_t row_begin, int64_t row_end);
Status quick_gelu(const ActivationParams& p, int64_t row_begin, int64_t row_end);

namespace detail {

// The float32 functions the kernels use, element by element, for tests of their error bounds
// (on the target the runtime dispatch picks, like the kernels).
enum class ActivationMath : int {
  kSilu = 0,      // silu(a)
  kGelu = 1,      // gelu(a)
  kGeluTanh = 2,  // gelu_tanh(a)
  kExp = 3,       // e^a for a in [-87.5, 88] (ExpInRange; unspecified outside)
  kNormalCdf = 4,  // Phi(a) = 0.5 (1 + erf(a / sqrt(2)))
  // The cheaper forms the bfloat16 kernels use.
  kSiluBf16 = 5,
  kGeluBf16 = 6,
  kGeluTanhBf16 = 7,
  kExpBf16 = 8,        // e^a for a in [-88, 87.5] (ExpNegBf16Parts or Exp2Bf16; unspecified outside)
  kNormalCdfBf16 = 9,  // Phi(a) (NormalCdfBf16NotNaN; NaN gives NaN)
  kQuickGelu = 10,     // quick_gelu(a) = a * sigmoid(1.702 a)
  kQuickGeluBf16 = 11,
};

// out[i] = f(in[i]) for i < n (any n; in and out may be the same array).
void activation_math(ActivationMath f, const float* in, float* out, size_t n);

}  // namespace detail

}  // namespace xllm_kernel::cpu
