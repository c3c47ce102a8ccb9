// Torch-free CPU kernels of the linear family. This translation unit is compiled once per Highway
// target (foreach_target) and the entry points pick the best one at run time.
//
// One loop order serves every M: for a panel of kPanel output channels and a tile of rows, each
// accumulator lane is the chain acc = fma(x[m, k], W[n, k], acc) over k = 0 .. K - 1. Small M
// (one tile) forms W in registers as it streams the panel once; larger M forms a block of W in a
// float32 scratch first and runs every tile of rows over it, keeping the partial sums in float32
// between blocks. Both form the same W and run the same chain, so a row's bits do not depend on M.
// bf16 rows against bf16 weights in pairs (kPanelPairs) run the vdpbf16ps kernel of bf16_dot.h
// instead, on the AVX-512 target of a CPU with AVX512_BF16, for every M alike.
#include "csrc/cpu/linear/linear.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "csrc/cpu/linear/linear.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/aligned_allocator.h"

#include "csrc/cpu/common/convert-inl.h"
#include "csrc/cpu/common/cpu_features.h"
#include "csrc/cpu/linear/bf16_dot.h"
#include "csrc/cpu/linear/scaled_mm-inl.h"  // FinishPanel (scaled_mm.cpp has scaled_mm's own TU)

HWY_BEFORE_NAMESPACE();
namespace xllm_kernel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr size_t kP = static_cast<size_t>(kernels::kPanel);
constexpr size_t kL = hn::MaxLanes(DF());
static_assert(kL <= kP / 2 && kP % kL == 0, "a panel holds whole vectors, int4 halves too");
constexpr size_t kNV = kP / kL;  // vectors per panel row
// Rows per tile: kMR * kNV accumulators plus kMR broadcasts fit the register file.
constexpr size_t kMR = kL >= 16 ? 8 : (kL == 8 ? 3 : 1);
constexpr size_t kBlockK = 256;  // K rows of W formed per block for M > kMR (32 KiB of float32)

// ---------------------------------------------------------------- sources of W, per scheme
// Load(k, j): W[k, j * kL .. j * kL + kL) of the panel in float32. Scaled sources take the
// group's scales (and zero points) by Group() before the rows of that group.

struct SrcF32 {
  static constexpr bool kScaled = false;
  const float* w;
  HWY_INLINE VF Load(size_t k, size_t j) const { return hn::LoadU(DF(), w + k * kP + j * kL); }
};

template <typename T>
struct SrcHalf {  // bf16 or f16 weights
  static constexpr bool kScaled = false;
  const T* w;
  HWY_INLINE VF Load(size_t k, size_t j) const { return LoadF(w + k * kP + j * kL); }
};

// bf16 weights in pairs of k (kPanelPairs, [K / 2][kP][2]): the 32-bit word of a channel's pair
// holds k (even) in its low and k + 1 in its high half; either widens to float32 exactly.
struct SrcBf16Pairs {
  static constexpr bool kScaled = false;
  const uint16_t* w;
  HWY_INLINE VF Load(size_t k, size_t j) const {
    const DU du;
    const VU v = hn::LoadU(du, reinterpret_cast<const uint32_t*>(w + (k / 2) * 2 * kP) + j * kL);
    return hn::BitCast(DF(), (k & 1) != 0 ? hn::And(v, hn::Set(du, 0xFFFF0000u)) : hn::ShiftLeft<16>(v));
  }
};

// The scales of one group (int8, fp8: no zero points).
struct GroupScales {
  static constexpr bool kScaled = true;
  VF s[kNV];
  HWY_INLINE void Group(const float* scales, const float*) {
    HWY_UNROLL(kNV)
    for (size_t j = 0; j < kNV; ++j) s[j] = hn::LoadU(DF(), scales + j * kL);
  }
};

struct SrcInt8 : GroupScales {
  const int8_t* w;
  HWY_INLINE VF Load(size_t k, size_t j) const {
    const hn::Rebind<int8_t, DF> d8;
    const auto q = hn::PromoteTo(DI(), hn::LoadU(d8, w + k * kP + j * kL));
    return hn::Mul(hn::ConvertTo(DF(), q), s[j]);
  }
};

struct SrcFp8 : GroupScales {  // float8_e4m3fn: no infinities, S.1111.111 is NaN
  const uint8_t* w;
  HWY_INLINE VF Load(size_t k, size_t j) const {
    const DF d;
    const DU du;
    const hn::Rebind<uint8_t, DF> d8;
    const VU b = hn::PromoteTo(du, hn::LoadU(d8, w + k * kP + j * kL));
    const VU em = hn::And(b, hn::Set(du, 0x7Fu));
    // Normal: exponent E + 120 (bias 7 -> 127), mantissa in place. Subnormal (E = 0): m * 2^-9,
    // by an integer conversion (exact under DAZ too).
    const VF normal = hn::BitCast(d, hn::Add(hn::ShiftLeft<20>(em), hn::Set(du, 120u << 23)));
    const VF subnormal = hn::Mul(hn::ConvertTo(d, hn::BitCast(DI(), em)), hn::Set(d, 1.0f / 512));
    VF mag = hn::IfThenElse(hn::RebindMask(d, hn::Lt(em, hn::Set(du, 8u))), subnormal, normal);
    mag = hn::IfThenElse(hn::RebindMask(d, hn::Eq(em, hn::Set(du, 0x7Fu))),
                         hn::Set(d, std::numeric_limits<float>::quiet_NaN()), mag);
    const VU sign = hn::ShiftLeft<24>(hn::And(b, hn::Set(du, 0x80u)));
    return hn::Mul(hn::BitCast(d, hn::Or(hn::BitCast(du, mag), sign)), s[j]);
  }
};

// Nibbles: byte i of a row holds lane i (low) and lane i + kP / 2 (high), stored as q + 8 without
// zero points (kZeros false: W = (q + 8 - 8) * s) or as q with them (W = (q - z) * s).
template <bool kZeros>
struct SrcInt4 {
  static constexpr bool kScaled = true;
  const uint8_t* w;
  VF s[kNV];
  VF z[kNV];
  HWY_INLINE void Group(const float* scales, const float* zeros) {
    HWY_UNROLL(kNV)
    for (size_t j = 0; j < kNV; ++j) {
      s[j] = hn::LoadU(DF(), scales + j * kL);
      if constexpr (kZeros) z[j] = hn::LoadU(DF(), zeros + j * kL);
    }
  }
  HWY_INLINE VF Load(size_t k, size_t j) const {
    const hn::Rebind<uint8_t, DF> d8;
    const DF d;
    const size_t lane = j * kL;
    if constexpr (kL == 16) {
      // A vector holds 16 floats: one table lookup gives the nibble's value, q - 8 (kZeros false)
      // or q, in place of a conversion and a subtraction (both halves share the widened bytes).
      const VU b = hn::PromoteTo(DU(), hn::LoadU(d8, w + k * (kP / 2)));
      const VU nib = lane < kP / 2 ? hn::And(b, hn::Set(DU(), 0xFu)) : hn::ShiftRight<4>(b);
      const VF table = hn::Sub(hn::Iota(d, 0.0f), hn::Set(d, kZeros ? 0.0f : 8.0f));
      const VF q = hn::TableLookupLanes(table, hn::IndicesFromVec(d, nib));
      return kZeros ? hn::Mul(hn::Sub(q, z[j]), s[j]) : hn::Mul(q, s[j]);  // q - z exact; one rounding
    } else {
      const auto b = hn::LoadU(d8, w + k * (kP / 2) + lane % (kP / 2));
      const auto nib = lane < kP / 2 ? hn::And(b, hn::Set(d8, 0xF)) : hn::ShiftRight<4>(b);
      const VF q = hn::ConvertTo(d, hn::BitCast(DI(), hn::PromoteTo(DU(), nib)));
      return hn::Mul(hn::Sub(q, kZeros ? z[j] : hn::Set(d, 8.0f)), s[j]);  // q - z exact; one rounding
    }
  }
};

// ---------------------------------------------------------------- the chain

// acc[r][j] = fma(x[r][k], W(k - src_k0, j), acc[r][j]) for k in [k0, k1), in order.
template <size_t kRows, class Src>
HWY_INLINE void Chain(const Src& src, const float* const* x, size_t k0, size_t k1, size_t src_k0,
                      VF (&acc)[kRows][kNV]) {
  const DF d;
  // A local copy whose address never leaves this function: GCC keeps it in registers (on the
  // caller's array it stored every accumulator after every k).
  VF a[kRows][kNV];
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t j = 0; j < kNV; ++j) a[r][j] = acc[r][j];
  }
  const float* rows[kRows];
  for (size_t r = 0; r < kRows; ++r) rows[r] = x[r];
  for (size_t k = k0; k < k1; ++k) {
    VF xb[kRows];
    HWY_UNROLL(8)
    for (size_t r = 0; r < kRows; ++r) xb[r] = hn::Set(d, rows[r][k]);
    HWY_UNROLL(kNV)
    for (size_t j = 0; j < kNV; ++j) {
      const VF w = src.Load(k - src_k0, j);
      HWY_UNROLL(8)
      for (size_t r = 0; r < kRows; ++r) a[r][j] = hn::MulAdd(xb[r], w, a[r][j]);
    }
  }
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t j = 0; j < kNV; ++j) acc[r][j] = a[r][j];
  }
}

// One row over kG panels at once: acc[g][j] = fma(x[k], W_g(k, j), acc[g][j]) for k in [k0, k1), in
// order: each output is the same chain as Chain's, and the kG * kNV chains hide the FMA latency that
// one row's kNV chains leave exposed (M = 1: decode).
template <size_t kG, class Src>
HWY_INLINE void ChainPanels(const Src (&src)[kG], const float* x, size_t k0, size_t k1, VF (&acc)[kG][kNV]) {
  const DF d;
  VF a[kG][kNV];  // a local copy, as in Chain
  for (size_t g = 0; g < kG; ++g) {
    for (size_t j = 0; j < kNV; ++j) a[g][j] = acc[g][j];
  }
  for (size_t k = k0; k < k1; ++k) {
    const VF xb = hn::Set(d, x[k]);
    HWY_UNROLL(4)
    for (size_t g = 0; g < kG; ++g) {
      HWY_UNROLL(kNV)
      for (size_t j = 0; j < kNV; ++j) a[g][j] = hn::MulAdd(xb, src[g].Load(k, j), a[g][j]);
    }
  }
  for (size_t g = 0; g < kG; ++g) {
    for (size_t j = 0; j < kNV; ++j) acc[g][j] = a[g][j];
  }
}

// One packed panel, filled by PanelsT for each panel: the source pointed at its weights
// (select_panel), the call's parameters, and the panel's scales and zero points (null: none).
//   const Panel<Src> view{.src = src, .p = p, .scales = sz.first, .zeros = sz.second};
template <class Src>
struct Panel {
  Src& src;
  const LinearParams& p;
  const float* scales = nullptr;
  const float* zeros = nullptr;
};

// The chain over [k0, k1) from a source in the packed panel, group by group.
template <size_t kRows, class Src>
HWY_INLINE void ChainGroups(const Panel<Src>& panel, const float* const* x, size_t k0, size_t k1,
                            VF (&acc)[kRows][kNV]) {
  Src& src = panel.src;
  if constexpr (!Src::kScaled) {
    Chain<kRows>(src, x, k0, k1, 0, acc);
  } else {
    const size_t group = static_cast<size_t>(panel.p.group);
    for (size_t k = k0; k < k1;) {
      const size_t g = k / group;
      const size_t end = std::min(k1, (g + 1) * group);
      src.Group(panel.scales + g * kP, panel.zeros != nullptr ? panel.zeros + g * kP : nullptr);
      Chain<kRows>(src, x, k, end, 0, acc);
      k = end;
    }
  }
}

// W rows [k0, k1) of the panel formed in float32 into dst[(k - k0) * kP + lane].
template <class Src>
HWY_INLINE void FormBlock(const Panel<Src>& panel, size_t k0, size_t k1, float* HWY_RESTRICT dst) {
  const DF d;
  Src& src = panel.src;
  const size_t group = Src::kScaled ? static_cast<size_t>(panel.p.group) : static_cast<size_t>(panel.p.k);
  for (size_t k = k0; k < k1;) {
    const size_t g = k / group;
    const size_t end = std::min(k1, (g + 1) * group);
    if constexpr (Src::kScaled) {
      src.Group(panel.scales + g * kP, panel.zeros != nullptr ? panel.zeros + g * kP : nullptr);
    }
    for (; k < end; ++k) {
      HWY_UNROLL(kNV)
      for (size_t j = 0; j < kNV; ++j) hn::Store(src.Load(k, j), d, dst + (k - k0) * kP + j * kL);
    }
  }
}

// + bias (where given: adding 0 would turn -0 into +0), one rounding to T, the panel's columns of
// rows [m0, m0 + kRows).
template <typename T, size_t kRows>
HWY_INLINE void Finish(VF (&acc)[kRows][kNV], const LinearParams& p, size_t m0, size_t panel) {
  const DF d;
  const size_t n0 = panel * kP;
  const size_t cols = std::min(kP, static_cast<size_t>(p.n) - n0);
  if (p.bias != nullptr) {
    HWY_ALIGN float b[kP] = {};
    std::memcpy(b, p.bias + n0, cols * sizeof(float));
    HWY_UNROLL(kNV)
    for (size_t j = 0; j < kNV; ++j) {
      const VF bj = hn::Load(d, b + j * kL);
      HWY_UNROLL(8)
      for (size_t r = 0; r < kRows; ++r) acc[r][j] = hn::Add(acc[r][j], bj);
    }
  }
  T* out = static_cast<T*>(p.out);
  for (size_t r = 0; r < kRows; ++r) {
    T* y = out + static_cast<int64_t>(m0 + r) * p.out_stride + n0;
    if (cols == kP) {
      HWY_UNROLL(kNV)
      for (size_t j = 0; j < kNV; ++j) StoreF(acc[r][j], y + j * kL);
    } else {
      T tmp[kP];
      for (size_t j = 0; j < kNV; ++j) StoreF(acc[r][j], tmp + j * kL);
      std::memcpy(y, tmp, cols * sizeof(T));
    }
  }
}

template <size_t kRows>
HWY_INLINE void ZeroAcc(VF (&acc)[kRows][kNV]) {
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t j = 0; j < kNV; ++j) acc[r][j] = hn::Zero(DF());
  }
}

// Calls f(std::integral_constant<size_t, R>) for R = rows (1 <= rows <= kMax).
template <size_t kMax, class F>
HWY_INLINE void WithRows(size_t rows, const F& f) {
  if constexpr (kMax > 0) {
    if (rows == kMax) return f(std::integral_constant<size_t, kMax>());
    WithRows<kMax - 1>(rows, f);
  }
}

template <typename T, class Src>
void PanelsT(const LinearParams& p, Src src, size_t panel_bytes, int64_t panel_begin, int64_t panel_end) {
  const size_t m = static_cast<size_t>(p.m), k = static_cast<size_t>(p.k);
  const size_t scale_stride = static_cast<size_t>(p.groups) * kP;  // floats per panel
  const uint8_t* weights = static_cast<const uint8_t*>(p.weights);
  // Points the source at a panel's weights; returns its scales and zero points (null: none).
  auto select_panel = [&](int64_t panel) {
    src.w = reinterpret_cast<decltype(src.w)>(weights + panel * panel_bytes);
    return std::pair<const float*, const float*>(
        p.scales != nullptr ? p.scales + panel * scale_stride : nullptr,
        p.zeros != nullptr ? p.zeros + panel * scale_stride : nullptr);
  };
  // Panels run together for one row (ChainPanels) where their sources' state and accumulators fit the
  // register file: 4 with two vectors per panel row (AVX-512), else 1.
  constexpr size_t kG = kNV <= 2 ? 4 : 1;
  if (m == 1 && kG > 1) {
    const float* x = p.x;
    int64_t panel = panel_begin;
    for (; panel + static_cast<int64_t>(kG) <= panel_end; panel += kG) {
      Src srcs[kG];
      const float* sp[kG];
      const float* zp[kG];
      for (size_t g = 0; g < kG; ++g) {
        const std::pair<const float*, const float*> sz = select_panel(panel + static_cast<int64_t>(g));
        srcs[g] = src;
        sp[g] = sz.first;
        zp[g] = sz.second;
      }
      VF acc[kG][kNV];
      for (size_t g = 0; g < kG; ++g) {
        for (size_t j = 0; j < kNV; ++j) acc[g][j] = hn::Zero(DF());
      }
      if constexpr (!Src::kScaled) {
        ChainPanels<kG>(srcs, x, 0, k, acc);
      } else {
        const size_t group = static_cast<size_t>(p.group);
        for (size_t k0 = 0; k0 < k;) {
          const size_t gi = k0 / group;
          const size_t end = std::min(k, (gi + 1) * group);
          for (size_t g = 0; g < kG; ++g) srcs[g].Group(sp[g] + gi * kP, zp[g] != nullptr ? zp[g] + gi * kP : nullptr);
          ChainPanels<kG>(srcs, x, k0, end, acc);
          k0 = end;
        }
      }
      for (size_t g = 0; g < kG; ++g) {
        VF one[1][kNV];
        for (size_t j = 0; j < kNV; ++j) one[0][j] = acc[g][j];
        Finish<T, 1>(one, p, 0, static_cast<size_t>(panel) + g);
      }
    }
    panel_begin = panel;  // the panels left, one at a time below
  }
  if (m <= kMR) {
    // One tile: W formed in registers, the panel streamed once.
    const float* x[kMR];
    for (size_t r = 0; r < m; ++r) x[r] = p.x + static_cast<int64_t>(r) * p.x_stride;
    for (int64_t panel = panel_begin; panel < panel_end; ++panel) {
      const std::pair<const float*, const float*> sz = select_panel(panel);
      const float* sp = sz.first;
      const float* zp = sz.second;
      WithRows<kMR>(m, [&](auto rows) {
        constexpr size_t R = decltype(rows)::value;
        VF acc[R][kNV];
        ZeroAcc<R>(acc);
        ChainGroups<R>(Panel<Src>{.src = src, .p = p, .scales = sp, .zeros = zp}, x, 0, k, acc);
        Finish<T, R>(acc, p, 0, static_cast<size_t>(panel));
      });
    }
    return;
  }
  // Blocks of W formed once, every tile of rows run over each; partial sums kept in float32.
  auto block = hwy::AllocateAligned<float>(kBlockK * kP);
  auto partial = hwy::AllocateAligned<float>(m * kP);
  const DF d;
  for (int64_t panel = panel_begin; panel < panel_end; ++panel) {
    const std::pair<const float*, const float*> sz = select_panel(panel);
    const Panel<Src> view{.src = src, .p = p, .scales = sz.first, .zeros = sz.second};
    for (size_t k0 = 0; k0 < k; k0 += kBlockK) {
      const size_t k1 = std::min(k, k0 + kBlockK);
      FormBlock(view, k0, k1, block.get());
      const SrcF32 formed{block.get()};
      for (size_t m0 = 0; m0 < m; m0 += kMR) {
        WithRows<kMR>(std::min(kMR, m - m0), [&](auto rows) {
          constexpr size_t R = decltype(rows)::value;
          const float* x[R];
          for (size_t r = 0; r < R; ++r) x[r] = p.x + static_cast<int64_t>(m0 + r) * p.x_stride;
          VF acc[R][kNV];
          if (k0 == 0) {
            ZeroAcc<R>(acc);
          } else {
            for (size_t r = 0; r < R; ++r) {
              for (size_t j = 0; j < kNV; ++j) acc[r][j] = hn::Load(d, partial.get() + (m0 + r) * kP + j * kL);
            }
          }
          Chain<R>(formed, x, k0, k1, k0, acc);
          if (k1 == k) {
            Finish<T, R>(acc, p, m0, static_cast<size_t>(panel));
          } else {
            for (size_t r = 0; r < R; ++r) {
              for (size_t j = 0; j < kNV; ++j) hn::Store(acc[r][j], d, partial.get() + (m0 + r) * kP + j * kL);
            }
          }
        });
      }
    }
  }
}

// Whether this target runs bf16_dot.h's kernel for p (linear_reads_bf16_rows).
bool ReadsBf16Rows(const LinearParams& p) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  return p.scheme == LinearScheme::kBFloat16 && p.layout == kernels::LinearLayout::kPanelPairs &&
         p.x_bf16 != nullptr && cpu_features().avx512_bf16;
#else
  (void)p;
  return false;
#endif
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// bf16_dot.h's kernel over chunks of rows (whole tiles), then panels. A panel (K * 64 bytes) is read
// from memory once per chunk and from the cache by the chunk's other tiles:
//   K <= 8192 (a panel of at most 512 KiB stays in L2): chunks of about 1 MiB of rows (in L2 too);
//   larger K: chunks of about 8 MiB of rows (in the last-level cache), each panel run in blocks of
//     kBf16DotBlock pairs of k (32 KiB, in L1 while every tile of the chunk runs over it; the partial
//     sums wait in t in float32: the same chain).
// (A/B on Zen 5: blocking 4096 x 14336 gave 0.77x the time at M = 512 and 0.91x at 64; at K = 4096 it
// gave 1.18x at M = 16 and 1.05x at 64, so smaller K keeps whole panels.)
constexpr int64_t kBf16DotBlock = 256;

void Bf16DotPanels(const LinearParams& p, int64_t panel_begin, int64_t panel_end) {
  constexpr int64_t kRows = linear_detail::kBf16DotRows;
  const bool blocked = p.k > 8192;
  const int64_t chunk_bytes = blocked ? int64_t{8} << 20 : int64_t{1} << 20;
  const int64_t chunk = std::max<int64_t>(kRows, chunk_bytes / (p.k * 2) / kRows * kRows);
  const int64_t pairs = p.k / 2, block = blocked ? kBf16DotBlock : pairs;
  auto t = hwy::AllocateAligned<float>(static_cast<size_t>(std::min(p.m, chunk) * kernels::kPanel));
  const uint16_t* weights = static_cast<const uint16_t*>(p.weights);
  const size_t out_bytes = kernels::element_size(p.out_dtype);
  for (int64_t r0 = 0; r0 < p.m; r0 += chunk) {
    const int64_t rows = std::min(chunk, p.m - r0);
    const PanelRows finish{.out = static_cast<uint8_t*>(p.out) + r0 * p.out_stride * out_bytes,
                           .out_stride = p.out_stride,
                           .n = p.n,
                           .m = rows,
                           .bias = p.bias};
    for (int64_t panel = panel_begin; panel < panel_end; ++panel) {
      for (int64_t q0 = 0; q0 < pairs; q0 += block) {
        const linear_detail::Bf16DotRange range{.pair_begin = q0, .pair_end = std::min(pairs, q0 + block),
                                                .resume = q0 > 0};
        linear_detail::Bf16DotPanel(p.x_bf16 + r0 * p.x_bf16_stride, p.x_bf16_stride, rows,
                                    weights + panel * p.k * kernels::kPanel, range, t.get());
      }
      FinishPanel(p.out_dtype, finish, panel, t.get());
    }
  }
}
#endif

template <typename T>
void LinearT(const LinearParams& p, int64_t panel_begin, int64_t panel_end) {
  const size_t k = static_cast<size_t>(p.k);
  switch (p.scheme) {
    case LinearScheme::kFloat32:
      return PanelsT<T>(p, SrcF32{nullptr}, k * kP * 4, panel_begin, panel_end);
    case LinearScheme::kBFloat16:
      if (p.layout == kernels::LinearLayout::kPanelPairs) {
        return PanelsT<T>(p, SrcBf16Pairs{nullptr}, k * kP * 2, panel_begin, panel_end);
      }
      return PanelsT<T>(p, SrcHalf<bfloat16_t>{nullptr}, k * kP * 2, panel_begin, panel_end);
    case LinearScheme::kFloat16:
      return PanelsT<T>(p, SrcHalf<float16_t>{nullptr}, k * kP * 2, panel_begin, panel_end);
    case LinearScheme::kInt8:
      return PanelsT<T>(p, SrcInt8{{}, nullptr}, k * kP, panel_begin, panel_end);
    case LinearScheme::kFp8:
      return PanelsT<T>(p, SrcFp8{{}, nullptr}, k * kP, panel_begin, panel_end);
    case LinearScheme::kInt4:
      if (p.zeros != nullptr) return PanelsT<T>(p, SrcInt4<true>{nullptr, {}, {}}, k * kP / 2, panel_begin, panel_end);
      return PanelsT<T>(p, SrcInt4<false>{nullptr, {}, {}}, k * kP / 2, panel_begin, panel_end);
    case LinearScheme::kW8A8Int8:  // scaled_mm's schemes: linear() refuses them before dispatch
    case LinearScheme::kW8A8Fp8:
    case LinearScheme::kW4A8: return;
  }
}

void LinearPanels(const LinearParams& p, int64_t panel_begin, int64_t panel_end) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if (ReadsBf16Rows(p)) return Bf16DotPanels(p, panel_begin, panel_end);
#endif
  switch (p.out_dtype) {
    case DType::kFloat32: return LinearT<float>(p, panel_begin, panel_end);
    case DType::kBFloat16: return LinearT<bfloat16_t>(p, panel_begin, panel_end);
    case DType::kFloat16: return LinearT<float16_t>(p, panel_begin, panel_end);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace xllm_kernel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace xllm_kernel::cpu {

HWY_EXPORT(LinearPanels);
HWY_EXPORT(ReadsBf16Rows);

namespace {

bool valid_scheme(LinearScheme s) {
  return s == LinearScheme::kFloat32 || s == LinearScheme::kBFloat16 || s == LinearScheme::kFloat16 ||
         s == LinearScheme::kInt8 || s == LinearScheme::kFp8 || s == LinearScheme::kInt4;
}

// The group layout every scheme needs: scaled schemes a group in [1, k] with groups = ceil(k / group).
bool valid_groups(LinearScheme s, int64_t k, int64_t group, int64_t groups) {
  if (!kernels::scheme_has_scales(s)) return true;
  return group >= 1 && group <= k && groups == kernels::ceil_div(k, group);
}

// Rows [n][k] (stride elements apart) into panels of kPanel channels of the same bits, lanes past n
// zero: element (kk, lane) of a panel at panel[at(kk, lane)]. A panel's destination (k * kPanel
// elements) stays in the cache while each of its rows is read once, in order.
//   [k][kPanel]:         at = kk * kPanel + lane
//   [k / 2][kPanel][2]:  at = (kk / 2) * 2 * kPanel + lane * 2 + kk % 2   (kPanelPairs, k even)
template <typename T, class At>
void transpose_panels(const T* src, int64_t stride, int64_t n, int64_t k, T* dst, At at) {
  using kernels::kPanel;
  for (int64_t p = 0; p < linear_panels(n); ++p) {
    T* panel = dst + p * k * kPanel;
    const int64_t lanes = std::min<int64_t>(kPanel, n - p * kPanel);
    for (int64_t lane = 0; lane < kPanel; ++lane) {
      const T* row = lane < lanes ? src + (p * kPanel + lane) * stride : nullptr;
      for (int64_t kk = 0; kk < k; ++kk) panel[at(kk, lane)] = row != nullptr ? row[kk] : T{};
    }
  }
}

template <typename T>
void transpose_panels(const T* src, int64_t stride, int64_t n, int64_t k, T* dst) {
  transpose_panels(src, stride, n, k, dst, [](int64_t kk, int64_t lane) { return kk * kernels::kPanel + lane; });
}

}  // namespace

bool linear_reads_bf16_rows(const LinearParams& p) { return HWY_DYNAMIC_DISPATCH(ReadsBf16Rows)(p); }

Status linear(const LinearParams& p, int64_t panel_begin, int64_t panel_end) {
  if (!valid_scheme(p.scheme) || !kernels::valid_dtype(p.out_dtype)) return Status::invalid("unknown scheme or dtype");
  if (p.m < 0 || p.n < 1 || p.k < 1) return Status::invalid("m must be >= 0, n and k >= 1");
  if (panel_begin < 0 || panel_begin > panel_end || panel_end > linear_panels(p.n)) {
    return Status::invalid("panel range out of bounds");
  }
  if (!valid_groups(p.scheme, p.k, p.group, p.groups)) return Status::invalid("group must be in [1, k], groups ceil(k / group)");
  if (p.layout != linear_panel_layout(p.scheme, p.k)) return Status::invalid("layout is not the scheme's panel layout");
  if (p.m == 0 || panel_begin == panel_end) return Status::ok();
  const bool bf16_rows = linear_reads_bf16_rows(p);
  if ((bf16_rows ? p.x_bf16 == nullptr : p.x == nullptr) || p.out == nullptr || p.weights == nullptr) {
    return Status::invalid("null x, out or weights");
  }
  if (kernels::scheme_has_scales(p.scheme) && p.scales == nullptr) return Status::invalid("null scales");
  if (p.zeros != nullptr && p.scheme != LinearScheme::kInt4) return Status::invalid("zeros need the int4 scheme");
  if ((bf16_rows ? p.x_bf16_stride : p.x_stride) < p.k && p.m > 1) return Status::invalid("x rows overlap");
  if (p.out_stride < p.n && p.m > 1) return Status::invalid("out rows overlap");
  HWY_DYNAMIC_DISPATCH(LinearPanels)(p, panel_begin, panel_end);
  return Status::ok();
}

Status linear_pack_panels(const LinearPackSource& s, void* weights, float* scales, float* zeros) {
  using kernels::kPanel;
  if (!valid_scheme(s.scheme)) return Status::invalid("unknown scheme");
  if (s.n < 1 || s.k < 1 || s.weight == nullptr || weights == nullptr || s.weight_stride < s.k) {
    return Status::invalid("n and k must be >= 1, weight rows of k elements");
  }
  if (!valid_groups(s.scheme, s.k, s.group, s.groups)) return Status::invalid("group must be in [1, k], groups ceil(k / group)");
  const bool scaled = kernels::scheme_has_scales(s.scheme);
  if (scaled && (s.scales == nullptr || scales == nullptr)) return Status::invalid("null scales");
  if (s.zeros != nullptr && (s.scheme != LinearScheme::kInt4 || zeros == nullptr)) {
    return Status::invalid("zeros need the int4 scheme and a zeros section");
  }
  const int64_t panels = linear_panels(s.n);
  const int64_t n = s.n, k = s.k;
  const int64_t bytes = kernels::scheme_bits(s.scheme) / 8;  // 0 for int4
  const uint8_t* src = static_cast<const uint8_t*>(s.weight);
  uint8_t* dst = static_cast<uint8_t*>(weights);
  if (s.scheme == LinearScheme::kInt4) {
    const int8_t lo = s.zeros != nullptr ? 0 : -8, hi = s.zeros != nullptr ? 15 : 7;
    const int offset = s.zeros != nullptr ? 0 : 8;
    const int64_t half = kPanel / 2;
    for (int64_t p = 0; p < panels; ++p) {
      for (int64_t kk = 0; kk < k; ++kk) {
        uint8_t* row = dst + (p * k + kk) * half;
        for (int64_t lane = 0; lane < kPanel; ++lane) {
          const int64_t nn = p * kPanel + lane;
          int stored = offset;  // past n: W = (offset - zero) * 0 = 0
          if (nn < n) {
            const int8_t q = static_cast<const int8_t*>(s.weight)[nn * s.weight_stride + kk];
            if (q < lo || q > hi) return Status::invalid("int4 weight outside its range");
            stored = q + offset;
          }
          if (lane < half) {
            row[lane] = static_cast<uint8_t>(stored);
          } else {
            row[lane - half] = static_cast<uint8_t>(row[lane - half] | (stored << 4));
          }
        }
      }
    }
  } else if (bytes == 4) {
    transpose_panels(static_cast<const uint32_t*>(s.weight), s.weight_stride, n, k, static_cast<uint32_t*>(weights));
  } else if (linear_panel_layout(s.scheme, k) == kernels::LinearLayout::kPanelPairs) {
    transpose_panels(static_cast<const uint16_t*>(s.weight), s.weight_stride, n, k, static_cast<uint16_t*>(weights),
                     [](int64_t kk, int64_t lane) { return (kk / 2) * 2 * kPanel + lane * 2 + (kk & 1); });
  } else if (bytes == 2) {
    transpose_panels(static_cast<const uint16_t*>(s.weight), s.weight_stride, n, k, static_cast<uint16_t*>(weights));
  } else {
    transpose_panels(src, s.weight_stride, n, k, dst);
  }
  if (scaled) {
    for (int64_t p = 0; p < panels; ++p) {
      for (int64_t g = 0; g < s.groups; ++g) {
        for (int64_t lane = 0; lane < kPanel; ++lane) {
          const int64_t nn = p * kPanel + lane;
          const int64_t at = (p * s.groups + g) * kPanel + lane;
          scales[at] = nn < n ? s.scales[nn * s.groups + g] : 0.0f;
          if (s.zeros != nullptr) zeros[at] = nn < n ? s.zeros[nn * s.groups + g] : 0.0f;
        }
      }
    }
  }
  return Status::ok();
}

}  // namespace xllm_kernel::cpu
#endif  // HWY_ONCE
