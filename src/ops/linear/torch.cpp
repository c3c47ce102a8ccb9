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
// scaled_mm (w8a8-int8, w4a8): torch._int_mm per K group (on CUDA where cuBLASLt takes the shape:
// M > 16, K and N multiples of 8; else a float64 matmul, exact for these integers), the azp
// correction in int32, then the contract's epilogue in ATen float32 operations, one per step in its
// order: the same bits as every implementation. w8a8-fp8: the e4m3 values widened to float32
// (exact) and at::matmul per K group (cuBLAS / oneDNN order), then the same epilogue.
// torch._scaled_mm is not used: it applies the scales inside its GEMM in an order of its own.
// oneDNN may pick its kernel by M: this implementation does not promise batch invariance.
#include <ATen/ATen.h>

#include <cstring>

#include "src/ops/common/bridge.h"
#include "src/ops/common/registration.h"
#include "src/ops/linear/internal.h"
#include "xllm_kernel/ops/linear.h"
#include "xllm_kernel/ops/quantization.h"

namespace xllm_kernel::linear {
namespace {

template <c10::DeviceType kDevice>
const BackendModule& module() {
  return kDevice == c10::DeviceType::CPU ? modules().torch_cpu : modules().torch_cuda;
}

}  // namespace

// The ATen forms shared with npu.torch (src/ops/linear/npu/torch_npu.cpp), declared in internal.h.

// The canonical rows: weights [N][K] (int4: two K-neighbours per byte, low nibble first, q + 8
// without zeros), scales and zeros float32 [N][groups].
at::Tensor pack_rows(const at::Tensor& weight, const std::optional<at::Tensor>& scales,
                     const std::optional<at::Tensor>& zeros, const std::string& scheme, int64_t group_size,
                     c10::DeviceType device, const BackendModule& module) {
  const char* op = "linear_pack";
  const PackShape shape = pack_shape(op, weight, scales, zeros, scheme, group_size);
  TORCH_CHECK(weight.device().type() == device, op, ": weight must be on ", c10::DeviceTypeName(device, true),
              ", got ", weight.device().str());
  const Canonical c = canonicalize(op, weight, scales, zeros, shape);
  const NewPacked made = new_packed(shape, LinearLayout::kRows, packer_name(module));
  uint8_t* base = made.packed.mutable_data_ptr<uint8_t>();
  const kernels::LinearSizes& z = made.sizes;
  if (shape.scheme == LinearScheme::kInt4 || shape.scheme == LinearScheme::kW4A8) {
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
  if (kernels::scheme_has_sums(shape.scheme)) {  // sum_{k in g} q[n, k] as given, int32 [N][groups]
    const at::Tensor sums = c.weight.to(at::kInt).view({shape.n, shape.groups, shape.group}).sum(2, false, at::kInt);
    std::memcpy(base + z.sums_offset, sums.contiguous().const_data_ptr(), sums.nbytes());
  }
  return device == c10::DeviceType::CPU ? made.packed : made.packed.to(weight.device());
}

namespace {

template <c10::DeviceType kDevice>
at::Tensor torch_pack(const at::Tensor& weight, const std::optional<at::Tensor>& scales,
                      const std::optional<at::Tensor>& zeros, std::string scheme, int64_t group_size) {
  return pack_rows(weight, scales, zeros, scheme, group_size, kDevice, module<kDevice>());
}

}  // namespace

// The shared ATen forms (internal.h says what each is).

at::Tensor section(const at::Tensor& packed, int64_t offset, int64_t count, at::ScalarType dtype) {
  const int64_t bytes = count * static_cast<int64_t>(c10::elementSize(dtype));
  return packed.view({-1}).narrow(0, offset, bytes).view(dtype);
}

// W in float32 [N, K], formed as the contract says.
// The int4 weights (int4, w4a8) as float32 q - z [N, K] (z: the zeros, or 8 when stored as q + 8).
at::Tensor centered_int4(const at::Tensor& packed, const LinearHeader& h) {
  const int64_t n = h.n, k = h.k;
  const at::Tensor bytes =
      section(packed, h.weights_offset, n * kernels::ceil_div(k, 2), at::kByte).view({n, kernels::ceil_div(k, 2)});
  at::Tensor q = at::stack({bytes.bitwise_and(0xF), bytes.bitwise_right_shift(4)}, -1).view({n, -1}).narrow(1, 0, k);
  q = q.to(at::kFloat);
  return h.has_zeros != 0 ? q.sub_(section(packed, h.zeros_offset, n * h.groups, at::kFloat)
                                       .view({n, h.groups})
                                       .repeat_interleave(h.group, 1)
                                       .narrow(1, 0, k))
                          : q.sub_(8);
}

at::Tensor dequantized(const at::Tensor& packed, const LinearHeader& h) {
  const int64_t n = h.n, k = h.k;
  at::Tensor q;
  if (h.scheme == LinearScheme::kInt4) {
    q = centered_int4(packed, h);
  } else {
    const at::ScalarType t = h.scheme == LinearScheme::kInt8 ? at::kChar : at::kFloat8_e4m3fn;
    q = section(packed, h.weights_offset, n * k, t).view({n, k}).to(at::kFloat);
  }
  const at::Tensor s =
      section(packed, h.scales_offset, n * h.groups, at::kFloat).view({n, h.groups}).repeat_interleave(h.group, 1);
  return q.mul_(s.narrow(1, 0, k));
}

at::Tensor linear_rows(const at::Tensor& input, const at::Tensor& packed, const std::optional<at::Tensor>& bias,
                       c10::DeviceType device, const BackendModule& module) {
  const char* op = "linear";
  const LinearHeader h = read_header(op, packed, device, packer_name(module));
  const Rows r = check_input(op, input, bias, h, device);
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
      if (device == c10::DeviceType::CPU && h.groups == 1) {  // one scale per channel
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
    case LinearScheme::kW8A8Int8:
    case LinearScheme::kW8A8Fp8:
    case LinearScheme::kW4A8:
      TORCH_CHECK(false, op, ": scheme ", kernels::scheme_name(h.scheme), " reached linear");  // read_header refuses it
  }
  return y.reshape(r.out_shape).contiguous();
}

namespace {

template <c10::DeviceType kDevice>
at::Tensor torch_linear(const at::Tensor& input, const at::Tensor& packed, const std::optional<at::Tensor>& bias) {
  return linear_rows(input, packed, bias, kDevice, module<kDevice>());
}

// acc = a w^T exactly in int32 for int8 a [M, K] and int8 w [N, K] (|acc| < 2^31 by the K bound).
at::Tensor int_mm(const at::Tensor& a, const at::Tensor& w) {
  const int64_t m = a.size(0), n = w.size(0), k = a.size(1);
  if (a.is_cpu() || (m > 16 && k % 8 == 0 && n % 8 == 0)) return at::_int_mm(a, w.t());
  return a.to(at::kDouble).matmul(w.to(at::kDouble).t()).to(at::kInt);  // every partial sum exact in float64
}

}  // namespace

at::Tensor scaled_rows(const ScaledRows& r, const at::Tensor& packed, const LinearHeader& h, at::ScalarType out_dtype,
                       IntMm int_mm) {
  const int64_t m = r.a.size(0), n = h.n, k = h.k;
  const at::Tensor a = r.a.contiguous();
  at::Tensor w;  // [N, K]: int8 q (w8a8-int8), int8 q - z (w4a8), float32 q (w8a8-fp8)
  if (h.scheme == LinearScheme::kW4A8) {
    w = centered_int4(packed, h).to(at::kChar);
  } else if (h.scheme == LinearScheme::kW8A8Int8) {
    w = section(packed, h.weights_offset, n * k, at::kChar).view({n, k});
  } else {
    w = section(packed, h.weights_offset, n * k, at::kFloat8_e4m3fn).view({n, k}).to(at::kFloat);
  }
  const at::Tensor s = section(packed, h.scales_offset, n * h.groups, at::kFloat).view({n, h.groups});
  const at::Tensor sa = r.per_token ? r.scale_a.view({m, 1}) : r.scale_a.view({1, 1});
  const bool integer = h.scheme != LinearScheme::kW8A8Fp8;
  const at::Tensor af = integer ? a : a.to(at::kFloat);
  at::Tensor t;
  for (int64_t g = 0; g < h.groups; ++g) {
    const int64_t k0 = g * h.group, len = std::min(h.group, k - k0);
    const at::Tensor ag = h.groups == 1 ? af : af.narrow(1, k0, len).contiguous();
    const at::Tensor wg = h.groups == 1 ? w : w.narrow(1, k0, len).contiguous();
    at::Tensor acc = integer ? int_mm(ag, wg) : ag.matmul(wg.t());
    if (r.azp.defined()) {  // acc - azp * sum_k q, modulo 2^32 (exact for azp in [-128, 127])
      const at::Tensor sums = section(packed, kernels::linear_sizes(h.scheme, n, k, h.groups, false).sums_offset, n,
                                      at::kInt);
      const at::Tensor azp = r.per_token ? r.azp.view({m, 1}) : r.azp.view({1, 1});
      acc = acc.to(at::kLong).sub_(azp.to(at::kLong) * sums.to(at::kLong).view({1, n})).to(at::kInt);
    }
    const at::Tensor term = acc.to(at::kFloat).mul_(sa).mul_(s.narrow(1, g, 1).view({1, n}));
    t = g == 0 ? term : t.add_(term);
  }
  if (r.bias.defined()) t.add_(r.bias.view({1, n}));
  return t.to(out_dtype);
}

namespace {

// scaled_mm on checked rows with torch._int_mm (or the float64 matmul where cuBLASLt refuses).
at::Tensor torch_scaled_rows(const char*, const ScaledRows& r, const at::Tensor& packed, const LinearHeader& h,
                             at::ScalarType out_dtype) {
  return scaled_rows(r, packed, h, out_dtype, &int_mm);
}

template <c10::DeviceType kDevice>
at::Tensor torch_scaled_mm(const at::Tensor& a, const at::Tensor& packed, const at::Tensor& scale_a,
                           const std::optional<at::Tensor>& azp, const std::optional<at::Tensor>& bias,
                           at::ScalarType out_dtype) {
  return scaled_mm_entry(a, packed, scale_a, azp, bias, out_dtype, kDevice, module<kDevice>(), &torch_scaled_rows);
}

template <c10::DeviceType kDevice>
at::Tensor torch_linear_dynamic_quant(const at::Tensor& input, const at::Tensor& packed,
                                      const std::optional<at::Tensor>& bias) {
  static const auto quant = family::registered_function<PerTokenQuantFn>(
      "linear_dynamic_quant",
      std::string(kDevice == c10::DeviceType::CPU ? "cpu" : "cuda") + ".torch." + per_token_quant_operation().name());
  return linear_dynamic_quant_entry(
      input, packed, bias, kDevice, module<kDevice>(),
      [](const at::Tensor& rows, at::ScalarType dtype) { return quant(rows, dtype, std::nullopt); }, &torch_scaled_rows);
}

constexpr auto kCpu = c10::DeviceType::CPU;
constexpr auto kCuda = c10::DeviceType::CUDA;

}  // namespace

XLLM_REGISTER_NAMED("cpu.torch.linear_pack", modules().torch_cpu, linear_pack_operation(), torch_pack<kCpu>);
XLLM_REGISTER_NAMED("cpu.torch.linear", modules().torch_cpu, linear_operation(), torch_linear<kCpu>);
XLLM_REGISTER_NAMED("cuda.torch.linear_pack", modules().torch_cuda, linear_pack_operation(), torch_pack<kCuda>);
XLLM_REGISTER_NAMED("cuda.torch.linear", modules().torch_cuda, linear_operation(), torch_linear<kCuda>);
XLLM_REGISTER_NAMED("cpu.torch.scaled_mm", modules().torch_cpu, scaled_mm_operation(), torch_scaled_mm<kCpu>);
XLLM_REGISTER_NAMED("cuda.torch.scaled_mm", modules().torch_cuda, scaled_mm_operation(), torch_scaled_mm<kCuda>);
XLLM_REGISTER_NAMED("cpu.torch.linear_dynamic_quant", modules().torch_cpu, linear_dynamic_quant_operation(),
                    torch_linear_dynamic_quant<kCpu>);
XLLM_REGISTER_NAMED("cuda.torch.linear_dynamic_quant", modules().torch_cuda, linear_dynamic_quant_operation(),
                    torch_linear_dynamic_quant<kCuda>);

}  // namespace xllm_kernel::linear
