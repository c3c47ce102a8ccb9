// cpu.native.*: bridges from at::Tensor to the Highway kernels in csrc/cpu/normalization/normalization.cpp.
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include "csrc/cpu/normalization/normalization.h"
#include "src/core/cpu_allocator.h"
#include "src/core/cpu_stream.h"
#include "src/ops/common/cpu.h"
#include "src/ops/normalization/internal.h"
#include "xllm_kernel/ops/normalization.h"

namespace xllm_kernel::normalization {

namespace {

void describe_rows(const char* op, cpu::NormParams& p, const at::Tensor& shape,
                   std::initializer_list<std::pair<const at::Tensor*, int64_t*>> tensors) {
  p.row_ndim = normalization::describe_rows(op, shape, tensors, cpu::kMaxRowDims, p.row_sizes, p.rows);
}

template <class Kernel>
void run_rows(const char* op, const cpu::NormParams& p, Kernel kernel) {
  bridge::run_rows(op, p, p.rows, p.hidden, kernel);
}

// Outputs too large to stay in cache for the next op are stored non-temporally, which saves
// reading every output line before writing it (src/core/cpu_stream.h has the policy).
bool stream_output(const at::Tensor& out) { return detail::stream_cpu_output(static_cast<int64_t>(out.nbytes())); }

cpu::NormParams common(const at::Tensor& input, const at::Tensor& weight, double eps) {
  cpu::NormParams p;
  p.dtype = bridge::kernel_dtype(input.scalar_type());
  p.weight_dtype = bridge::kernel_dtype(weight.scalar_type());
  p.hidden = input.size(-1);
  p.weight = weight.const_data_ptr();
  p.eps = eps;
  return p;
}

at::Tensor native_rms_norm(const at::Tensor& input, const at::Tensor& weight, double eps) {
  check_arguments(rms_norm_operation().name().c_str(), input, weight, std::nullopt, nullptr, eps, c10::DeviceType::CPU);
  at::Tensor out = detail::empty_cpu_cached(input.sizes(), input.scalar_type());
  cpu::NormParams p = common(input, weight, eps);
  describe_rows(rms_norm_operation().name().c_str(), p, input, {{&input, p.input_strides}, {&out, p.out_strides}});
  p.input = input.const_data_ptr();
  p.out = out.mutable_data_ptr();
  p.stream_out = stream_output(out);
  run_rows(rms_norm_operation().name().c_str(), p, cpu::rms_norm);
  return out;
}

void native_fused_add_rms_norm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps) {
  check_arguments(fused_add_rms_norm_operation().name().c_str(), input, weight, std::nullopt, &residual, eps, c10::DeviceType::CPU);
  cpu::NormParams p = common(input, weight, eps);
  describe_rows(fused_add_rms_norm_operation().name().c_str(), p, input, {{&input, p.input_strides}, {&residual, p.residual_strides}});
  p.input = input.mutable_data_ptr();
  p.residual = residual.mutable_data_ptr();
  run_rows(fused_add_rms_norm_operation().name().c_str(), p, cpu::fused_add_rms_norm);
}

at::Tensor native_layer_norm(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                             double eps) {
  check_arguments(layer_norm_operation().name().c_str(), input, weight, bias, nullptr, eps, c10::DeviceType::CPU);
  at::Tensor out = detail::empty_cpu_cached(input.sizes(), input.scalar_type());
  cpu::NormParams p = common(input, weight, eps);
  describe_rows(layer_norm_operation().name().c_str(), p, input, {{&input, p.input_strides}, {&out, p.out_strides}});
  p.input = input.const_data_ptr();
  p.out = out.mutable_data_ptr();
  p.bias = bias.has_value() && bias->defined() ? bias->const_data_ptr() : nullptr;
  p.stream_out = stream_output(out);
  run_rows(layer_norm_operation().name().c_str(), p, cpu::layer_norm);
  return out;
}

}  // namespace

XLLM_REGISTER_IMPLEMENTATION(cpu_native_rms_norm, modules().native_cpu, rms_norm_operation(), native_rms_norm);
XLLM_REGISTER_IMPLEMENTATION(cpu_native_fused_add_rms_norm, modules().native_cpu, fused_add_rms_norm_operation(),
                             native_fused_add_rms_norm);
XLLM_REGISTER_IMPLEMENTATION(cpu_native_layer_norm, modules().native_cpu, layer_norm_operation(), native_layer_norm);

}  // namespace xllm_kernel::normalization
