// cpu.torch.* and cuda.torch.*: the quantization operations composed from ATen ops in float32,
// step by step as csrc/common/quantization.h writes them (every constant a tensor of the operand's
// shape, so that no division by a scalar becomes a reciprocal multiply; ATen's float32 ops do not
// contract a * b + c), with the contract's conversions (e4m3 with saturation and one NaN, int8 and
// int32 rounded to nearest even and saturated, NaN to 0) and NaN rules. The fused operations are
// their composition: the normalization's (activation's) own torch implementation, called through
// the registry, then the quantization here, so that fused equals composition bit for bit. ATen
// dispatches on the tensors' device; on CUDA everything runs on the current stream without a
// synchronization, so the cuda implementations are capturable into a graph.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <limits>
#include <string>

#include "src/ops/common/registration.h"
#include "src/ops/quantization/internal.h"
#include "xllm_kernel/ops/activation.h"
#include "xllm_kernel/ops/normalization.h"
#include "xllm_kernel/registry.h"

namespace xllm_kernel::quantization {
namespace {

using kernels::QuantDType;
using kernels::QuantScheme;
using Pair = std::tuple<at::Tensor, at::Tensor>;

constexpr auto kCpu = c10::DeviceType::CPU;
constexpr auto kCuda = c10::DeviceType::CUDA;

at::Tensor like(const at::Tensor& t, double value) { return at::full_like(t, value); }

// NaN elements as the canonical quiet NaN 0x7FC00000.
at::Tensor canonical_nan(const at::Tensor& s) {
  return at::where(s.isnan(), like(s, std::numeric_limits<float>::quiet_NaN()), s);
}

// float8_e4m3fn of float32 v: saturated to +-448 (+-inf too), rounded to nearest even, NaN 0x7F.
at::Tensor e4m3(const at::Tensor& v) {
  const at::Tensor q = v.clamp(-448.0, 448.0).to(at::kFloat8_e4m3fn).view(at::kByte);
  return at::where(v.isnan(), at::full_like(q, 0x7F), q).view(at::kFloat8_e4m3fn);
}

// int32(v) of float32 v as int64: NaN 0, saturated to [-2^31, 2^31 - 1], rounded to nearest even
// (in float64, where every float32 is exact).
at::Tensor int32_of(const at::Tensor& v) {
  return v.to(at::kDouble).nan_to_num(0.0).clamp(-2147483648.0, 2147483647.0).round().to(at::kLong);
}

// int8(v): NaN 0, saturated to [-128, 127], rounded to nearest even.
at::Tensor int8_of(const at::Tensor& v) { return v.nan_to_num(0.0).clamp(-128.0, 127.0).round().to(at::kChar); }

// int8(int32(v) + azp), the sum exact (int64) before it saturates; azp int64, broadcastable.
at::Tensor int8_azp_of(const at::Tensor& v, const at::Tensor& azp) {
  return (int32_of(v) + azp).clamp(-128, 127).to(at::kChar);
}

// The per-token schemes over float32 rows x [..., hidden].
Pair per_token(const at::Tensor& x, QuantDType qdtype, const at::Tensor& scale_ub) {
  const at::Tensor amax = x.abs().amax(-1, /*keepdim=*/true);  // NaN propagates
  if (qdtype == QuantDType::kFloat8E4M3) {
    const at::Tensor bounded = scale_ub.defined() ? at::minimum(amax, scale_ub.reshape({})) : amax;
    at::Tensor s = bounded.div(like(bounded, kernels::kFp8E4M3Max));
    s = canonical_nan(at::maximum(s, like(s, kernels::fp8_min_scale())));
    return {e4m3(x.div(s)), s};
  }
  const at::Tensor s = canonical_nan(amax.div(like(amax, kernels::kInt8Max)));
  const at::Tensor m = at::where(amax.eq(0), like(amax, 0.0), like(amax, kernels::kInt8Max).div(amax));
  return {int8_of(x.mul(m)), s};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> per_token_azp(const at::Tensor& x) {
  const at::Tensor mx = x.amax(-1, /*keepdim=*/true), mn = x.amin(-1, /*keepdim=*/true);
  const at::Tensor s = mx.sub(mn).div(like(mx, 255.0));
  const at::Tensor m = like(s, 1.0).div(s);
  const at::Tensor azp = int32_of(like(mn, -128.0).sub(mn.div(s)));
  return {int8_azp_of(x.mul(m), azp), canonical_nan(s), azp.to(at::kInt)};
}

at::Tensor static_scheme(const at::Tensor& x, QuantDType qdtype, const at::Tensor& scale, const at::Tensor& azp) {
  const at::Tensor s = scale.reshape({});
  if (qdtype == QuantDType::kFloat8E4M3) return e4m3(x.mul(like(s, 1.0).div(s)));
  if (!azp.defined()) return int8_of(x.div(s));
  return int8_azp_of(x.mul(like(s, 1.0).div(s)), azp.reshape({}).to(at::kLong));
}

// A torch implementation of another family's operation on `device`, as registered
// ("cpu.torch.rms_norm"): the fused operations are built on it.
template <class Sig>
KernelFunction<Sig> torch_sibling(c10::DeviceType device, const std::string& operation) {
  const std::string name = std::string(device == kCpu ? "cpu" : "cuda") + ".torch." + operation;
  return family::registered_function<Sig>("quantization", name);
}

at::Tensor as_float(const at::Tensor& t) { return t.to(at::kFloat); }

// ---------------------------------------------------------------- the operations

template <c10::DeviceType kDevice>
Pair torch_per_token_quant(const at::Tensor& input, at::ScalarType dtype, const std::optional<at::Tensor>& scale_ub) {
  const char* op = per_token_quant_operation().name().c_str();
  const Arguments a = check_arguments({.op = op, .producer = QuantProducer::kInput, .scheme = QuantScheme::kPerToken,
                                       .input = input, .dtype = dtype, .scale_ub = &scale_ub, .device = kDevice});
  return per_token(as_float(input), a.qdtype, a.scale_ub);
}

template <c10::DeviceType kDevice>
std::tuple<at::Tensor, at::Tensor, at::Tensor> torch_per_token_quant_int8_azp(const at::Tensor& input) {
  const char* op = per_token_quant_int8_azp_operation().name().c_str();
  check_arguments({.op = op, .producer = QuantProducer::kInput, .scheme = QuantScheme::kPerTokenAzp, .input = input,
                   .dtype = at::kChar, .device = kDevice});
  return per_token_azp(as_float(input));
}

template <c10::DeviceType kDevice>
at::Tensor torch_static_quant(const at::Tensor& input, const at::Tensor& scale, at::ScalarType dtype,
                              const std::optional<at::Tensor>& azp) {
  const char* op = static_quant_operation().name().c_str();
  const Arguments a = check_arguments({.op = op, .producer = QuantProducer::kInput, .scheme = QuantScheme::kStatic,
                                       .input = input, .dtype = dtype, .scale = &scale, .azp = &azp,
                                       .device = kDevice});
  return static_scheme(as_float(input), a.qdtype, a.scale, a.azp);
}

// rms_norm(input, weight, eps) as cpu.torch.rms_norm (cuda.torch.rms_norm) computes it, in float32.
template <c10::DeviceType kDevice>
at::Tensor normalized(const at::Tensor& input, const at::Tensor& weight, double eps) {
  static const auto rms_norm = torch_sibling<RmsNormFn>(kDevice, rms_norm_operation().name());
  return as_float(rms_norm(input, weight, eps));
}

// residual <- round(input + residual) and the normalized row, as fused_add_rms_norm's torch
// implementation computes them (on a copy of input, which that operation writes).
template <c10::DeviceType kDevice>
at::Tensor add_normalized(const at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps) {
  static const auto fused_add = torch_sibling<FusedAddRmsNormFn>(kDevice, fused_add_rms_norm_operation().name());
  at::Tensor x = input.clone();
  fused_add(x, residual, weight, eps);
  return as_float(x);
}

template <c10::DeviceType kDevice>
Pair torch_rms_norm_per_token_quant(const at::Tensor& input, const at::Tensor& weight, double eps,
                                    at::ScalarType dtype, const std::optional<at::Tensor>& scale_ub) {
  const char* op = rms_norm_per_token_quant_operation().name().c_str();
  const Arguments a = check_arguments({.op = op, .producer = QuantProducer::kRmsNorm, .scheme = QuantScheme::kPerToken,
                                       .input = input, .weight = &weight, .eps = eps, .dtype = dtype,
                                       .scale_ub = &scale_ub, .device = kDevice});
  return per_token(normalized<kDevice>(input, weight, eps), a.qdtype, a.scale_ub);
}

template <c10::DeviceType kDevice>
Pair torch_fused_add_rms_norm_per_token_quant(const at::Tensor& input, at::Tensor& residual, const at::Tensor& weight,
                                              double eps, at::ScalarType dtype,
                                              const std::optional<at::Tensor>& scale_ub) {
  const char* op = fused_add_rms_norm_per_token_quant_operation().name().c_str();
  const Arguments a = check_arguments({.op = op, .producer = QuantProducer::kFusedAddRmsNorm,
                                       .scheme = QuantScheme::kPerToken, .input = input, .residual = &residual,
                                       .weight = &weight, .eps = eps, .dtype = dtype, .scale_ub = &scale_ub,
                                       .device = kDevice});
  return per_token(add_normalized<kDevice>(input, residual, weight, eps), a.qdtype, a.scale_ub);
}

template <c10::DeviceType kDevice>
at::Tensor torch_rms_norm_static_quant(const at::Tensor& input, const at::Tensor& weight, double eps,
                                       const at::Tensor& scale, at::ScalarType dtype,
                                       const std::optional<at::Tensor>& azp) {
  const char* op = rms_norm_static_quant_operation().name().c_str();
  const Arguments a = check_arguments({.op = op, .producer = QuantProducer::kRmsNorm, .scheme = QuantScheme::kStatic,
                                       .input = input, .weight = &weight, .eps = eps, .dtype = dtype, .scale = &scale,
                                       .azp = &azp, .device = kDevice});
  return static_scheme(normalized<kDevice>(input, weight, eps), a.qdtype, a.scale, a.azp);
}

template <c10::DeviceType kDevice>
at::Tensor torch_fused_add_rms_norm_static_quant(const at::Tensor& input, at::Tensor& residual,
                                                 const at::Tensor& weight, double eps, const at::Tensor& scale,
                                                 at::ScalarType dtype, const std::optional<at::Tensor>& azp) {
  const char* op = fused_add_rms_norm_static_quant_operation().name().c_str();
  const Arguments a = check_arguments({.op = op, .producer = QuantProducer::kFusedAddRmsNorm, .scheme = QuantScheme::kStatic,
                                       .input = input, .residual = &residual, .weight = &weight, .eps = eps,
                                       .dtype = dtype, .scale = &scale, .azp = &azp, .device = kDevice});
  return static_scheme(add_normalized<kDevice>(input, residual, weight, eps), a.qdtype, a.scale, a.azp);
}

template <c10::DeviceType kDevice>
Pair torch_silu_and_mul_per_token_quant(const at::Tensor& input, at::ScalarType dtype,
                                        const std::optional<at::Tensor>& scale_ub) {
  const char* op = silu_and_mul_per_token_quant_operation().name().c_str();
  const Arguments a = check_arguments({.op = op, .producer = QuantProducer::kSiluAndMul, .scheme = QuantScheme::kPerToken,
                                       .input = input, .dtype = dtype, .scale_ub = &scale_ub, .device = kDevice});
  static const auto silu_and_mul = torch_sibling<SiluAndMulFn>(kDevice, silu_and_mul_operation().name());
  return per_token(as_float(silu_and_mul(input)), a.qdtype, a.scale_ub);
}

}  // namespace

XLLM_REGISTER_NAMED("cpu.torch.per_token_quant", modules().torch_cpu, per_token_quant_operation(),
                    torch_per_token_quant<kCpu>);
XLLM_REGISTER_NAMED("cpu.torch.per_token_quant_int8_azp", modules().torch_cpu, per_token_quant_int8_azp_operation(),
                    torch_per_token_quant_int8_azp<kCpu>);
XLLM_REGISTER_NAMED("cpu.torch.static_quant", modules().torch_cpu, static_quant_operation(), torch_static_quant<kCpu>);
XLLM_REGISTER_NAMED("cpu.torch.rms_norm_per_token_quant", modules().torch_cpu, rms_norm_per_token_quant_operation(),
                    torch_rms_norm_per_token_quant<kCpu>);
XLLM_REGISTER_NAMED("cpu.torch.fused_add_rms_norm_per_token_quant", modules().torch_cpu,
                    fused_add_rms_norm_per_token_quant_operation(), torch_fused_add_rms_norm_per_token_quant<kCpu>);
XLLM_REGISTER_NAMED("cpu.torch.rms_norm_static_quant", modules().torch_cpu, rms_norm_static_quant_operation(),
                    torch_rms_norm_static_quant<kCpu>);
XLLM_REGISTER_NAMED("cpu.torch.fused_add_rms_norm_static_quant", modules().torch_cpu,
                    fused_add_rms_norm_static_quant_operation(), torch_fused_add_rms_norm_static_quant<kCpu>);
XLLM_REGISTER_NAMED("cpu.torch.silu_and_mul_per_token_quant", modules().torch_cpu,
                    silu_and_mul_per_token_quant_operation(), torch_silu_and_mul_per_token_quant<kCpu>);
XLLM_REGISTER_NAMED("cuda.torch.per_token_quant", modules().torch_cuda, per_token_quant_operation(),
                    torch_per_token_quant<kCuda>);
XLLM_REGISTER_NAMED("cuda.torch.per_token_quant_int8_azp", modules().torch_cuda, per_token_quant_int8_azp_operation(),
                    torch_per_token_quant_int8_azp<kCuda>);
XLLM_REGISTER_NAMED("cuda.torch.static_quant", modules().torch_cuda, static_quant_operation(),
                    torch_static_quant<kCuda>);
XLLM_REGISTER_NAMED("cuda.torch.rms_norm_per_token_quant", modules().torch_cuda, rms_norm_per_token_quant_operation(),
                    torch_rms_norm_per_token_quant<kCuda>);
XLLM_REGISTER_NAMED("cuda.torch.fused_add_rms_norm_per_token_quant", modules().torch_cuda,
                    fused_add_rms_norm_per_token_quant_operation(), torch_fused_add_rms_norm_per_token_quant<kCuda>);
XLLM_REGISTER_NAMED("cuda.torch.rms_norm_static_quant", modules().torch_cuda, rms_norm_static_quant_operation(),
                    torch_rms_norm_static_quant<kCuda>);
XLLM_REGISTER_NAMED("cuda.torch.fused_add_rms_norm_static_quant", modules().torch_cuda,
                    fused_add_rms_norm_static_quant_operation(), torch_fused_add_rms_norm_static_quant<kCuda>);
XLLM_REGISTER_NAMED("cuda.torch.silu_and_mul_per_token_quant", modules().torch_cuda,
                    silu_and_mul_per_token_quant_operation(), torch_silu_and_mul_per_token_quant<kCuda>);

}  // namespace xllm_kernel::quantization
