// What the linear family's suites share (linear, linear_pack, scaled_mm, linear_dynamic_quant):
// the schemes as the suites name them, the canonical arguments of linear_pack drawn for a case, and
// the stand-in that carries them in a case's tensors until each implementation packs them with the
// linear_pack of its own device and solution (a packed weight belongs to the implementation that
// packed it).
#pragma once

#include <ATen/ATen.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "csrc/common/linear.h"
#include "src/numerics/tensor_case.h"
#include "xllm_kernel/ops/linear.h"
#include "xllm_kernel/registry.h"

namespace xllm_kernel::numerics::linear_suite {

// A scheme as the suite names it: "int4/g32/zeros", "fp8/block", "bf16", "w8a8-int8", "w4a8/g128".
struct SchemeSpec {
  std::string scheme;       // linear_pack's
  std::string fp8 = "";     // tensor, channel, block
  int64_t group = 0;        // int4: the group size (0: K); int8: 0 per channel, else the group size
  bool zeros = false;
};

inline SchemeSpec parse_scheme(const std::string& name) {
  SchemeSpec s;
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t at = name.find('/'); at != std::string::npos; at = name.find('/', start)) {
    parts.push_back(name.substr(start, at - start));
    start = at + 1;
  }
  parts.push_back(name.substr(start));
  s.scheme = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i] == "zeros") {
      s.zeros = true;
    } else if (parts[i] == "gK") {
      s.group = 0;
    } else if (parts[i][0] == 'g') {
      s.group = std::stoll(parts[i].substr(1));
    } else {
      s.fp8 = parts[i];
    }
  }
  TORCH_CHECK((s.scheme != "fp8" && s.scheme != "w8a8-fp8") || !s.fp8.empty(), "linear suite: ", s.scheme,
              " needs /tensor, /channel or /block, got ", name);
  return s;
}

// The canonical arguments of linear_pack.
struct PackArgs {
  at::Tensor weight, scales, zeros;  // zeros undefined without
  std::string scheme;
  int64_t group_size = 0;
};

inline PackArgs make_pack_args(const SchemeSpec& s, int64_t n, int64_t k, at::Generator& g) {
  PackArgs a;
  a.scheme = s.scheme;
  auto scales = [&](std::vector<int64_t> shape) {
    return at::rand(shape, g, at::kDouble).mul_(0.02).add_(0.005).to(at::kFloat);
  };
  if (s.scheme == "f32" || s.scheme == "bf16" || s.scheme == "f16") {
    const at::ScalarType t = s.scheme == "f32" ? at::kFloat : s.scheme == "bf16" ? at::kBFloat16 : at::kHalf;
    a.weight = at::randn({n, k}, g, at::kDouble).div_(4).to(t);
  } else if (s.scheme == "int8") {
    a.weight = at::randint(-128, 128, {n, k}, g, at::kLong).to(at::kChar);
    a.group_size = s.group;
    a.scales = s.group > 0 ? scales({n, k / s.group}) : scales({n});
  } else if (s.scheme == "w8a8-int8") {  // symmetric: [-127, 127]
    a.weight = at::randint(-127, 128, {n, k}, g, at::kLong).to(at::kChar);
    a.scales = scales({n});
  } else if (s.scheme == "fp8" || s.scheme == "w8a8-fp8") {
    a.weight = at::randn({n, k}, g, at::kDouble).mul_(8).to(at::kFloat8_e4m3fn);
    if (s.fp8 == "tensor") {
      a.scales = scales({});
    } else if (s.fp8 == "channel") {
      a.scales = scales({n});
    } else {
      a.scales = scales({kernels::ceil_div(n, kernels::kFp8Block), kernels::ceil_div(k, kernels::kFp8Block)});
    }
  } else {
    const int64_t group = s.group > 0 ? s.group : k;
    a.group_size = s.group > 0 ? s.group : -1;
    a.weight = (s.zeros ? at::randint(0, 16, {n, k}, g, at::kLong) : at::randint(-8, 8, {n, k}, g, at::kLong)).to(at::kChar);
    a.scales = scales({n, k / group});
    if (s.zeros) a.zeros = at::randint(0, 16, {n, k / group}, g, at::kLong).to(at::kInt);
  }
  return a;
}

// ---------------------------------------------------------------- the stand-in

inline constexpr char kStandInMarker[8] = {'X', 'K', 'S', 'U', 'I', 'T', 'E', '1'};

struct StandInHeader {
  char marker[8];
  int64_t n, k, group_size, weight_dtype, scale_dims, scale_rows, scale_cols, zeros_cols;
  char scheme[16];
};

// A uint8 [n, ...] tensor holding the canonical arguments.
inline at::Tensor make_stand_in(const PackArgs& a) {
  StandInHeader h{};
  std::memcpy(h.marker, kStandInMarker, sizeof(h.marker));
  h.n = a.weight.size(0);
  h.k = a.weight.size(1);
  h.group_size = a.group_size;
  h.weight_dtype = static_cast<int64_t>(a.weight.scalar_type());
  h.scale_dims = a.scales.defined() ? a.scales.dim() : -1;
  h.scale_rows = a.scales.defined() && a.scales.dim() >= 1 ? a.scales.size(0) : 1;
  h.scale_cols = a.scales.defined() && a.scales.dim() == 2 ? a.scales.size(1) : 1;
  h.zeros_cols = a.zeros.defined() ? a.zeros.size(1) : 0;
  std::strncpy(h.scheme, a.scheme.c_str(), sizeof(h.scheme) - 1);
  // The header, then the values of weight, scales and zeros (those given), as bytes.
  std::vector<at::Tensor> parts = {a.weight.contiguous()};
  if (a.scales.defined()) parts.push_back(a.scales.contiguous());
  if (a.zeros.defined()) parts.push_back(a.zeros.to(at::kFloat).contiguous());
  int64_t bytes = static_cast<int64_t>(sizeof(h));
  for (const at::Tensor& t : parts) bytes += static_cast<int64_t>(t.nbytes());
  const int64_t row = kernels::ceil_div(bytes, h.n);
  at::Tensor out = at::zeros({h.n * row}, at::kByte);
  uint8_t* p = out.mutable_data_ptr<uint8_t>();
  std::memcpy(p, &h, sizeof(h));
  p += sizeof(h);
  for (const at::Tensor& t : parts) {  // each holds >= 1 element (a 0-dim scale included)
    std::memcpy(p, t.const_data_ptr(), t.nbytes());
    p += t.nbytes();
  }
  return out.view({h.n, row});
}

// The canonical arguments a stand-in carries, or nothing when `t` is not one.
inline std::optional<PackArgs> read_stand_in(const at::Tensor& t) {
  if (!t.defined() || t.is_meta() || t.scalar_type() != at::kByte || t.dim() != 2 || !t.is_contiguous() ||
      t.numel() < static_cast<int64_t>(sizeof(StandInHeader))) {
    return std::nullopt;
  }
  const at::Tensor c = t.to(at::kCPU);
  const uint8_t* p = c.const_data_ptr<uint8_t>();
  StandInHeader h;
  std::memcpy(&h, p, sizeof(h));
  if (std::memcmp(h.marker, kStandInMarker, sizeof(h.marker)) != 0 || t.size(0) != h.n) return std::nullopt;
  PackArgs a;
  h.scheme[sizeof(h.scheme) - 1] = '\0';
  a.scheme = h.scheme;
  a.group_size = h.group_size;
  const auto wt = static_cast<at::ScalarType>(h.weight_dtype);
  const int64_t wbytes = h.n * h.k * static_cast<int64_t>(c10::elementSize(wt));
  const uint8_t* at = p + sizeof(h);
  a.weight = at::empty({h.n, h.k}, at::TensorOptions().dtype(wt));
  std::memcpy(a.weight.mutable_data_ptr(), at, wbytes);
  at += wbytes;
  if (h.scale_dims >= 0) {
    std::vector<int64_t> shape;
    if (h.scale_dims >= 1) shape.push_back(h.scale_rows);
    if (h.scale_dims == 2) shape.push_back(h.scale_cols);
    a.scales = at::empty(shape, at::kFloat);
    std::memcpy(a.scales.mutable_data_ptr(), at, a.scales.nbytes());
    at += a.scales.nbytes();
  }
  if (h.zeros_cols > 0) {
    a.zeros = at::empty({h.n, h.zeros_cols}, at::kFloat);
    std::memcpy(a.zeros.mutable_data_ptr(), at, a.zeros.nbytes());
  }
  return a;
}

inline std::optional<at::Tensor> optional(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// The implementation of `operation` with the same device and solution as `spec`, or nothing (a
// kernel outside the catalog's modules: the generic tests' recorder).
inline std::optional<PreparedKernel> find_sibling(const KernelSpec& spec, const std::string& operation) {
  const std::string name = std::string(to_string(spec.device)) + "." + spec.solution + "." + operation;
  const auto found = registry().find(name);
  if (found == nullptr) return std::nullopt;
  return PreparedKernel(found->spec, found->function, "");
}

inline PreparedKernel sibling(const KernelSpec& spec, const std::string& operation) {
  std::optional<PreparedKernel> found = find_sibling(spec, operation);
  TORCH_CHECK(found.has_value(), "linear suite: ", spec.name, " has no ", to_string(spec.device), ".", spec.solution,
              ".", operation, " registered to pair with");
  return *found;
}

// The weight packed by `spec`'s linear_pack on `device`, or nothing when `spec` has none.
inline std::optional<at::Tensor> pack_for(const KernelSpec& spec, const PackArgs& a, const at::Device& device) {
  const std::optional<PreparedKernel> packer = find_sibling(spec, "linear_pack");
  if (!packer) return std::nullopt;
  const auto pack = packer->function<LinearPackFn>();
  const at::Tensor z = a.zeros.defined() ? a.zeros.to(device) : at::Tensor();
  return pack(a.weight.to(device), optional(a.scales.defined() ? a.scales.to(device) : at::Tensor()), optional(z),
              a.scheme, a.group_size);
}

// bind_arguments of the linear suite: the stand-in in stack[1] packed for `spec`.
inline void bind_packed(const KernelSpec& spec, std::vector<c10::IValue>& stack) {
  if (stack.size() < 2 || !stack[1].isTensor()) return;
  const std::optional<PackArgs> args = read_stand_in(stack[1].toTensor());
  if (!args) return;
  const at::Device device = stack[0].isTensor() && stack[0].toTensor().defined() ? stack[0].toTensor().device()
                                                                                 : at::Device(at::kCPU);
  if (std::optional<at::Tensor> packed = pack_for(spec, *args, device)) stack[1] = *packed;
}

}  // namespace xllm_kernel::numerics::linear_suite
