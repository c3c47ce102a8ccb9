// Shared by the quantization group's bridges (not public): the argument checks, the outputs and
// the kernel parameters, for the CPU and the CUDA bridges alike.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include <cstdint>
#include <optional>

#include "csrc/common/quantization.h"
#include "src/ops/common/bridge.h"
#include "src/ops/common/family.h"
#include "xllm_kernel/catalog.h"
#include "xllm_kernel/ops/quantization.h"

namespace xllm_kernel::quantization {

// What produces the rows that are quantized: the kernels' enum (csrc/common/quantization.h).
using kernels::QuantProducer;

// The checked arguments of a call. Tensors undefined where the operation has none.
struct Arguments {
  QuantProducer producer = QuantProducer::kInput;
  kernels::QuantDType qdtype = kernels::QuantDType::kInt8;
  kernels::QuantScheme scheme = kernels::QuantScheme::kPerToken;
  int64_t hidden = 0;    // the out rows' width (silu_and_mul: half the input's last dimension)
  at::Tensor scale_ub;   // per-token fp8: one float32 element, contiguous; undefined: none
  at::Tensor scale;      // static: one float32 element
  at::Tensor azp;        // static int8: one int32 element; undefined: none
};

// One call's arguments as its bridge received them: what check_arguments checks and kernel_params
// reads. `weight` and `eps` for the rms_norm producers, `residual` for fused_add_rms_norm;
// `scale_ub` for the per-token schemes (None allowed), `scale` and `azp` for the static one; null
// where the operation has none.
//   const Call call{.op = op, .producer = QuantProducer::kRmsNorm, .scheme = QuantScheme::kStatic, .input = input,
//                   .weight = &weight, .eps = eps, .dtype = dtype, .scale = &scale, .azp = &azp, .device = kDevice};
struct Call {
  const char* op = "";
  QuantProducer producer = QuantProducer::kInput;
  kernels::QuantScheme scheme = kernels::QuantScheme::kPerToken;
  const at::Tensor& input;
  const at::Tensor* residual = nullptr;
  const at::Tensor* weight = nullptr;
  double eps = 0;
  std::optional<at::ScalarType> dtype;  // the quantized type; none: int8
  const std::optional<at::Tensor>* scale_ub = nullptr;
  const at::Tensor* scale = nullptr;
  const std::optional<at::Tensor>* azp = nullptr;
  c10::DeviceType device = c10::DeviceType::CPU;  // the implementation's
};

// Every argument of one call, checked for an implementation on `call.device`: shapes, dtypes,
// devices, layouts and eps (values of scales are the contract's, not errors). Errors name the
// operation, the argument, what was expected and what was given.
Arguments check_arguments(const Call& call);

// The quantized type of `dtype` (torch.int8, torch.float8_e4m3fn); anything else is an error naming
// `op` and the argument dtype.
kernels::QuantDType quant_dtype(const char* op, at::ScalarType dtype);
at::ScalarType scalar_type(kernels::QuantDType qdtype);

// The results: out of the quantized type, input's leading dimensions and `hidden`; scale (float32)
// and azp (int32) [..., 1] where the scheme writes them. New contiguous tensors on input's device.
struct Outputs {
  at::Tensor out, scale, azp;
};
Outputs new_outputs(const at::Tensor& input, const Arguments& a);

// The kernel parameters from checked arguments and new outputs. stream_out stays false: the CPU
// bridge decides it.
inline kernels::QuantParams kernel_params(const Call& call, const Arguments& a, const Outputs& o) {
  const char* op = call.op;
  const at::Tensor& input = call.input;
  const at::Tensor* residual = call.residual;
  const at::Tensor* weight = call.weight;
  kernels::QuantParams p;
  p.dtype = bridge::kernel_dtype(input.scalar_type());
  p.qdtype = a.qdtype;
  p.scheme = a.scheme;
  p.hidden = a.hidden;
  const bool per_token = a.scheme != kernels::QuantScheme::kStatic;
  const bool with_azp = a.scheme == kernels::QuantScheme::kPerTokenAzp;
  if (residual != nullptr && with_azp) {
    bridge::describe_rows(op, input,
                          {{&input, &p.input_strides}, {&o.out, &p.out_strides}, {&o.scale, &p.scale_strides},
                           {&o.azp, &p.azp_strides}, {residual, &p.residual_strides}},
                          p.shape);
  } else if (residual != nullptr && per_token) {
    bridge::describe_rows(op, input,
                          {{&input, &p.input_strides}, {&o.out, &p.out_strides}, {&o.scale, &p.scale_strides},
                           {residual, &p.residual_strides}},
                          p.shape);
  } else if (residual != nullptr) {
    bridge::describe_rows(op, input,
                          {{&input, &p.input_strides}, {&o.out, &p.out_strides}, {residual, &p.residual_strides}},
                          p.shape);
  } else if (with_azp) {
    bridge::describe_rows(op, input,
                          {{&input, &p.input_strides}, {&o.out, &p.out_strides}, {&o.scale, &p.scale_strides},
                           {&o.azp, &p.azp_strides}},
                          p.shape);
  } else if (per_token) {
    bridge::describe_rows(op, input,
                          {{&input, &p.input_strides}, {&o.out, &p.out_strides}, {&o.scale, &p.scale_strides}},
                          p.shape);
  } else {
    bridge::describe_rows(op, input, {{&input, &p.input_strides}, {&o.out, &p.out_strides}}, p.shape);
  }
  if (p.shape.rows == 0) return p;
  p.input = input.const_data_ptr();
  p.out = o.out.mutable_data_ptr();
  if (per_token) p.scale_out = o.scale.mutable_data_ptr<float>();
  if (with_azp) p.azp_out = o.azp.mutable_data_ptr<int32_t>();
  if (a.scale_ub.defined()) p.scale_ub = a.scale_ub.const_data_ptr<float>();
  if (a.scale.defined()) p.static_scale = a.scale.const_data_ptr<float>();
  if (a.azp.defined()) p.static_azp = a.azp.const_data_ptr<int32_t>();
  if (weight != nullptr) {
    p.weight = weight->const_data_ptr();
    p.weight_dtype = bridge::kernel_dtype(weight->scalar_type());
    p.eps = call.eps;
  }
  if (residual != nullptr) p.residual = const_cast<at::Tensor*>(residual)->mutable_data_ptr();
  return p;
}

// The group's backend modules (src/ops/quantization/quantization.cpp).
const family::StandardModules& modules();

}  // namespace xllm_kernel::quantization
