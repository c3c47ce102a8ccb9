// The normalization group: contracts, OPERATIONS, backend modules, public API, fake (Meta) kernels
// and the dispatcher kernels that route torch.ops.xllm_kernel.* to the prepared bindings.
#include "xllm_kernel/ops/normalization.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "src/core/devices.h"
#include "src/ops/normalization/internal.h"
#include "xllm_kernel/boxing.h"
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
          "zero rows allowed, eps finite and >= 0.",
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
          "place and must not overlap; residual has input's shape and dtype. Returns nothing.",
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
          "optional and has weight's dtype. Layout rules as rms_norm; out is a new contiguous tensor.",
      .dtypes = kDtypes};
  return contract;
}

const TypedOperation<RmsNormFn>& rms_norm_operation() {
  static const TypedOperation<RmsNormFn> operation(rms_norm_contract(), &boxed_function<RmsNormFn>,
                                                   &call_boxed<RmsNormFn>);
  return operation;
}

const TypedOperation<FusedAddRmsNormFn>& fused_add_rms_norm_operation() {
  static const TypedOperation<FusedAddRmsNormFn> operation(
      fused_add_rms_norm_contract(), &boxed_function<FusedAddRmsNormFn>, &call_boxed<FusedAddRmsNormFn>);
  return operation;
}

const TypedOperation<LayerNormFn>& layer_norm_operation() {
  static const TypedOperation<LayerNormFn> operation(layer_norm_contract(), &boxed_function<LayerNormFn>,
                                                     &call_boxed<LayerNormFn>);
  return operation;
}

namespace normalization {
namespace {

// Every module implements the three operations with the same domain and priority.
std::vector<Implementation> implementations(const std::string& input_domain, int priority) {
  std::vector<Implementation> out;
  for (const Operation* op : std::initializer_list<const Operation*>{
           &rms_norm_operation(), &fused_add_rms_norm_operation(), &layer_norm_operation()}) {
    out.push_back({.operation = op, .input_domain = input_domain, .priority = priority});
  }
  return out;
}

constexpr const char* kDomain = "float32/bfloat16/float16, weight (and bias) in the input's dtype or float32, "
                                "contiguous last dim, any leading strides";

}  // namespace

const BackendModule& torch_cpu_module() {
  static const BackendModule module{.name = "normalization.torch_cpu",
                                    .device = Device::kCpu,
                                    .solution = "torch",
                                    .binding = "aten",
                                    .implementations = implementations(std::string("cpu tensors, ") + kDomain, 10)};
  return module;
}

const BackendModule& native_cpu_module() {
  static const BackendModule module{.name = "normalization.native_cpu",
                                    .device = Device::kCpu,
                                    .solution = "native",
                                    .binding = "highway",
                                    .implementations = implementations(std::string("cpu tensors, ") + kDomain, 20),
                                    .probe = &bridge::probe_highway};
  return module;
}

// ATen on CUDA tensors, linked in (src/ops/normalization/torch.cpp).
const BackendModule& torch_cuda_module() {
  static const BackendModule module{.name = "normalization.torch_cuda",
                                    .device = Device::kCuda,
                                    .solution = "torch",
                                    .binding = "aten",
                                    .execution_modes = {ExecutionMode::kEager, ExecutionMode::kGraph},
                                    .implementations = implementations(std::string("cuda tensors, ") + kDomain, 10),
                                    .probe = &bridge::probe_torch_cuda};
  return module;
}

// Our CUDA kernels, in the plugin built by cmake/cuda.cmake (src/ops/normalization/cuda/).
const BackendModule& native_cuda_module() {
  static const BackendModule module{
      .name = "normalization.native_cuda",
      .device = Device::kCuda,
      .solution = "native",
      .binding = "cuda",
      .execution_modes = {ExecutionMode::kEager, ExecutionMode::kGraph},
      .implementations = implementations(std::string("cuda tensors (sm_80+), ") + kDomain, 20),
      .probe = &bridge::probe_cuda_plugin,
      .plugin = "libxllm_kernel_cuda.so"};
  return module;
}

// torch_npu's vendor operators, called through the dispatcher by schema, in the plugin built by
// cmake/npu.cmake (src/ops/normalization/npu/); the Python package registers the same
// implementations from xllm_kernel/ops/normalization/torch_npu.py (the guide's form), and then
// the plugin is not loaded.
const BackendModule& torch_npu_module() {
  static const BackendModule module{
      .name = "normalization.torch_npu",
      .device = Device::kNpu,
      .solution = "torch",
      .binding = "torch_npu",
      .execution_modes = {ExecutionMode::kEager, ExecutionMode::kGraph},
      .implementations =
          {{.operation = &rms_norm_operation(),
            .input_domain = "npu tensors, torch_npu.npu_rms_norm (first output); float32 weights with bfloat16/"
                            "float16 input computed on a float32 copy of the input (the vendor op takes gamma in "
                            "the input's dtype)",
            .priority = 20,
            .supports = bridge::vendor_operator(
                "npu::npu_rms_norm", "npu::npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)")},
           {.operation = &fused_add_rms_norm_operation(),
            .input_domain = "npu tensors, torch_npu.npu_add_rms_norm (y, rstd, x): x written back to residual, y to "
                            "input; float32 weights with bfloat16/float16 input: the rounded sum, then npu_rms_norm on "
                            "its float32 copy",
            .priority = 20,
            .supports = bridge::vendor_operator("npu::npu_add_rms_norm",
                                                "npu::npu_add_rms_norm(Tensor x1, Tensor x2, Tensor gamma, float "
                                                "epsilon=1e-06) -> (Tensor, Tensor, Tensor)")},
           {.operation = &layer_norm_operation(),
            .input_domain = "npu tensors, ATen layer_norm on npu (torch_npu's kernel); weight/bias of another dtype "
                            "than the input: computed on float32 copies",
            .priority = 20}},
      .probe = &bridge::probe_torch_npu,
      .plugin = "libxllm_kernel_npu.so"};
  return module;
}

}  // namespace normalization

const Group& normalization_group() {
  static const Group group{
      .name = "normalization",
      .operations = {&rms_norm_operation(), &fused_add_rms_norm_operation(), &layer_norm_operation()},
      .modules = {&normalization::torch_cpu_module(), &normalization::native_cpu_module(),
                  &normalization::torch_cuda_module(), &normalization::native_cuda_module(),
                  &normalization::torch_npu_module()}};
  return group;
}
XLLM_REGISTER_GROUP(normalization_group);

namespace ops {

at::Tensor rms_norm(const at::Tensor& input, const at::Tensor& weight, double eps) {
  return rms_norm_operation().call(detail::device_of("rms_norm", input), input, weight, eps);
}

void fused_add_rms_norm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps) {
  fused_add_rms_norm_operation().call(detail::device_of("fused_add_rms_norm", input), input, residual, weight, eps);
}

at::Tensor layer_norm(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                      double eps) {
  return layer_norm_operation().call(detail::device_of("layer_norm", input), input, weight, bias, eps);
}

}  // namespace ops

namespace {

// Fakes infer metadata only: the output is a new contiguous tensor of input's shape and dtype.
at::Tensor rms_norm_fake(const at::Tensor& input, const at::Tensor& weight, double eps) {
  TORCH_CHECK(input.dim() >= 1, "rms_norm: input must have at least 1 dimension [..., hidden], got a 0-D tensor");
  return at::empty(input.sizes(), input.options());
}

void fused_add_rms_norm_fake(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps) {
  TORCH_CHECK(residual.sizes() == input.sizes(), "fused_add_rms_norm: residual must have input's shape ",
              input.sizes(), ", got ", residual.sizes());
}

at::Tensor layer_norm_fake(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                           double eps) {
  TORCH_CHECK(input.dim() >= 1, "layer_norm: input must have at least 1 dimension [..., hidden], got a 0-D tensor");
  return at::empty(input.sizes(), input.options());
}

}  // namespace
}  // namespace xllm_kernel

// Schemas are defined once, from the contracts, in src/core/custom_ops.cpp.
TORCH_LIBRARY_IMPL(xllm_kernel, Meta, m) {
  m.impl("rms_norm", &xllm_kernel::rms_norm_fake);
  m.impl("fused_add_rms_norm", &xllm_kernel::fused_add_rms_norm_fake);
  m.impl("layer_norm", &xllm_kernel::layer_norm_fake);
}

TORCH_LIBRARY_IMPL(xllm_kernel, CPU, m) {
  m.impl("rms_norm", &xllm_kernel::ops::rms_norm);
  m.impl("fused_add_rms_norm", &xllm_kernel::ops::fused_add_rms_norm);
  m.impl("layer_norm", &xllm_kernel::ops::layer_norm);
}

TORCH_LIBRARY_IMPL(xllm_kernel, CUDA, m) {
  m.impl("rms_norm", &xllm_kernel::ops::rms_norm);
  m.impl("fused_add_rms_norm", &xllm_kernel::ops::fused_add_rms_norm);
  m.impl("layer_norm", &xllm_kernel::ops::layer_norm);
}
