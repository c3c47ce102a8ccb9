// The normalization group: contracts, declared operations (with their fake kernels), the module
// table and the public API. torch.ops.xllm_kernel.* reaches the prepared bindings through the
// declared operations (src/ops/common/family.h); the argument checks are in checks.cpp.
#include "xllm_kernel/ops/normalization.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include "src/ops/normalization/internal.h"
#include "src/ops/common/family.h"
#include "xllm_kernel/catalog.h"

namespace xllm_kernel {

namespace {
constexpr const char* kDtypes = "float32, bfloat16, float16; weight (and bias) in the input's dtype or float32";
}

const OpContract& rms_norm_contract() {
  static const OpContract contract{
      .operation = "rms_norm",
      .version = 1,
      .schema = "rms_norm(Tensor input, Tensor weight, float eps) -> Tensor",
      .numerical_mode = NumericalMode::kFp32Accumulate,
      .semantics =
          "out = input * rsqrt(mean(input^2 over the last dimension) + eps) * weight, computed in float32 and "
          "rounded once to the input's dtype. input is [..., hidden] with any strides for the leading dimensions "
          "and a contiguous last dimension; out is a new contiguous tensor of input's shape and dtype. hidden >= 1, "
          "zero rows allowed, eps finite and >= 0. Non-finite values follow IEEE arithmetic in this order: a NaN "
          "in a row makes the whole row NaN; an infinity (and no NaN) makes the mean infinite, so that row's "
          "finite elements become 0 (times weight) and its infinities NaN (inf * 0); a NaN or infinite weight "
          "element gives NaN or +-inf in its column (NaN where the normalized value is 0 and the weight infinite).",
      .dtypes = kDtypes};
  return contract;
}

const OpContract& fused_add_rms_norm_contract() {
  static const OpContract contract{
      .operation = "fused_add_rms_norm",
      .version = 1,
      .schema = "fused_add_rms_norm(Tensor(a!) input, Tensor(b!) residual, Tensor weight, float eps) -> ()",
      .mutates = {"input", "residual"},
      .numerical_mode = NumericalMode::kFp32Accumulate,
      .semantics =
          "residual <- input + residual, rounded to residual's dtype; input <- rms_norm(residual, weight, eps) "
          "computed from that rounded residual (the Hugging Face / vLLM semantics). Both tensors are written in "
          "place and must not overlap; residual has input's shape and dtype. Non-finite values: the sum is IEEE "
          "(inf + -inf is NaN), then rms_norm's rules apply to the rounded residual. Returns nothing.",
      .dtypes = kDtypes};
  return contract;
}

const OpContract& layer_norm_contract() {
  static const OpContract contract{
      .operation = "layer_norm",
      .version = 1,
      .schema = "layer_norm(Tensor input, Tensor weight, Tensor? bias, float eps) -> Tensor",
      .numerical_mode = NumericalMode::kFp32Accumulate,
      .semantics =
          "out = (input - mean) * rsqrt(var + eps) * weight + bias over the last dimension, with the biased "
          "variance (divided by hidden), computed in float32 and rounded once to the input's dtype; bias is "
          "optional and has weight's dtype. Layout rules as rms_norm; out is a new contiguous tensor. Non-finite "
          "values: a NaN or an infinity in a row makes the mean or the variance non-finite, so the whole row is NaN; "
          "a NaN or infinite weight or bias element gives NaN or +-inf in its column (IEEE).",
      .dtypes = kDtypes};
  return contract;
}

namespace normalization {
namespace {

// Fakes infer metadata only: the output is a new contiguous tensor of input's shape and dtype.
at::Tensor rms_norm_fake(const at::Tensor& input, const at::Tensor& weight, double eps) {
  TORCH_CHECK(input.dim() >= 1, rms_norm_contract().operation, ": input must have at least 1 dimension [..., hidden], got a 0-D tensor");
  return at::empty(input.sizes(), input.options());
}

void fused_add_rms_norm_fake(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps) {
  TORCH_CHECK(residual.sizes() == input.sizes(), fused_add_rms_norm_contract().operation, ": residual must have input's shape ",
              input.sizes(), ", got ", residual.sizes());
}

at::Tensor layer_norm_fake(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                           double eps) {
  TORCH_CHECK(input.dim() >= 1, layer_norm_contract().operation, ": input must have at least 1 dimension [..., hidden], got a 0-D tensor");
  return at::empty(input.sizes(), input.options());
}

using family::DeclaredOperation;

const DeclaredOperation<RmsNormFn>& rms_norm_declared() {
  static const DeclaredOperation<RmsNormFn> operation(rms_norm_contract(), &rms_norm_fake);
  return operation;
}

const DeclaredOperation<FusedAddRmsNormFn>& fused_add_rms_norm_declared() {
  static const DeclaredOperation<FusedAddRmsNormFn> operation(fused_add_rms_norm_contract(), &fused_add_rms_norm_fake);
  return operation;
}

const DeclaredOperation<LayerNormFn>& layer_norm_declared() {
  static const DeclaredOperation<LayerNormFn> operation(layer_norm_contract(), &layer_norm_fake);
  return operation;
}

}  // namespace

// The standard modules, and torch_npu's vendor operators, called through the dispatcher by schema,
// in the plugin built by cmake/npu.cmake (src/ops/normalization/npu/); the Python package registers
// the same implementations from xllm_kernel/ops/normalization/torch_npu.py (the guide's form), and
// then the plugin is not loaded.
const family::StandardModules& modules() {
  static const family::StandardModules modules = family::standard_modules(
      {.family = "normalization",
       .operations = {&rms_norm_operation(), &fused_add_rms_norm_operation(), &layer_norm_operation()},
       .domain = "float32/bfloat16/float16, weight (and bias) in the input's dtype or float32, contiguous last dim, "
                 "any leading strides",
       .npu_implementations =
           {{.operation = &rms_norm_operation(),
                .input_domain = "npu tensors, torch_npu.npu_rms_norm (first output); float32 weights with bfloat16/"
                                "float16 input computed on a float32 copy of the input (the vendor op takes gamma in "
                                "the input's dtype)",
                .priority = family::kNativePriority,
                .supports = bridge::vendor_operator(
                    "npu::npu_rms_norm", "npu::npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)")},
               {.operation = &fused_add_rms_norm_operation(),
                .input_domain = "npu tensors, torch_npu.npu_add_rms_norm (y, rstd, x): x written back to residual, y to "
                                "input; float32 weights with bfloat16/float16 input: the rounded sum, then npu_rms_norm on "
                                "its float32 copy",
                .priority = family::kNativePriority,
                .supports = bridge::vendor_operator("npu::npu_add_rms_norm",
                                                    "npu::npu_add_rms_norm(Tensor x1, Tensor x2, Tensor gamma, float "
                                                    "epsilon=1e-06) -> (Tensor, Tensor, Tensor)")},
               {.operation = &layer_norm_operation(),
                .input_domain = "npu tensors, ATen layer_norm on npu (torch_npu's kernel); weight/bias of another dtype "
                                "than the input: computed on float32 copies",
                .priority = family::kNativePriority}},
         .batch_invariant = {.native_cpu = true}});
  return modules;
}

}  // namespace normalization

const TypedOperation<RmsNormFn>& rms_norm_operation() { return normalization::rms_norm_declared(); }
const TypedOperation<FusedAddRmsNormFn>& fused_add_rms_norm_operation() {
  return normalization::fused_add_rms_norm_declared();
}
const TypedOperation<LayerNormFn>& layer_norm_operation() { return normalization::layer_norm_declared(); }

const Group& normalization_group() {
  static const Group group = normalization::modules().group();
  return group;
}
XLLM_REGISTER_GROUP(normalization_group);

namespace ops {

at::Tensor rms_norm(const at::Tensor& input, const at::Tensor& weight, double eps) {
  return normalization::rms_norm_declared()(input, weight, eps);
}

void fused_add_rms_norm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps) {
  normalization::fused_add_rms_norm_declared()(input, residual, weight, eps);
}

at::Tensor layer_norm(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                      double eps) {
  return normalization::layer_norm_declared()(input, weight, bias, eps);
}

}  // namespace ops
}  // namespace xllm_kernel
