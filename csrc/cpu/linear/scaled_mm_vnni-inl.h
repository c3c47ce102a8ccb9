// scaled_mm's vpdpbusd tiles, one source for both vector widths: included by scaled_mm_x86.cpp
// once per width, inside a namespace of its own and under that width's target attributes
// (HWY_PUSH_ATTRIBUTES), after it has defined `W`, the width's operations:
//
//   struct W {
//     using V = ...;                         // __m512i (AVX512_VNNI) or __m256i (AVX-VNNI, VEX)
//     static constexpr int kVecs;            // vectors per 32 channels: 2 or 4
//     static constexpr int kInt8Rows, kW4a8Rows;  // rows per tile
//     static constexpr bool kHoldWeights;    // the schedule (below)
//     V Zero(); V Load(const void*); V Broadcast(int32_t); V Set1(int32_t); V Add(V, V); V Sub(V, V);
//     V Mullo(V, V); V LowNibbles(V); V HighNibbles(V);
//     V Dpbusd(V acc, V u, V s);             // acc + u (unsigned bytes) . s (signed bytes), int8 tile
//     V DpbusdNibbles(V acc, V u, V s);      // the same, w4a8 tile
//     S Scales(const float* s);             // a panel's 32 channel scales, as the epilogue takes them
//     void Epilogue(float* t, const V (&c)[kVecs], float sa, S scales, bool first);
//   };
//
// The arithmetic is the kernels' (scaled_mm_x86.cpp's header): int32 sums of exact products, so
// the order of the products does not change a bit. What the width changes is the schedule, chosen
// by the registers: with 32 zmm registers a quad's weight vectors are held while the rows'
// broadcasts stream (kHoldWeights); with 16 ymm registers the rows' broadcasts are held while the
// weight vectors stream. Few accumulator chains (at most 4 vectors of R rows) get a second set of
// accumulators (even and odd quads, or low and high nibbles) to hide vpdpbusd's latency.
//
// No include guard: one inclusion per width (scaled_mm_x86.cpp).

// Accumulator sets of a tile of R rows.
template <int R>
constexpr int kSetsOf = R * W::kVecs <= 4 ? 2 : 1;

// ---------------------------------------------------------------- w8a8-int8

// acc[r][j] += a[r]'s quad q (a + 128 as uint8, broadcast) . channels 8 * lanes * j.. of quad q.
template <int R>
HWY_INLINE void Int8Quad(const uint8_t* const (&a)[R], const int8_t* w, int64_t q, typename W::V (&acc)[R][W::kVecs]) {
  using V = typename W::V;
  constexpr int64_t kBytes = 128 / W::kVecs;  // one vector of a quad: its channels' 4 k
  if constexpr (W::kHoldWeights) {
    V wv[W::kVecs];
    for (int j = 0; j < W::kVecs; ++j) wv[j] = W::Load(w + q * 128 + j * kBytes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const V b = W::Broadcast(Load32(a[r] + q * 4));
      for (int j = 0; j < W::kVecs; ++j) acc[r][j] = W::Dpbusd(acc[r][j], b, wv[j]);
    }
  } else {
    V b[R];
    for (int r = 0; r < R; ++r) b[r] = W::Broadcast(Load32(a[r] + q * 4));
#pragma GCC unroll 4
    for (int j = 0; j < W::kVecs; ++j) {
      const V wv = W::Load(w + q * 128 + j * kBytes);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r][j] = W::Dpbusd(acc[r][j], b[r], wv);
    }
  }
}

// Rows [m0, m0 + R) of a panel: w the panel's quads, [quads][32][4] int8; the activations a + 128
// as uint8 (AForm::kUint8). t = (float(sum (a + 128) q - (128 + azp) sum q) * sa) * s: the int32
// wraps of the shifted sum cancel (the result fits).
template <int R>
void Int8Rows(const Prepared& x, const int8_t* w, int64_t quads, int64_t m0, const int32_t* sums, const float* scales,
              float* t) {
  using V = typename W::V;
  constexpr int kSets = kSetsOf<R>;
  V acc[kSets][R][W::kVecs];
  for (int s = 0; s < kSets; ++s) {
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < W::kVecs; ++j) acc[s][r][j] = W::Zero();
    }
  }
  const uint8_t* a[R];
  for (int r = 0; r < R; ++r) a[r] = static_cast<const uint8_t*>(x.a) + (m0 + r) * x.stride;
  int64_t q = 0;
  for (; q + kSets <= quads; q += kSets) {
#pragma GCC unroll 2
    for (int s = 0; s < kSets; ++s) Int8Quad<R>(a, w, q + s, acc[s]);
  }
  for (; q < quads; ++q) Int8Quad<R>(a, w, q, acc[0]);
  V sum[W::kVecs];
  for (int j = 0; j < W::kVecs; ++j) sum[j] = W::Load(sums + j * (32 / W::kVecs));
  const typename W::S s = W::Scales(scales);
  for (int r = 0; r < R; ++r) {
    const V shift = W::Set1(128 + (x.azp != nullptr ? x.azp[m0 + r] : 0));
    V c[W::kVecs];
    for (int j = 0; j < W::kVecs; ++j) {
      c[j] = acc[0][r][j];
      if constexpr (kSets == 2) c[j] = W::Add(c[j], acc[1][r][j]);
      c[j] = W::Sub(c[j], W::Mullo(sum[j], shift));
    }
    W::Epilogue(t + (m0 + r) * kP, c, x.scale_a[m0 + r], s, true);
  }
}

// ---------------------------------------------------------------- w4a8

// Rows [m0, m0 + R) of a panel: the nibbles (0..15) the unsigned operand, the activations the
// signed one (no shift); w the panel's blocks of 8 k, [K / 8][2][16][4] bytes, so that the block's
// vector j holds channels 8 * lanes * j... Per group: t (+)= (float(acc - z * sum_g a) * sa) * s.
template <int R>
void W4a8Rows(const Prepared& x, int64_t panel, int64_t m0, float* t) {
  using V = typename W::V;
  constexpr int kSets = kSetsOf<R>;
  constexpr int64_t kBytes = 128 / W::kVecs;
  const ScaledMmParams& p = *x.p;
  const int64_t blocks = p.k / 8, per_group = p.group / 8, groups = p.groups;
  const uint8_t* w = static_cast<const uint8_t*>(p.weights) + panel * p.k * 16;
  const int32_t* zeros = static_cast<const int32_t*>(p.zeros);
  const int8_t* a[R];
  for (int r = 0; r < R; ++r) a[r] = static_cast<const int8_t*>(x.a) + (m0 + r) * x.stride;
  for (int64_t g = 0; g < groups; ++g) {
    V acc[kSets][R][W::kVecs];  // the low nibbles' quads in set 0, the high ones' in the last set
    for (int s = 0; s < kSets; ++s) {
      for (int r = 0; r < R; ++r) {
        for (int j = 0; j < W::kVecs; ++j) acc[s][r][j] = W::Zero();
      }
    }
    const int64_t b1 = std::min(blocks, (g + 1) * per_group);
    for (int64_t b = g * per_group; b < b1; ++b) {
      if constexpr (W::kHoldWeights) {
        V lo[W::kVecs], hi[W::kVecs];
        for (int j = 0; j < W::kVecs; ++j) {
          const V v = W::Load(w + b * 128 + j * kBytes);
          lo[j] = W::LowNibbles(v);
          hi[j] = W::HighNibbles(v);
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const V alo = W::Broadcast(Load32(a[r] + b * 8)), ahi = W::Broadcast(Load32(a[r] + b * 8 + 4));
          for (int j = 0; j < W::kVecs; ++j) {
            acc[0][r][j] = W::DpbusdNibbles(acc[0][r][j], lo[j], alo);
            acc[kSets - 1][r][j] = W::DpbusdNibbles(acc[kSets - 1][r][j], hi[j], ahi);
          }
        }
      } else {
        V alo[R], ahi[R];
        for (int r = 0; r < R; ++r) {
          alo[r] = W::Broadcast(Load32(a[r] + b * 8));
          ahi[r] = W::Broadcast(Load32(a[r] + b * 8 + 4));
        }
#pragma GCC unroll 4
        for (int j = 0; j < W::kVecs; ++j) {
          const V v = W::Load(w + b * 128 + j * kBytes);
          const V lo = W::LowNibbles(v), hi = W::HighNibbles(v);
#pragma GCC unroll 2
          for (int r = 0; r < R; ++r) {
            acc[0][r][j] = W::DpbusdNibbles(acc[0][r][j], lo, alo[r]);
            acc[kSets - 1][r][j] = W::DpbusdNibbles(acc[kSets - 1][r][j], hi, ahi[r]);
          }
        }
      }
    }
    const int64_t at = (panel * groups + g) * kP;
    V z[W::kVecs];
    for (int j = 0; j < W::kVecs; ++j) z[j] = zeros != nullptr ? W::Load(zeros + at + j * (32 / W::kVecs)) : W::Set1(8);
    const typename W::S s = W::Scales(p.scales + at);
    for (int r = 0; r < R; ++r) {
      const V asum = W::Set1(x.asum[(m0 + r) * groups + g]);
      V c[W::kVecs];
      for (int j = 0; j < W::kVecs; ++j) {
        c[j] = acc[0][r][j];
        if constexpr (kSets == 2) c[j] = W::Add(c[j], acc[1][r][j]);
        c[j] = W::Sub(c[j], W::Mullo(z[j], asum));
      }
      W::Epilogue(t + (m0 + r) * kP, c, x.scale_a[m0 + r], s, g == 0);
    }
  }
}

// ---------------------------------------------------------------- panels: a table of tiles

using Int8RowsFn = void (*)(const Prepared&, const int8_t*, int64_t, int64_t, const int32_t*, const float*, float*);
using W4a8RowsFn = void (*)(const Prepared&, int64_t, int64_t, float*);

template <int... R>
constexpr std::array<Int8RowsFn, sizeof...(R)> Int8Tiles(std::integer_sequence<int, R...>) {
  return {&Int8Rows<R + 1>...};
}
template <int... R>
constexpr std::array<W4a8RowsFn, sizeof...(R)> W4a8Tiles(std::integer_sequence<int, R...>) {
  return {&W4a8Rows<R + 1>...};
}

// Tiles of W::kInt8Rows rows, the last one of the rows left (the table's entry for that count).
void Int8Panel(const Prepared& x, int64_t panel, float* t) {
  static constexpr auto kTiles = Int8Tiles(std::make_integer_sequence<int, W::kInt8Rows>{});
  const ScaledMmParams& p = *x.p;
  const int64_t quads = x.k4 / 4;
  const int8_t* w = static_cast<const int8_t*>(p.weights) + panel * quads * 128;
  for (int64_t m0 = 0; m0 < p.m; m0 += W::kInt8Rows) {
    kTiles[std::min<int64_t>(W::kInt8Rows, p.m - m0) - 1](x, w, quads, m0, p.sums + panel * kP, p.scales + panel * kP, t);
  }
}

void W4a8Panel(const Prepared& x, int64_t panel, float* t) {
  static constexpr auto kTiles = W4a8Tiles(std::make_integer_sequence<int, W::kW4a8Rows>{});
  for (int64_t m0 = 0; m0 < x.p->m; m0 += W::kW4a8Rows) kTiles[std::min<int64_t>(W::kW4a8Rows, x.p->m - m0) - 1](x, panel, m0, t);
}
