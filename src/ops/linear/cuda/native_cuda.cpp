// cuda.native.*: bridges from at::Tensor to the CUDA scaled_mm kernel (csrc/cuda/linear/scaled_mm.h),
// built into the plugin libxllm_kernel_cuda.so:
//   linear_pack            every scheme in LinearLayout::kRows (the canonical rows of pack_rows: checked
//                          and laid out on the host, copied to the weight's device), recorded as packed
//                          by cuda.native.linear_pack;
//   linear                 the ATen path of cuda.torch (linear_rows): the plain and weight-only schemes
//                          have no CUDA kernel of their own yet, and a weight must be used by the
//                          solution that packed it;
//   scaled_mm              one launch of the kernel on the current stream;
//   linear_dynamic_quant   cuda.native.per_token_quant, then the same launch (the composition).
// The packed header is read on the host (a copy and a synchronization per call): eager only.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include "csrc/cuda/linear/scaled_mm.h"
#include "src/ops/common/bridge.h"
#include "src/ops/common/cuda/launch.h"
#include "src/ops/common/registration.h"
#include "src/ops/linear/internal.h"
#include "xllm_kernel/ops/linear.h"
#include "xllm_kernel/ops/quantization.h"

namespace xllm_kernel::linear {
namespace {

constexpr auto kCuda = c10::DeviceType::CUDA;

at::Tensor native_pack(const at::Tensor& weight, const std::optional<at::Tensor>& scales,
                       const std::optional<at::Tensor>& zeros, std::string scheme, int64_t group_size) {
  const char* op = "linear_pack";
  pack_shape(op, weight, scales, zeros, scheme, group_size);  // the arguments' errors first
  TORCH_CHECK(weight.is_cuda(), op, ": weight must be on cuda, got ", weight.device().str());
  return pack_rows(weight, scales, zeros, scheme, group_size, kCuda, modules().native_cuda);
}

// scaled_mm on checked rows into a new [M, N] tensor of out_dtype.
at::Tensor scaled_rows(const char* op, const ScaledRows& r, const at::Tensor& packed, const LinearHeader& h,
                       at::ScalarType out_dtype) {
  const at::Tensor& a = r.a;
  TORCH_CHECK(packed.device() == a.device(), op, ": packed must be on a's device ", a.device().str(), ", got ",
              packed.device().str());
  const int64_t m = a.size(0);
  at::Tensor out = at::empty({m, h.n}, a.options().dtype(out_dtype));
  bridge::check_capability(op, a);
  const c10::cuda::CUDAGuard guard(a.device());
  const at::Tensor scale_a = r.scale_a.contiguous();
  const at::Tensor azp = r.azp.defined() ? r.azp.contiguous() : at::Tensor();
  const auto p = scaled_mm_params<cuda::ScaledMmParams>(r, a, scale_a, azp, packed, h,
                                                         bridge::kernel_dtype(out_dtype), out);
  bridge::check_launch(op, cuda::scaled_mm(p, c10::cuda::getCurrentCUDAStream().stream()));
  return out;
}

at::Tensor native_scaled_mm(const at::Tensor& a, const at::Tensor& packed, const at::Tensor& scale_a,
                            const std::optional<at::Tensor>& azp, const std::optional<at::Tensor>& bias,
                            at::ScalarType out_dtype) {
  return scaled_mm_entry(a, packed, scale_a, azp, bias, out_dtype, kCuda, modules().native_cuda, &scaled_rows);
}

at::Tensor native_linear_dynamic_quant(const at::Tensor& input, const at::Tensor& packed,
                                       const std::optional<at::Tensor>& bias) {
  static const auto quant = family::registered_function<PerTokenQuantFn>(
      "linear_dynamic_quant", "cuda.native." + per_token_quant_operation().name());
  return linear_dynamic_quant_entry(
      input, packed, bias, kCuda, modules().native_cuda,
      [](const at::Tensor& rows, at::ScalarType dtype) { return quant(rows, dtype, std::nullopt); }, &scaled_rows);
}

at::Tensor native_linear(const at::Tensor& input, const at::Tensor& packed, const std::optional<at::Tensor>& bias) {
  return linear_rows(input, packed, bias, kCuda, modules().native_cuda);
}

}  // namespace

XLLM_REGISTER_NAMED("cuda.native.linear_pack", modules().native_cuda, linear_pack_operation(), native_pack);
XLLM_REGISTER_NAMED("cuda.native.linear", modules().native_cuda, linear_operation(), native_linear);
XLLM_REGISTER_NAMED("cuda.native.scaled_mm", modules().native_cuda, scaled_mm_operation(), native_scaled_mm);
XLLM_REGISTER_NAMED("cuda.native.linear_dynamic_quant", modules().native_cuda, linear_dynamic_quant_operation(),
                    native_linear_dynamic_quant);

}  // namespace xllm_kernel::linear
