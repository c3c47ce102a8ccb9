// cpu.torch.* and cuda.torch.*: the gated activations composed from ATen ops in float32, rounded
// once. ATen dispatches on the tensors' device; on CUDA it runs on the current stream, so the ops
// are also capturable into a CUDA graph.
#include <ATen/ATen.h>

#include "src/ops/activation/internal.h"
#include "xllm_kernel/ops/activation.h"

namespace xllm_kernel::activation {
namespace {

enum class Act { kSilu, kGelu, kGeluTanh };

const TypedOperation<ActivationFn>& operation(Act act) {
  switch (act) {
    case Act::kSilu: return silu_and_mul_operation();
    case Act::kGelu: return gelu_and_mul_operation();
    case Act::kGeluTanh: break;
  }
  return gelu_tanh_and_mul_operation();
}

template <c10::DeviceType kDevice, Act kAct>
at::Tensor torch_gated(const at::Tensor& input) {
  const int64_t d = check_input(operation(kAct).name().c_str(), input, kDevice);
  const at::Tensor x = input.to(at::kFloat);
  const at::Tensor gate = x.narrow(-1, 0, d);
  const at::Tensor up = x.narrow(-1, d, d);
  at::Tensor act = kAct == Act::kSilu ? at::silu(gate) : at::gelu(gate, kAct == Act::kGelu ? "none" : "tanh");
  return act.mul_(up).to(input.scalar_type()).contiguous();
}

constexpr auto kCpu = c10::DeviceType::CPU;
constexpr auto kCuda = c10::DeviceType::CUDA;

}  // namespace

XLLM_REGISTER_IMPLEMENTATION(cpu_torch_silu_and_mul, modules().torch_cpu, silu_and_mul_operation(),
                             (torch_gated<kCpu, Act::kSilu>));
XLLM_REGISTER_IMPLEMENTATION(cpu_torch_gelu_and_mul, modules().torch_cpu, gelu_and_mul_operation(),
                             (torch_gated<kCpu, Act::kGelu>));
XLLM_REGISTER_IMPLEMENTATION(cpu_torch_gelu_tanh_and_mul, modules().torch_cpu, gelu_tanh_and_mul_operation(),
                             (torch_gated<kCpu, Act::kGeluTanh>));
XLLM_REGISTER_IMPLEMENTATION(cuda_torch_silu_and_mul, modules().torch_cuda, silu_and_mul_operation(),
                             (torch_gated<kCuda, Act::kSilu>));
XLLM_REGISTER_IMPLEMENTATION(cuda_torch_gelu_and_mul, modules().torch_cuda, gelu_and_mul_operation(),
                             (torch_gated<kCuda, Act::kGelu>));
XLLM_REGISTER_IMPLEMENTATION(cuda_torch_gelu_tanh_and_mul, modules().torch_cuda, gelu_tanh_and_mul_operation(),
                             (torch_gated<kCuda, Act::kGeluTanh>));

}  // namespace xllm_kernel::activation
