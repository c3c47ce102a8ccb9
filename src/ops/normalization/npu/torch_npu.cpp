// npu.torch.*: the normalization contracts over torch_npu's vendor operators, called through the
// PyTorch dispatcher by schema (no torch_npu header or library is linked: the operators are
// whatever the process's torch_npu registered). Built into the plugin libxllm_kernel_npu.so, which
// initialize("npu") loads once the normalization.torch_npu module's probe finds torch_npu loaded
// and each implementation's `supports` probe found its operator with the expected schema.
//
// Mapping onto the contracts (the vendor ops take gamma in the input's dtype):
//   rms_norm            npu_rms_norm(input, weight, eps)[0]; a float32 weight with bfloat16/float16
//                       input runs on a float32 copy of the input, rounded once at the end.
//   fused_add_rms_norm  (y, rstd, x) = npu_add_rms_norm(input, residual, weight, eps), x written back
//                       to residual and y to input (the contract is in place; the write-back is two
//                       copies of the rows). A float32 weight: x = input + residual in the input's
//                       dtype, then npu_rms_norm on a float32 copy of x.
//   layer_norm          ATen's layer_norm on npu tensors (torch_npu's kernel); weight or bias of
//                       another dtype than the input: on float32 copies.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/add.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/layer_norm.h>
#include <c10/util/Exception.h>

#include <tuple>

#include "src/ops/common/registration.h"
#include "src/ops/normalization/internal.h"
#include "xllm_kernel/ops/normalization.h"

namespace xllm_kernel::normalization {
namespace {

constexpr c10::DeviceType kNpu = c10::DeviceType::PrivateUse1;

using RmsNormVendor = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, double);
using AddRmsNormVendor = std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                        const at::Tensor&, double);

// Looked up once, on the first call (the module's supports probes checked the schemas before the
// plugin loaded); a typed handle calls the operator without boxing.
const c10::TypedOperatorHandle<RmsNormVendor>& npu_rms_norm() {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("npu::npu_rms_norm", "").typed<RmsNormVendor>();
  return op;
}

const c10::TypedOperatorHandle<AddRmsNormVendor>& npu_add_rms_norm() {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("npu::npu_add_rms_norm", "").typed<AddRmsNormVendor>();
  return op;
}

at::Tensor torch_npu_rms_norm(const at::Tensor& input, const at::Tensor& weight, double eps) {
  check_arguments({.op = rms_norm_operation().name().c_str(), .input = input, .weight = weight, .eps = eps,
                   .device = kNpu});
  if (input.numel() == 0) return at::empty(input.sizes(), input.options());
  if (weight.scalar_type() == input.scalar_type()) {
    return std::get<0>(npu_rms_norm().call(input, weight, eps)).contiguous();
  }
  return std::get<0>(npu_rms_norm().call(input.to(at::kFloat), weight, eps)).to(input.scalar_type()).contiguous();
}

void torch_npu_fused_add_rms_norm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps) {
  check_arguments({.op = fused_add_rms_norm_operation().name().c_str(), .input = input, .weight = weight,
                   .residual = &residual, .eps = eps, .device = kNpu});
  if (input.numel() == 0) return;
  if (weight.scalar_type() == input.scalar_type()) {
    auto [y, rstd, x] = npu_add_rms_norm().call(input, residual, weight, eps);
    residual.copy_(x);
    input.copy_(y);
    return;
  }
  at::Tensor x = at::add(input, residual);  // rounded to the input's dtype, as the contract says
  at::Tensor y = std::get<0>(npu_rms_norm().call(x.to(at::kFloat), weight, eps));
  residual.copy_(x);
  input.copy_(y);
}

at::Tensor torch_npu_layer_norm(const at::Tensor& input, const at::Tensor& weight,
                                const std::optional<at::Tensor>& bias, double eps) {
  check_arguments({.op = layer_norm_operation().name().c_str(), .input = input, .weight = weight, .bias = &bias,
                   .eps = eps, .device = kNpu});
  if (input.numel() == 0) return at::empty(input.sizes(), input.options());
  const int64_t hidden = input.size(-1);
  if (weight.scalar_type() == input.scalar_type()) {
    return at::layer_norm(input, {hidden}, weight, bias, eps).contiguous();
  }
  std::optional<at::Tensor> bias32;
  if (bias.has_value() && bias->defined()) bias32 = bias->to(at::kFloat);
  return at::layer_norm(input.to(at::kFloat), {hidden}, weight.to(at::kFloat), bias32, eps)
      .to(input.scalar_type())
      .contiguous();
}

}  // namespace

XLLM_REGISTER_NAMED("npu.torch.rms_norm", *modules().torch_npu, rms_norm_operation(), torch_npu_rms_norm);
XLLM_REGISTER_NAMED("npu.torch.fused_add_rms_norm", *modules().torch_npu, fused_add_rms_norm_operation(),
                    torch_npu_fused_add_rms_norm);
XLLM_REGISTER_NAMED("npu.torch.layer_norm", *modules().torch_npu, layer_norm_operation(), torch_npu_layer_norm);

}  // namespace xllm_kernel::normalization
