#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <vector>

#include "src/ops/normalization/checks.h"
#include "src/ops/normalization/internal.h"

namespace xllm_kernel::normalization {
namespace {

using bridge::dtype_name;

void check_parameter(const char* op, const char* name, const at::Tensor& param, const at::Tensor& input,
                     int64_t hidden) {
  TORCH_CHECK(param.defined(), op, ": ", name, " must be a defined tensor, got an undefined one");
  TORCH_CHECK(param.device() == input.device(), op, ": ", name, " must be on ", input.device(),
              " (the input's device), got ", param.device());
  const std::string allowed = input.scalar_type() == at::kFloat
                                  ? std::string("float32")
                                  : std::string("float32 or ") + dtype_name(input.scalar_type()) + " (the input's dtype)";
  TORCH_CHECK(param.scalar_type() == at::kFloat || param.scalar_type() == input.scalar_type(), op, ": ", name,
              " must be ", allowed, ", got ", dtype_name(param.scalar_type()));
  TORCH_CHECK(param.dim() == 1, op, ": ", name, " must be 1-D [hidden], got shape ", param.sizes());
  TORCH_CHECK(param.size(0) == hidden, op, ": ", name, " must have ", hidden,
              " elements (hidden size, the input's last dimension), got ", param.size(0));
  TORCH_CHECK(param.stride(0) == 1 || hidden == 1, op, ": ", name, " must be contiguous (stride 1), got stride ",
              param.stride(0));
}

}  // namespace

void check_arguments(const Call& call) {
  const char* op = call.op;
  const at::Tensor& input = call.input;
  const at::Tensor& weight = call.weight;
  const std::optional<at::Tensor>* bias = call.bias;
  const at::Tensor* residual = call.residual;
  const double eps = call.eps;
  const c10::DeviceType device = call.device;
  TORCH_CHECK(input.defined(), op, ": input must be a defined tensor, got an undefined one");
  TORCH_CHECK(input.device().type() == device, op, ": input must be on ", c10::DeviceTypeName(device, true),
              " for this implementation, got ", input.device());
  TORCH_CHECK(bridge::is_floating_kernel_dtype(input.scalar_type()), op, ": input must be float32, bfloat16 or float16, got ",
              dtype_name(input.scalar_type()));
  TORCH_CHECK(input.dim() >= 1, op, ": input must have at least 1 dimension [..., hidden], got a 0-D tensor");
  const int64_t hidden = input.size(-1);
  TORCH_CHECK(hidden >= 1, op, ": hidden size (input's last dimension) must be >= 1, got ", hidden);
  TORCH_CHECK(input.stride(-1) == 1 || hidden == 1, op,
              ": input's last dimension must be contiguous (stride 1), got stride ", input.stride(-1));
  TORCH_CHECK(std::isfinite(eps) && eps >= 0, op, ": eps must be finite and >= 0, got ", eps);
  check_parameter(op, "weight", weight, input, hidden);
  if (bias != nullptr && bias->has_value() && (*bias)->defined()) {
    check_parameter(op, "bias", **bias, input, hidden);
    TORCH_CHECK((*bias)->scalar_type() == weight.scalar_type(), op, ": bias must have weight's dtype ",
                dtype_name(weight.scalar_type()), ", got ", dtype_name((*bias)->scalar_type()));
  }
  if (residual != nullptr) {
    TORCH_CHECK(residual->defined(), op, ": residual must be a defined tensor, got an undefined one");
    TORCH_CHECK(residual->device() == input.device(), op, ": residual must be on ", input.device(),
                " (the input's device), got ", residual->device());
    TORCH_CHECK(residual->scalar_type() == input.scalar_type(), op, ": residual must have input's dtype ",
                dtype_name(input.scalar_type()), ", got ", dtype_name(residual->scalar_type()));
    TORCH_CHECK(residual->sizes() == input.sizes(), op, ": residual must have input's shape ", input.sizes(),
                ", got ", residual->sizes());
    TORCH_CHECK(residual->stride(-1) == 1 || hidden == 1, op,
                ": residual's last dimension must be contiguous (stride 1), got stride ", residual->stride(-1));
    // Both are written: each element must be written once, and not through the other.
    // torch's checks decide dense tensors; the rest (TooHard) gets the exact check of the rows.
    const auto overlaps_itself = [](const at::Tensor& t) {
      const at::MemOverlap o = at::has_internal_overlap(t);
      return o == at::MemOverlap::Yes || (o == at::MemOverlap::TooHard && bridge::rows_overlap_within(t));
    };
    TORCH_CHECK(!overlaps_itself(input), op,
                ": input is written in place and must not have overlapping elements (e.g. from expand), got strides ",
                input.strides());
    TORCH_CHECK(!overlaps_itself(*residual), op,
                ": residual is written in place and must not have overlapping elements (e.g. from expand), got strides ",
                residual->strides());
    const at::MemOverlapStatus overlap = at::get_overlap_status(input, *residual);
    TORCH_CHECK(overlap != at::MemOverlapStatus::Full && overlap != at::MemOverlapStatus::Partial &&
                    !(overlap == at::MemOverlapStatus::TooHard && bridge::rows_overlap_between(input, *residual)),
                op, ": input and residual must not share memory, got overlapping tensors (input strides ",
                input.strides(), ", residual strides ", residual->strides(), ")");
  }
}

}  // namespace xllm_kernel::normalization
