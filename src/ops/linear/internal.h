// Shared by the linear family's bridges (not public): the canonical form linear_pack takes, the
// packed tensor's header, and the checks every implementation makes.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include <optional>
#include <string>

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
// layout) is an error naming both and saying to pack again with the selected linear_pack.
LinearHeader read_header(const char* op, const at::Tensor& packed, c10::DeviceType device,
                         const std::string& expected_packer);

// input [..., K] checked against the header's K (dtype, device, contiguous last dimension) and
// bias ([N], the input's dtype or float32, or none): the rows of input as a 2-D [M, K] tensor (a
// view where the leading dimensions merge) and the output's shape [..., N].
struct Rows {
  at::Tensor x;                      // [M, K], last dimension contiguous
  std::vector<int64_t> out_shape;    // [..., N]
};
Rows check_input(const char* op, const at::Tensor& input, const std::optional<at::Tensor>& bias,
                 const LinearHeader& header, c10::DeviceType device);

// The name of the implementation of linear_pack in `module` ("cpu.native.linear_pack").
std::string packer_name(const BackendModule& module);

// The family's backend modules (src/ops/linear/linear.cpp).
const family::StandardModules& modules();

}  // namespace xllm_kernel::linear
