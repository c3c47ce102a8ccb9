// The activation group: contracts, OPERATIONS, backend modules, public API, fake (Meta) kernels
// and the dispatcher kernels that route torch.ops.xllm_kernel.* to the prepared bindings.
#include "xllm_kernel/ops/activation.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "src/core/devices.h"
#include "src/ops/activation/internal.h"
#include "xllm_kernel/boxing.h"

namespace xllm_kernel {

namespace {

constexpr const char* kDtypes = "float32, bfloat16, float16 (output in the input's dtype)";
constexpr const char* kLayout =
    " input is [..., 2d] with any strides for the leading dimensions and a contiguous last dimension; out is a new "
    "contiguous [..., d] tensor of input's dtype. d >= 1, zero rows allowed. Computed in float32 and rounded once "
    "to the input's dtype (the vLLM / FlashInfer semantics).";

OpContract gated(const char* name, const std::string& act) {
  return OpContract{.operation = name,
                    .version = 1,
                    .schema = std::string(name) + "(Tensor input) -> Tensor",
                    .numerical_mode = NumericalMode::kApproximate,
                    .semantics = "out = " + act + " * x[..., d:] with x = input." + kLayout,
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

#define XLLM_ACTIVATION_OPERATION(NAME)                                                                      \
  const TypedOperation<ActivationFn>& NAME##_operation() {                                                   \
    static const TypedOperation<ActivationFn> operation(NAME##_contract(), &boxed_function<ActivationFn>,    \
                                                        &call_boxed<ActivationFn>);                          \
    return operation;                                                                                        \
  }
XLLM_ACTIVATION_OPERATION(silu_and_mul)
XLLM_ACTIVATION_OPERATION(gelu_and_mul)
XLLM_ACTIVATION_OPERATION(gelu_tanh_and_mul)
#undef XLLM_ACTIVATION_OPERATION

namespace activation {
namespace {

std::vector<Implementation> implementations(const std::string& input_domain, int priority) {
  std::vector<Implementation> out;
  for (const Operation* op : std::initializer_list<const Operation*>{
           &silu_and_mul_operation(), &gelu_and_mul_operation(), &gelu_tanh_and_mul_operation()}) {
    out.push_back({.operation = op, .input_domain = input_domain, .priority = priority});
  }
  return out;
}

constexpr const char* kDomain = "float32/bfloat16/float16 [..., 2d], contiguous last dim, any leading strides";

}  // namespace

const BackendModule& torch_cpu_module() {
  static const BackendModule module{.name = "activation.torch_cpu",
                                    .device = Device::kCpu,
                                    .solution = "torch",
                                    .binding = "aten",
                                    .implementations = implementations(std::string("cpu tensors, ") + kDomain, 10)};
  return module;
}

const BackendModule& native_cpu_module() {
  static const BackendModule module{.name = "activation.native_cpu",
                                    .device = Device::kCpu,
                                    .solution = "native",
                                    .binding = "highway",
                                    .implementations = implementations(std::string("cpu tensors, ") + kDomain, 20),
                                    .probe = &bridge::probe_highway};
  return module;
}

const BackendModule& torch_cuda_module() {
  static const BackendModule module{.name = "activation.torch_cuda",
                                    .device = Device::kCuda,
                                    .solution = "torch",
                                    .binding = "aten",
                                    .execution_modes = {ExecutionMode::kEager, ExecutionMode::kGraph},
                                    .implementations = implementations(std::string("cuda tensors, ") + kDomain, 10),
                                    .probe = &bridge::probe_torch_cuda};
  return module;
}

// Our CUDA kernels, in the plugin (src/ops/activation/cuda/).
const BackendModule& native_cuda_module() {
  static const BackendModule module{
      .name = "activation.native_cuda",
      .device = Device::kCuda,
      .solution = "native",
      .binding = "cuda",
      .execution_modes = {ExecutionMode::kEager, ExecutionMode::kGraph},
      .implementations = implementations(std::string("cuda tensors (sm_80+), ") + kDomain, 20),
      .probe = &bridge::probe_cuda_plugin,
      .plugin = "libxllm_kernel_cuda.so"};
  return module;
}

int64_t check_input(const char* op, const at::Tensor& input, c10::DeviceType device) {
  bridge::check_floating_tensor(op, "input", input, device);
  const int64_t width = input.size(-1);
  TORCH_CHECK(width >= 2 && width % 2 == 0, op,
              ": input's last dimension must be even and >= 2 ([..., 2d] with d >= 1: the gate and the up "
              "projection side by side), got ",
              width);
  return width / 2;
}

std::vector<int64_t> output_shape(const at::Tensor& input) {
  std::vector<int64_t> shape(input.sizes().begin(), input.sizes().end());
  shape.back() /= 2;
  return shape;
}

}  // namespace activation

const Group& activation_group() {
  static const Group group{
      .name = "activation",
      .operations = {&silu_and_mul_operation(), &gelu_and_mul_operation(), &gelu_tanh_and_mul_operation()},
      .modules = {&activation::torch_cpu_module(), &activation::native_cpu_module(), &activation::torch_cuda_module(),
                  &activation::native_cuda_module()}};
  return group;
}
XLLM_REGISTER_GROUP(activation_group);

namespace ops {

at::Tensor silu_and_mul(const at::Tensor& input) {
  return silu_and_mul_operation().call(detail::device_of("silu_and_mul", input), input);
}

at::Tensor gelu_and_mul(const at::Tensor& input) {
  return gelu_and_mul_operation().call(detail::device_of("gelu_and_mul", input), input);
}

at::Tensor gelu_tanh_and_mul(const at::Tensor& input) {
  return gelu_tanh_and_mul_operation().call(detail::device_of("gelu_tanh_and_mul", input), input);
}

}  // namespace ops

namespace {

// Fakes infer metadata only: a new contiguous [..., d] tensor of input's dtype.
template <const char* kName>
at::Tensor gated_fake(const at::Tensor& input) {
  TORCH_CHECK(input.dim() >= 1, kName, ": input must have at least 1 dimension [..., 2d], got a 0-D tensor");
  TORCH_CHECK(input.size(-1) % 2 == 0, kName, ": input's last dimension must be even ([..., 2d]), got ",
              input.size(-1));
  return at::empty(activation::output_shape(input), input.options());
}

constexpr char kSiluAndMul[] = "silu_and_mul";
constexpr char kGeluAndMul[] = "gelu_and_mul";
constexpr char kGeluTanhAndMul[] = "gelu_tanh_and_mul";

}  // namespace
}  // namespace xllm_kernel

TORCH_LIBRARY_IMPL(xllm_kernel, Meta, m) {
  m.impl("silu_and_mul", &xllm_kernel::gated_fake<xllm_kernel::kSiluAndMul>);
  m.impl("gelu_and_mul", &xllm_kernel::gated_fake<xllm_kernel::kGeluAndMul>);
  m.impl("gelu_tanh_and_mul", &xllm_kernel::gated_fake<xllm_kernel::kGeluTanhAndMul>);
}

TORCH_LIBRARY_IMPL(xllm_kernel, CPU, m) {
  m.impl("silu_and_mul", &xllm_kernel::ops::silu_and_mul);
  m.impl("gelu_and_mul", &xllm_kernel::ops::gelu_and_mul);
  m.impl("gelu_tanh_and_mul", &xllm_kernel::ops::gelu_tanh_and_mul);
}

TORCH_LIBRARY_IMPL(xllm_kernel, CUDA, m) {
  m.impl("silu_and_mul", &xllm_kernel::ops::silu_and_mul);
  m.impl("gelu_and_mul", &xllm_kernel::ops::gelu_and_mul);
  m.impl("gelu_tanh_and_mul", &xllm_kernel::ops::gelu_tanh_and_mul);
}
