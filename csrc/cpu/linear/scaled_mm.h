// Torch-free CPU kernels of scaled_mm (the linear family's GEMM on quantized activations), Highway
// with runtime ISA dispatch, over weights packed in LinearLayout::kQuads (csrc/common/linear.h):
//
//   cpu::ScaledMmPackSource src{.scheme = LinearScheme::kW8A8Int8, .n = N, .k = K, .group = K, .groups = 1,
//                               .weight = q_int8, .weight_stride = K, .scales = s_f32};
//   cpu::scaled_mm_pack(src, weights, scales, zeros, sums);          // once, at load
//   cpu::ScaledMmParams p{...};                                       // a: int8 or e4m3 rows
//   cpu::scaled_mm(p, 0, cpu::linear_panels(p.n));                   // or panel ranges on threads
//
// Numerics (the contract's, src/ops/linear/linear.cpp). For output [m, n], with g the K groups of
// the weight (one group for w8a8-int8 and per-channel or per-tensor w8a8-fp8):
//   int8 (w8a8-int8, w4a8): acc_g = sum_{k in g} (a[m, k] - azp[m]) * (q[n, k] - z[n, g]) in int32,
//     exact (K <= kScaledMmMaxK); azp 0 without, z 0 for w8a8-int8 and symmetric w4a8.
//   fp8 (w8a8-fp8): acc_g = sum_{k in g} float(a[m, k]) * float(q[n, k]) in float32 (every product
//     exact), in an order fixed by K alone: not by M, the row's position, the panel range or threads.
//   t = (float(acc_0) * scale_a[m]) * s[n, 0], then t = t + (float(acc_g) * scale_a[m]) * s[n, g] for
//   g = 1, 2, ...; y = t + bias[n] (no bias: y = t); out = y rounded once to out_dtype (to nearest
//   even). Every operation is a float32 multiply or add of its own (no fused multiply-add);
//   float(acc) rounds to nearest even. The int8 schemes so give the same bits on every target as any
//   implementation that follows the contract (cpu.torch: torch._int_mm and ATen float32 arithmetic).
//
// Layout (LinearLayout::kQuads; panels of kPanel = 32 channels, lanes past n hold zero weights
// (w4a8: their zero point), scale 0, sum 0):
//   weights  w8a8 (int8, e4m3): [panels][ceil(K / 4)][32][4] bytes: channel 32p + c's k = 4i .. 4i + 3
//            at bytes ((i * 32 + c) * 4 ..) of panel p, 0 past K. w4a8: [panels][K / 8][2][16][4]:
//            byte j of channel 16h + c in block b holds k = 8b + j in its low nibble and 8b + 4 + j in
//            its high one, each as u = q + 8 (symmetric) or u = q (with zeros), so one 64-byte load
//            gives 16 channels' two quads (u & 0xF, u >> 4).
//   scales   float32 [panels][groups][32].
//   zeros    int32 [panels][groups][32] (w4a8 with zeros): z.
//   sums     int32 [panels][groups][32]: sum_{k in g} (q - z), the integer weight's value (w8a8-int8:
//            sum_k q, which the kernels' unsigned shift and azp subtract; w4a8: not read).
#pragma once

#include <cstdint>

#include "csrc/common/linear.h"
#include "csrc/common/rows.h"

namespace xllm_kernel::cpu {

using kernels::DType;
using kernels::LinearScheme;
using kernels::Status;

// The canonical weight of one of the schemes kW8A8Int8, kW8A8Fp8, kW4A8, to be packed.
struct ScaledMmPackSource {
  LinearScheme scheme = LinearScheme::kW8A8Int8;
  int64_t n = 0, k = 0;
  int64_t group = 0;   // K elements per scale group (w8a8-int8: K; w8a8-fp8: K or 128; w4a8: a multiple of 8)
  int64_t groups = 0;  // ceil(K / group)
  // [n] rows of k elements: int8 in [-127, 127] (w8a8-int8), e4m3fn bytes (w8a8-fp8), int8 in
  // [-8, 7] (w4a8 without zeros) or [0, 15] (w4a8 with zeros).
  const void* weight = nullptr;
  int64_t weight_stride = 0;
  const float* scales = nullptr;  // [n][groups] float32
  const float* zeros = nullptr;   // [n][groups] float32 integers in [0, 15] (w4a8 with zeros), or null
};

// Writes the kQuads sections: weights (at most linear_sizes(...).weights_bytes bytes), scales
// (at most scales_bytes), zeros (w4a8 with zeros: at most zeros_bytes; the layout's own element
// type) and sums (w8a8-int8, w4a8: at most sums_bytes of int32). Every section's bytes past what
// it writes are left as they are (the bridge zero-fills the tensor). Values outside a scheme's
// range are an invalid argument naming it.
Status scaled_mm_pack(const ScaledMmPackSource& src, void* weights, float* scales, void* zeros, int32_t* sums);

struct ScaledMmParams {
  LinearScheme scheme = LinearScheme::kW8A8Int8;
  DType out_dtype = DType::kFloat32;  // float32, bfloat16, float16
  int64_t m = 0, n = 0, k = 0;
  int64_t group = 0, groups = 0;      // as packed
  const void* a = nullptr;            // [m] rows of k: int8 (w8a8-int8, w4a8), e4m3fn bytes (w8a8-fp8)
  int64_t a_stride = 0;               // elements between rows
  const float* scale_a = nullptr;     // scale_a[m * scale_a_stride]
  int64_t scale_a_stride = 1;         // 1: per token, 0: one for every row
  const int32_t* azp = nullptr;       // azp[m * azp_stride] (w8a8-int8 only), or null
  int64_t azp_stride = 1;
  void* out = nullptr;                // [m] rows of n elements of out_dtype
  int64_t out_stride = 0;
  const void* weights = nullptr;      // the packed sections (kQuads)
  const float* scales = nullptr;
  const void* zeros = nullptr;        // w4a8 with zeros, or null
  const int32_t* sums = nullptr;      // w8a8-int8, w4a8
  const float* bias = nullptr;        // [n] float32, or null
  // Optional (w8a8-int8): a caller's int8 GEMM for one panel, e.g. the torch bridge's oneDNN brgemm
  // (AMX-INT8 where the CPU has it). It sets acc[r * kPanel + c] = sum_{k < k4} u[r * lda + k] * w(k, c)
  // in int32 for rows r < m, u the activations + 128 as uint8 (128 past K), panel the kQuads weights
  // ([k4 / 4][32][4] int8, 0 past K). The sums are exact in any order, and the kernels' own epilogue
  // follows: the same bits as without it. Null: the kernels' own dot products.
  using Int8PanelSums = void (*)(const uint8_t* u, int64_t lda, int64_t m, int64_t k4, const int8_t* panel,
                                 int32_t* acc);
  Int8PanelSums int8_panel_sums = nullptr;
  // Optional (w8a8-fp8, used on CPUs with AVX512_BF16, which converts the weights): a caller's bf16
  // GEMM for one panel and K group, e.g. the torch bridge's oneDNN brgemm (AMX-BF16). It sets
  // acc[r * kPanel + c] = sum_{k < kk} x[r * lda + k] * w(k, c) in float32, in its own order, for rows
  // r < m: x the activations as bf16 bits (exact), w the group's weights as bf16 pairs of k
  // ([kk / 2][32][2], exact), kk a multiple of 4. The epilogue follows per group as the contract says.
  using Bf16PanelSums = void (*)(const uint16_t* x, int64_t lda, int64_t m, int64_t kk, const uint16_t* panel,
                                 float* acc);
  Bf16PanelSums bf16_panel_sums = nullptr;
};

// Computes the output columns of panels [panel_begin, panel_end) (linear_panels(n) in all) for
// every row; ranges may run concurrently on disjoint panels. Allocates its own scratch.
Status scaled_mm(const ScaledMmParams& p, int64_t panel_begin, int64_t panel_end);

// The instruction class scaled_mm's int8 dot products use on this CPU ("avx512-vnni", "avx-vnni",
// "avx2", "avx512", "scalar", ...): for reports and rooflines.
const char* scaled_mm_isa();

}  // namespace xllm_kernel::cpu
