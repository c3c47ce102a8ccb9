// The activation group: contracts, declared operations (with their fake kernels), the module table,
// the argument checks its bridges share and the public API. torch.ops.xllm_kernel.* reaches the
// prepared bindings through the declared operations (src/ops/common/family.h).
#include "xllm_kernel/ops/activation.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include "src/ops/activation/internal.h"
#include "src/ops/common/family.h"

namespace xllm_kernel {

namespace {

constexpr const char* kDtypes = "float32, bfloat16, float16 (output in the input's dtype)";
constexpr const char* kLayout =
    " input is [..., 2d] with any strides for the leading dimensions and a contiguous last dimension; out is a new "
    "contiguous [..., d] tensor of input's dtype. d >= 1, zero rows allowed. Computed in float32 and rounded once "
    "to the input's dtype (the vLLM / FlashInfer semantics). Non-finite inputs: act(+inf) = +inf, act(-inf) = 0 (the "
    "limits), NaN gives NaN; the product with the up projection is IEEE (a gate of +inf times 0 is NaN).";

OpContract gated(const char* name, const std::string& act) {
  return OpContract{.operation = name,
                    .version = 1,
                    .schema = std::string(name) + "(Tensor input) -> Tensor",
                    .numerical_mode = NumericalMode::kApproximate,
                    .semantics = "out = " + act + " * x[..., d:] with x = input." + kLayout,
                    .dtypes = kDtypes};
}

constexpr const char* kPlainLayout =
    " input is [..., d] with any strides for the leading dimensions and a contiguous last dimension; out is a new "
    "contiguous tensor of input's shape and dtype. d >= 1, zero rows allowed. Computed in float32 and rounded once "
    "to the input's dtype. Non-finite inputs: act(+inf) = +inf, act(-inf) = 0 (the limits), NaN gives NaN.";

// An activation without the gate: out = act(input), elementwise.
OpContract plain(const char* name, const std::string& act) {
  return OpContract{.operation = name,
                    .version = 1,
                    .schema = std::string(name) + "(Tensor input) -> Tensor",
                    .numerical_mode = NumericalMode::kApproximate,
                    .semantics = "out = " + act + " elementwise." + kPlainLayout,
                    .dtypes = kDtypes};
}

}  // namespace

const OpContract& silu_and_mul_contract() {
  static const OpContract contract = gated("silu_and_mul", "silu(x[..., :d]), silu(a) = a / (1 + exp(-a)),");
  return contract;
}

const OpContract& gelu_and_mul_contract() {
  static const OpContract contract =
      gated("gelu_and_mul", "gelu(x[..., :d]), the exact GELU gelu(a) = a/2 * (1 + erf(a / sqrt(2))),");
  return contract;
}

const OpContract& gelu_tanh_and_mul_contract() {
  static const OpContract contract = gated(
      "gelu_tanh_and_mul",
      "gelu_tanh(x[..., :d]), the tanh approximation gelu_tanh(a) = a/2 * (1 + tanh(sqrt(2/pi) * (a + 0.044715 a^3))),");
  return contract;
}

const OpContract& gelu_contract() {
  static const OpContract contract =
      plain("gelu", "gelu(input), the exact GELU gelu(a) = a/2 * (1 + erf(a / sqrt(2))) (GPT-NeoX, Falcon, BERT),");
  return contract;
}

const OpContract& gelu_tanh_contract() {
  static const OpContract contract =
      plain("gelu_tanh",
            "gelu_tanh(input), the tanh approximation gelu_tanh(a) = a/2 * (1 + tanh(sqrt(2/pi) * (a + 0.044715 a^3))) "
            "(GPT-2's gelu_new, GPT-J, Phi-2, StarCoder),");
  return contract;
}

const OpContract& quick_gelu_contract() {
  static const OpContract contract =
      plain("quick_gelu", "quick_gelu(input), quick_gelu(a) = a * sigmoid(1.702 a) = a / (1 + exp(-1.702 a)) (CLIP),");
  return contract;
}

namespace activation {
namespace {

// Fakes infer metadata only: a new contiguous [..., d] tensor of input's dtype.
template <const TypedOperation<ActivationFn>& (*kOperation)()>
at::Tensor gated_fake(const at::Tensor& input) {
  const char* op = kOperation().name().c_str();
  TORCH_CHECK(input.dim() >= 1, op, ": input must have at least 1 dimension [..., 2d], got a 0-D tensor");
  TORCH_CHECK(input.size(-1) % 2 == 0, op, ": input's last dimension must be even ([..., 2d]), got ", input.size(-1));
  return at::empty(output_shape(input), input.options());
}

// Without the gate: a new contiguous tensor of input's shape and dtype.
template <const TypedOperation<ActivationFn>& (*kOperation)()>
at::Tensor plain_fake(const at::Tensor& input) {
  TORCH_CHECK(input.dim() >= 1, kOperation().name(), ": input must have at least 1 dimension [..., d], got a 0-D tensor");
  return at::empty(input.sizes(), input.options());
}

using Declared = family::DeclaredOperation<ActivationFn>;

const Declared& silu_and_mul_declared() {
  static const Declared operation(silu_and_mul_contract(), &gated_fake<&silu_and_mul_operation>);
  return operation;
}

const Declared& gelu_and_mul_declared() {
  static const Declared operation(gelu_and_mul_contract(), &gated_fake<&gelu_and_mul_operation>);
  return operation;
}

const Declared& gelu_tanh_and_mul_declared() {
  static const Declared operation(gelu_tanh_and_mul_contract(), &gated_fake<&gelu_tanh_and_mul_operation>);
  return operation;
}

const Declared& gelu_declared() {
  static const Declared operation(gelu_contract(), &plain_fake<&gelu_operation>);
  return operation;
}

const Declared& gelu_tanh_declared() {
  static const Declared operation(gelu_tanh_contract(), &plain_fake<&gelu_tanh_operation>);
  return operation;
}

const Declared& quick_gelu_declared() {
  static const Declared operation(quick_gelu_contract(), &plain_fake<&quick_gelu_operation>);
  return operation;
}

}  // namespace

const family::StandardModules& modules() {
  static const family::StandardModules modules = family::standard_modules(
      {.family = "activation",
       .operations = {&silu_and_mul_operation(), &gelu_and_mul_operation(), &gelu_tanh_and_mul_operation(),
                      &gelu_operation(), &gelu_tanh_operation(), &quick_gelu_operation()},
       .domain = "float32/bfloat16/float16 [..., 2d] (gated) or [..., d], contiguous last dim, any leading strides",
       .batch_invariant = {.native_cpu = true}});
  return modules;
}

}  // namespace activation

const TypedOperation<ActivationFn>& silu_and_mul_operation() { return activation::silu_and_mul_declared(); }
const TypedOperation<ActivationFn>& gelu_and_mul_operation() { return activation::gelu_and_mul_declared(); }
const TypedOperation<ActivationFn>& gelu_tanh_and_mul_operation() { return activation::gelu_tanh_and_mul_declared(); }
const TypedOperation<ActivationFn>& gelu_operation() { return activation::gelu_declared(); }
const TypedOperation<ActivationFn>& gelu_tanh_operation() { return activation::gelu_tanh_declared(); }
const TypedOperation<ActivationFn>& quick_gelu_operation() { return activation::quick_gelu_declared(); }

const Group& activation_group() {
  static const Group group = activation::modules().group();
  return group;
}
XLLM_REGISTER_GROUP(activation_group);

namespace ops {

at::Tensor silu_and_mul(const at::Tensor& input) { return activation::silu_and_mul_declared()(input); }
at::Tensor gelu_and_mul(const at::Tensor& input) { return activation::gelu_and_mul_declared()(input); }
at::Tensor gelu_tanh_and_mul(const at::Tensor& input) { return activation::gelu_tanh_and_mul_declared()(input); }
at::Tensor gelu(const at::Tensor& input) { return activation::gelu_declared()(input); }
at::Tensor gelu_tanh(const at::Tensor& input) { return activation::gelu_tanh_declared()(input); }
at::Tensor quick_gelu(const at::Tensor& input) { return activation::quick_gelu_declared()(input); }

}  // namespace ops
}  // namespace xllm_kernel
