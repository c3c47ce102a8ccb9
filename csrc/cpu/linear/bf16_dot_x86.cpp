// The linear family's bf16 dot-product kernel (bf16_dot.h), compiled with a function-level target
// so that the rest of the build keeps its baseline. A tile is kBf16DotRows rows x 32 channels: per
// pair of k, two loads of the panel (16 channels' pairs each), one 4-byte broadcast of each row's
// pair, and vdpbf16ps into 2 accumulators per row (16 of the 32 zmm registers).
//
// vdpbf16ps adds x[k + 1] W[k + 1] and then x[k] W[k] to each lane, each step rounded to nearest even
// in float32 (the products of two bf16 values are exact), treats bf16 subnormal inputs as zero and
// flushes subnormal results to zero, whatever MXCSR says. Every row's chain is the same whatever the
// tile, the row's position or the number of rows: the kernel's bits do not depend on m.
#if defined(__x86_64__) || defined(_M_X64)

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "csrc/common/linear.h"
#include "csrc/cpu/linear/bf16_dot.h"

#define XLLM_BF16 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define XLLM_BF16_INLINE \
  inline __attribute__((always_inline, target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace xllm_kernel::cpu::linear_detail {
namespace {

constexpr int64_t kP = kernels::kPanel;
static_assert(kP == 32, "a tile row is two zmm of 16 channels");

inline int32_t Load32(const uint16_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template <int R>
XLLM_BF16_INLINE void Rows(const uint16_t* x, int64_t x_stride, const Bf16DotRange& range, const uint16_t* w, float* t) {
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) {
    acc[r][0] = range.resume ? _mm512_loadu_ps(t + r * kP) : _mm512_setzero_ps();
    acc[r][1] = range.resume ? _mm512_loadu_ps(t + r * kP + 16) : _mm512_setzero_ps();
  }
  const uint16_t* a[R];
  for (int r = 0; r < R; ++r) a[r] = x + r * x_stride;
  for (int64_t q = range.pair_begin; q < range.pair_end; ++q) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(w + q * 2 * kP);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(w + q * 2 * kP + kP);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(Load32(a[r] + 2 * q));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], b0, av);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], b1, av);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(t + r * kP, acc[r][0]);
    _mm512_storeu_ps(t + r * kP + 16, acc[r][1]);
  }
}

}  // namespace

XLLM_BF16 void Bf16DotPanel(const uint16_t* x, int64_t x_stride, int64_t m, const uint16_t* panel,
                          const Bf16DotRange& range, float* t) {
  for (int64_t m0 = 0; m0 < m; m0 += kBf16DotRows) {
    const uint16_t* xr = x + m0 * x_stride;
    float* tr = t + m0 * kP;
    switch (m - m0 < kBf16DotRows ? m - m0 : kBf16DotRows) {
      case 1: Rows<1>(xr, x_stride, range, panel, tr); break;
      case 2: Rows<2>(xr, x_stride, range, panel, tr); break;
      case 3: Rows<3>(xr, x_stride, range, panel, tr); break;
      case 4: Rows<4>(xr, x_stride, range, panel, tr); break;
      case 5: Rows<5>(xr, x_stride, range, panel, tr); break;
      case 6: Rows<6>(xr, x_stride, range, panel, tr); break;
      case 7: Rows<7>(xr, x_stride, range, panel, tr); break;
      default: Rows<8>(xr, x_stride, range, panel, tr); break;
    }
  }
}

}  // namespace xllm_kernel::cpu::linear_detail

#endif  // x86-64
