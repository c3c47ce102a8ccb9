// The checks and the packed-tensor plumbing every linear bridge shares (src/ops/linear/internal.h).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <string>

#include "src/ops/common/bridge.h"
#include "src/ops/linear/internal.h"

namespace xllm_kernel::linear {

namespace {

constexpr const char* kSchemes = "f32, bf16, f16, int8, fp8, int4, w8a8-int8, w8a8-fp8, w4a8";

LinearScheme parse_scheme(const char* op, const std::string& scheme) {
  for (LinearScheme s : kernels::kAllLinearSchemes) {
    if (scheme == kernels::scheme_name(s)) return s;
  }
  TORCH_CHECK(false, op, ": scheme must be one of ", kSchemes, ", got '", scheme, "'");
}

at::ScalarType weight_dtype(LinearScheme s) {
  switch (s) {
    case LinearScheme::kFloat32: return at::kFloat;
    case LinearScheme::kBFloat16: return at::kBFloat16;
    case LinearScheme::kFloat16: return at::kHalf;
    case LinearScheme::kInt8:
    case LinearScheme::kInt4:
    case LinearScheme::kW8A8Int8:
    case LinearScheme::kW4A8: return at::kChar;
    case LinearScheme::kFp8:
    case LinearScheme::kW8A8Fp8: return at::kFloat8_e4m3fn;
  }
  return at::kFloat;
}

// The group of scales [N, K / g] for group_size g (g divides K, or -1: g = K), checked.
int64_t group_scales(const char* op, const char* scheme, const at::Tensor& sc, int64_t n, int64_t k,
                     int64_t group_size) {
  const int64_t g = group_size == -1 ? k : group_size;
  TORCH_CHECK(g >= 1 && k % g == 0, op, ": group_size must divide K = ", k,
              " (weight's last dimension), or be -1 for one group of K, for scheme ", scheme, ", got ", group_size);
  TORCH_CHECK(sc.dim() == 2 && sc.size(0) == n && sc.size(1) == k / g, op, ": scales must be [N, K / group_size] = [",
              n, ", ", k / g, "] for scheme ", scheme, " (weight [N, K] = [", n, ", ", k, "], group_size ", group_size,
              "), got shape ", shape_string(sc));
  return g;
}

}  // namespace

std::string shape_string(const at::Tensor& t) { return c10::str(t.sizes()); }

void check_scale_dtype(const char* op, const char* arg, const at::Tensor& t) {
  TORCH_CHECK(bridge::is_floating_kernel_dtype(t.scalar_type()), op, ": ", arg,
              " must be float32, bfloat16 or float16, got ", bridge::dtype_name(t.scalar_type()));
}

PackShape pack_shape(const char* op, const at::Tensor& weight, const std::optional<at::Tensor>& scales,
                     const std::optional<at::Tensor>& zeros, const std::string& scheme, int64_t group_size) {
  PackShape s;
  s.scheme = parse_scheme(op, scheme);
  TORCH_CHECK(weight.defined(), op, ": weight must be a defined tensor");
  TORCH_CHECK(weight.dim() == 2, op, ": weight must be 2-D [N, K], got shape ", shape_string(weight));
  s.n = weight.size(0);
  s.k = weight.size(1);
  TORCH_CHECK(s.n >= 1 && s.k >= 1, op, ": weight [N, K] needs N >= 1 and K >= 1, got shape ", shape_string(weight));
  TORCH_CHECK(weight.scalar_type() == weight_dtype(s.scheme), op, ": weight must be ",
              bridge::dtype_name(weight_dtype(s.scheme)), " for scheme ", scheme, ", got ",
              bridge::dtype_name(weight.scalar_type()));
  const bool has_scales = scales.has_value() && scales->defined();
  const bool has_zeros = zeros.has_value() && zeros->defined();
  if (!kernels::scheme_has_scales(s.scheme)) {
    TORCH_CHECK(!has_scales, op, ": scales must be None for scheme ", scheme);
    TORCH_CHECK(!has_zeros, op, ": zeros must be None for scheme ", scheme);
    TORCH_CHECK(group_size == 0, op, ": group_size must be 0 for scheme ", scheme, ", got ", group_size);
    return s;
  }
  TORCH_CHECK(has_scales, op, ": scales must be a tensor for scheme ", scheme, ", got None");
  const at::Tensor& sc = *scales;
  check_scale_dtype(op, "scales", sc);
  TORCH_CHECK(sc.device() == weight.device(), op, ": scales must be on weight's device ", weight.device().str(),
              ", got ", sc.device().str());
  TORCH_CHECK(!has_zeros || zeros->device() == weight.device(), op, ": zeros must be on weight's device ",
              weight.device().str(), ", got ", has_zeros ? zeros->device().str() : "");
  TORCH_CHECK(has_zeros == false || s.scheme == LinearScheme::kInt4 || s.scheme == LinearScheme::kW4A8, op,
              ": zeros must be None for scheme ", scheme, " (int4 and w4a8 only)");
  switch (s.scheme) {
    case LinearScheme::kW8A8Int8:
      TORCH_CHECK(group_size == 0, op, ": group_size must be 0 for scheme w8a8-int8 (one scale per channel), got ",
                  group_size);
      TORCH_CHECK(sc.dim() == 1 && sc.size(0) == s.n, op, ": scales must be [N] = [", s.n,
                  "] for scheme w8a8-int8 (one scale per channel; weight [N, K]), got shape ", shape_string(sc));
      s.group = s.k;
      break;
    case LinearScheme::kInt8:
      if (group_size == 0) {  // one scale per output channel
        TORCH_CHECK(sc.dim() == 1 && sc.size(0) == s.n, op, ": scales must be [N] = [", s.n,
                    "] for scheme int8 with group_size 0 (one scale per channel; weight [N, K]), got shape ",
                    shape_string(sc));
        s.group = s.k;
      } else {
        s.group = group_scales(op, "int8", sc, s.n, s.k, group_size);
      }
      break;
    case LinearScheme::kFp8:
    case LinearScheme::kW8A8Fp8: {
      TORCH_CHECK(group_size == 0, op, ": group_size must be 0 for scheme ", scheme, " (the scales' shape says), got ",
                  group_size);
      const int64_t bn = kernels::ceil_div(s.n, kernels::kFp8Block), bk = kernels::ceil_div(s.k, kernels::kFp8Block);
      if (sc.dim() <= 1 && sc.numel() == 1) {
        s.fp8 = kernels::Fp8Scales::kTensor;
        s.group = s.k;
      } else if (sc.dim() == 1 && sc.size(0) == s.n) {
        s.fp8 = kernels::Fp8Scales::kChannel;
        s.group = s.k;
      } else if (sc.dim() == 2 && sc.size(0) == bn && sc.size(1) == bk) {
        s.fp8 = kernels::Fp8Scales::kBlock;
        s.group = std::min(s.k, kernels::kFp8Block);
      } else {
        TORCH_CHECK(false, op, ": scales for scheme ", scheme, " (weight [N, K]) must be [] or [1] (per tensor), [N] = [", s.n,
                    "] (per channel) or [ceil(N / 128), ceil(K / 128)] = [", bn, ", ", bk, "] (per block), got shape ",
                    shape_string(sc));
      }
      break;
    }
    case LinearScheme::kInt4:
    case LinearScheme::kW4A8: {
      const int64_t g = group_scales(op, scheme.c_str(), sc, s.n, s.k, group_size);
      TORCH_CHECK(s.scheme != LinearScheme::kW4A8 || g % 8 == 0, op,
                  ": group_size must be a multiple of 8 for scheme w4a8 (K = ", s.k, " when -1), got ", g);
      s.group = g;
      if (has_zeros) {
        const at::Tensor& z = *zeros;
        TORCH_CHECK(z.dim() == 2 && z.size(0) == s.n && z.size(1) == s.k / g, op,
                    ": zeros must be [N, K / group_size] = [", s.n, ", ", s.k / g, "] like scales (weight [N, K] = [",
                    s.n, ", ", s.k, "], group_size ", group_size, "), got shape ", shape_string(z));
        TORCH_CHECK(z.scalar_type() != at::kBool && !at::isComplexType(z.scalar_type()), op,
                    ": zeros must hold integers in [0, 15] (an integer or floating dtype), got ",
                    bridge::dtype_name(z.scalar_type()));
        s.zeros = true;
      }
      break;
    }
    default: break;
  }
  s.groups = kernels::ceil_div(s.k, s.group);
  TORCH_CHECK(!kernels::scheme_quantizes_activations(s.scheme) || s.k <= kernels::kScaledMmMaxK, op,
              ": K must be at most ", kernels::kScaledMmMaxK, " for scheme ", scheme,
              " (scaled_mm's int32 sums stay exact up to it), got K = ", s.k);
  return s;
}

Canonical canonicalize(const char* op, const at::Tensor& weight, const std::optional<at::Tensor>& scales,
                       const std::optional<at::Tensor>& zeros, const PackShape& shape) {
  Canonical c;
  c.shape = shape;
  c.weight = weight.to(at::kCPU).contiguous();
  if (!kernels::scheme_has_scales(shape.scheme)) return c;
  at::Tensor s = scales->to(at::kCPU).to(at::kFloat);
  if (shape.fp8 == kernels::Fp8Scales::kBlock) {
    s = s.repeat_interleave(kernels::kFp8Block, 0).narrow(0, 0, shape.n);
  } else if (s.dim() != 2) {  // per tensor or per channel (int4 and grouped int8: [N, groups] already)
    s = s.reshape({-1, 1}).expand({shape.n, 1});
  }
  c.scales = s.contiguous();
  if (shape.scheme == LinearScheme::kW8A8Int8) {
    const int64_t wmin = c.weight.min().item<int64_t>();
    TORCH_CHECK(wmin >= -127, op, ": weight must hold values in [-127, 127] for scheme w8a8-int8 (symmetric; the "
                "kernels' int16 pair sums rely on it), got the value ", wmin);
  }
  if (shape.scheme == LinearScheme::kInt4 || shape.scheme == LinearScheme::kW4A8) {
    const at::Tensor w = c.weight;
    const int64_t lo = shape.zeros ? 0 : -8, hi = shape.zeros ? 15 : 7;
    const int64_t wmin = w.min().item<int64_t>(), wmax = w.max().item<int64_t>();
    TORCH_CHECK(wmin >= lo && wmax <= hi, op, ": weight must hold values in [", lo, ", ", hi, "] for scheme ",
                kernels::scheme_name(shape.scheme), " ", shape.zeros ? "with zeros" : "without zeros (symmetric)",
                ", got values in [", wmin, ", ", wmax, "]");
    if (shape.zeros) {
      const at::Tensor z = zeros->to(at::kCPU).to(at::kDouble);
      const bool integral = z.eq(z.round()).all().item<bool>();
      const double zmin = z.min().item<double>(), zmax = z.max().item<double>();
      TORCH_CHECK(integral && zmin >= 0 && zmax <= 15, op, ": zeros must hold integers in [0, 15], got values in [",
                  zmin, ", ", zmax, "]", integral ? "" : " (not all integers)");
      c.zeros = z.to(at::kFloat).contiguous();
    }
  }
  return c;
}

NewPacked new_packed(const PackShape& shape, LinearLayout layout, const std::string& packer) {
  NewPacked out;
  out.sizes = kernels::linear_sizes(shape.scheme, shape.n, shape.k, shape.groups, shape.zeros);
  out.packed = at::zeros({shape.n, out.sizes.row_bytes}, at::TensorOptions().dtype(at::kByte));
  const LinearHeader h =
      kernels::make_linear_header({.scheme = shape.scheme, .layout = layout, .fp8 = shape.fp8, .zeros = shape.zeros,
                                   .n = shape.n, .k = shape.k, .group = shape.group, .groups = shape.groups,
                                   .packer = packer.c_str()});
  std::memcpy(out.packed.mutable_data_ptr<uint8_t>(), &h, sizeof(h));
  return out;
}

LinearHeader read_header(const char* op, const at::Tensor& packed, c10::DeviceType device,
                         const std::string& expected_packer, bool quantized_activations) {
  TORCH_CHECK(packed.defined(), op, ": packed must be a defined tensor (what linear_pack returned)");
  TORCH_CHECK(packed.device().type() == device, op, ": packed must be on ", c10::DeviceTypeName(device, true),
              ", got ", packed.device().str());
  TORCH_CHECK(packed.scalar_type() == at::kByte, op, ": packed must be uint8 (what linear_pack returned), got ",
              bridge::dtype_name(packed.scalar_type()));
  TORCH_CHECK(packed.dim() == 2 && packed.is_contiguous() && packed.numel() >= kernels::kHeaderBytes, op,
              ": packed must be a contiguous uint8 [N, row_bytes] tensor of at least ", kernels::kHeaderBytes,
              " bytes (what linear_pack returned), got shape ", shape_string(packed),
              packed.is_contiguous() ? "" : " (not contiguous)");
  LinearHeader h;
  if (packed.is_cpu()) {
    std::memcpy(&h, packed.const_data_ptr<uint8_t>(), sizeof(h));
  } else {  // a copy to the host (and a synchronization)
    const at::Tensor head = packed.view({-1}).narrow(0, 0, kernels::kHeaderBytes).to(at::kCPU);
    std::memcpy(&h, head.const_data_ptr<uint8_t>(), sizeof(h));
  }
  TORCH_CHECK(std::memcmp(h.magic, kernels::kLinearMagic, sizeof(h.magic)) == 0, op,
              ": packed is not a packed weight (its header lacks the linear_pack magic): pass what linear_pack returned");
  TORCH_CHECK(h.version == kernels::kLinearVersion, op, ": packed has header version ", h.version, ", this build reads ",
              kernels::kLinearVersion, ": pack the weight again");
  h.packer[sizeof(h.packer) - 1] = '\0';
  TORCH_CHECK(expected_packer == h.packer, op, ": packed was packed by ", h.packer,
              ", but this implementation takes only weights packed by ", expected_packer,
              ": pack with linear_pack after initialize() selected the same solution for linear_pack and linear");
  const bool scaled = kernels::scheme_quantizes_activations(h.scheme);
  TORCH_CHECK(scaled == quantized_activations, op, ": packed holds a weight of scheme ",
              kernels::scheme_name(h.scheme), ", which ",
              scaled ? "scaled_mm and linear_dynamic_quant take (its activations are quantized)"
                     : "linear takes",
              "; ", op, " takes ",
              quantized_activations ? "the schemes w8a8-int8, w8a8-fp8 and w4a8" : "the schemes f32, bf16, f16, int8, fp8 and int4");
  const kernels::LinearSizes z = kernels::linear_sizes(h.scheme, h.n, h.k, h.groups, h.has_zeros != 0);
  TORCH_CHECK(packed.size(0) == h.n && packed.size(1) == z.row_bytes, op, ": packed must be [N, row_bytes] = [", h.n,
              ", ", z.row_bytes, "] for its header (", kernels::scheme_name(h.scheme), ", N ", h.n, ", K ", h.k,
              "), got shape ", shape_string(packed));
  return h;
}

Rows check_input(const char* op, const at::Tensor& input, const std::optional<at::Tensor>& bias,
                 const LinearHeader& header, c10::DeviceType device) {
  bridge::check_floating_tensor(op, "input", input, device);
  TORCH_CHECK(input.size(-1) == header.k, op, ": input's last dimension must be K = ", header.k,
              " (the packed weight's), got ", input.size(-1));
  if (bias.has_value() && bias->defined()) {
    const at::Tensor& b = *bias;
    TORCH_CHECK(b.device() == input.device(), op, ": bias must be on input's device ", input.device().str(), ", got ",
                b.device().str());
    TORCH_CHECK(b.scalar_type() == input.scalar_type() || b.scalar_type() == at::kFloat, op,
                ": bias must be input's dtype (", bridge::dtype_name(input.scalar_type()), ") or float32, got ",
                bridge::dtype_name(b.scalar_type()));
    TORCH_CHECK(b.dim() == 1 && b.size(0) == header.n, op, ": bias must be [N] = [", header.n, "], got shape ",
                shape_string(b));
  }
  Rows r;
  r.out_shape.assign(input.sizes().begin(), input.sizes().end());
  r.out_shape.back() = header.n;
  r.x = input.dim() == 2 ? input : input.reshape({-1, header.k});
  if (r.x.stride(1) != 1) r.x = r.x.contiguous();
  return r;
}

at::ScalarType activation_dtype(LinearScheme scheme) {
  return scheme == LinearScheme::kW8A8Fp8 ? at::kFloat8_e4m3fn : at::kChar;
}

ScaledRows check_scaled_input(const char* op, const at::Tensor& a, const at::Tensor& scale_a,
                              const std::optional<at::Tensor>& azp, const std::optional<at::Tensor>& bias,
                              at::ScalarType out_dtype, const LinearHeader& header, c10::DeviceType device) {
  const char* scheme = kernels::scheme_name(header.scheme);
  const at::ScalarType want = activation_dtype(header.scheme);
  TORCH_CHECK(a.defined(), op, ": a must be a defined tensor");
  TORCH_CHECK(a.device().type() == device, op, ": a must be on ", c10::DeviceTypeName(device, true), ", got ",
              a.device().str());
  TORCH_CHECK(a.scalar_type() == want, op, ": a must be ", bridge::dtype_name(want), " for a weight of scheme ",
              scheme, ", got ", bridge::dtype_name(a.scalar_type()));
  TORCH_CHECK(a.dim() >= 1, op, ": a must have at least 1 dimension [..., K], got a 0-D tensor");
  TORCH_CHECK(a.size(-1) == header.k, op, ": a's last dimension must be K = ", header.k, " (the packed weight's), got ",
              a.size(-1));
  TORCH_CHECK(a.stride(-1) == 1 || a.size(-1) <= 1, op, ": a's last dimension must be contiguous (stride 1), got stride ",
              a.stride(-1));
  TORCH_CHECK(bridge::is_floating_kernel_dtype(out_dtype), op, ": out_dtype must be float32, bfloat16 or float16, got ",
              bridge::dtype_name(out_dtype));
  ScaledRows r;
  r.out_shape.assign(a.sizes().begin(), a.sizes().end());
  r.out_shape.back() = header.n;
  r.a = a.dim() == 2 ? a : a.reshape({-1, header.k});
  if (r.a.stride(1) != 1) r.a = r.a.contiguous();
  const int64_t m = r.a.size(0);
  // scale_a: [..., 1] of a's leading shape (per token) or one element (per tensor).
  std::vector<int64_t> per_token(a.sizes().begin(), a.sizes().end());
  per_token.back() = 1;
  TORCH_CHECK(scale_a.defined(), op, ": scale_a must be a defined tensor");
  TORCH_CHECK(scale_a.device() == a.device(), op, ": scale_a must be on a's device ", a.device().str(), ", got ",
              scale_a.device().str());
  TORCH_CHECK(scale_a.scalar_type() == at::kFloat, op, ": scale_a must be float32, got ",
              bridge::dtype_name(scale_a.scalar_type()));
  r.per_token = scale_a.sizes().vec() == per_token;
  TORCH_CHECK(r.per_token || scale_a.numel() == 1, op, ": scale_a must be ", c10::IntArrayRef(per_token),
              " (per token) or hold one element (per tensor) for a of shape ", shape_string(a), ", got shape ",
              shape_string(scale_a));
  r.scale_a = r.per_token ? scale_a.reshape({m}) : scale_a.reshape({1});
  if (azp.has_value() && azp->defined()) {
    TORCH_CHECK(header.scheme == LinearScheme::kW8A8Int8, op, ": azp must be None for a weight of scheme ", scheme,
                " (an activation zero point goes with w8a8-int8 only)");
    TORCH_CHECK(azp->device() == a.device(), op, ": azp must be on a's device ", a.device().str(), ", got ",
                azp->device().str());
    TORCH_CHECK(azp->scalar_type() == at::kInt, op, ": azp must be int32, got ", bridge::dtype_name(azp->scalar_type()));
    TORCH_CHECK(azp->sizes() == scale_a.sizes(), op, ": azp must have scale_a's shape ", shape_string(scale_a),
                ", got shape ", shape_string(*azp));
    r.azp = r.per_token ? azp->reshape({m}) : azp->reshape({1});
  }
  if (bias.has_value() && bias->defined()) {
    const at::Tensor& b = *bias;
    TORCH_CHECK(b.device() == a.device(), op, ": bias must be on a's device ", a.device().str(), ", got ",
                b.device().str());
    TORCH_CHECK(b.scalar_type() == out_dtype || b.scalar_type() == at::kFloat, op, ": bias must be out_dtype (",
                bridge::dtype_name(out_dtype), ") or float32, got ", bridge::dtype_name(b.scalar_type()));
    TORCH_CHECK(b.dim() == 1 && b.size(0) == header.n, op, ": bias must be [N] = [", header.n, "], got shape ",
                shape_string(b));
    r.bias = b.to(at::kFloat).contiguous();
  }
  return r;
}

at::Tensor scaled_mm_entry(const at::Tensor& a, const at::Tensor& packed, const at::Tensor& scale_a,
                           const std::optional<at::Tensor>& azp, const std::optional<at::Tensor>& bias,
                           at::ScalarType out_dtype, c10::DeviceType device, const BackendModule& module,
                           const ScaledCompute& compute) {
  const char* op = "scaled_mm";
  const LinearHeader h = read_header(op, packed, device, packer_name(module), true);
  const ScaledRows r = check_scaled_input(op, a, scale_a, azp, bias, out_dtype, h, device);
  if (r.a.size(0) == 0) return at::empty(r.out_shape, a.options().dtype(out_dtype));
  return compute(op, r, packed, h, out_dtype).view(r.out_shape);
}

at::Tensor linear_dynamic_quant_entry(const at::Tensor& input, const at::Tensor& packed,
                                      const std::optional<at::Tensor>& bias, c10::DeviceType device,
                                      const BackendModule& module, const Quantize& quantize,
                                      const ScaledCompute& compute) {
  const char* op = "linear_dynamic_quant";
  const LinearHeader h = read_header(op, packed, device, packer_name(module), true);
  const Rows rows = check_input(op, input, bias, h, device);
  if (rows.x.size(0) == 0) return at::empty(rows.out_shape, input.options());
  const auto [q, scale] = quantize(rows.x, activation_dtype(h.scheme));
  const ScaledRows r = check_scaled_input(op, q, scale, std::nullopt, bias, input.scalar_type(), h, device);
  return compute(op, r, packed, h, input.scalar_type()).view(rows.out_shape);
}

std::string packer_name(const BackendModule& module) {
  return std::string(to_string(module.device)) + "." + module.solution + ".linear_pack";
}

}  // namespace xllm_kernel::linear
