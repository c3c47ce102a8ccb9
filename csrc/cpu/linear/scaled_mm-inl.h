// scaled_mm's per-target parts (scaled_mm.h) that its driver (scaled_mm.cpp, which prepares the
// activations once per call and runs the kernel panel by panel) and linear's bf16 dot-product
// driver (linear.cpp) share, included by both once per Highway target: the panel kernel for the
// scheme on this target and CPU, and the finishing of a panel's rows (+ bias, one rounding to the
// output type). The kernels (scaled_mm_internal.h) are the x86 ones of scaled_mm_x86.cpp on the
// AVX2 and AVX-512 targets and the scalar ones of scaled_mm.cpp elsewhere:
//
//   target  w8a8-int8 / w4a8                        w8a8-fp8
//   AVX3    vpdpbusd zmm (AVX512_VNNI), else as     vdpbf16ps (AVX512_BF16), else AVX2's
//           AVX2
//   AVX2    vpdpbusd ymm (AVX-VNNI: Alder Lake and   float32 FMA
//           later client cores, Zen 5), else
//           vpmaddubsw + vpmaddwd
//   others  scalar int32                             scalar float32 (the same bits as AVX2's)
//
// The choice reads cpu_features(), so that a test's ScopedCpuFeatures (the CPU classes "avx512",
// "avx512_avx_vnni", "avx2", ...) reaches the AVX3 target's AVX2 and AVX-VNNI kernels and the AVX2
// target's vpmaddubsw ones on a CPU that has every extension.
//
// Loop order: chunks of rows (about 2 MiB of prepared activations), then panels, then the kernel's
// row tiles, so a panel's weights (K * 32 bytes) are read from memory once per chunk and from the
// cache by its other tiles of rows.

// Per-target include guard (Highway's idiom): included once per target by foreach_target.
#if defined(XLLM_KERNEL_CPU_LINEAR_SCALED_MM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef XLLM_KERNEL_CPU_LINEAR_SCALED_MM_INL_H_
#undef XLLM_KERNEL_CPU_LINEAR_SCALED_MM_INL_H_
#else
#define XLLM_KERNEL_CPU_LINEAR_SCALED_MM_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "csrc/cpu/common/convert-inl.h"
#include "csrc/cpu/common/cpu_features.h"
#include "csrc/cpu/linear/scaled_mm_internal.h"
#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace xllm_kernel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The panel kernel of scheme s on this target and CPU. The caller's GEMMs (ScaledMmParams::
// int8_panel_sums, bf16_panel_sums: torch's brgemm in the library, so the Brgemm* kernels) run where
// given: w8a8-int8's on every target, w8a8-fp8's on the AVX-512 target of a CPU with AVX512_BF16
// (its weights' conversion).
inline scaled_mm_detail::PanelKernel ScaledMmKernel(LinearScheme s, bool brgemm_int8 = false, bool brgemm_bf16 = false) {
  namespace d = scaled_mm_detail;
  (void)brgemm_bf16;
  if (brgemm_int8 && s == LinearScheme::kW8A8Int8) return d::BrgemmInt8Kernel();
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  const CpuFeatures& f = cpu_features();
#if HWY_TARGET <= HWY_AVX3
  if (brgemm_bf16 && s == LinearScheme::kW8A8Fp8 && f.avx512_bf16) return d::BrgemmFp8Kernel();
#endif
#if HWY_TARGET <= HWY_AVX3
  if (f.avx512_vnni && s == LinearScheme::kW8A8Int8) return d::Int8Avx512VnniKernel();
  if (f.avx512_vnni && s == LinearScheme::kW4A8) return d::W4a8Avx512VnniKernel();
  if (f.avx512_bf16 && s == LinearScheme::kW8A8Fp8) return d::Fp8Avx512Bf16Kernel();
#endif
  if (f.avx_vnni) {
    if (s == LinearScheme::kW8A8Int8) return d::Int8AvxVnniKernel();
    if (s == LinearScheme::kW4A8) return d::W4a8AvxVnniKernel();
  }
  switch (s) {
    case LinearScheme::kW4A8: return d::W4a8Avx2Kernel();
    case LinearScheme::kW8A8Fp8: return d::Fp8Avx2Kernel();
    default: return d::Int8Avx2Kernel();
  }
#else
  return d::ScalarKernel(s);
#endif
}

// The rows a panel's t finishes into: out rows of n columns of the output type, out_stride elements
// apart, and the bias (float32 [n], or null). scaled_mm's driver and linear's bf16 dot-product
// driver (linear.cpp) share it.
struct PanelRows {
  void* out = nullptr;
  int64_t out_stride = 0;
  int64_t n = 0, m = 0;
  const float* bias = nullptr;
};

// out[m, panel's columns] = round(t[m] + bias) for every row.
template <typename T>
void FinishPanelRows(const PanelRows& p, int64_t panel, const float* t) {
  constexpr size_t kP = static_cast<size_t>(kernels::kPanel);
  const DF d;
  const size_t lanes = hn::Lanes(d);
  const int64_t n0 = panel * kernels::kPanel;
  const size_t cols = static_cast<size_t>(std::min<int64_t>(kernels::kPanel, p.n - n0));
  HWY_ALIGN float bias[kP] = {};
  if (p.bias != nullptr) std::memcpy(bias, p.bias + n0, cols * sizeof(float));
  T* out = static_cast<T*>(p.out);
  for (int64_t r = 0; r < p.m; ++r) {
    T* y = out + r * p.out_stride + n0;
    T tmp[kP];
    T* dst = cols == kP ? y : tmp;
    for (size_t j = 0; j < kP; j += lanes) {
      VF v = hn::LoadU(d, t + static_cast<size_t>(r) * kP + j);
      if (p.bias != nullptr) v = hn::Add(v, hn::Load(d, bias + j));  // adding 0 would turn -0 into +0
      StoreF(v, dst + j);
    }
    if (cols != kP) std::memcpy(y, tmp, cols * sizeof(T));
  }
}

// Finishes a panel's rows into the output type.
inline void FinishPanel(DType out_dtype, const PanelRows& rows, int64_t panel, const float* t) {
  switch (out_dtype) {
    case DType::kFloat32: return FinishPanelRows<float>(rows, panel, t);
    case DType::kBFloat16: return FinishPanelRows<bfloat16_t>(rows, panel, t);
    case DType::kFloat16: return FinishPanelRows<float16_t>(rows, panel, t);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace xllm_kernel::cpu
HWY_AFTER_NAMESPACE();

#endif  // XLLM_KERNEL_CPU_LINEAR_SCALED_MM_INL_H_
