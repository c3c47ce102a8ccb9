// The row passes of the normalization kernels (csrc/cpu/normalization/normalization.cpp), shared
// with the kernels that fuse a normalization with what follows (csrc/cpu/quantization), so that
// both compute the same float32 arithmetic in the same order and round to the same bits.
//
// Include after "hwy/highway.h" in a foreach_target translation unit (per-target include guard):
//   #include "csrc/cpu/normalization/normalization-inl.h"
//   const float ss = ReduceRow(x, hidden, SquareOp());
//   const float inv = RmsInverse(ss, inv_hidden, eps);
//   weights.Row<false, false>(x, 0.0f, inv, y, hidden, next, std::isnan(ss), stream);
// Per-target include guard (Highway's idiom): included once per target by foreach_target.
#if defined(XLLM_KERNEL_CPU_NORMALIZATION_NORMALIZATION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef XLLM_KERNEL_CPU_NORMALIZATION_NORMALIZATION_INL_H_
#undef XLLM_KERNEL_CPU_NORMALIZATION_NORMALIZATION_INL_H_
#else
#define XLLM_KERNEL_CPU_NORMALIZATION_NORMALIZATION_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "csrc/cpu/common/convert-inl.h"
#include "csrc/cpu/common/stream-inl.h"
#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace xllm_kernel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---------------------------------------------------------------- row passes

struct SquareOp {
  HWY_INLINE VF operator()(VF v, VF acc) const { return hn::MulAdd(v, v, acc); }
};
struct SumOp {
  HWY_INLINE VF operator()(VF v, VF acc) const { return hn::Add(v, acc); }
};
struct DeviationSquareOp {
  VF mean;
  HWY_INLINE VF operator()(VF v, VF acc) const {
    const VF dev = hn::Sub(v, mean);
    return hn::MulAdd(dev, dev, acc);
  }
};

// fp32 reduction of op over a row; four accumulators hide the add latency.
template <typename T, class Op>
HWY_INLINE float ReduceRow(const T* x, size_t hidden, const Op& op) {
  const DF d;
  const size_t n = hn::Lanes(d);
  VF a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * n <= hidden; i += 4 * n) {
    VF v0, v1, v2, v3;
    Load2Unordered(x + i, v0, v1);
    Load2Unordered(x + i + 2 * n, v2, v3);
    a0 = op(v0, a0);
    a1 = op(v1, a1);
    a2 = op(v2, a2);
    a3 = op(v3, a3);
  }
  for (; i + n <= hidden; i += n) a0 = op(LoadF(x + i), a0);
  if (i < hidden) {
    const size_t rest = hidden - i;
    a1 = hn::IfThenElse(hn::FirstN(d, rest), op(LoadTail(x + i, rest), a1), a1);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
}

// y = (x - shift) * scale * w (+ b), rounded once into y. x - shift stays a separate, exact
// subtraction for x near the mean: a fused x * scale - shift * scale would round shift * scale
// and leave an error of |mean| * scale ulps where the result should be (near) zero.
template <bool kShift, bool kBias, typename W>
HWY_INLINE VF Affine(VF x, VF shift, VF scale, const W* w, const W* b) {
  const VF v = kShift ? hn::Mul(hn::Sub(x, shift), scale) : hn::Mul(x, scale);
  if constexpr (kBias) return hn::MulAdd(v, LoadF(w), LoadF(b));
  return hn::Mul(v, LoadF(w));
}

// `next` (the next row's input, or x for the last row) is prefetched in step, so memory keeps
// streaming while this row is finished from cache. kStream (f32 rows only): whole vectors are
// stored non-temporally, y must be aligned to the vector size.
template <bool kShift, bool kBias, bool kStream = false, typename T, typename W>
HWY_INLINE void AffineRow(const T* x, float shift_s, float scale_s, const W* w, const W* b, T* y,
                          size_t hidden, const T* next) {
  const DF d;
  const size_t n = hn::Lanes(d);
  const VF shift = hn::Set(d, kShift ? shift_s : 0.0f);
  const VF scale = hn::Set(d, scale_s);
  size_t i = 0;
  for (; i + 4 * n <= hidden; i += 4 * n) {
    PrefetchElems(next + i, 4 * n);
    VF v0 = Affine<kShift, kBias>(LoadF(x + i), shift, scale, w + i, b + i);
    VF v1 = Affine<kShift, kBias>(LoadF(x + i + n), shift, scale, w + i + n, b + i + n);
    VF v2 = Affine<kShift, kBias>(LoadF(x + i + 2 * n), shift, scale, w + i + 2 * n, b + i + 2 * n);
    VF v3 = Affine<kShift, kBias>(LoadF(x + i + 3 * n), shift, scale, w + i + 3 * n, b + i + 3 * n);
    if constexpr (kStream && std::is_same_v<T, float>) {
      StoreVec<true>(v0, d, y + i);
      StoreVec<true>(v1, d, y + i + n);
      StoreVec<true>(v2, d, y + i + 2 * n);
      StoreVec<true>(v3, d, y + i + 3 * n);
    } else {
      Store2F(v0, v1, y + i);
      Store2F(v2, v3, y + i + 2 * n);
    }
  }
  for (; i + n <= hidden; i += n)
    StoreF(Affine<kShift, kBias>(LoadF(x + i), shift, scale, w + i, b + i), y + i);
  if (i < hidden) {
    const size_t rest = hidden - i;
    const VF xv = LoadTail(x + i, rest);
    VF v = kShift ? hn::Mul(hn::Sub(xv, shift), scale) : hn::Mul(xv, scale);
    if constexpr (kBias) {
      v = hn::MulAdd(v, LoadTail(w + i, rest), LoadTail(b + i, rest));
    } else {
      v = hn::Mul(v, LoadTail(w + i, rest));
    }
    StoreTail(v, y + i, rest);
  }
}

// r = round(x + r) stored into r; returns the fp32 sum of squares of the stored values.
template <typename T>
HWY_INLINE float AddRoundSumSquares(const T* x, T* r, size_t hidden) {
  const DF d;
  const size_t n = hn::Lanes(d);
  VF a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * n <= hidden; i += 4 * n) {
    VF s0 = hn::Add(LoadF(x + i), LoadF(r + i));
    VF s1 = hn::Add(LoadF(x + i + n), LoadF(r + i + n));
    VF s2 = hn::Add(LoadF(x + i + 2 * n), LoadF(r + i + 2 * n));
    VF s3 = hn::Add(LoadF(x + i + 3 * n), LoadF(r + i + 3 * n));
    Store2F(s0, s1, r + i);
    Store2F(s2, s3, r + i + 2 * n);
    a0 = hn::MulAdd(s0, s0, a0);
    a1 = hn::MulAdd(s1, s1, a1);
    a2 = hn::MulAdd(s2, s2, a2);
    a3 = hn::MulAdd(s3, s3, a3);
  }
  for (; i + n <= hidden; i += n) {
    const VF s = StoreF(hn::Add(LoadF(x + i), LoadF(r + i)), r + i);
    a0 = hn::MulAdd(s, s, a0);
  }
  if (i < hidden) {
    // Padding lanes are 0 + 0, which rounds to 0 and adds nothing.
    const size_t rest = hidden - i;
    const VF s = StoreTail(hn::Add(LoadTail(x + i, rest), LoadTail(r + i, rest)), r + i, rest);
    a1 = hn::MulAdd(s, s, a1);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
}

// AffineRow for bf16 rows on f32 weights (and bias) in even/odd order per block of 2N elements
// (natural order after the last full block, see PreparedWeights). kStream: full blocks are
// stored non-temporally, y must be aligned to the vector size. kHalfPrefetch: only the first half
// of `next`, at half the rate (for a pass that follows and prefetches the second half).
template <bool kShift, bool kBias, bool kNaNPayload, bool kStream, bool kHalfPrefetch = false>
HWY_INLINE void AffineRowEvenOdd(const bfloat16_t* x, float shift_s, float scale_s, const float* w, const float* b,
                                 bfloat16_t* y, size_t hidden, const bfloat16_t* next) {
  const DF d;
  const size_t n = hn::Lanes(d);
  const VF shift = hn::Set(d, kShift ? shift_s : 0.0f);
  const VF scale = hn::Set(d, scale_s);
  size_t i = 0;
  for (; i + 4 * n <= hidden; i += 4 * n) {
    if constexpr (kHalfPrefetch) {
      PrefetchElems(next + i / 2, 2 * n);
    } else {
      PrefetchElems(next + i, 4 * n);
    }
    VF e0, o0, e1, o1;
    LoadEvenOdd(x + i, e0, o0);
    LoadEvenOdd(x + i + 2 * n, e1, o1);
    e0 = Affine<kShift, kBias>(e0, shift, scale, w + i, b + i);
    o0 = Affine<kShift, kBias>(o0, shift, scale, w + i + n, b + i + n);
    e1 = Affine<kShift, kBias>(e1, shift, scale, w + i + 2 * n, b + i + 2 * n);
    o1 = Affine<kShift, kBias>(o1, shift, scale, w + i + 3 * n, b + i + 3 * n);
    StoreEvenOdd<kNaNPayload, kStream>(e0, o0, y + i);
    StoreEvenOdd<kNaNPayload, kStream>(e1, o1, y + i + 2 * n);
  }
  for (; i + 2 * n <= hidden; i += 2 * n) {
    VF e, o;
    LoadEvenOdd(x + i, e, o);
    e = Affine<kShift, kBias>(e, shift, scale, w + i, b + i);
    o = Affine<kShift, kBias>(o, shift, scale, w + i + n, b + i + n);
    StoreEvenOdd<kNaNPayload, kStream>(e, o, y + i);
  }
  // Fewer than 2N elements left, weights in natural order.
  if (i < hidden) AffineRow<kShift, kBias>(x + i, shift_s, scale_s, w + i, b + i, y + i, hidden - i, x + i);
}

// AddRoundSumSquares for bf16 in even/odd form (elementwise, so no reordering is needed).
HWY_INLINE float AddRoundSumSquaresEvenOdd(const bfloat16_t* x, bfloat16_t* r, size_t hidden) {
  const DF d;
  const size_t n = hn::Lanes(d);
  VF a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * n <= hidden; i += 4 * n) {
    VF xe0, xo0, xe1, xo1, re0, ro0, re1, ro1;
    LoadEvenOdd(x + i, xe0, xo0);
    LoadEvenOdd(x + i + 2 * n, xe1, xo1);
    LoadEvenOdd(r + i, re0, ro0);
    LoadEvenOdd(r + i + 2 * n, re1, ro1);
    VF s0 = hn::Add(xe0, re0), s1 = hn::Add(xo0, ro0), s2 = hn::Add(xe1, re1), s3 = hn::Add(xo1, ro1);
    StoreEvenOdd</*kNaNPayload=*/true>(s0, s1, r + i);
    StoreEvenOdd</*kNaNPayload=*/true>(s2, s3, r + i + 2 * n);
    a0 = hn::MulAdd(s0, s0, a0);
    a1 = hn::MulAdd(s1, s1, a1);
    a2 = hn::MulAdd(s2, s2, a2);
    a3 = hn::MulAdd(s3, s3, a3);
  }
  const float head = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  return i < hidden ? head + AddRoundSumSquares(x + i, r + i, hidden - i) : head;
}

// Sums of (x - k) and (x - k)^2 over a row in one pass.
template <typename T>
HWY_INLINE void ShiftedMoments(const T* x, size_t hidden, float k_s, float& s1, float& s2) {
  const DF d;
  const size_t n = hn::Lanes(d);
  const VF k = hn::Set(d, k_s);
  VF a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  VF q0 = hn::Zero(d), q1 = hn::Zero(d), q2 = hn::Zero(d), q3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * n <= hidden; i += 4 * n) {
    VF v0, v1, v2, v3;
    Load2Unordered(x + i, v0, v1);
    Load2Unordered(x + i + 2 * n, v2, v3);
    v0 = hn::Sub(v0, k);
    v1 = hn::Sub(v1, k);
    v2 = hn::Sub(v2, k);
    v3 = hn::Sub(v3, k);
    a0 = hn::Add(v0, a0);
    a1 = hn::Add(v1, a1);
    a2 = hn::Add(v2, a2);
    a3 = hn::Add(v3, a3);
    q0 = hn::MulAdd(v0, v0, q0);
    q1 = hn::MulAdd(v1, v1, q1);
    q2 = hn::MulAdd(v2, v2, q2);
    q3 = hn::MulAdd(v3, v3, q3);
  }
  for (; i + n <= hidden; i += n) {
    const VF v = hn::Sub(LoadF(x + i), k);
    a0 = hn::Add(v, a0);
    q0 = hn::MulAdd(v, v, q0);
  }
  if (i < hidden) {
    const VF v = hn::IfThenElseZero(hn::FirstN(d, hidden - i), hn::Sub(LoadTail(x + i, hidden - i), k));
    a1 = hn::Add(v, a1);
    q1 = hn::MulAdd(v, v, q1);
  }
  s1 = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  s2 = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(q0, q1), hn::Add(q2, q3))));
}

// Mean and biased variance of a row. One pass over the data shifted by k, an estimate of the
// mean from the row's first vector: var = E[(x-k)^2] - (mean-k)^2 is accurate while
// (mean-k)^2 <= E[(x-k)^2] / 2 (the subtraction then loses at most one bit), which holds unless
// the first elements are far from the rest. Otherwise two exact passes: the mean, then the
// squared deviations from it (the row is in L1 by then).
template <typename T>
HWY_INLINE void RowMeanVar(const T* x, size_t hidden, float inv_hidden, float& mean, float& var, bool& nan) {
  const DF d;
  const size_t n = hn::Lanes(d);
  const float k = hidden >= n ? hn::GetLane(hn::SumOfLanes(d, LoadF(x))) / static_cast<float>(n)
                              : hn::GetLane(LoadTail(x, 1));
  float s1, s2;
  ShiftedMoments(x, hidden, k, s1, s2);
  const float dk = s1 * inv_hidden;
  const float m2 = s2 * inv_hidden;
  nan = std::isnan(s1) || std::isnan(s2);
  if (dk * dk <= 0.5f * m2) {
    mean = k + dk;
    var = m2 - dk * dk;
    return;
  }
  mean = ReduceRow(x, hidden, SumOp()) * inv_hidden;
  var = ReduceRow(x, hidden, DeviationSquareOp{hn::Set(d, mean)}) * inv_hidden;
}

// Weight and bias converted once per row range to f32, in the order the row loop reads them:
// for bf16 rows, even/odd per full block of 2N elements, then natural order; for other rows,
// natural order. Worth it from a few rows on (it costs about one row's weight conversion), so
// shorter ranges keep the original weights. has_nan: a weight or bias is NaN.
template <typename T, typename W>
class PreparedWeights {
 public:
  static constexpr bool kEvenOdd = std::is_same_v<T, bfloat16_t>;
  static constexpr int64_t kMinRows = 4;

  PreparedWeights(const W* w, const W* b, size_t hidden, int64_t rows) : w_(w), b_(b) {
    if (!(kEvenOdd || !std::is_same_v<W, float>) || rows < kMinRows) return;
    buffer_ = hwy::AllocateAligned<float>(b != nullptr ? 2 * hidden : hidden);
    if (!buffer_) return;  // out of memory: use the weights as they are
    bool nan = Convert(w, buffer_.get(), hidden);
    if (b != nullptr) nan |= Convert(b, buffer_.get() + hidden, hidden);
    has_nan_ = nan;
    prepared_ = true;
  }

  // y = (x - shift) * scale * w (+ b) for one row. row_nan: the row's input may hold a NaN.
  // stream: store y non-temporally where the layout allows (f32 and bf16 rows aligned to the
  // vector size).
  // kHalfPrefetch: bf16 rows on prepared weights prefetch the first half of next only
  // (AffineRowEvenOdd); others all of it.
  template <bool kShift, bool kBias, bool kHalfPrefetch = false>
  HWY_INLINE void Row(const T* x, float shift, float scale, T* y, size_t hidden, const T* next, bool row_nan,
                      bool stream) const {
    stream = stream && !std::is_same_v<T, float16_t> && StreamAligned(y);
    if (!prepared_) {
      if (stream) {
        AffineRow<kShift, kBias, true>(x, shift, scale, w_, kBias ? b_ : w_, y, hidden, next);
      } else {
        AffineRow<kShift, kBias, false>(x, shift, scale, w_, kBias ? b_ : w_, y, hidden, next);
      }
      return;
    }
    const float* w = buffer_.get();
    const float* b = kBias ? w + hidden : w;
    if constexpr (kEvenOdd) {
      const bool nan = row_nan || has_nan_;
      constexpr bool kHalf = kHalfPrefetch;
      if (nan && stream) AffineRowEvenOdd<kShift, kBias, true, true, kHalf>(x, shift, scale, w, b, y, hidden, next);
      if (nan && !stream) AffineRowEvenOdd<kShift, kBias, true, false, kHalf>(x, shift, scale, w, b, y, hidden, next);
      if (!nan && stream) AffineRowEvenOdd<kShift, kBias, false, true, kHalf>(x, shift, scale, w, b, y, hidden, next);
      if (!nan && !stream) AffineRowEvenOdd<kShift, kBias, false, false, kHalf>(x, shift, scale, w, b, y, hidden, next);
    } else {
      AffineRow<kShift, kBias>(x, shift, scale, w, b, y, hidden, next);
    }
  }

 private:
  // Converts src into dst in the row loop's order; returns whether src holds a NaN.
  static bool Convert(const W* src, float* dst, size_t hidden) {
    const DF d;
    const size_t n = hn::Lanes(d);
    auto nan = hn::Zero(d);  // becomes NaN when a NaN is converted
    size_t i = 0;
    if constexpr (kEvenOdd) {
      for (; i + 2 * n <= hidden; i += 2 * n) {
        VF even, odd;
        if constexpr (std::is_same_v<W, bfloat16_t>) {
          LoadEvenOdd(src + i, even, odd);
        } else {
#if HWY_TARGET == HWY_SCALAR
          even = LoadF(src + i);
          odd = LoadF(src + i + 1);
#else
          const VF lo = LoadF(src + i), hi = LoadF(src + i + n);
          even = hn::ConcatEven(d, hi, lo);
          odd = hn::ConcatOdd(d, hi, lo);
#endif
        }
        hn::StoreU(even, d, dst + i);
        hn::StoreU(odd, d, dst + i + n);
        nan = hn::Add(nan, hn::Add(hn::IfThenElseZero(hn::IsNaN(even), even), hn::IfThenElseZero(hn::IsNaN(odd), odd)));
      }
    }
    for (; i + n <= hidden; i += n) {
      const VF v = LoadF(src + i);
      hn::StoreU(v, d, dst + i);
      nan = hn::Add(nan, hn::IfThenElseZero(hn::IsNaN(v), v));
    }
    if (i < hidden) {
      alignas(64) float tail[kMaxLanes];
      const VF v = LoadTail(src + i, hidden - i);
      hn::Store(v, d, tail);
      std::memcpy(dst + i, tail, (hidden - i) * sizeof(float));
      nan = hn::Add(nan, hn::IfThenElseZero(hn::IsNaN(v), v));
    }
    return std::isnan(hn::GetLane(hn::SumOfLanes(d, nan)));
  }

  const W* w_;
  const W* b_;
  hwy::AlignedFreeUniquePtr<float[]> buffer_;
  bool prepared_ = false;
  bool has_nan_ = true;
};

// rms_norm's multiplier of a row from its float32 sum of squares: 1 / sqrt(ss / hidden + eps),
// as ss * inv_hidden (inv_hidden = 1 / hidden in float32) + eps, a correctly rounded square root
// and a division.
HWY_INLINE float RmsInverse(float ss, float inv_hidden, float eps) { return 1.0f / std::sqrt(ss * inv_hidden + eps); }

}  // namespace HWY_NAMESPACE
}  // namespace xllm_kernel::cpu
HWY_AFTER_NAMESPACE();

#endif  // XLLM_KERNEL_CPU_NORMALIZATION_NORMALIZATION_INL_H_
