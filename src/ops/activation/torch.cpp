// cpu.torch.* and cuda.torch.*: the activations composed from ATen ops in float32, rounded
// once. ATen dispatches on the tensors' device; on CUDA it runs on the current stream, so the ops
// are also capturable into a CUDA graph.
#include <ATen/ATen.h>

#include "src/ops/activation/internal.h"
#include "src/ops/common/registration.h"
#include "xllm_kernel/ops/activation.h"

namespace xllm_kernel::activation {
namespace {

enum class Act { kSilu, kGelu, kGeluTanh, kQuickGelu };

using Accessor = const TypedOperation<ActivationFn>& (*)();

// act(x) of a float32 tensor, as ATen computes it.
at::Tensor aten_activate(Act act, const at::Tensor& x) {
  switch (act) {
    case Act::kSilu: return at::silu(x);
    case Act::kGelu: return at::gelu(x, "none");
    case Act::kGeluTanh: return at::gelu(x, "tanh");
    case Act::kQuickGelu: break;
  }
  return x * at::sigmoid(x * 1.702);
}

// act(x) with the contracts' limits: act(+inf) = +inf, act(-inf) = 0 (ATen's formulas give NaN at
// -inf, and at::gelu at +inf too); NaN stays NaN.
at::Tensor activate(Act act, const at::Tensor& x) {
  const at::Tensor limits = at::where(x.gt(0), x, at::zeros_like(x));
  return at::where(x.isinf(), limits, aten_activate(act, x));
}

template <c10::DeviceType kDevice, Act kAct, Accessor kOperation>
at::Tensor torch_gated(const at::Tensor& input) {
  const int64_t d = check_input(kOperation().name().c_str(), input, kDevice);
  const at::Tensor x = input.to(at::kFloat);
  const at::Tensor gate = x.narrow(-1, 0, d);
  const at::Tensor up = x.narrow(-1, d, d);
  return activate(kAct, gate).mul_(up).to(input.scalar_type()).contiguous();
}

template <c10::DeviceType kDevice, Act kAct, Accessor kOperation>
at::Tensor torch_plain(const at::Tensor& input) {
  check_plain_input(kOperation().name().c_str(), input, kDevice);
  return activate(kAct, input.to(at::kFloat)).to(input.scalar_type()).contiguous();
}

constexpr auto kCpu = c10::DeviceType::CPU;
constexpr auto kCuda = c10::DeviceType::CUDA;

}  // namespace

XLLM_REGISTER_NAMED("cpu.torch.silu_and_mul", modules().torch_cpu, silu_and_mul_operation(),
                    (torch_gated<kCpu, Act::kSilu, &silu_and_mul_operation>));
XLLM_REGISTER_NAMED("cpu.torch.gelu_and_mul", modules().torch_cpu, gelu_and_mul_operation(),
                    (torch_gated<kCpu, Act::kGelu, &gelu_and_mul_operation>));
XLLM_REGISTER_NAMED("cpu.torch.gelu_tanh_and_mul", modules().torch_cpu, gelu_tanh_and_mul_operation(),
                    (torch_gated<kCpu, Act::kGeluTanh, &gelu_tanh_and_mul_operation>));
XLLM_REGISTER_NAMED("cpu.torch.gelu", modules().torch_cpu, gelu_operation(),
                    (torch_plain<kCpu, Act::kGelu, &gelu_operation>));
XLLM_REGISTER_NAMED("cpu.torch.gelu_tanh", modules().torch_cpu, gelu_tanh_operation(),
                    (torch_plain<kCpu, Act::kGeluTanh, &gelu_tanh_operation>));
XLLM_REGISTER_NAMED("cpu.torch.quick_gelu", modules().torch_cpu, quick_gelu_operation(),
                    (torch_plain<kCpu, Act::kQuickGelu, &quick_gelu_operation>));
XLLM_REGISTER_NAMED("cuda.torch.silu_and_mul", modules().torch_cuda, silu_and_mul_operation(),
                    (torch_gated<kCuda, Act::kSilu, &silu_and_mul_operation>));
XLLM_REGISTER_NAMED("cuda.torch.gelu_and_mul", modules().torch_cuda, gelu_and_mul_operation(),
                    (torch_gated<kCuda, Act::kGelu, &gelu_and_mul_operation>));
XLLM_REGISTER_NAMED("cuda.torch.gelu_tanh_and_mul", modules().torch_cuda, gelu_tanh_and_mul_operation(),
                    (torch_gated<kCuda, Act::kGeluTanh, &gelu_tanh_and_mul_operation>));
XLLM_REGISTER_NAMED("cuda.torch.gelu", modules().torch_cuda, gelu_operation(),
                    (torch_plain<kCuda, Act::kGelu, &gelu_operation>));
XLLM_REGISTER_NAMED("cuda.torch.gelu_tanh", modules().torch_cuda, gelu_tanh_operation(),
                    (torch_plain<kCuda, Act::kGeluTanh, &gelu_tanh_operation>));
XLLM_REGISTER_NAMED("cuda.torch.quick_gelu", modules().torch_cuda, quick_gelu_operation(),
                    (torch_plain<kCuda, Act::kQuickGelu, &quick_gelu_operation>));

}  // namespace xllm_kernel::activation
