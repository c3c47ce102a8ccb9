// The linear family's bf16 dot-product kernel (bf16_dot_x86.cpp): bf16 rows against bf16 weights in
// pairs of k (LinearLayout::kPanelPairs) with vdpbf16ps. Not a public interface: linear.cpp's
// per-target driver calls it where cpu_features() has AVX512_BF16 (and F, BW, VL, DQ).
#pragma once

#include <cstdint>

namespace xllm_kernel::cpu::linear_detail {

// Rows of the bf16 dot-product tile; the driver sizes its chunks of rows in multiples of it.
inline constexpr int64_t kBf16DotRows = 8;

// For rows r in [0, m) and the kPanel channels c of one panel,
//   t[r * kPanel + c] = the chain over k pairs p = 0 .. k / 2 - 1 of
//                       acc = (acc + x[r][2p + 1] W[2p + 1][c]) + x[r][2p] W[2p][c]   (vdpbf16ps)
// from acc = 0. x: bf16 bits, rows x_stride elements apart; panel: [k / 2][kPanel][2] bf16 bits; k even.
void Bf16DotPanel(const uint16_t* x, int64_t x_stride, int64_t m, int64_t k, const uint16_t* panel, float* t);

}  // namespace xllm_kernel::cpu::linear_detail
