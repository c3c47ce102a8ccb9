// cpu.native.*: bridges from at::Tensor to the Highway kernels in csrc/cpu/linear/. linear_pack
// lays the weights out in panels of 32 output channels (LinearLayout::kPanels; bf16 with K even in
// pairs of k, kPanelPairs); linear splits the panels over torch's intra-op threads and gives the
// kernel the input rows in float32 (converted once), or as they are where it reads bf16 rows
// (linear_reads_bf16_rows: AVX512_BF16).
//
// bf16 input with bf16 weights on a CPU with AMX-BF16 runs torch's at::native::cpublas::brgemm
// (oneDNN's AMX microkernel) instead, panel by panel, for every M alike: kPanelPairs is its bf16
// "VNNI" operand layout with ld_b = 32. Its sums are float32 in oneDNN's order for that CPU (the
// same for every M, row position and thread count); bias and the one rounding follow in ATen.
// scaled_mm's w8a8-int8 on a CPU with AMX-INT8 takes its int32 sums from torch's u8s8 brgemm the
// same way (kQuads is its int8 "VNNI" operand layout, the activations + 128 its unsigned operand),
// and the kernels' own epilogue: exact sums, so the same bits as the kernels' own vpdpbusd.
// w8a8-fp8 on a CPU with AMX-BF16: the kernel converts each panel's e4m3 weights to bf16 pairs once
// (exact) and takes each K group's float32 sums from torch's bf16 brgemm, oneDNN's order, for every M.
// A test's cpu::ScopedCpuFeatures(..., torch_brgemm_without_amx = true) runs all three on any CPU
// torch's brgemm supports (AVX512_BF16, AVX512_VNNI: its vdpbf16ps and vpdpbusd microkernels), so the
// paths are tested without AMX; one that takes AMX away turns them off.
#include <ATen/ATen.h>
#include <ATen/native/CPUBlas.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>

#include "csrc/cpu/common/cpu_features.h"
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

// Whether torch's brgemm runs where the CPU (as cpu_features() says) has AMX of that kind (`amx`):
// there, or wherever a test asks for it (cpu::torch_brgemm_without_amx).
bool brgemm_allowed(bool amx) { return amx || cpu::torch_brgemm_without_amx(); }

// Whether linear runs torch's brgemm for this weight and input (above).
bool use_brgemm(const LinearHeader& h, at::ScalarType input) {
  return h.scheme == LinearScheme::kBFloat16 && h.layout == LinearLayout::kPanelPairs && input == at::kBFloat16 &&
         brgemm_allowed(cpu::cpu_features().amx_bf16);
}

// The float32 sums of one panel (kPanelPairs, or a K group of w8a8-fp8's converted one) for m rows
// of bf16 from torch's bf16 brgemm into acc [m][kPanel]: linear's brgemm path and scaled_mm's
// ScaledMmParams::bf16_panel_sums.
void brgemm_bf16_panel_sums(const uint16_t* x, int64_t lda, int64_t m, int64_t kk, const uint16_t* panel, float* acc) {
  at::native::cpublas::brgemm(m, kernels::kPanel, kk, lda, kernels::kPanel, kernels::kPanel, /*add_C=*/false,
                              reinterpret_cast<const at::BFloat16*>(x), reinterpret_cast<const at::BFloat16*>(panel),
                              acc, /*is_vnni=*/true);
}

// scaled_mm's int32 sums of one w8a8-int8 panel from torch's u8s8 brgemm (ScaledMmParams::int8_panel_sums).
void brgemm_int8_panel_sums(const uint8_t* u, int64_t lda, int64_t m, int64_t k4, const int8_t* panel, int32_t* acc) {
  at::native::cpublas::brgemm(m, kernels::kPanel, k4, lda, kernels::kPanel, kernels::kPanel, /*add_C=*/false, u,
                              panel, acc, /*is_vnni=*/true);
}

// Rows of a brgemm call: chunks of at most this many rows share a panel read from the cache.
constexpr int64_t kBrgemmRows = 64;

// y = brgemm sums (+ bias) rounded once to the input's dtype, for rows x [m, K] (bf16, unit inner
// stride) against kPanelPairs panels.
at::Tensor brgemm_linear(const at::Tensor& x, const uint8_t* weights, const LinearHeader& h, const at::Tensor& bias) {
  const int64_t m = x.size(0), n = h.n, k = h.k, panels = cpu::linear_panels(n);
  const int64_t lda = m > 1 ? x.stride(0) : k;
  at::Tensor acc = at::empty({m, n}, x.options().dtype(at::kFloat));
  const auto* a = reinterpret_cast<const uint16_t*>(x.const_data_ptr());
  const auto* b = reinterpret_cast<const uint16_t*>(weights);
  float* c = acc.mutable_data_ptr<float>();
  detail::parallel_rows(panels, 1, [&](int64_t begin, int64_t end) {
    float sums[kBrgemmRows * kernels::kPanel];
    for (int64_t r0 = 0; r0 < m; r0 += kBrgemmRows) {
      const int64_t rows = std::min(kBrgemmRows, m - r0);
      for (int64_t panel = begin; panel < end; ++panel) {
        const int64_t n0 = panel * kernels::kPanel, cols = std::min(kernels::kPanel, n - n0);
        brgemm_bf16_panel_sums(a + r0 * lda, lda, rows, k, b + panel * k * kernels::kPanel, sums);
        for (int64_t r = 0; r < rows; ++r) std::memcpy(c + (r0 + r) * n + n0, sums + r * kernels::kPanel, cols * 4);
      }
    }
    at::native::cpublas::brgemm_release(/*is_vnni=*/true);
  });
  if (bias.defined()) acc.add_(bias);
  return acc.to(x.scalar_type());
}

at::Tensor native_pack(const at::Tensor& weight, const std::optional<at::Tensor>& scales,
                       const std::optional<at::Tensor>& zeros, std::string scheme, int64_t group_size) {
  const char* op = "linear_pack";
  const PackShape shape = pack_shape(op, weight, scales, zeros, scheme, group_size);
  TORCH_CHECK(weight.device().is_cpu(), op, ": weight must be on cpu, got ", weight.device().str());
  const Canonical c = canonicalize(op, weight, scales, zeros, shape);
  const bool scaled = kernels::scheme_quantizes_activations(shape.scheme);
  const NewPacked made = new_packed(shape, scaled ? LinearLayout::kQuads : cpu::linear_panel_layout(shape.scheme, shape.k),
                                    packer_name(modules().native_cpu));
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
  const LinearLayout layout = cpu::linear_panel_layout(h.scheme, h.k);
  TORCH_CHECK(h.layout == layout, op, ": packed weight's layout is ", static_cast<int>(h.layout),
              ", expected ", static_cast<int>(layout), " (what ", packer_name(modules().native_cpu),
              " writes for scheme ", kernels::scheme_name(h.scheme), " and K = ", h.k,
              "); pack the weight again with the selected linear_pack");
  const Rows r = check_input(op, input, bias, h, c10::DeviceType::CPU);
  at::Tensor rows = r.x;
  const int64_t m = rows.size(0);
  if (rows.stride(1) != 1 || (m > 1 && rows.stride(0) < h.k)) rows = rows.contiguous();  // overlapping rows too
  const at::Tensor b = bias.has_value() && bias->defined() ? bias->to(at::kFloat).contiguous() : at::Tensor();
  const uint8_t* base = packed.const_data_ptr<uint8_t>();
  if (m > 0 && use_brgemm(h, rows.scalar_type())) {
    return brgemm_linear(rows, base + h.weights_offset, h, b).view(r.out_shape);
  }
  at::Tensor out = at::empty({m, h.n}, input.options());
  cpu::LinearParams p;
  p.scheme = h.scheme;
  p.layout = h.layout;
  p.out_dtype = bridge::kernel_dtype(input.scalar_type());
  p.m = m;
  p.n = h.n;
  p.k = h.k;
  p.group = kernels::scheme_has_scales(h.scheme) ? h.group : 0;
  p.groups = kernels::scheme_has_scales(h.scheme) ? h.groups : 0;
  at::Tensor x;  // float32 rows, where the kernel reads those
  if (rows.scalar_type() == at::kBFloat16) {
    p.x_bf16 = reinterpret_cast<const uint16_t*>(rows.const_data_ptr());
    p.x_bf16_stride = m > 1 ? rows.stride(0) : h.k;
  }
  if (!cpu::linear_reads_bf16_rows(p)) {
    x = rows.scalar_type() == at::kFloat ? rows : rows.to(at::kFloat);
    p.x = x.const_data_ptr<float>();
    p.x_stride = m > 1 ? x.stride(0) : h.k;
  }
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
  auto p = scaled_mm_params<cpu::ScaledMmParams>(r, a, scale_a, azp, packed, h, bridge::kernel_dtype(out_dtype), out);
  const cpu::CpuFeatures& f = cpu::cpu_features();
  if (h.scheme == LinearScheme::kW8A8Int8 && brgemm_allowed(f.amx_int8)) p.int8_panel_sums = &brgemm_int8_panel_sums;
  if (h.scheme == LinearScheme::kW8A8Fp8 && f.avx512_bf16 && brgemm_allowed(f.amx_bf16)) {
    p.bf16_panel_sums = &brgemm_bf16_panel_sums;
  }
  bridge::run_rows(op, p, cpu::linear_panels(h.n), std::max<int64_t>(1, m) * h.k * kernels::kPanel,
                   [](const cpu::ScaledMmParams& params, int64_t begin, int64_t end) {
                     const kernels::Status s = cpu::scaled_mm(params, begin, end);
                     if (params.int8_panel_sums != nullptr || params.bf16_panel_sums != nullptr) {
                       at::native::cpublas::brgemm_release(/*is_vnni=*/true);
                     }
                     return s;
                   });
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

std::string native_brgemm_paths(bool scaled) {
  const cpu::CpuFeatures& f = cpu::cpu_features();
  std::string paths;
  auto add = [&](bool on, const char* what) {
    if (on) paths += (paths.empty() ? "" : "; ") + std::string(what);
  };
  if (!scaled) add(brgemm_allowed(f.amx_bf16), "bf16 rows on bf16 weights: torch's oneDNN brgemm (cpublas::brgemm, AMX-BF16)");
  if (scaled) {
    add(brgemm_allowed(f.amx_int8), "w8a8-int8's int32 sums: torch's oneDNN u8s8 brgemm (AMX-INT8)");
    add(f.avx512_bf16 && brgemm_allowed(f.amx_bf16), "w8a8-fp8's float32 sums: torch's oneDNN bf16 brgemm (AMX-BF16)");
  }
  return paths;
}

XLLM_REGISTER_NAMED("cpu.native.scaled_mm", modules().native_cpu, scaled_mm_operation(), native_scaled_mm);
XLLM_REGISTER_NAMED("cpu.native.linear_dynamic_quant", modules().native_cpu, linear_dynamic_quant_operation(),
                    native_linear_dynamic_quant);
XLLM_REGISTER_NAMED("cpu.native.linear_pack", modules().native_cpu, linear_pack_operation(), native_pack);
XLLM_REGISTER_NAMED("cpu.native.linear", modules().native_cpu, linear_operation(), native_linear);

}  // namespace xllm_kernel::linear
