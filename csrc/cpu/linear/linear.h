// Torch-free CPU kernels of the linear family (Highway, runtime ISA dispatch):
//   y[m, n] = sum_k x[m, k] * W[n, k] (+ bias[n]),  W[n, k] = (q[n, k] - z[n, g]) * s[n, g],  g = k / group
// over weights packed in panels of kPanel output channels (csrc/common/linear.h, LinearLayout::kPanels;
// bf16 weights with K even in pairs of k, LinearLayout::kPanelPairs: linear_panel_layout).
//
//   cpu::LinearPackSource src{.scheme = LinearScheme::kInt4, .n = N, .k = K, .group = 128, .groups = K / 128,
//                             .weight = q_int8, .weight_stride = K, .scales = s_f32, .zeros = nullptr};
//   cpu::linear_pack_panels(src, weights, scales, zeros);        // once, at load
//   cpu::LinearParams p{...};                                   // x as float32 rows
//   cpu::linear(p, 0, cpu::linear_panels(p.n));                // or panel ranges on several threads
//
// Numerics (the contract's): W is formed in float32, (q - z) exactly and one rounding of its product
// with the scale (bf16, f16, f32 weights: their value); each output is one float32 fused
// multiply-add chain over k = 0, 1, ..., K - 1 starting from 0, then + bias[n] in float32, then
// one rounding to the output dtype. The chain's order is the same for every M, every row position,
// every panel range and every thread count: a row's bits do not depend on the batch (batch
// invariance). Non-finite scales, weights or inputs propagate as IEEE arithmetic does.
//
// One exception, bf16 input with bf16 weights (kPanelPairs) on a CPU with AVX512_BF16
// (linear_reads_bf16_rows): the kernel reads the bf16 rows and runs vdpbf16ps, whose chain takes k
// in pairs, acc = (acc + x[k + 1] W[k + 1]) + x[k] W[k] for k = 0, 2, ..., each step rounded to float32
// (the products are exact), bf16 subnormal inputs read as zero and subnormal partial sums flushed to
// zero (the instruction's fixed DAZ / FTZ). The order is again the same for every M, row position,
// panel range and thread count.
#pragma once

#include <cstdint>

#include "csrc/common/linear.h"
#include "csrc/common/rows.h"

namespace xllm_kernel::cpu {

using kernels::DType;
using kernels::LinearScheme;
using kernels::Status;

struct LinearParams {
  LinearScheme scheme = LinearScheme::kFloat32;
  kernels::LinearLayout layout = kernels::LinearLayout::kPanels;  // linear_panel_layout(scheme, k)
  DType out_dtype = DType::kFloat32;
  int64_t m = 0, n = 0, k = 0;
  int64_t group = 0;    // K elements per scale group (schemes with scales)
  int64_t groups = 0;   // ceil(K / group)
  const float* x = nullptr;  // [m] rows of k float32 (null where linear_reads_bf16_rows)
  int64_t x_stride = 0;      // elements between rows
  const uint16_t* x_bf16 = nullptr;  // the same rows as bfloat16 bits, where the input is bf16 (or null)
  int64_t x_bf16_stride = 0;
  void* out = nullptr;       // [m] rows of n elements of out_dtype
  int64_t out_stride = 0;
  const void* weights = nullptr;  // the packed panels
  const float* scales = nullptr;  // [panels][groups][kPanel] (int8, fp8, int4)
  const float* zeros = nullptr;   // [panels][groups][kPanel] (int4 with zeros; null: q was stored as q + 8)
  const float* bias = nullptr;    // [n] float32, or null
};

// The layout linear_pack_panels writes for a scheme: kPanelPairs for bf16 with K even, else kPanels.
constexpr kernels::LinearLayout linear_panel_layout(LinearScheme s, int64_t k) {
  return s == LinearScheme::kBFloat16 && k % 2 == 0 ? kernels::LinearLayout::kPanelPairs
                                                    : kernels::LinearLayout::kPanels;
}

// Whether linear(p) reads p.x_bf16 instead of p.x: bf16 weights in kPanelPairs, bf16 rows given,
// cpu_features() with AVX512_BF16 (a test's ScopedCpuFeatures may take it away).
// A caller with bf16 input sets x_bf16 first, then converts the rows to float32 only where false.
bool linear_reads_bf16_rows(const LinearParams& p);

// The number of panels of n output channels.
constexpr int64_t linear_panels(int64_t n) { return (n + kernels::kPanel - 1) / kernels::kPanel; }

// Computes the output columns of panels [panel_begin, panel_end) for every row; ranges may run
// concurrently on disjoint panels. Allocates its own scratch (at most 64 KiB + 128 m bytes).
Status linear(const LinearParams& p, int64_t panel_begin, int64_t panel_end);

// The canonical weight of one scheme, to be packed.
struct LinearPackSource {
  LinearScheme scheme = LinearScheme::kFloat32;
  int64_t n = 0, k = 0, group = 0, groups = 0;
  // [n] rows of k elements: float, bf16 or f16 bits (their schemes), int8 values (int8; int4: in
  // [-8, 7] without zeros, [0, 15] with), fp8 e4m3fn bytes.
  const void* weight = nullptr;
  int64_t weight_stride = 0;
  const float* scales = nullptr;  // [n][groups] float32 (schemes with scales)
  const float* zeros = nullptr;   // [n][groups] float32 integers in [0, 15] (int4 with zeros), or null
};

// Writes the panels: weights (linear_sizes(...).weights_bytes bytes at most), scales and zeros
// ([panels][groups][kPanel] float32; zeros only with src.zeros). Lanes past n hold 0 (int4: the
// stored zero point, so W = 0). Int4 values outside their range are an invalid argument.
Status linear_pack_panels(const LinearPackSource& src, void* weights, float* scales, float* zeros);

}  // namespace xllm_kernel::cpu
