// npu.torch.*: the linear contracts on Ascend NPUs, from ATen ops on npu tensors (torch_npu's kernels)
// and torch_npu's npu_quant_matmul, called through the PyTorch dispatcher by schema (no torch_npu
// header or library is linked). Built into the plugin libxllm_kernel_npu.so, which initialize("npu")
// loads once the linear.torch_npu module's probe finds torch_npu loaded. The ATen forms are the
// torch bridges' own (src/ops/linear/torch.cpp, declared in internal.h), so the npu results are the
// cpu.torch / cuda.torch arithmetic on the npu.
//
// Mapping onto the contracts:
//   linear_pack           the canonical rows (LinearLayout::kRows), packed on the host and copied to
//                         the weight's npu device; packer "npu.torch.linear_pack".
//   linear                f32/bf16/f16 weights: at::linear in the input's dtype where weight and bias
//                         have it, else at::linear in float32, rounded once. int8, int4, fp8: W
//                         dequantized in float32 as the contract forms it, at::linear in float32.
//                         torch_npu.npu_weight_quant_batchmatmul is NOT used: it takes float16/bfloat16
//                         x only (no float32), antiquant_scale/antiquant_offset in x's dtype, so its W
//                         = (q + offset) * scale is formed and rounded in float16/bfloat16, where the
//                         contract forms W in float32 from float32 scales (one rounding of the
//                         product); its group size must be a multiple of 32 in [32, K - 1]. Its W
//                         equals the contract's only for scales and products exact in x's dtype,
//                         which a bridge cannot know without reading every weight.
//   scaled_mm             w8a8-int8, w4a8: per K group, the exact int32 acc from npu_quant_matmul(a, w^T,
//                         scale = [1.0], output_dtype = int32) (w4a8: w = q - z as int8, in [-15, 15]);
//                         the azp correction and the contract's float32 epilogue (scale_a, then the
//                         weight scale, then bias, one rounding) in ATen ops, one per step in its
//                         order, as cpu.torch. The vendor's own epilogue (scale, pertoken_scale,
//                         bias, output_dtype float16/bfloat16) is not used: it does not promise that
//                         order or float32 steps. The documented formula for an int32 output is
//                         out = x1 @ x2 * scale; with scale 1 it is taken to be the accumulator
//                         itself (the numerics suite on an Ascend device checks that, test/npu).
//                         w8a8-fp8: the 910B's quant matmul takes no float8 activations: the e4m3
//                         values widened to float32 (exact), at::matmul per K group (torch_npu's
//                         float32 matmul: with torch.npu.matmul.allow_hf32 on, HF32 inputs would
//                         round the e4m3 values no further, but its sums would not be float32's),
//                         then the same epilogue.
//   linear_dynamic_quant  no npu per_token_quant is registered (the quantization family explains why
//                         torch_npu's npu_dynamic_quant does not fit its contract): the rows are
//                         quantized by cpu.torch.per_token_quant on a host copy (bit-exact to the
//                         contract), the int8/e4m3 rows and scales copied back, then scaled_mm as
//                         above. A device-to-host copy and a synchronization per call.
// The packed header is read on the host (a copy and a synchronization per call), as on CUDA.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <optional>
#include <string>

#include "src/ops/common/registration.h"
#include "src/ops/linear/internal.h"
#include "xllm_kernel/ops/linear.h"
#include "xllm_kernel/ops/quantization.h"

namespace xllm_kernel::linear {
namespace {

constexpr c10::DeviceType kNpu = c10::DeviceType::PrivateUse1;

const BackendModule& npu_module() { return *modules().torch_npu; }

// torch_npu 2.14.0's schema: npu::npu_quant_matmul(Tensor x1, Tensor x2, Tensor scale, *, Tensor? offset=None,
// Tensor? pertoken_scale=None, Tensor? bias=None, int? output_dtype=None, int? x1_dtype=None, int? x2_dtype=None,
// int? pertoken_scale_dtype=None, int? scale_dtype=None, int[]? group_sizes=None, Tensor? y_scale=None) -> Tensor
// (output_dtype: a c10::ScalarType's value).
using QuantMatmulVendor = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                     const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                                     const std::optional<at::Tensor>&, std::optional<int64_t>, std::optional<int64_t>,
                                     std::optional<int64_t>, std::optional<int64_t>, std::optional<int64_t>,
                                     at::OptionalIntArrayRef, const std::optional<at::Tensor>&);

// Looked up once, on the first call (the module's supports probe checked the schema before the
// plugin loaded); a typed handle calls the operator without boxing.
const c10::TypedOperatorHandle<QuantMatmulVendor>& npu_quant_matmul() {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("npu::npu_quant_matmul", "").typed<QuantMatmulVendor>();
  return op;
}

// acc = a w^T in int32 for int8 a [M, k] and int8 w [N, k] (k <= 65535: the contract's bound is the
// vendor's): npu_quant_matmul with scale 1 and an int32 output, w passed as the transposed view [k, N].
at::Tensor vendor_int_mm(const at::Tensor& a, const at::Tensor& w) {
  const at::Tensor one = at::ones({1}, a.options().dtype(at::kFloat));
  return npu_quant_matmul().call(a, w.t(), one, std::nullopt, std::nullopt, std::nullopt,
                                 static_cast<int64_t>(at::kInt), std::nullopt, std::nullopt, std::nullopt,
                                 std::nullopt, std::nullopt, std::nullopt);
}

at::Tensor npu_pack(const at::Tensor& weight, const std::optional<at::Tensor>& scales,
                    const std::optional<at::Tensor>& zeros, std::string scheme, int64_t group_size) {
  return pack_rows(weight, scales, zeros, scheme, group_size, kNpu, npu_module());
}

at::Tensor npu_linear(const at::Tensor& input, const at::Tensor& packed, const std::optional<at::Tensor>& bias) {
  return linear_rows(input, packed, bias, kNpu, npu_module());
}

// scaled_mm on checked rows, the int32 sums from npu_quant_matmul.
at::Tensor npu_scaled_rows(const char*, const ScaledRows& r, const at::Tensor& packed, const LinearHeader& h,
                           at::ScalarType out_dtype) {
  return scaled_rows(r, packed, h, out_dtype, &vendor_int_mm);
}

at::Tensor npu_scaled_mm(const at::Tensor& a, const at::Tensor& packed, const at::Tensor& scale_a,
                         const std::optional<at::Tensor>& azp, const std::optional<at::Tensor>& bias,
                         at::ScalarType out_dtype) {
  return scaled_mm_entry(a, packed, scale_a, azp, bias, out_dtype, kNpu, npu_module(), &npu_scaled_rows);
}

at::Tensor npu_linear_dynamic_quant(const at::Tensor& input, const at::Tensor& packed,
                                    const std::optional<at::Tensor>& bias) {
  static const auto quant = family::registered_function<PerTokenQuantFn>(
      "linear_dynamic_quant", "cpu.torch." + per_token_quant_operation().name());
  // The rows quantized on a host copy, the results copied back (no npu per_token_quant fits its contract).
  auto on_host = [](const at::Tensor& rows, at::ScalarType dtype) {
    const auto [q, scale] = quant(rows.cpu(), dtype, std::nullopt);
    return std::make_tuple(q.to(rows.device()), scale.to(rows.device()));
  };
  return linear_dynamic_quant_entry(input, packed, bias, kNpu, npu_module(), on_host, &npu_scaled_rows);
}

}  // namespace

XLLM_REGISTER_NAMED("npu.torch.linear_pack", *modules().torch_npu, linear_pack_operation(), npu_pack);
XLLM_REGISTER_NAMED("npu.torch.linear", *modules().torch_npu, linear_operation(), npu_linear);
XLLM_REGISTER_NAMED("npu.torch.scaled_mm", *modules().torch_npu, scaled_mm_operation(), npu_scaled_mm);
XLLM_REGISTER_NAMED("npu.torch.linear_dynamic_quant", *modules().torch_npu, linear_dynamic_quant_operation(),
                    npu_linear_dynamic_quant);

}  // namespace xllm_kernel::linear
