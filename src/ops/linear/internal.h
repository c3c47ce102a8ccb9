// Shared by the linear family's bridges (not public): the canonical form linear_pack takes, the
// packed tensor's header, and the checks every implementation makes.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include <optional>
#include <string>
#include <vector>

#include "csrc/common/linear.h"
#include "src/ops/common/family.h"

namespace xllm_kernel::linear {

using kernels::Fp8Scales;
using kernels::LinearHeader;
using kernels::LinearLayout;
using kernels::LinearScheme;

// "[2, 3]": a tensor's shape in errors.
std::string shape_string(const at::Tensor& t);

// Scales (and the checkpoint importers' scales) are float32, bfloat16 or float16: an error naming
// `op` and `arg` otherwise.
void check_scale_dtype(const char* op, const char* arg, const at::Tensor& t);

// What the arguments of linear_pack describe, from their shapes and dtypes alone (also on Meta
// tensors: the fake uses it).
struct PackShape {
  LinearScheme scheme = LinearScheme::kFloat32;
  Fp8Scales fp8 = Fp8Scales::kNone;
  bool zeros = false;
  int64_t n = 0, k = 0;
  int64_t group = 0;   // K elements per scale group (K: one per channel; 0 without scales)
  int64_t groups = 0;  // ceil(K / group), 0 without scales
};

// Checks the arguments' shapes and dtypes (errors name linear_pack, the argument, the expected and
// the given value).
PackShape pack_shape(const char* op, const at::Tensor& weight, const std::optional<at::Tensor>& scales,
                     const std::optional<at::Tensor>& zeros, const std::string& scheme, int64_t group_size);

// The canonical form on the CPU: weight contiguous (its dtype), scales and zeros float32 [n, groups]
// (fp8 tensor and block scales expanded to each channel and group). Checks the values the shapes
// cannot show (int4 in its range, zeros integers in [0, 15]).
struct Canonical {
  PackShape shape;
  at::Tensor weight, scales, zeros;  // zeros undefined without
};
Canonical canonicalize(const char* op, const at::Tensor& weight, const std::optional<at::Tensor>& scales,
                       const std::optional<at::Tensor>& zeros, const PackShape& shape);

// A new packed tensor (uint8 [n, row_bytes], zero-filled, on the CPU) whose header records the
// shape, `layout` and `packer`, with the sizes and offsets of its sections; the caller fills them.
struct NewPacked {
  at::Tensor packed;
  kernels::LinearSizes sizes;
};
NewPacked new_packed(const PackShape& shape, LinearLayout layout, const std::string& packer);

// The header of `packed` for `op` on `device`, checked: a uint8 [N, row_bytes] tensor, the magic, the
// version, sizes that match the header, and the packer: packed by another implementation (or
// layout) is an error naming both and saying to pack again with the selected linear_pack. A scheme of
// the other kind (quantized_activations: w8a8-int8, w8a8-fp8, w4a8 for scaled_mm; the others for
// linear) is an error naming the operations that take it.
LinearHeader read_header(const char* op, const at::Tensor& packed, c10::DeviceType device,
                         const std::string& expected_packer, bool quantized_activations = false);

// scaled_mm's arguments checked against the header (errors name op, the argument, the expected and
// the given value): a [..., K] of the scheme's dtype, scale_a float32 [..., 1] or one element, azp
// int32 like scale_a (w8a8-int8 only), bias [N] of out_dtype or float32, out_dtype float32,
// bfloat16 or float16.
struct ScaledRows {
  at::Tensor a;                    // [M, K], last dimension contiguous
  at::Tensor scale_a;              // float32 [M] (per_token) or [1]
  at::Tensor azp;                  // int32 like scale_a, or undefined
  at::Tensor bias;                 // float32 [N] contiguous, or undefined
  bool per_token = true;
  std::vector<int64_t> out_shape;  // [..., N]
};
ScaledRows check_scaled_input(const char* op, const at::Tensor& a, const at::Tensor& scale_a,
                              const std::optional<at::Tensor>& azp, const std::optional<at::Tensor>& bias,
                              at::ScalarType out_dtype, const LinearHeader& header, c10::DeviceType device);

// The quantized dtype of a scheme's activations: int8 (w8a8-int8, w4a8) or float8_e4m3fn (w8a8-fp8).
at::ScalarType activation_dtype(LinearScheme scheme);

// input [..., K] checked against the header's K (dtype, device, contiguous last dimension) and
// bias ([N], the input's dtype or float32, or none): the rows of input as a 2-D [M, K] tensor (a
// view where the leading dimensions merge) and the output's shape [..., N].
struct Rows {
  at::Tensor x;                      // [M, K], last dimension contiguous
  std::vector<int64_t> out_shape;    // [..., N]
};
Rows check_input(const char* op, const at::Tensor& input, const std::optional<at::Tensor>& bias,
                 const LinearHeader& header, c10::DeviceType device);

// The ATen forms of the torch bridges (src/ops/linear/torch.cpp), shared by cpu.torch, cuda.torch and
// npu.torch (src/ops/linear/npu/torch_npu.cpp):
//   pack_rows     linear_pack in LinearLayout::kRows (the canonical rows) on weight's device, `device`,
//                 recording packer_name(module)
//   linear_rows   linear of a kRows weight packed by `module`'s linear_pack on `device`: at::linear in
//                 the input's dtype where weight and bias have it, else in float32 (quantized weights:
//                 dequantized, float32; on the CPU int8 per channel: at::_weight_int8pack_mm)
//   section       bytes [offset, offset + count * element size) of packed as a tensor of dtype (a view)
//   centered_int4 the int4 weights (int4, w4a8) as float32 q - z [N, K] (z: the zeros, or 8 when stored
//                 as q + 8), from kRows
//   dequantized   W in float32 [N, K] as the contract forms it (int8, fp8, int4), from kRows
//   scaled_rows   scaled_mm on checked rows of a kRows weight: acc per K group (int8 schemes: int_mm,
//                 which must return the exact int32 a w^T of int8 a [M, k] and int8 w [N, k]; w8a8-fp8:
//                 at::matmul of the float32 values), then the contract's float32 epilogue, one ATen
//                 operation per step in its order; the result in out_dtype [M, N]
using IntMm = at::Tensor (*)(const at::Tensor& a, const at::Tensor& w);
at::Tensor pack_rows(const at::Tensor& weight, const std::optional<at::Tensor>& scales,
                     const std::optional<at::Tensor>& zeros, const std::string& scheme, int64_t group_size,
                     c10::DeviceType device, const BackendModule& module);
at::Tensor linear_rows(const at::Tensor& input, const at::Tensor& packed, const std::optional<at::Tensor>& bias,
                       c10::DeviceType device, const BackendModule& module);
at::Tensor section(const at::Tensor& packed, int64_t offset, int64_t count, at::ScalarType dtype);
at::Tensor centered_int4(const at::Tensor& packed, const LinearHeader& h);
at::Tensor dequantized(const at::Tensor& packed, const LinearHeader& h);
at::Tensor scaled_rows(const ScaledRows& r, const at::Tensor& packed, const LinearHeader& h, at::ScalarType out_dtype,
                       IntMm int_mm);

// The name of the implementation of linear_pack in `module` ("cpu.native.linear_pack").
std::string packer_name(const BackendModule& module);

// The family's backend modules (src/ops/linear/linear.cpp).
const family::StandardModules& modules();

}  // namespace xllm_kernel::linear
