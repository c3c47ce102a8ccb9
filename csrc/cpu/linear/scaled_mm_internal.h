// What scaled_mm's per-target driver (scaled_mm-inl.h) and its x86 kernels (scaled_mm_x86.cpp,
// function-level AVX2 / AVX-512 targets) share: the activations prepared once per call and the
// panel kernels. Not a public interface.
//
// A panel kernel computes, for every row m of the call and the kPanel channels of one panel, the
// epilogue's t before the bias (scaled_mm.h):
//   t[m * kPanel + lane] = (float(acc_0) * scale_a[m]) * s[n, 0] (+ (float(acc_g) * scale_a[m]) * s[n, g] ...)
// and the driver adds the bias and rounds to the output type. Lanes past n hold whatever the
// zero lanes of the packed weights give (never stored).
#pragma once

#include <cstdint>
#include <vector>

#include "csrc/cpu/linear/scaled_mm.h"

namespace xllm_kernel::cpu::scaled_mm_detail {

constexpr int64_t kP = kernels::kPanel;

// The activations in the form a kernel reads, [m] rows of `k4` (K rounded up to 4) elements,
// `stride` elements apart, zero past K (the packed weights are zero there too).
enum class AForm {
  kInt8,     // int8 as given (w8a8-int8 without VNNI, w4a8)
  kUint8,    // a XOR 0x80 = a + 128 as uint8 (w8a8-int8 with vpdpbusd, zmm or ymm: its u8 operand)
  kBf16,     // e4m3 as bfloat16 bits (exact; w8a8-fp8 with vdpbf16ps)
  kFloat32,  // e4m3 as float32 (exact; w8a8-fp8 otherwise)
};

struct Prepared {
  const ScaledMmParams* p = nullptr;
  int64_t k4 = 0;             // K rounded up to 4
  const void* a = nullptr;    // [m][stride] in the kernel's AForm
  int64_t stride = 0;         // elements between prepared rows
  const float* scale_a = nullptr;  // [m] (scale_a_stride 0 expanded)
  const int32_t* azp = nullptr;    // [m] (w8a8-int8 with azp), or null
  const int32_t* asum = nullptr;   // [m][groups]: sum of a over each group (w4a8)
  void* scratch = nullptr;         // the kernel's per-call scratch (PanelKernel::scratch_bytes)
};

// Computes t (above) for rows [0, p.m) of panel `panel` into t[m * kPanel + lane].
using PanelFn = void (*)(const Prepared& x, int64_t panel, float* t);

struct PanelKernel {
  PanelFn fn = nullptr;
  AForm form = AForm::kInt8;
  const char* isa = "";  // the instruction class, for scaled_mm_isa()
  // The kernel's scratch for a call: fn(m, k4) bytes (null: none).
  int64_t (*scratch_bytes)(int64_t m, int64_t k4) = nullptr;
};

// The prepared activations and the buffers behind them.
struct Activations {
  Prepared x;
  std::vector<uint8_t> a;
  std::vector<float> scale_a;
  std::vector<int32_t> azp, asum;
};

// Fills `act` for p's rows in `form` (scaled_mm.cpp).
void PrepareActivations(const ScaledMmParams& p, AForm form, Activations& act);

// The scalar kernel of a scheme (scaled_mm.cpp): targets without an x86 kernel.
PanelKernel ScalarKernel(LinearScheme s);

// w8a8-int8 over the caller's ScaledMmParams::int8_panel_sums (torch's brgemm in the library), then the kernels' epilogue
// (scaled_mm.cpp).
PanelKernel BrgemmInt8Kernel();

#if defined(__x86_64__) || defined(_M_X64)
// scaled_mm_x86.cpp. Each needs the CPU features its name says (AVX2: AVX2 + FMA + F16C; AVX-512:
// F, BW, VL, DQ and the named extension; AVX-VNNI: AVX2 + FMA + F16C + AVX-VNNI); the driver
// checks cpu_features() first.
PanelKernel Int8Avx512VnniKernel();  // w8a8-int8, vpdpbusd on zmm
PanelKernel W4a8Avx512VnniKernel();  // w4a8, vpdpbusd on zmm
PanelKernel Fp8Avx512Bf16Kernel();   // w8a8-fp8, vdpbf16ps on zmm
PanelKernel BrgemmFp8Kernel();       // w8a8-fp8 over ScaledMmParams::bf16_panel_sums (AVX512_BF16 conversion)
PanelKernel Int8AvxVnniKernel();     // w8a8-int8, vpdpbusd on ymm (VEX)
PanelKernel W4a8AvxVnniKernel();     // w4a8, vpdpbusd on ymm (VEX)
PanelKernel Int8Avx2Kernel();        // w8a8-int8, vpmaddubsw with the sign trick
PanelKernel W4a8Avx2Kernel();        // w4a8, vpmaddubsw on the unsigned nibbles
PanelKernel Fp8Avx2Kernel();         // w8a8-fp8, float32 FMA
#endif

}  // namespace xllm_kernel::cpu::scaled_mm_detail
