// The argument checks every quantization bridge shares (src/ops/quantization/internal.h). The
// producers' arguments (weight, eps, residual; the gated input) are checked by their families'
// own checks under this operation's name, so that the rules are rms_norm's and silu_and_mul's.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <string>

#include "src/core/cpu_allocator.h"
#include "src/ops/activation/checks.h"
#include "src/ops/normalization/checks.h"
#include "src/ops/quantization/internal.h"

namespace xllm_kernel::quantization {
namespace {

using bridge::dtype_name;
using kernels::QuantDType;
using kernels::QuantScheme;

std::string scalar_type_words(at::ScalarType t) {
  const int code = static_cast<int>(t);
  if (code < 0 || code >= static_cast<int>(at::ScalarType::NumOptions)) {
    return "an invalid ScalarType (code " + std::to_string(code) + ")";
  }
  return std::string("torch.") + dtype_name(t);
}

// A one-element parameter tensor (a scale, a bound, a zero point): defined, on input's device, of
// `dtype`, exactly one element (any shape). Returned contiguous.
at::Tensor one_element(const char* op, const char* arg, const at::Tensor& t, at::ScalarType dtype,
                       const at::Tensor& input) {
  TORCH_CHECK(t.defined(), op, ": ", arg, " must be a defined tensor, got an undefined one");
  TORCH_CHECK(t.device() == input.device(), op, ": ", arg, " must be on ", input.device(), " (the input's device), got ",
              t.device());
  TORCH_CHECK(t.scalar_type() == dtype, op, ": ", arg, " must be ", dtype_name(dtype), ", got ",
              dtype_name(t.scalar_type()));
  TORCH_CHECK(t.numel() == 1, op, ": ", arg, " must hold exactly one element, got shape ", t.sizes());
  return t.contiguous();
}

}  // namespace

QuantDType quant_dtype(const char* op, at::ScalarType dtype) {
  TORCH_CHECK(dtype == at::kChar || dtype == at::kFloat8_e4m3fn, op,
              ": dtype must be torch.int8 or torch.float8_e4m3fn, got ", scalar_type_words(dtype));
  return dtype == at::kChar ? QuantDType::kInt8 : QuantDType::kFloat8E4M3;
}

at::ScalarType scalar_type(QuantDType qdtype) {
  return qdtype == QuantDType::kInt8 ? at::kChar : at::kFloat8_e4m3fn;
}

Arguments check_arguments(const Call& call) {
  const char* op = call.op;
  const at::Tensor& input = call.input;
  const c10::DeviceType device = call.device;
  const std::optional<at::Tensor>* scale_ub = call.scale_ub;
  const std::optional<at::Tensor>* azp = call.azp;
  Arguments a;
  a.producer = call.producer;
  a.scheme = call.scheme;
  switch (call.producer) {
    case QuantProducer::kInput:
      bridge::check_floating_tensor(op, "input", input, device);
      a.hidden = input.size(-1);
      TORCH_CHECK(a.hidden >= 1, op, ": hidden size (input's last dimension) must be >= 1, got ", a.hidden);
      break;
    case QuantProducer::kRmsNorm:
    case QuantProducer::kFusedAddRmsNorm:
      normalization::check_arguments({.op = op, .input = input, .weight = *call.weight, .residual = call.residual,
                                      .eps = call.eps, .device = device});
      a.hidden = input.size(-1);
      break;
    case QuantProducer::kSiluAndMul:
      a.hidden = activation::check_input(op, input, device);
      break;
  }
  a.qdtype = call.dtype.has_value() ? quant_dtype(op, *call.dtype) : QuantDType::kInt8;
  if (scale_ub != nullptr && scale_ub->has_value() && (*scale_ub)->defined()) {
    TORCH_CHECK(a.qdtype == QuantDType::kFloat8E4M3, op,
                ": scale_ub must be None with dtype torch.int8 (it bounds the fp8 scale only), got a tensor");
    a.scale_ub = one_element(op, "scale_ub", **scale_ub, at::kFloat, input);
  }
  if (call.scale != nullptr) a.scale = one_element(op, "scale", *call.scale, at::kFloat, input);
  if (azp != nullptr && azp->has_value() && (*azp)->defined()) {
    TORCH_CHECK(a.qdtype == QuantDType::kInt8, op,
                ": azp must be None with dtype torch.float8_e4m3fn (a zero point is int8 only), got a tensor");
    a.azp = one_element(op, "azp", **azp, at::kInt, input);
  }
  return a;
}

Outputs new_outputs(const at::Tensor& input, const Arguments& a) {
  std::vector<int64_t> sizes(input.sizes().begin(), input.sizes().end());
  sizes.back() = a.hidden;
  // On the CPU from the library's output block cache, as the other families' outputs: a fresh
  // allocation of a large output costs a page fault per page on every call.
  const auto empty = [&](at::ScalarType t) {
    return input.is_cpu() ? detail::empty_cpu_cached(sizes, t) : at::empty(sizes, input.options().dtype(t));
  };
  Outputs o;
  o.out = empty(scalar_type(a.qdtype));
  if (a.scheme == QuantScheme::kStatic) return o;
  sizes.back() = 1;
  o.scale = empty(at::kFloat);
  if (a.scheme == QuantScheme::kPerTokenAzp) o.azp = empty(at::kInt);
  return o;
}

}  // namespace xllm_kernel::quantization
