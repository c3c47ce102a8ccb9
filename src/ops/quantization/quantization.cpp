// The quantization group: the contracts, the declared operations (with their fake kernels), the
// module table and the public API. torch.ops.xllm_kernel.* reaches the prepared bindings through
// the declared operations (src/ops/common/family.h); the argument checks are in checks.cpp, the
// arithmetic in csrc/common/quantization.h.
#include "xllm_kernel/ops/quantization.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <string>
#include <vector>

#include "src/ops/common/dependencies.h"
#include "src/ops/common/family.h"
#include "src/ops/quantization/internal.h"

namespace xllm_kernel {

namespace {

constexpr const char* kDtypes =
    "input float32, bfloat16, float16; out int8 or float8_e4m3fn (dtype); scale, scale_ub float32; azp int32";
constexpr const char* kNormDtypes =
    "input (and residual) float32, bfloat16, float16; weight in the input's dtype or float32; out int8 or "
    "float8_e4m3fn (dtype); scale, scale_ub float32; azp int32";

// The text every contract shares: the arithmetic's conventions and the non-finite rules.
#define XLLM_QUANT_COMMON                                                                                           \
  " All arithmetic is IEEE float32 (correctly rounded division, no fused multiply-add) in the order written; "     \
  "e4m3(v) rounds to nearest even and saturates to +-448 (+-inf too; NaN gives 0x7F whatever its sign), int8(v) " \
  "and int32(v) round to nearest even and saturate (NaN gives 0). The bits equal vLLM's kernels (csrc/"           \
  "quantization/w8a8) for finite input. Non-finite values: a NaN anywhere in a row (or a NaN scale_ub) makes the " \
  "row's scale the quiet NaN 0x7FC00000, its fp8 q 0x7F, its int8 q 0 and its azp 0 (vLLM drops NaN in its max " \
  "and returns +448 for it: here a NaN is never hidden); infinities follow IEEE arithmetic (a row with +-inf has " \
  "amax inf: fp8 scale inf, its finite elements 0 and its infinities NaN, or +-448 with a finite scale_ub; int8 " \
  "scale inf, q 0). Zero rows: fp8 scale 1/(448*512), int8 scale 0, q 0. Inputs [..., hidden] with any leading "  \
  "strides and a contiguous last dimension, zero rows allowed, offsets past 2^31 elements; results are new "       \
  "contiguous tensors."

#define XLLM_QUANT_PER_TOKEN                                                                                     \
  "Per token (one scale per row of the leading dimensions, amax = max |x| over the row): float8_e4m3fn: scale = " \
  "max(min(amax, scale_ub) / 448, 1/(448*512)) (no scale_ub: amax / 448 bounded below the same way), q = e4m3(x / " \
  "scale), a true division; int8: scale = amax / 127, m = (amax == 0 ? 0 : 127 / amax) once per row, q = int8(x " \
  "* m); scale_ub (one float32 element) with float8_e4m3fn only, with int8 an error. Returns (q of dtype and "     \
  "the input's shape, scale float32 [..., 1])."

#define XLLM_QUANT_STATIC                                                                                         \
  "Static (scale: one float32 element for the whole tensor): float8_e4m3fn q = e4m3(x * (1 / scale)), the "      \
  "reciprocal multiply of vLLM's static fp8 kernel; int8 q = int8(x / scale), a true division; int8 with azp "    \
  "(one int32 element) q = int8(int32(x * (1 / scale)) + azp), the sum exact before it saturates; azp with "      \
  "float8_e4m3fn is an error. scale 0: 1 / 0 = inf (x * inf saturates, 0 * inf is NaN). Returns q of dtype and " \
  "the input's shape."

#define XLLM_QUANT_FUSED                                                                                            \
  " Equals its composition bit for bit: the normalized row is rounded to the input's dtype exactly as rms_norm's " \
  "implementation of the same solution rounds it (float32, rms_norm's contract: x * rsqrt(mean(x^2) + eps) * "     \
  "weight), and that rounded row is quantized as above; the quantization is exact given that row."


OpContract contract(const char* name, const char* schema, const std::string& semantics, const char* dtypes,
                    std::vector<std::string> mutates = {}) {
  return OpContract{.operation = name,
                    .version = 1,
                    .schema = schema,
                    .mutates = std::move(mutates),
                    .numerical_mode = NumericalMode::kExact,
                    .semantics = semantics,
                    .dtypes = dtypes};
}

}  // namespace

const OpContract& per_token_quant_contract() {
  static const OpContract c = contract(
      "per_token_quant", "per_token_quant(Tensor input, ScalarType dtype, Tensor? scale_ub) -> (Tensor out, Tensor scale)",
      XLLM_QUANT_PER_TOKEN XLLM_QUANT_COMMON, kDtypes);
  return c;
}

const OpContract& per_token_quant_int8_azp_contract() {
  static const OpContract c = contract(
      "per_token_quant_int8_azp",
      "per_token_quant_int8_azp(Tensor input) -> (Tensor out, Tensor scale, Tensor azp)",
      "Asymmetric int8 per token (vLLM's dynamic_scaled_int8_quant with azp): with max and min of the row (a NaN "
      "makes both NaN), scale = (max - min) / 255, azp = int32(-128 - min / scale), m = 1 / scale once per row, q = "
      "int8(int32(x * m) + azp), the sum exact before it saturates; x ~ (q - azp) * scale. A row with max == min has "
      "scale 0 and m = inf: zeros give azp 0 and q 0, a constant c > 0 azp -2^31 and q -1, c < 0 azp 2^31 - 1 and q "
      "-1 (the formulas, as vLLM's CUDA kernel). Returns (q int8 of the input's shape, scale float32 [..., 1], azp "
      "int32 [..., 1])." XLLM_QUANT_COMMON,
      kDtypes);
  return c;
}

const OpContract& static_quant_contract() {
  static const OpContract c = contract(
      "static_quant", "static_quant(Tensor input, Tensor scale, ScalarType dtype, Tensor? azp) -> Tensor",
      XLLM_QUANT_STATIC XLLM_QUANT_COMMON, kDtypes);
  return c;
}

const OpContract& rms_norm_per_token_quant_contract() {
  static const OpContract c = contract(
      "rms_norm_per_token_quant",
      "rms_norm_per_token_quant(Tensor input, Tensor weight, float eps, ScalarType dtype, Tensor? scale_ub) -> "
      "(Tensor out, Tensor scale)",
      "per_token_quant(rms_norm(input, weight, eps), dtype, scale_ub) in one pass over the rows; the weight and eps "
      "rules are rms_norm's." XLLM_QUANT_FUSED " " XLLM_QUANT_PER_TOKEN XLLM_QUANT_COMMON,
      kNormDtypes);
  return c;
}

const OpContract& fused_add_rms_norm_per_token_quant_contract() {
  static const OpContract c = contract(
      "fused_add_rms_norm_per_token_quant",
      "fused_add_rms_norm_per_token_quant(Tensor input, Tensor(a!) residual, Tensor weight, float eps, ScalarType "
      "dtype, Tensor? scale_ub) -> (Tensor out, Tensor scale)",
      "residual <- input + residual rounded to residual's dtype, written in place exactly as fused_add_rms_norm "
      "writes it (input is not written), then per_token_quant(rms_norm(residual, weight, eps), dtype, scale_ub); "
      "residual has input's shape and dtype and must not overlap it." XLLM_QUANT_FUSED " " XLLM_QUANT_PER_TOKEN
          XLLM_QUANT_COMMON,
      kNormDtypes, {"residual"});
  return c;
}

const OpContract& rms_norm_static_quant_contract() {
  static const OpContract c = contract(
      "rms_norm_static_quant",
      "rms_norm_static_quant(Tensor input, Tensor weight, float eps, Tensor scale, ScalarType dtype, Tensor? azp) -> "
      "Tensor",
      "static_quant(rms_norm(input, weight, eps), scale, dtype, azp) in one pass over the rows; the weight and eps "
      "rules are rms_norm's." XLLM_QUANT_FUSED " " XLLM_QUANT_STATIC XLLM_QUANT_COMMON,
      kNormDtypes);
  return c;
}

const OpContract& fused_add_rms_norm_static_quant_contract() {
  static const OpContract c = contract(
      "fused_add_rms_norm_static_quant",
      "fused_add_rms_norm_static_quant(Tensor input, Tensor(a!) residual, Tensor weight, float eps, Tensor scale, "
      "ScalarType dtype, Tensor? azp) -> Tensor",
      "residual <- input + residual rounded to residual's dtype, written in place exactly as fused_add_rms_norm "
      "writes it (input is not written), then static_quant(rms_norm(residual, weight, eps), scale, dtype, azp)."
          XLLM_QUANT_FUSED " " XLLM_QUANT_STATIC XLLM_QUANT_COMMON,
      kNormDtypes, {"residual"});
  return c;
}

const OpContract& silu_and_mul_per_token_quant_contract() {
  static const OpContract c = contract(
      "silu_and_mul_per_token_quant",
      "silu_and_mul_per_token_quant(Tensor input, ScalarType dtype, Tensor? scale_ub) -> (Tensor out, Tensor scale)",
      "per_token_quant(silu_and_mul(input), dtype, scale_ub): input [..., 2d] (d >= 1), out [..., d]. Equals its "
      "composition bit for bit: silu(input[..., :d]) * input[..., d:] is rounded to the input's dtype exactly as "
      "silu_and_mul's implementation of the same solution rounds it, then quantized; the quantization is exact "
      "given that row. " XLLM_QUANT_PER_TOKEN XLLM_QUANT_COMMON,
      kDtypes);
  return c;
}

#undef XLLM_QUANT_COMMON
#undef XLLM_QUANT_PER_TOKEN
#undef XLLM_QUANT_STATIC
#undef XLLM_QUANT_FUSED

namespace quantization {
namespace {

using kernels::QuantScheme;
using Pair = std::tuple<at::Tensor, at::Tensor>;

// Fakes infer metadata only (shapes, dtypes): what the outputs of a valid call look like.
Outputs fake_outputs(const char* op, const at::Tensor& input, at::ScalarType dtype, QuantScheme scheme, bool gated) {
  TORCH_CHECK(input.dim() >= 1, op, ": input must have at least 1 dimension [..., hidden], got a 0-D tensor");
  Arguments a;
  a.qdtype = quant_dtype(op, dtype);
  a.scheme = scheme;
  a.hidden = input.size(-1);
  if (gated) {
    TORCH_CHECK(input.size(-1) % 2 == 0, op, ": input's last dimension must be even [..., 2d], got ", input.size(-1));
    a.hidden /= 2;
  }
  return new_outputs(input, a);
}

Pair per_token_quant_fake(const at::Tensor& input, at::ScalarType dtype, const std::optional<at::Tensor>&) {
  Outputs o = fake_outputs(per_token_quant_contract().operation.c_str(), input, dtype, QuantScheme::kPerToken, false);
  return {o.out, o.scale};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> per_token_quant_int8_azp_fake(const at::Tensor& input) {
  Outputs o = fake_outputs(per_token_quant_int8_azp_contract().operation.c_str(), input, at::kChar,
                           QuantScheme::kPerTokenAzp, false);
  return {o.out, o.scale, o.azp};
}

at::Tensor static_quant_fake(const at::Tensor& input, const at::Tensor&, at::ScalarType dtype,
                             const std::optional<at::Tensor>&) {
  return fake_outputs(static_quant_contract().operation.c_str(), input, dtype, QuantScheme::kStatic, false).out;
}

Pair rms_norm_per_token_quant_fake(const at::Tensor& input, const at::Tensor&, double, at::ScalarType dtype,
                                   const std::optional<at::Tensor>&) {
  Outputs o = fake_outputs(rms_norm_per_token_quant_contract().operation.c_str(), input, dtype, QuantScheme::kPerToken,
                           false);
  return {o.out, o.scale};
}

Pair fused_add_rms_norm_per_token_quant_fake(const at::Tensor& input, at::Tensor& residual, const at::Tensor&, double,
                                             at::ScalarType dtype, const std::optional<at::Tensor>&) {
  const char* op = fused_add_rms_norm_per_token_quant_contract().operation.c_str();
  TORCH_CHECK(residual.sizes() == input.sizes(), op, ": residual must have input's shape ", input.sizes(), ", got ",
              residual.sizes());
  Outputs o = fake_outputs(op, input, dtype, QuantScheme::kPerToken, false);
  return {o.out, o.scale};
}

at::Tensor rms_norm_static_quant_fake(const at::Tensor& input, const at::Tensor&, double, const at::Tensor&,
                                      at::ScalarType dtype, const std::optional<at::Tensor>&) {
  return fake_outputs(rms_norm_static_quant_contract().operation.c_str(), input, dtype, QuantScheme::kStatic, false)
      .out;
}

at::Tensor fused_add_rms_norm_static_quant_fake(const at::Tensor& input, at::Tensor& residual, const at::Tensor&,
                                                double, const at::Tensor&, at::ScalarType dtype,
                                                const std::optional<at::Tensor>&) {
  const char* op = fused_add_rms_norm_static_quant_contract().operation.c_str();
  TORCH_CHECK(residual.sizes() == input.sizes(), op, ": residual must have input's shape ", input.sizes(), ", got ",
              residual.sizes());
  return fake_outputs(op, input, dtype, QuantScheme::kStatic, false).out;
}

Pair silu_and_mul_per_token_quant_fake(const at::Tensor& input, at::ScalarType dtype,
                                       const std::optional<at::Tensor>&) {
  Outputs o = fake_outputs(silu_and_mul_per_token_quant_contract().operation.c_str(), input, dtype,
                           QuantScheme::kPerToken, true);
  return {o.out, o.scale};
}

using family::DeclaredOperation;

#define XLLM_QUANT_DECLARE(NAME, FN)                                                              \
  const DeclaredOperation<FN>& NAME##_declared() {                                                \
    static const DeclaredOperation<FN> operation(NAME##_contract(), &NAME##_fake);                \
    return operation;                                                                             \
  }

XLLM_QUANT_DECLARE(per_token_quant, PerTokenQuantFn)
XLLM_QUANT_DECLARE(per_token_quant_int8_azp, PerTokenQuantInt8AzpFn)
XLLM_QUANT_DECLARE(static_quant, StaticQuantFn)
XLLM_QUANT_DECLARE(rms_norm_per_token_quant, RmsNormPerTokenQuantFn)
XLLM_QUANT_DECLARE(fused_add_rms_norm_per_token_quant, FusedAddRmsNormPerTokenQuantFn)
XLLM_QUANT_DECLARE(rms_norm_static_quant, RmsNormStaticQuantFn)
XLLM_QUANT_DECLARE(fused_add_rms_norm_static_quant, FusedAddRmsNormStaticQuantFn)
XLLM_QUANT_DECLARE(silu_and_mul_per_token_quant, SiluAndMulPerTokenQuantFn)
#undef XLLM_QUANT_DECLARE

}  // namespace

// The standard modules. No torch_npu implementation: torch_npu's npu_dynamic_quant (its documented
// formula: scale = row_max(|x|) / 127, y = round(x / scale)) divides by the scale where the
// contract multiplies by m = 127 / amax (different bits), takes float16/bfloat16 input only, has
// no float8_e4m3fn output with vLLM's scale bound or a scale_ub, and returns the scale without the
// trailing 1 dimension; none of the fused operations has a vendor counterpart (README).
const family::StandardModules& modules() {
  static const family::StandardModules modules = family::standard_modules(
      {.family = "quantization",
       .operations = {&per_token_quant_operation(), &per_token_quant_int8_azp_operation(), &static_quant_operation(),
                      &rms_norm_per_token_quant_operation(), &fused_add_rms_norm_per_token_quant_operation(),
                      &rms_norm_static_quant_operation(), &fused_add_rms_norm_static_quant_operation(),
                      &silu_and_mul_per_token_quant_operation()},
       .domain = "float32/bfloat16/float16 input (contiguous last dim, any leading strides), int8 or float8_e4m3fn "
                 "out, weight in the input's dtype or float32",
       .batch_invariant = {.native_cpu = true}});
  return modules;
}

}  // namespace quantization

const TypedOperation<PerTokenQuantFn>& per_token_quant_operation() { return quantization::per_token_quant_declared(); }
const TypedOperation<PerTokenQuantInt8AzpFn>& per_token_quant_int8_azp_operation() {
  return quantization::per_token_quant_int8_azp_declared();
}
const TypedOperation<StaticQuantFn>& static_quant_operation() { return quantization::static_quant_declared(); }
const TypedOperation<RmsNormPerTokenQuantFn>& rms_norm_per_token_quant_operation() {
  return quantization::rms_norm_per_token_quant_declared();
}
const TypedOperation<FusedAddRmsNormPerTokenQuantFn>& fused_add_rms_norm_per_token_quant_operation() {
  return quantization::fused_add_rms_norm_per_token_quant_declared();
}
const TypedOperation<RmsNormStaticQuantFn>& rms_norm_static_quant_operation() {
  return quantization::rms_norm_static_quant_declared();
}
const TypedOperation<FusedAddRmsNormStaticQuantFn>& fused_add_rms_norm_static_quant_operation() {
  return quantization::fused_add_rms_norm_static_quant_declared();
}
const TypedOperation<SiluAndMulPerTokenQuantFn>& silu_and_mul_per_token_quant_operation() {
  return quantization::silu_and_mul_per_token_quant_declared();
}

const Group& quantization_group() {
  static const Group group = quantization::modules().group();
  return group;
}
XLLM_REGISTER_GROUP(quantization_group);
// Its fused operations run the normalization and activation row passes, and check their arguments
// with those families' checks (csrc/cpu/quantization, src/ops/quantization/checks.cpp).
XLLM_FAMILY_BUILDS_ON(quantization, "normalization", "activation");

namespace ops {

std::tuple<at::Tensor, at::Tensor> per_token_quant(const at::Tensor& input, at::ScalarType dtype,
                                                   const std::optional<at::Tensor>& scale_ub) {
  return quantization::per_token_quant_declared()(input, dtype, scale_ub);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> per_token_quant_int8_azp(const at::Tensor& input) {
  return quantization::per_token_quant_int8_azp_declared()(input);
}

at::Tensor static_quant(const at::Tensor& input, const at::Tensor& scale, at::ScalarType dtype,
                        const std::optional<at::Tensor>& azp) {
  return quantization::static_quant_declared()(input, scale, dtype, azp);
}

std::tuple<at::Tensor, at::Tensor> rms_norm_per_token_quant(const at::Tensor& input, const at::Tensor& weight,
                                                            double eps, at::ScalarType dtype,
                                                            const std::optional<at::Tensor>& scale_ub) {
  return quantization::rms_norm_per_token_quant_declared()(input, weight, eps, dtype, scale_ub);
}

std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm_per_token_quant(const at::Tensor& input, at::Tensor& residual,
                                                                      const at::Tensor& weight, double eps,
                                                                      at::ScalarType dtype,
                                                                      const std::optional<at::Tensor>& scale_ub) {
  return quantization::fused_add_rms_norm_per_token_quant_declared()(input, residual, weight, eps, dtype, scale_ub);
}

at::Tensor rms_norm_static_quant(const at::Tensor& input, const at::Tensor& weight, double eps,
                                 const at::Tensor& scale, at::ScalarType dtype, const std::optional<at::Tensor>& azp) {
  return quantization::rms_norm_static_quant_declared()(input, weight, eps, scale, dtype, azp);
}

at::Tensor fused_add_rms_norm_static_quant(const at::Tensor& input, at::Tensor& residual, const at::Tensor& weight,
                                           double eps, const at::Tensor& scale, at::ScalarType dtype,
                                           const std::optional<at::Tensor>& azp) {
  return quantization::fused_add_rms_norm_static_quant_declared()(input, residual, weight, eps, scale, dtype, azp);
}

std::tuple<at::Tensor, at::Tensor> silu_and_mul_per_token_quant(const at::Tensor& input, at::ScalarType dtype,
                                                                const std::optional<at::Tensor>& scale_ub) {
  return quantization::silu_and_mul_per_token_quant_declared()(input, dtype, scale_ub);
}

}  // namespace ops
}  // namespace xllm_kernel
