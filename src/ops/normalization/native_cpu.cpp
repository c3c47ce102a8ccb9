// cpu.native.*: bridges from at::Tensor to the Highway kernels in csrc/cpu/normalization/normalization.cpp.
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <atomic>

#include "csrc/cpu/common/simd.h"
#include "csrc/cpu/normalization/normalization.h"
#include "src/core/cpu_allocator.h"
#include "src/core/parallel.h"
#include "src/ops/normalization/internal.h"
#include "xllm_kernel/device_api.h"
#include "xllm_kernel/ops/normalization.h"

namespace xllm_kernel::normalization {

// Detail: the SIMD target runtime dispatch picked on this CPU.
ProbeResult probe_native_cpu() { return ProbeResult::ok(cpu::simd_target()); }

namespace {

cpu::DType to_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return cpu::DType::kFloat32;
    case at::kBFloat16: return cpu::DType::kBFloat16;
    case at::kHalf: return cpu::DType::kFloat16;
    default: TORCH_CHECK(false, "native cpu normalization: unsupported dtype ", t);  // checked before
  }
}

void describe_rows(const char* op, cpu::NormParams& p, const at::Tensor& shape,
                   std::initializer_list<std::pair<const at::Tensor*, int64_t*>> tensors) {
  p.row_ndim = normalization::describe_rows(op, shape, tensors, cpu::kMaxRowDims, p.row_sizes, p.rows);
}

template <class Kernel>
void run_rows(const char* op, const cpu::NormParams& p, Kernel kernel) {
  if (p.rows == 0) return;
  // About 64 KiB of float32 work per task keeps thread overhead small at small hidden sizes.
  const int64_t grain = std::max<int64_t>(1, 16384 / p.hidden);
  std::atomic<const char*> rejected{nullptr};  // the reason of a failed status
  detail::parallel_rows(p.rows, grain, [&](int64_t begin, int64_t end) {
    const cpu::Status s = kernel(p, begin, end);
    if (!s.is_ok()) rejected.store(s.reason);
  });
  TORCH_CHECK(rejected.load() == nullptr, op, ": native cpu kernel rejected its parameters (", rejected.load(),
              "); this is a bug in the bridge");
}

// Outputs at least as large as the last-level cache cannot be there for the next op anyway; the
// kernels store them non-temporally, which saves reading every output line before writing it.
bool stream_output(const at::Tensor& out) {
  static const int64_t threshold = [] {
    const DeviceApi* api = device_api(Device::kCpu);
    const int64_t llc = api != nullptr ? api->last_level_cache_bytes(0) : -1;
    return llc > 0 ? llc : int64_t{32} << 20;
  }();
  return static_cast<int64_t>(out.nbytes()) >= threshold;
}

cpu::NormParams common(const at::Tensor& input, const at::Tensor& weight, double eps) {
  cpu::NormParams p;
  p.dtype = to_dtype(input.scalar_type());
  p.weight_dtype = to_dtype(weight.scalar_type());
  p.hidden = input.size(-1);
  p.weight = weight.const_data_ptr();
  p.eps = eps;
  return p;
}

at::Tensor native_rms_norm(const at::Tensor& input, const at::Tensor& weight, double eps) {
  check_arguments("rms_norm", input, weight, std::nullopt, nullptr, eps, c10::DeviceType::CPU);
  at::Tensor out = detail::empty_cpu_cached(input.sizes(), input.scalar_type());
  cpu::NormParams p = common(input, weight, eps);
  describe_rows("rms_norm", p, input, {{&input, p.input_strides}, {&out, p.out_strides}});
  p.input = input.const_data_ptr();
  p.out = out.mutable_data_ptr();
  p.stream_out = stream_output(out);
  run_rows("rms_norm", p, cpu::rms_norm);
  return out;
}

void native_fused_add_rms_norm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps) {
  check_arguments("fused_add_rms_norm", input, weight, std::nullopt, &residual, eps, c10::DeviceType::CPU);
  cpu::NormParams p = common(input, weight, eps);
  describe_rows("fused_add_rms_norm", p, input, {{&input, p.input_strides}, {&residual, p.residual_strides}});
  p.input = input.mutable_data_ptr();
  p.residual = residual.mutable_data_ptr();
  run_rows("fused_add_rms_norm", p, cpu::fused_add_rms_norm);
}

at::Tensor native_layer_norm(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                             double eps) {
  check_arguments("layer_norm", input, weight, bias, nullptr, eps, c10::DeviceType::CPU);
  at::Tensor out = detail::empty_cpu_cached(input.sizes(), input.scalar_type());
  cpu::NormParams p = common(input, weight, eps);
  describe_rows("layer_norm", p, input, {{&input, p.input_strides}, {&out, p.out_strides}});
  p.input = input.const_data_ptr();
  p.out = out.mutable_data_ptr();
  p.bias = bias.has_value() && bias->defined() ? bias->const_data_ptr() : nullptr;
  p.stream_out = stream_output(out);
  run_rows("layer_norm", p, cpu::layer_norm);
  return out;
}

KernelSpec spec(const char* operation, const OpContract& contract) {
  return KernelSpec{std::string("cpu.native.") + operation,
                    &contract,
                    Device::kCpu,
                    {ExecutionMode::kEager},
                    "cpu tensors, float32/bfloat16/float16, weight in input dtype or float32, contiguous last dim, "
                    "any leading strides",
                    "native",
                    "",
                    "highway",
                    20};
}

}  // namespace

XLLM_REGISTER_KERNEL(cpu_native_rms_norm, rms_norm_operation(), spec("rms_norm", rms_norm_contract()),
                     native_rms_norm);
XLLM_REGISTER_KERNEL(cpu_native_fused_add_rms_norm, fused_add_rms_norm_operation(),
                     spec("fused_add_rms_norm", fused_add_rms_norm_contract()), native_fused_add_rms_norm);
XLLM_REGISTER_KERNEL(cpu_native_layer_norm, layer_norm_operation(), spec("layer_norm", layer_norm_contract()),
                     native_layer_norm);

}  // namespace xllm_kernel::normalization
