// cpu.torch.* and cuda.torch.*: the linear family from ATen ops, the peers of the native kernels.
// linear_pack keeps the canonical rows (LinearLayout::kRows); linear runs
//   f32, bf16, f16 weights: at::linear in the input's dtype where weight and bias have it (oneDNN on
//                           CPU, cuBLAS on CUDA), else at::linear in float32, rounded once;
//   int8:                   per channel: at::_weight_int8pack_mm on CPU (float32 input and scales:
//                           W = q * s with the scale applied to the float32 sum, the same W);
//                           in groups, and on CUDA: dequantized + at::linear in float32;
//   fp8, int4:              W dequantized in float32 as the contract forms it, at::linear in float32.
// torch's own int4 kernel (_weight_int4pack_mm_for_cpu) forms W as (q - 8) * s + m with s and m in
// the input's dtype: another W than the contract's (float32 (q - z) * s), so it is not used here.
// oneDNN may pick its kernel by M: this implementation does not promise batch invariance.
#include <ATen/ATen.h>

#include <cstring>

#include "src/ops/common/registration.h"
#include "src/ops/linear/internal.h"
#include "xllm_kernel/ops/linear.h"

namespace xllm_kernel::linear {
namespace {

template <c10::DeviceType kDevice>
const BackendModule& module() {
  return kDevice == c10::DeviceType::CPU ? modules().torch_cpu : modules().torch_cuda;
}

// The canonical rows: weights [N][K] (int4: two K-neighbours per byte, low nibble first, q + 8
// without zeros), scales and zeros float32 [N][groups].
template <c10::DeviceType kDevice>
at::Tensor torch_pack(const at::Tensor& weight, const std::optional<at::Tensor>& scales,
                      const std::optional<at::Tensor>& zeros, std::string scheme, int64_t group_size) {
  const char* op = "linear_pack";
  const PackShape shape = pack_shape(op, weight, scales, zeros, scheme, group_size);
  TORCH_CHECK(weight.device().type() == kDevice, op, ": weight must be on ", c10::DeviceTypeName(kDevice, true),
              ", got ", weight.device().str());
  const Canonical c = canonicalize(op, weight, scales, zeros, shape);
  const NewPacked made = new_packed(shape, LinearLayout::kRows, packer_name(module<kDevice>()));
  uint8_t* base = made.packed.mutable_data_ptr<uint8_t>();
  const kernels::LinearSizes& z = made.sizes;
  if (shape.scheme == LinearScheme::kInt4) {
    const int64_t row = kernels::ceil_div(shape.k, 2);
    const int8_t* q = c.weight.const_data_ptr<int8_t>();
    const int offset = shape.zeros ? 0 : 8;
    for (int64_t n = 0; n < shape.n; ++n) {
      uint8_t* dst = base + z.weights_offset + n * row;
      for (int64_t k = 0; k < shape.k; ++k) {
        const auto u = static_cast<uint8_t>(q[n * shape.k + k] + offset);
        dst[k / 2] = static_cast<uint8_t>(dst[k / 2] | (k % 2 == 0 ? u : u << 4));
      }
    }
  } else {
    std::memcpy(base + z.weights_offset, c.weight.const_data_ptr(), c.weight.nbytes());
  }
  if (c.scales.defined()) std::memcpy(base + z.scales_offset, c.scales.const_data_ptr(), c.scales.nbytes());
  if (c.zeros.defined()) std::memcpy(base + z.zeros_offset, c.zeros.const_data_ptr(), c.zeros.nbytes());
  return kDevice == c10::DeviceType::CPU ? made.packed : made.packed.to(weight.device());
}

// bytes [offset, offset + count * element size) of packed as a tensor of dtype (a view).
at::Tensor section(const at::Tensor& packed, int64_t offset, int64_t count, at::ScalarType dtype) {
  const int64_t bytes = count * static_cast<int64_t>(c10::elementSize(dtype));
  return packed.view({-1}).narrow(0, offset, bytes).view(dtype);
}

// W in float32 [N, K], formed as the contract says.
at::Tensor dequantized(const at::Tensor& packed, const LinearHeader& h) {
  const int64_t n = h.n, k = h.k;
  at::Tensor q;
  if (h.scheme == LinearScheme::kInt4) {
    const at::Tensor bytes = section(packed, h.weights_offset, n * kernels::ceil_div(k, 2), at::kByte)
                                 .view({n, kernels::ceil_div(k, 2)});
    q = at::stack({bytes.bitwise_and(0xF), bytes.bitwise_right_shift(4)}, -1).view({n, -1}).narrow(1, 0, k);
    q = q.to(at::kFloat);
    q = h.has_zeros != 0
            ? q.sub_(section(packed, h.zeros_offset, n * h.groups, at::kFloat).view({n, h.groups}).repeat_interleave(
                  h.group, 1).narrow(1, 0, k))
            : q.sub_(8);
  } else {
    const at::ScalarType t = h.scheme == LinearScheme::kInt8 ? at::kChar : at::kFloat8_e4m3fn;
    q = section(packed, h.weights_offset, n * k, t).view({n, k}).to(at::kFloat);
  }
  const at::Tensor s =
      section(packed, h.scales_offset, n * h.groups, at::kFloat).view({n, h.groups}).repeat_interleave(h.group, 1);
  return q.mul_(s.narrow(1, 0, k));
}

template <c10::DeviceType kDevice>
at::Tensor torch_linear(const at::Tensor& input, const at::Tensor& packed, const std::optional<at::Tensor>& bias) {
  const char* op = "linear";
  const LinearHeader h = read_header(op, packed, kDevice, packer_name(module<kDevice>()));
  const Rows r = check_input(op, input, bias, h, kDevice);
  const at::ScalarType dtype = input.scalar_type();
  const bool has_bias = bias.has_value() && bias->defined();
  // The bias for the float32 paths (none: std::nullopt).
  auto bias32 = [&]() -> std::optional<at::Tensor> {
    return has_bias ? std::optional<at::Tensor>(bias->to(at::kFloat)) : std::nullopt;
  };
  at::Tensor y;
  switch (h.scheme) {
    case LinearScheme::kFloat32:
    case LinearScheme::kBFloat16:
    case LinearScheme::kFloat16: {
      const at::ScalarType wt = h.scheme == LinearScheme::kFloat32    ? at::kFloat
                                : h.scheme == LinearScheme::kBFloat16 ? at::kBFloat16
                                                                       : at::kHalf;
      const at::Tensor w = section(packed, h.weights_offset, h.n * h.k, wt).view({h.n, h.k});
      if (wt == dtype && (!has_bias || bias->scalar_type() == dtype)) {
        y = at::linear(r.x, w, has_bias ? std::optional<at::Tensor>(*bias) : std::nullopt);
      } else {
        y = at::linear(r.x.to(at::kFloat), w.to(at::kFloat), bias32()).to(dtype);
      }
      break;
    }
    case LinearScheme::kInt8:
      if (kDevice == c10::DeviceType::CPU && h.groups == 1) {  // one scale per channel
        const at::Tensor q = section(packed, h.weights_offset, h.n * h.k, at::kChar).view({h.n, h.k});
        const at::Tensor s = section(packed, h.scales_offset, h.n, at::kFloat);
        y = at::_weight_int8pack_mm(r.x.to(at::kFloat).contiguous(), q, s);
        if (has_bias) y.add_(*bias32());
        y = y.to(dtype);
        break;
      }
      [[fallthrough]];
    case LinearScheme::kFp8:
    case LinearScheme::kInt4:
      y = at::linear(r.x.to(at::kFloat), dequantized(packed, h), bias32()).to(dtype);
      break;
  }
  return y.reshape(r.out_shape).contiguous();
}

constexpr auto kCpu = c10::DeviceType::CPU;
constexpr auto kCuda = c10::DeviceType::CUDA;

}  // namespace

XLLM_REGISTER_NAMED("cpu.torch.linear_pack", modules().torch_cpu, linear_pack_operation(), torch_pack<kCpu>);
XLLM_REGISTER_NAMED("cpu.torch.linear", modules().torch_cpu, linear_operation(), torch_linear<kCpu>);
XLLM_REGISTER_NAMED("cuda.torch.linear_pack", modules().torch_cuda, linear_pack_operation(), torch_pack<kCuda>);
XLLM_REGISTER_NAMED("cuda.torch.linear", modules().torch_cuda, linear_operation(), torch_linear<kCuda>);

}  // namespace xllm_kernel::linear
