// Shared by the linear family's bridges (not public): the canonical form linear_pack takes, the
// packed tensor's header, and the checks every implementation makes.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include <functional>
#include <optional>
#include <tuple>
#include <string>
#include <vector>

#include "csrc/common/linear.h"
#include "csrc/common/rows.h"
#include "src/ops/common/family.h"

namespace xllm_kernel::linear {

using kernels::Fp8Scales;
using kernels::LinearHeader;
using kernels::LinearLayout;
using kernels::LinearScheme;

// Which of cpu.native's GEMMs hand their tiles to torch's oneDNN brgemm on this CPU (as cpu_features()
// says, src/ops/linear/native_cpu.cpp), for explain: linear's (`scaled` false) or scaled_mm's and
// linear_dynamic_quant's; "" where none does.
std::string native_brgemm_paths(bool scaled);

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

// The bridges of scaled_mm and linear_dynamic_quant, one per implementation's device and module:
// the header read (packed by `module`'s linear_pack), the arguments checked, zero rows answered, then
// `compute` (the implementation's scaled_mm on checked rows: a new [M, N] tensor of out_dtype);
// linear_dynamic_quant quantizes the checked input rows with `quantize` (the implementation's
// per_token_quant: (q, scale [M, 1]) on the input's device) before `compute`.
using ScaledCompute = std::function<at::Tensor(const char* op, const ScaledRows& rows, const at::Tensor& packed,
                                               const LinearHeader& header, at::ScalarType out_dtype)>;
using Quantize = std::function<std::tuple<at::Tensor, at::Tensor>(const at::Tensor& rows, at::ScalarType dtype)>;
at::Tensor scaled_mm_entry(const at::Tensor& a, const at::Tensor& packed, const at::Tensor& scale_a,
                           const std::optional<at::Tensor>& azp, const std::optional<at::Tensor>& bias,
                           at::ScalarType out_dtype, c10::DeviceType device, const BackendModule& module,
                           const ScaledCompute& compute);
at::Tensor linear_dynamic_quant_entry(const at::Tensor& input, const at::Tensor& packed,
                                      const std::optional<at::Tensor>& bias, c10::DeviceType device,
                                      const BackendModule& module, const Quantize& quantize,
                                      const ScaledCompute& compute);

// The fields every scaled_mm kernel takes (cpu::ScaledMmParams and cuda::ScaledMmParams name them
// alike), for checked rows `a` (its rows not overlapping), `scale_a` and `azp` contiguous, the packed
// weight and the new output [M, N].
template <class Params>
Params scaled_mm_params(const ScaledRows& r, const at::Tensor& a, const at::Tensor& scale_a, const at::Tensor& azp,
                        const at::Tensor& packed, const LinearHeader& h, kernels::DType out_dtype, at::Tensor& out) {
  const int64_t m = a.size(0);
  const uint8_t* base = packed.const_data_ptr<uint8_t>();
  const int64_t sums_offset = kernels::linear_sizes(h.scheme, h.n, h.k, h.groups, h.has_zeros != 0).sums_offset;
  Params p;
  p.scheme = h.scheme;
  p.out_dtype = out_dtype;
  p.m = m;
  p.n = h.n;
  p.k = h.k;
  p.group = h.group;
  p.groups = h.groups;
  p.a = a.const_data_ptr();
  p.a_stride = m > 1 ? a.stride(0) : h.k;
  p.scale_a = scale_a.const_data_ptr<float>();
  p.scale_a_stride = r.per_token ? 1 : 0;
  p.azp = azp.defined() ? azp.const_data_ptr<int32_t>() : nullptr;
  p.azp_stride = r.per_token ? 1 : 0;
  p.out = out.mutable_data_ptr();
  p.out_stride = h.n;
  p.weights = base + h.weights_offset;
  p.scales = reinterpret_cast<const float*>(base + h.scales_offset);
  p.zeros = h.zeros_offset > 0 ? reinterpret_cast<decltype(p.zeros)>(base + h.zeros_offset) : nullptr;
  p.sums = sums_offset > 0 ? reinterpret_cast<const int32_t*>(base + sums_offset) : nullptr;
  p.bias = r.bias.defined() ? r.bias.const_data_ptr<float>() : nullptr;
  return p;
}

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
