// scaled_mm's translation unit (scaled_mm.h), in the family's skeleton: compiled once per Highway
// target (foreach_target), the per-target driver (ScaledMmPanels: rows in chunks, the panel kernel
// scaled_mm-inl.h's ScaledMmKernel picks, then FinishPanel), and once (HWY_ONCE) the entry points,
// the activations' preparation, the scalar kernels and the packing. The x86 panel kernels are
// scaled_mm_x86.cpp's; linear.cpp shares scaled_mm-inl.h's FinishPanel.
#include "csrc/cpu/linear/scaled_mm.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "csrc/cpu/linear/scaled_mm.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/aligned_allocator.h"

#include "csrc/cpu/linear/linear.h"
#include "csrc/cpu/linear/scaled_mm-inl.h"  // the panel kernels' choice, FinishPanel
#include "csrc/cpu/linear/scaled_mm_internal.h"

HWY_BEFORE_NAMESPACE();
namespace xllm_kernel::cpu {
namespace HWY_NAMESPACE {

void ScaledMmPanels(const ScaledMmParams& p, int64_t panel_begin, int64_t panel_end) {
  const scaled_mm_detail::PanelKernel kernel = ScaledMmKernel(p.scheme, p.int8_panel_sums != nullptr, p.bf16_panel_sums != nullptr);
  // Rows in chunks whose prepared activations take about 2 MiB (at least 64 rows): the scratch
  // stays bounded for long prefills; a panel's weights are read once per chunk (from memory
  // the first time, the cache after). A row's bits do not depend on the chunks.
  const int64_t k4 = kernels::round_up(p.k, 4);
  const int64_t elem = kernel.form == scaled_mm_detail::AForm::kFloat32 ? 4
                       : kernel.form == scaled_mm_detail::AForm::kBf16  ? 2
                                                                          : 1;
  const int64_t chunk = std::max<int64_t>(64, (int64_t{2} << 20) / (k4 * elem)) / 8 * 8;
  hwy::AlignedFreeUniquePtr<uint8_t[]> scratch;
  const int64_t scratch_bytes = kernel.scratch_bytes != nullptr ? kernel.scratch_bytes(std::min(p.m, chunk), k4) : 0;
  if (scratch_bytes > 0) scratch = hwy::AllocateAligned<uint8_t>(static_cast<size_t>(scratch_bytes));
  auto t = hwy::AllocateAligned<float>(static_cast<size_t>(std::min(p.m, chunk) * kernels::kPanel));
  scaled_mm_detail::Activations act;
  for (int64_t r0 = 0; r0 < p.m; r0 += chunk) {
    ScaledMmParams c = p;
    c.m = std::min(chunk, p.m - r0);
    c.a = static_cast<const uint8_t*>(p.a) + r0 * p.a_stride;
    c.scale_a = p.scale_a + r0 * p.scale_a_stride;
    if (p.azp != nullptr) c.azp = p.azp + r0 * p.azp_stride;
    c.out = static_cast<uint8_t*>(p.out) + r0 * p.out_stride * kernels::element_size(p.out_dtype);
    scaled_mm_detail::PrepareActivations(c, kernel.form, act);
    act.x.scratch = scratch.get();
    const PanelRows rows{.out = c.out, .out_stride = c.out_stride, .n = c.n, .m = c.m, .bias = c.bias};
    for (int64_t panel = panel_begin; panel < panel_end; ++panel) {
      kernel.fn(act.x, panel, t.get());
      FinishPanel(c.out_dtype, rows, panel, t.get());
    }
  }
}

const char* ScaledMmIsa() { return ScaledMmKernel(LinearScheme::kW8A8Int8).isa; }

}  // namespace HWY_NAMESPACE
}  // namespace xllm_kernel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace xllm_kernel::cpu {

HWY_EXPORT(ScaledMmPanels);
HWY_EXPORT(ScaledMmIsa);

namespace scaled_mm_detail {

// e4m3fn byte -> float32 (exact): bias 7, no infinities, S.1111.111 NaN.
inline const std::array<float, 256>& Fp8Values() {
  static const std::array<float, 256> values = [] {
    std::array<float, 256> v{};
    for (int b = 0; b < 256; ++b) {
      const int e = (b >> 3) & 0xF, m = b & 7;
      float mag = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
      if ((b & 0x7F) == 0x7F) mag = std::numeric_limits<float>::quiet_NaN();
      v[b] = (b & 0x80) ? -mag : mag;
    }
    return v;
  }();
  return values;
}

void PrepareActivations(const ScaledMmParams& p, AForm form, Activations& act) {
  const int64_t m = p.m, k = p.k, k4 = kernels::round_up(k, 4);
  Prepared& x = act.x;
  x.p = &p;
  x.k4 = k4;
  x.stride = k4;
  const uint8_t* a = static_cast<const uint8_t*>(p.a);
  const size_t bytes = form == AForm::kBf16 ? 2 : form == AForm::kFloat32 ? 4 : 1;
  act.a.assign(static_cast<size_t>(m * k4) * bytes, 0);
  for (int64_t r = 0; r < m; ++r) {
    const uint8_t* row = a + r * p.a_stride;
    switch (form) {
      case AForm::kInt8: std::memcpy(act.a.data() + r * k4, row, static_cast<size_t>(k)); break;
      case AForm::kUint8: {
        uint8_t* dst = act.a.data() + r * k4;
        for (int64_t i = 0; i < k; ++i) dst[i] = row[i] ^ 0x80u;
        std::memset(dst + k, 0x80, static_cast<size_t>(k4 - k));  // a = 0 (the weights are 0 there too)
        break;
      }
      case AForm::kBf16: {
        uint16_t* dst = reinterpret_cast<uint16_t*>(act.a.data()) + r * k4;
        for (int64_t i = 0; i < k; ++i) {
          uint32_t bits;
          std::memcpy(&bits, &Fp8Values()[row[i]], 4);
          dst[i] = static_cast<uint16_t>(bits >> 16);  // exact: 4 significant bits; NaN 0x7FC0
        }
        break;
      }
      case AForm::kFloat32: {
        float* dst = reinterpret_cast<float*>(act.a.data()) + r * k4;
        for (int64_t i = 0; i < k; ++i) dst[i] = Fp8Values()[row[i]];
        break;
      }
    }
  }
  x.a = act.a.data();
  act.scale_a.resize(static_cast<size_t>(m));
  for (int64_t r = 0; r < m; ++r) act.scale_a[r] = p.scale_a[r * p.scale_a_stride];
  x.scale_a = act.scale_a.data();
  x.azp = nullptr;
  if (p.azp != nullptr) {
    act.azp.resize(static_cast<size_t>(m));
    for (int64_t r = 0; r < m; ++r) act.azp[r] = p.azp[r * p.azp_stride];
    x.azp = act.azp.data();
  }
  x.asum = nullptr;
  if (p.scheme == LinearScheme::kW4A8) {
    act.asum.assign(static_cast<size_t>(m * p.groups), 0);
    for (int64_t r = 0; r < m; ++r) {
      const int8_t* row = reinterpret_cast<const int8_t*>(a + r * p.a_stride);
      for (int64_t i = 0; i < k; ++i) act.asum[r * p.groups + i / p.group] += row[i];
    }
    x.asum = act.asum.data();
  }
}

namespace {

// t = (float(acc) * sa) * s, or t + that after the first group (linear.cpp: -ffp-contract=off).
inline void Accumulate(float& t, float acc, float sa, float s, bool first) {
  const float prod = (acc * sa) * s;
  t = first ? prod : t + prod;
}

// acc - b * c in int32 (its wraps cancel where the result fits, as the contract's does).
inline int32_t SubMul(int32_t acc, int32_t b, int32_t c) {
  return static_cast<int32_t>(static_cast<uint32_t>(acc) - static_cast<uint32_t>(b) * static_cast<uint32_t>(c));
}

// w8a8-int8's epilogue for row r of a panel from acc = sum_k (a + u) q, u 0 (int8 activations) or 128
// (their unsigned form): c = acc - shift * sum_k q with shift = u + azp, i.e. sum_k (a - azp) q; then
// t = (float(c) * scale_a) * s.
void FinishInt8Row(const Prepared& x, int64_t panel, int64_t r, const int32_t* acc, int32_t shift, float* t) {
  const ScaledMmParams& p = *x.p;
  for (int64_t lane = 0; lane < kP; ++lane) {
    const int32_t c = SubMul(acc[lane], shift, p.sums[panel * kP + lane]);
    Accumulate(t[r * kP + lane], static_cast<float>(c), x.scale_a[r], p.scales[panel * kP + lane], true);
  }
}

void ScalarInt8Panel(const Prepared& x, int64_t panel, float* t) {
  const ScaledMmParams& p = *x.p;
  const int64_t quads = x.k4 / 4;
  const int8_t* w = static_cast<const int8_t*>(p.weights) + panel * quads * 128;
  for (int64_t r = 0; r < p.m; ++r) {
    const int8_t* a = static_cast<const int8_t*>(x.a) + r * x.stride;
    int32_t acc[kP] = {};
    for (int64_t q = 0; q < quads; ++q) {
      for (int64_t lane = 0; lane < kP; ++lane) {
        for (int64_t j = 0; j < 4; ++j) acc[lane] += a[q * 4 + j] * w[(q * kP + lane) * 4 + j];
      }
    }
    FinishInt8Row(x, panel, r, acc, x.azp != nullptr ? x.azp[r] : 0, t);
  }
}

// The caller's int32 sums of (a + 128) q, then the VNNI kernels' compensation and epilogue.
void BrgemmInt8Panel(const Prepared& x, int64_t panel, float* t) {
  const ScaledMmParams& p = *x.p;
  const int8_t* w = static_cast<const int8_t*>(p.weights) + panel * (x.k4 / 4) * 128;
  int32_t* acc = static_cast<int32_t*>(x.scratch);
  p.int8_panel_sums(static_cast<const uint8_t*>(x.a), x.stride, p.m, x.k4, w, acc);
  for (int64_t r = 0; r < p.m; ++r) FinishInt8Row(x, panel, r, acc + r * kP, 128 + (x.azp != nullptr ? x.azp[r] : 0), t);
}

int64_t BrgemmInt8Scratch(int64_t m, int64_t) { return m * kP * 4; }

void ScalarW4a8Panel(const Prepared& x, int64_t panel, float* t) {
  const ScaledMmParams& p = *x.p;
  const int64_t blocks = p.k / 8, per_group = p.group / 8;
  const uint8_t* w = static_cast<const uint8_t*>(p.weights) + panel * p.k * 16;
  const int32_t* zeros = static_cast<const int32_t*>(p.zeros);
  for (int64_t r = 0; r < p.m; ++r) {
    const int8_t* a = static_cast<const int8_t*>(x.a) + r * x.stride;
    for (int64_t g = 0; g < p.groups; ++g) {
      int32_t acc[kP] = {};
      for (int64_t b = g * per_group; b < std::min(blocks, (g + 1) * per_group); ++b) {
        for (int64_t lane = 0; lane < kP; ++lane) {
          const uint8_t* quad = w + b * 128 + (lane / 16) * 64 + (lane % 16) * 4;
          for (int64_t j = 0; j < 4; ++j) acc[lane] += a[b * 8 + j] * (quad[j] & 0xF) + a[b * 8 + 4 + j] * (quad[j] >> 4);
        }
      }
      const int64_t at = (panel * p.groups + g) * kP;
      for (int64_t lane = 0; lane < kP; ++lane) {
        const int32_t c = SubMul(acc[lane], zeros != nullptr ? zeros[at + lane] : 8, x.asum[r * p.groups + g]);
        Accumulate(t[r * kP + lane], static_cast<float>(c), x.scale_a[r], p.scales[at + lane], g == 0);
      }
    }
  }
}

// acc = acc + a[k] * W[k] for k = 0, 1, ... in order (every product exact): what the AVX2 kernel's
// FMA chain gives, bit for bit.
void ScalarFp8Panel(const Prepared& x, int64_t panel, float* t) {
  const ScaledMmParams& p = *x.p;
  const int64_t quads = x.k4 / 4;
  const int64_t per_group = p.groups == 1 ? x.k4 : p.group;
  const uint8_t* w = static_cast<const uint8_t*>(p.weights) + panel * quads * 128;
  const std::array<float, 256>& value = Fp8Values();
  for (int64_t r = 0; r < p.m; ++r) {
    const float* a = static_cast<const float*>(x.a) + r * x.stride;
    for (int64_t g = 0; g < p.groups; ++g) {
      float acc[kP] = {};
      for (int64_t k = g * per_group; k < std::min(x.k4, (g + 1) * per_group); ++k) {
        for (int64_t lane = 0; lane < kP; ++lane) {
          const float prod = a[k] * value[w[((k / 4) * kP + lane) * 4 + k % 4]];
          acc[lane] = acc[lane] + prod;
        }
      }
      const int64_t at = (panel * p.groups + g) * kP;
      for (int64_t lane = 0; lane < kP; ++lane) Accumulate(t[r * kP + lane], acc[lane], x.scale_a[r], p.scales[at + lane], g == 0);
    }
  }
}

}  // namespace

PanelKernel ScalarKernel(LinearScheme s) {
  switch (s) {
    case LinearScheme::kW4A8: return {ScalarW4a8Panel, AForm::kInt8, "scalar", nullptr};
    case LinearScheme::kW8A8Fp8: return {ScalarFp8Panel, AForm::kFloat32, "scalar", nullptr};
    default: return {ScalarInt8Panel, AForm::kInt8, "scalar", nullptr};
  }
}

PanelKernel BrgemmInt8Kernel() { return {BrgemmInt8Panel, AForm::kUint8, "brgemm", BrgemmInt8Scratch}; }

// Why a scheme's group layout is invalid, or nullptr.
inline const char* InvalidScaledMmGroups(LinearScheme s, int64_t k, int64_t group, int64_t groups) {
  if (group < 1 || group > k || groups != kernels::ceil_div(k, group)) {
    return "group must be in [1, k], groups ceil(k / group)";
  }
  switch (s) {
    case LinearScheme::kW8A8Int8:
      return groups == 1 ? nullptr : "w8a8-int8 takes one group (per channel scales)";
    case LinearScheme::kW8A8Fp8:
      return groups == 1 || group % 4 == 0 ? nullptr : "w8a8-fp8 groups must be k or a multiple of 4";
    case LinearScheme::kW4A8:
      return k % 8 == 0 && group % 8 == 0 ? nullptr : "w4a8 needs k and group multiples of 8";
    default: return "scaled_mm takes w8a8-int8, w8a8-fp8 or w4a8";
  }
}

}  // namespace scaled_mm_detail

Status scaled_mm(const ScaledMmParams& p, int64_t panel_begin, int64_t panel_end) {
  if (!kernels::scheme_quantizes_activations(p.scheme)) return Status::invalid("scaled_mm takes w8a8-int8, w8a8-fp8 or w4a8");
  if (!kernels::valid_dtype(p.out_dtype)) return Status::invalid("unknown out dtype");
  if (p.m < 0 || p.n < 1 || p.k < 1 || p.k > kernels::kScaledMmMaxK) {
    return Status::invalid("m must be >= 0, n >= 1 and k in [1, kScaledMmMaxK]");
  }
  if (const char* why = scaled_mm_detail::InvalidScaledMmGroups(p.scheme, p.k, p.group, p.groups)) return Status::invalid(why);
  if (panel_begin < 0 || panel_begin > panel_end || panel_end > linear_panels(p.n)) {
    return Status::invalid("panel range out of bounds");
  }
  if (p.m == 0 || panel_begin == panel_end) return Status::ok();
  if (p.a == nullptr || p.out == nullptr || p.weights == nullptr || p.scales == nullptr || p.scale_a == nullptr) {
    return Status::invalid("null a, out, weights, scales or scale_a");
  }
  if (p.scheme == LinearScheme::kW8A8Int8 && p.sums == nullptr) return Status::invalid("w8a8-int8 needs its sums");
  if (p.zeros != nullptr && p.scheme != LinearScheme::kW4A8) return Status::invalid("zeros need the w4a8 scheme");
  if (p.azp != nullptr && p.scheme != LinearScheme::kW8A8Int8) return Status::invalid("azp needs the w8a8-int8 scheme");
  if (p.scale_a_stride < 0 || p.azp_stride < 0) return Status::invalid("negative scale_a or azp stride");
  if (p.a_stride < p.k && p.m > 1) return Status::invalid("a rows overlap");
  if (p.out_stride < p.n && p.m > 1) return Status::invalid("out rows overlap");
  HWY_DYNAMIC_DISPATCH(ScaledMmPanels)(p, panel_begin, panel_end);
  return Status::ok();
}

const char* scaled_mm_isa() { return HWY_DYNAMIC_DISPATCH(ScaledMmIsa)(); }

Status scaled_mm_pack(const ScaledMmPackSource& s, void* weights, float* scales, void* zeros, int32_t* sums) {
  using kernels::kPanel;
  if (!kernels::scheme_quantizes_activations(s.scheme)) return Status::invalid("scaled_mm_pack takes w8a8-int8, w8a8-fp8 or w4a8");
  if (s.n < 1 || s.k < 1 || s.k > kernels::kScaledMmMaxK || s.weight == nullptr || s.weight_stride < s.k) {
    return Status::invalid("n >= 1, k in [1, kScaledMmMaxK] and weight rows of k elements");
  }
  if (const char* why = scaled_mm_detail::InvalidScaledMmGroups(s.scheme, s.k, s.group, s.groups)) return Status::invalid(why);
  if (weights == nullptr || s.scales == nullptr || scales == nullptr) return Status::invalid("null weights or scales");
  if (s.zeros != nullptr && (s.scheme != LinearScheme::kW4A8 || zeros == nullptr)) {
    return Status::invalid("zeros need the w4a8 scheme and a zeros section");
  }
  if (s.scheme == LinearScheme::kW8A8Int8 && sums == nullptr) return Status::invalid("w8a8-int8 needs a sums section");
  const int64_t n = s.n, k = s.k, panels = linear_panels(n), groups = s.groups;
  const uint8_t* src = static_cast<const uint8_t*>(s.weight);
  uint8_t* dst = static_cast<uint8_t*>(weights);
  // Check every value before writing anything.
  for (int64_t nn = 0; nn < n; ++nn) {
    const int8_t* row = reinterpret_cast<const int8_t*>(src + nn * s.weight_stride);
    if (s.scheme == LinearScheme::kW8A8Int8) {
      for (int64_t kk = 0; kk < k; ++kk) {
        if (row[kk] == -128) return Status::invalid("w8a8-int8 weight outside [-127, 127]");
      }
    } else if (s.scheme == LinearScheme::kW4A8) {
      const int lo = s.zeros != nullptr ? 0 : -8, hi = s.zeros != nullptr ? 15 : 7;
      for (int64_t kk = 0; kk < k; ++kk) {
        if (row[kk] < lo || row[kk] > hi) return Status::invalid("w4a8 weight outside its range ([-8, 7], with zeros [0, 15])");
      }
      if (s.zeros != nullptr) {
        for (int64_t g = 0; g < groups; ++g) {
          const float z = s.zeros[nn * groups + g];
          if (!(z >= 0.0f && z <= 15.0f) || z != std::floor(z)) return Status::invalid("w4a8 zeros must be integers in [0, 15]");
        }
      }
    }
  }
  if (s.scheme == LinearScheme::kW4A8) {
    // [panels][K / 8][2][16][4]: byte j of channel c of half h in block b holds k = 8b + j (low
    // nibble) and 8b + 4 + j (high), each as u = q + 8 (symmetric) or q (with zeros); lanes past n
    // hold their zero point (8, or 0 with a zero of 0).
    for (int64_t p = 0; p < panels; ++p) {
      uint8_t* panel = dst + p * k * 16;
      for (int64_t lane = 0; lane < kPanel; ++lane) {
        const int64_t nn = p * kPanel + lane;
        const int8_t* row = nn < n ? reinterpret_cast<const int8_t*>(src + nn * s.weight_stride) : nullptr;
        for (int64_t b = 0; b < k / 8; ++b) {
          uint8_t* quad = panel + b * 128 + (lane / 16) * 64 + (lane % 16) * 4;
          for (int64_t j = 0; j < 4; ++j) {
            const int offset = s.zeros != nullptr ? 0 : 8;
            const int lo = row != nullptr ? row[b * 8 + j] + offset : offset;
            const int hi = row != nullptr ? row[b * 8 + 4 + j] + offset : offset;
            quad[j] = static_cast<uint8_t>(lo | (hi << 4));
          }
        }
      }
    }
  } else {
    // [panels][ceil(K / 4)][32][4]: channel lane's k = 4i .. 4i + 3 at bytes (i * 32 + lane) * 4;
    // 0 past k and past n.
    const int64_t quads = kernels::ceil_div(k, 4);
    for (int64_t p = 0; p < panels; ++p) {
      uint8_t* panel = dst + p * quads * 128;
      for (int64_t lane = 0; lane < kPanel; ++lane) {
        const int64_t nn = p * kPanel + lane;
        for (int64_t kk = 0; kk < quads * 4; ++kk) {
          panel[((kk / 4) * kPanel + lane) * 4 + kk % 4] = nn < n && kk < k ? src[nn * s.weight_stride + kk] : 0;
        }
      }
    }
  }
  // Scales, zeros and sums: [panels][groups][32], 0 past n.
  int32_t* zero_section = static_cast<int32_t*>(zeros);
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t lane = 0; lane < kPanel; ++lane) {
        const int64_t nn = p * kPanel + lane, at = (p * groups + g) * kPanel + lane;
        const bool real = nn < n;
        scales[at] = real ? s.scales[nn * groups + g] : 0.0f;
        const int32_t z = s.zeros != nullptr && real ? static_cast<int32_t>(s.zeros[nn * groups + g]) : 0;
        if (s.zeros != nullptr) zero_section[at] = z;
        if (sums != nullptr && s.scheme != LinearScheme::kW8A8Fp8) {
          int32_t sum = 0;
          if (real) {
            const int8_t* row = reinterpret_cast<const int8_t*>(src + nn * s.weight_stride);
            const int64_t z_eff = s.scheme == LinearScheme::kW4A8 && s.zeros != nullptr ? z : 0;
            for (int64_t kk = g * s.group; kk < std::min(k, (g + 1) * s.group); ++kk) sum += row[kk] - static_cast<int32_t>(z_eff);
          }
          sums[at] = sum;
        }
      }
    }
  }
  return Status::ok();
}

}  // namespace xllm_kernel::cpu
#endif  // HWY_ONCE
