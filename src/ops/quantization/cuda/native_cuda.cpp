// cuda.native.*: bridges from at::Tensor to the CUDA kernels in csrc/cuda/quantization/ (one
// launcher per operation, operations.h). Built into
// the plugin libxllm_kernel_cuda.so, which initialize("cuda") loads when the
// quantization.native_cuda module's probe finds a usable device; loading it registers these. The
// argument checks are NativeBridges' (native_bridges.h, shared with cpu.native); the runner here
// allocates the outputs, fills the kernel parameters (kernel_params) and enqueues one kernel on
// the current stream. No value is read on the host (a static scale, a zero point and scale_ub are
// device pointers the kernel reads) and nothing is synchronized or allocated beyond the outputs,
// so a call can be captured into a graph.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "csrc/cuda/quantization/operations.h"
#include "src/ops/common/cuda/launch.h"
#include "src/ops/common/registration.h"
#include "src/ops/quantization/internal.h"
#include "src/ops/quantization/native_bridges.h"
#include "xllm_kernel/ops/quantization.h"

namespace xllm_kernel::quantization {
namespace {

struct CudaRunner {
  static constexpr c10::DeviceType kDevice = c10::DeviceType::CUDA;

  // The launcher of each operation (csrc/cuda/quantization/operations.h).
  using Launcher = kernels::Status (*)(const kernels::QuantParams&, cudaStream_t);
  static constexpr Launcher per_token_quant = &cuda::per_token_quant;
  static constexpr Launcher per_token_quant_int8_azp = &cuda::per_token_quant_int8_azp;
  static constexpr Launcher static_quant = &cuda::static_quant;
  static constexpr Launcher rms_norm_per_token_quant = &cuda::rms_norm_per_token_quant;
  static constexpr Launcher fused_add_rms_norm_per_token_quant = &cuda::fused_add_rms_norm_per_token_quant;
  static constexpr Launcher rms_norm_static_quant = &cuda::rms_norm_static_quant;
  static constexpr Launcher fused_add_rms_norm_static_quant = &cuda::fused_add_rms_norm_static_quant;
  static constexpr Launcher silu_and_mul_per_token_quant = &cuda::silu_and_mul_per_token_quant;

  static Outputs run(Launcher launcher, const Call& call, const Arguments& a) {
    const char* op = call.op;
    bridge::check_capability(op, call.input);
    const c10::cuda::CUDAGuard guard(call.input.device());
    Outputs o = new_outputs(call.input, a);
    const kernels::QuantParams p = kernel_params(call, a, o);
    bridge::check_launch(op, launcher(p, c10::cuda::getCurrentCUDAStream().stream()));
    return o;
  }
};

using CudaBridges = NativeBridges<CudaRunner>;

}  // namespace

XLLM_REGISTER_NAMED("cuda.native.per_token_quant", modules().native_cuda, per_token_quant_operation(),
                    CudaBridges::per_token_quant);
XLLM_REGISTER_NAMED("cuda.native.per_token_quant_int8_azp", modules().native_cuda, per_token_quant_int8_azp_operation(),
                    CudaBridges::per_token_quant_int8_azp);
XLLM_REGISTER_NAMED("cuda.native.static_quant", modules().native_cuda, static_quant_operation(),
                    CudaBridges::static_quant);
XLLM_REGISTER_NAMED("cuda.native.rms_norm_per_token_quant", modules().native_cuda, rms_norm_per_token_quant_operation(),
                    CudaBridges::rms_norm_per_token_quant);
XLLM_REGISTER_NAMED("cuda.native.fused_add_rms_norm_per_token_quant", modules().native_cuda,
                    fused_add_rms_norm_per_token_quant_operation(), CudaBridges::fused_add_rms_norm_per_token_quant);
XLLM_REGISTER_NAMED("cuda.native.rms_norm_static_quant", modules().native_cuda, rms_norm_static_quant_operation(),
                    CudaBridges::rms_norm_static_quant);
XLLM_REGISTER_NAMED("cuda.native.fused_add_rms_norm_static_quant", modules().native_cuda,
                    fused_add_rms_norm_static_quant_operation(), CudaBridges::fused_add_rms_norm_static_quant);
XLLM_REGISTER_NAMED("cuda.native.silu_and_mul_per_token_quant", modules().native_cuda,
                    silu_and_mul_per_token_quant_operation(), CudaBridges::silu_and_mul_per_token_quant);

}  // namespace xllm_kernel::quantization
