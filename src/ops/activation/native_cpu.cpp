// cpu.native.*: bridges from at::Tensor to the Highway kernels in csrc/cpu/activation/.
#include <c10/util/Exception.h>

#include "csrc/cpu/activation/activation.h"
#include "src/core/cpu_allocator.h"
#include "src/core/cpu_stream.h"
#include "src/ops/common/cpu.h"
#include "src/ops/activation/internal.h"
#include "xllm_kernel/ops/activation.h"

namespace xllm_kernel::activation {
namespace {

using Kernel = kernels::Status (*)(const cpu::ActivationParams&, int64_t, int64_t);

template <Kernel kKernel, const TypedOperation<ActivationFn>& (*kOperation)()>
at::Tensor native_gated(const at::Tensor& input) {
  const char* op = kOperation().name().c_str();
  const int64_t d = check_input(op, input, c10::DeviceType::CPU);
  at::Tensor out = detail::empty_cpu_cached(output_shape(input), input.scalar_type());
  cpu::ActivationParams p = kernel_params(op, input, d, out);
  p.stream_out = detail::stream_cpu_output(static_cast<int64_t>(out.nbytes()));
  bridge::run_rows(op, p, p.shape.rows, d, kKernel);
  return out;
}

}  // namespace

XLLM_REGISTER_IMPLEMENTATION(cpu_native_silu_and_mul, modules().native_cpu, silu_and_mul_operation(),
                             (native_gated<cpu::silu_and_mul, &silu_and_mul_operation>));
XLLM_REGISTER_IMPLEMENTATION(cpu_native_gelu_and_mul, modules().native_cpu, gelu_and_mul_operation(),
                             (native_gated<cpu::gelu_and_mul, &gelu_and_mul_operation>));
XLLM_REGISTER_IMPLEMENTATION(cpu_native_gelu_tanh_and_mul, modules().native_cpu, gelu_tanh_and_mul_operation(),
                             (native_gated<cpu::gelu_tanh_and_mul, &gelu_tanh_and_mul_operation>));

}  // namespace xllm_kernel::activation
