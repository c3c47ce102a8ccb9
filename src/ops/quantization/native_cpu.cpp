// cpu.native.*: bridges from at::Tensor to the Highway kernels in csrc/cpu/quantization/ (one
// entry point per operation, operations.h). The
// argument checks are NativeBridges' (native_bridges.h, shared with cuda.native); the runner here
// allocates the outputs, fills the kernel parameters (kernel_params) and splits the rows over
// torch's intra-op threads; an out tensor larger than the stream threshold (src/core/cpu_stream.h)
// is written with non-temporal stores.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "csrc/cpu/quantization/operations.h"
#include "src/core/cpu_stream.h"
#include "src/ops/common/cpu.h"
#include "src/ops/common/registration.h"
#include "src/ops/quantization/internal.h"
#include "src/ops/quantization/native_bridges.h"
#include "xllm_kernel/ops/quantization.h"

namespace xllm_kernel::quantization {
namespace {

struct CpuRunner {
  static constexpr c10::DeviceType kDevice = c10::DeviceType::CPU;

  // The kernel of each operation (csrc/cpu/quantization/operations.h).
  using Kernel = kernels::Status (*)(const kernels::QuantParams&, int64_t, int64_t);
  static constexpr Kernel per_token_quant = &cpu::per_token_quant;
  static constexpr Kernel per_token_quant_int8_azp = &cpu::per_token_quant_int8_azp;
  static constexpr Kernel static_quant = &cpu::static_quant;
  static constexpr Kernel rms_norm_per_token_quant = &cpu::rms_norm_per_token_quant;
  static constexpr Kernel fused_add_rms_norm_per_token_quant = &cpu::fused_add_rms_norm_per_token_quant;
  static constexpr Kernel rms_norm_static_quant = &cpu::rms_norm_static_quant;
  static constexpr Kernel fused_add_rms_norm_static_quant = &cpu::fused_add_rms_norm_static_quant;
  static constexpr Kernel silu_and_mul_per_token_quant = &cpu::silu_and_mul_per_token_quant;

  static Outputs run(Kernel kernel, const Call& call, const Arguments& a) {
    const char* op = call.op;
    Outputs o = new_outputs(call.input, a);
    kernels::QuantParams p = kernel_params(call, a, o);
    p.stream_out = detail::stream_cpu_output(static_cast<int64_t>(o.out.nbytes()));
    const int64_t row_elements = a.producer == QuantProducer::kSiluAndMul ? 2 * a.hidden : a.hidden;
    bridge::run_rows(op, p, p.shape.rows, row_elements, kernel);
    return o;
  }
};

using CpuBridges = NativeBridges<CpuRunner>;

}  // namespace

XLLM_REGISTER_NAMED("cpu.native.per_token_quant", modules().native_cpu, per_token_quant_operation(),
                    CpuBridges::per_token_quant);
XLLM_REGISTER_NAMED("cpu.native.per_token_quant_int8_azp", modules().native_cpu, per_token_quant_int8_azp_operation(),
                    CpuBridges::per_token_quant_int8_azp);
XLLM_REGISTER_NAMED("cpu.native.static_quant", modules().native_cpu, static_quant_operation(),
                    CpuBridges::static_quant);
XLLM_REGISTER_NAMED("cpu.native.rms_norm_per_token_quant", modules().native_cpu, rms_norm_per_token_quant_operation(),
                    CpuBridges::rms_norm_per_token_quant);
XLLM_REGISTER_NAMED("cpu.native.fused_add_rms_norm_per_token_quant", modules().native_cpu,
                    fused_add_rms_norm_per_token_quant_operation(), CpuBridges::fused_add_rms_norm_per_token_quant);
XLLM_REGISTER_NAMED("cpu.native.rms_norm_static_quant", modules().native_cpu, rms_norm_static_quant_operation(),
                    CpuBridges::rms_norm_static_quant);
XLLM_REGISTER_NAMED("cpu.native.fused_add_rms_norm_static_quant", modules().native_cpu,
                    fused_add_rms_norm_static_quant_operation(), CpuBridges::fused_add_rms_norm_static_quant);
XLLM_REGISTER_NAMED("cpu.native.silu_and_mul_per_token_quant", modules().native_cpu,
                    silu_and_mul_per_token_quant_operation(), CpuBridges::silu_and_mul_per_token_quant);

}  // namespace xllm_kernel::quantization
