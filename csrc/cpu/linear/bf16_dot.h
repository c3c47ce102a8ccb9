// The linear family's bf16 dot-product kernel (bf16_dot_x86.cpp): bf16 rows against bf16 weights in
// pairs of k (LinearLayout::kPanelPairs) with vdpbf16ps. Not a public interface: linear.cpp's
// per-target driver calls it where cpu_features() has AVX512_BF16 (and F, BW, VL, DQ).
#pragma once

#include <cstdint>

namespace xllm_kernel::cpu::linear_detail {

// Rows of the bf16 dot-product tile; the driver sizes its chunks of rows in multiples of it.
inline constexpr int64_t kBf16DotRows = 8;

// For rows r in [0, m) and the kPanel channels c of one panel,
//   t[r * kPanel + c] = the chain over k pairs p = pair_begin .. pair_end - 1 of
//                       acc = (acc + x[r][2p + 1] W[2p + 1][c]) + x[r][2p] W[2p][c]   (vdpbf16ps)
// from acc = t's value (`resume`) or 0. x: bf16 bits, rows x_stride elements apart; panel:
// [k / 2][kPanel][2] bf16 bits. A chain resumed from t is the same chain: float32 stored and loaded.
struct Bf16DotRange {
  int64_t pair_begin = 0, pair_end = 0;
  bool resume = false;
};
void Bf16DotPanel(const uint16_t* x, int64_t x_stride, int64_t m, const uint16_t* panel, const Bf16DotRange& range,
                  float* t);

}  // namespace xllm_kernel::cpu::linear_detail
