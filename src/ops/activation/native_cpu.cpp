// cpu.native.*: bridges from at::Tensor to the Highway kernels in csrc/cpu/activation/.
#include <c10/util/Exception.h>

#include "csrc/cpu/activation/activation.h"
#include "src/core/cpu_allocator.h"
#include "src/core/cpu_stream.h"
#include "src/ops/common/cpu.h"
#include "src/ops/activation/internal.h"
#include "src/ops/common/registration.h"
#include "xllm_kernel/ops/activation.h"

namespace xllm_kernel::activation {
namespace {

using Kernel = kernels::Status (*)(const cpu::ActivationParams&, int64_t, int64_t);

// Gated ([..., 2d] -> [..., d]) or not ([..., d] -> [..., d]).
template <Kernel kKernel, const TypedOperation<ActivationFn>& (*kOperation)(), bool kGated = true>
at::Tensor native_act(const at::Tensor& input) {
  const char* op = kOperation().name().c_str();
  constexpr auto kDevice = c10::DeviceType::CPU;
  const int64_t d = kGated ? check_input(op, input, kDevice) : check_plain_input(op, input, kDevice);
  at::Tensor out = detail::empty_cpu_cached(output_shape(input, kGated), input.scalar_type());
  cpu::ActivationParams p = kernel_params(op, input, d, out);
  p.stream_out = detail::stream_cpu_output(static_cast<int64_t>(out.nbytes()));
  bridge::run_rows(op, p, p.shape.rows, d, kKernel);
  return out;
}

}  // namespace

XLLM_REGISTER_NAMED("cpu.native.silu_and_mul", modules().native_cpu, silu_and_mul_operation(),
                    (native_act<cpu::silu_and_mul, &silu_and_mul_operation>));
XLLM_REGISTER_NAMED("cpu.native.gelu_and_mul", modules().native_cpu, gelu_and_mul_operation(),
                    (native_act<cpu::gelu_and_mul, &gelu_and_mul_operation>));
XLLM_REGISTER_NAMED("cpu.native.gelu_tanh_and_mul", modules().native_cpu, gelu_tanh_and_mul_operation(),
                    (native_act<cpu::gelu_tanh_and_mul, &gelu_tanh_and_mul_operation>));
XLLM_REGISTER_NAMED("cpu.native.gelu", modules().native_cpu, gelu_operation(),
                    (native_act<cpu::gelu, &gelu_operation, /*kGated=*/false>));
XLLM_REGISTER_NAMED("cpu.native.gelu_tanh", modules().native_cpu, gelu_tanh_operation(),
                    (native_act<cpu::gelu_tanh, &gelu_tanh_operation, /*kGated=*/false>));
XLLM_REGISTER_NAMED("cpu.native.quick_gelu", modules().native_cpu, quick_gelu_operation(),
                    (native_act<cpu::quick_gelu, &quick_gelu_operation, /*kGated=*/false>));

}  // namespace xllm_kernel::activation
