// cpu.native.*: bridges from at::Tensor to the Highway kernels in csrc/cpu/linear/. linear_pack
// lays the weights out in panels of 32 output channels (LinearLayout::kPanels); linear converts
// the input rows to float32 once and splits the panels over torch's intra-op threads.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "csrc/cpu/linear/linear.h"
#include "csrc/cpu/linear/scaled_mm.h"
#include "src/ops/common/bridge.h"
#include "src/ops/common/cpu.h"
#include "src/ops/common/registration.h"
#include "src/ops/linear/internal.h"
#include "xllm_kernel/ops/linear.h"
#include "xllm_kernel/ops/quantization.h"

namespace xllm_kernel::linear {
namespace {

at::Tensor native_pack(const at::Tensor& weight, const std::optional<at::Tensor>& scales,
                       const std::optional<at::Tensor>& zeros, std::string scheme, int64_t group_size) {
  const char* op = "linear_pack";
  const PackShape shape = pack_shape(op, weight, scales, zeros, scheme, group_size);
  TORCH_CHECK(weight.device().is_cpu(), op, ": weight must be on cpu, got ", weight.device().str());
  const Canonical c = canonicalize(op, weight, scales, zeros, shape);
  const bool scaled = kernels::scheme_quantizes_activations(shape.scheme);
  const NewPacked made =
      new_packed(shape, scaled ? LinearLayout::kQuads : LinearLayout::kPanels, packer_name(modules().native_cpu));
  uint8_t* base = made.packed.mutable_data_ptr<uint8_t>();
  const kernels::LinearSizes& z = made.sizes;
  if (scaled) {
    const cpu::ScaledMmPackSource src{.scheme = shape.scheme,
                                      .n = shape.n,
                                      .k = shape.k,
                                      .group = shape.group,
                                      .groups = shape.groups,
                                      .weight = c.weight.const_data_ptr(),
                                      .weight_stride = shape.k,
                                      .scales = c.scales.const_data_ptr<float>(),
                                      .zeros = c.zeros.defined() ? c.zeros.const_data_ptr<float>() : nullptr};
    const kernels::Status s = cpu::scaled_mm_pack(
        src, base + z.weights_offset, reinterpret_cast<float*>(base + z.scales_offset),
        z.zeros_offset > 0 ? base + z.zeros_offset : nullptr,
        z.sums_offset > 0 ? reinterpret_cast<int32_t*>(base + z.sums_offset) : nullptr);
    bridge::check_not_rejected(op, s.is_ok() ? nullptr : s.reason);
    return made.packed;
  }
  const cpu::LinearPackSource src{.scheme = shape.scheme,
                                  .n = shape.n,
                                  .k = shape.k,
                                  .group = shape.group,
                                  .groups = shape.groups,
                                  .weight = c.weight.const_data_ptr(),
                                  .weight_stride = shape.k,
                                  .scales = c.scales.defined() ? c.scales.const_data_ptr<float>() : nullptr,
                                  .zeros = c.zeros.defined() ? c.zeros.const_data_ptr<float>() : nullptr};
  const kernels::Status s = cpu::linear_pack_panels(
      src, base + z.weights_offset, z.scales_offset > 0 ? reinterpret_cast<float*>(base + z.scales_offset) : nullptr,
      z.zeros_offset > 0 ? reinterpret_cast<float*>(base + z.zeros_offset) : nullptr);
  bridge::check_not_rejected(op, s.is_ok() ? nullptr : s.reason);
  return made.packed;
}

at::Tensor native_linear(const at::Tensor& input, const at::Tensor& packed, const std::optional<at::Tensor>& bias) {
  const char* op = "linear";
  const LinearHeader h = read_header(op, packed, c10::DeviceType::CPU, packer_name(modules().native_cpu));
  const Rows r = check_input(op, input, bias, h, c10::DeviceType::CPU);
  at::Tensor x = r.x.scalar_type() == at::kFloat ? r.x : r.x.to(at::kFloat);
  const int64_t m = x.size(0);
  if (x.stride(1) != 1 || (m > 1 && x.stride(0) < h.k)) x = x.contiguous();  // overlapping rows too
  at::Tensor out = at::empty({m, h.n}, input.options());
  const at::Tensor b = bias.has_value() && bias->defined() ? bias->to(at::kFloat).contiguous() : at::Tensor();
  const uint8_t* base = packed.const_data_ptr<uint8_t>();
  cpu::LinearParams p;
  p.scheme = h.scheme;
  p.out_dtype = bridge::kernel_dtype(input.scalar_type());
  p.m = m;
  p.n = h.n;
  p.k = h.k;
  p.group = kernels::scheme_has_scales(h.scheme) ? h.group : 0;
  p.groups = kernels::scheme_has_scales(h.scheme) ? h.groups : 0;
  p.x = x.const_data_ptr<float>();
  p.x_stride = m > 1 ? x.stride(0) : h.k;
  p.out = out.mutable_data_ptr();
  p.out_stride = h.n;
  p.weights = base + h.weights_offset;
  p.scales = h.scales_offset > 0 ? reinterpret_cast<const float*>(base + h.scales_offset) : nullptr;
  p.zeros = h.zeros_offset > 0 ? reinterpret_cast<const float*>(base + h.zeros_offset) : nullptr;
  p.bias = b.defined() ? b.const_data_ptr<float>() : nullptr;
  // Tasks of whole panels; each streams its panels' weights once for every row.
  bridge::run_rows(op, p, cpu::linear_panels(h.n), std::max<int64_t>(1, m) * h.k * kernels::kPanel, cpu::linear);
  return out.view(r.out_shape);
}

// scaled_mm on checked rows: the kernel over panel ranges on torch's intra-op threads.
at::Tensor scaled_rows(const char* op, const ScaledRows& r, const at::Tensor& packed, const LinearHeader& h,
                       at::ScalarType out_dtype) {
  at::Tensor a = r.a;
  const int64_t m = a.size(0);
  if (m > 1 && a.stride(0) < h.k) a = a.contiguous();  // overlapping rows
  at::Tensor out = at::empty({m, h.n}, a.options().dtype(out_dtype));
  const at::Tensor scale_a = r.scale_a.contiguous();
  const at::Tensor azp = r.azp.defined() ? r.azp.contiguous() : at::Tensor();
  const auto p = scaled_mm_params<cpu::ScaledMmParams>(r, a, scale_a, azp, packed, h,
                                                        bridge::kernel_dtype(out_dtype), out);
  bridge::run_rows(op, p, cpu::linear_panels(h.n), std::max<int64_t>(1, m) * h.k * kernels::kPanel, cpu::scaled_mm);
  return out;
}

at::Tensor native_scaled_mm(const at::Tensor& a, const at::Tensor& packed, const at::Tensor& scale_a,
                            const std::optional<at::Tensor>& azp, const std::optional<at::Tensor>& bias,
                            at::ScalarType out_dtype) {
  return scaled_mm_entry(a, packed, scale_a, azp, bias, out_dtype, c10::DeviceType::CPU, modules().native_cpu,
                         &scaled_rows);
}

at::Tensor native_linear_dynamic_quant(const at::Tensor& input, const at::Tensor& packed,
                                       const std::optional<at::Tensor>& bias) {
  static const auto quant = family::registered_function<PerTokenQuantFn>(
      "linear_dynamic_quant", "cpu.native." + per_token_quant_operation().name());
  return linear_dynamic_quant_entry(
      input, packed, bias, c10::DeviceType::CPU, modules().native_cpu,
      [](const at::Tensor& rows, at::ScalarType dtype) { return quant(rows, dtype, std::nullopt); }, &scaled_rows);
}

}  // namespace

XLLM_REGISTER_NAMED("cpu.native.scaled_mm", modules().native_cpu, scaled_mm_operation(), native_scaled_mm);
XLLM_REGISTER_NAMED("cpu.native.linear_dynamic_quant", modules().native_cpu, linear_dynamic_quant_operation(),
                    native_linear_dynamic_quant);
XLLM_REGISTER_NAMED("cpu.native.linear_pack", modules().native_cpu, linear_pack_operation(), native_pack);
XLLM_REGISTER_NAMED("cpu.native.linear", modules().native_cpu, linear_operation(), native_linear);

}  // namespace xllm_kernel::linear
