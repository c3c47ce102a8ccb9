// Torch-free CPU kernels of the gated activations. This translation unit is compiled once per
// Highway target (foreach_target) and the entry points pick the best one at runtime.
#include "csrc/cpu/activation/activation.h"

#include <cstddef>
#include <cstdint>
#include <type_traits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "csrc/cpu/activation/activation.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/cache_control.h"

#include "csrc/cpu/common/convert-inl.h"
#include "csrc/cpu/common/math-inl.h"
#include "csrc/cpu/common/row_cursor.h"
#include "csrc/cpu/common/stream-inl.h"
#include "csrc/cpu/activation/activation-inl.h"

HWY_BEFORE_NAMESPACE();
namespace xllm_kernel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <template <bool> class Act, bool kGated, typename T>
void ActRowsT(const ActivationParams& p, int64_t row_begin, int64_t row_end) {
  const size_t d_size = static_cast<size_t>(p.d);
  const T* input = static_cast<const T*>(p.input);
  T* out = static_cast<T*>(p.out);
  const bool stream = p.stream_out;
  RowCursor<2> rc(p.shape, row_begin, {&p.input_strides, &p.out_strides});
  for (int64_t row = row_begin; row < row_end; ++row, rc.Next()) {
    const T* x = input + rc.offset[0];
    T* y = out + rc.offset[1];
    if (stream && StreamAligned(y)) {
      ActRow<Act, kGated, true>(x, y, d_size);
    } else {
      ActRow<Act, kGated, false>(x, y, d_size);
    }
  }
  if (stream) hwy::FlushStream();  // order the non-temporal stores before returning
}

template <template <bool> class Act, bool kGated>
void ActRows(const ActivationParams& p, int64_t row_begin, int64_t row_end) {
  switch (p.dtype) {
    case DType::kFloat32: return ActRowsT<Act, kGated, float>(p, row_begin, row_end);
    case DType::kBFloat16: return ActRowsT<Act, kGated, bfloat16_t>(p, row_begin, row_end);
    case DType::kFloat16: return ActRowsT<Act, kGated, float16_t>(p, row_begin, row_end);
  }
}

void SiluAndMulRows(const ActivationParams& p, int64_t b, int64_t e) { ActRows<Silu, true>(p, b, e); }
void GeluAndMulRows(const ActivationParams& p, int64_t b, int64_t e) { ActRows<Gelu, true>(p, b, e); }
void GeluTanhAndMulRows(const ActivationParams& p, int64_t b, int64_t e) { ActRows<GeluTanh, true>(p, b, e); }
void GeluRows(const ActivationParams& p, int64_t b, int64_t e) { ActRows<Gelu, false>(p, b, e); }
void GeluTanhRows(const ActivationParams& p, int64_t b, int64_t e) { ActRows<GeluTanh, false>(p, b, e); }
void QuickGeluRows(const ActivationParams& p, int64_t b, int64_t e) { ActRows<QuickGelu, false>(p, b, e); }

// ---------------------------------------------------------------- test access

template <class F>
HWY_INLINE void MapF32(const F& f, const float* in, float* out, size_t count) {
  const DF d;
  const size_t n = hn::Lanes(d);
  size_t i = 0;
  for (; i + n <= count; i += n) hn::StoreU(f(hn::LoadU(d, in + i)), d, out + i);
  if (i < count) StoreTail(f(LoadTail(in + i, count - i)), out + i, count - i);
}

struct ExpFn {
  HWY_INLINE VF operator()(VF a) const { return ExpInRange(DF(), a); }
};
struct NormalCdfFn {
  HWY_INLINE VF operator()(VF a) const { return NormalCdf(DF(), a); }
};
struct ExpNegBf16Fn {
  HWY_INLINE VF operator()(VF a) const {
#if XLLM_CPU_AVX512_BF16_PRECISION_MATH
    return Exp2Bf16(hn::Mul(a, hn::Set(DF(), 1.44269504f)));
#else
    VF er, pow2n;
    ExpNegBf16Parts(DF(), hn::Neg(a), er, pow2n);
    return hn::Mul(er, pow2n);
#endif
  }
};
struct NormalCdfBf16Fn {
  HWY_INLINE VF operator()(VF a) const { return hn::IfThenElse(hn::IsNaN(a), a, NormalCdfBf16NotNaN(DF(), a)); }
};

void ActivationMathF32(int f, const float* in, float* out, size_t count) {
  switch (static_cast<detail::ActivationMath>(f)) {
    case detail::ActivationMath::kSilu: return MapF32(Silu<false>(), in, out, count);
    case detail::ActivationMath::kGelu: return MapF32(Gelu<false>(), in, out, count);
    case detail::ActivationMath::kGeluTanh: return MapF32(GeluTanh<false>(), in, out, count);
    case detail::ActivationMath::kExp: return MapF32(ExpFn(), in, out, count);
    case detail::ActivationMath::kNormalCdf: return MapF32(NormalCdfFn(), in, out, count);
    case detail::ActivationMath::kSiluBf16: return MapF32(Silu<true>(), in, out, count);
    case detail::ActivationMath::kGeluBf16: return MapF32(Gelu<true>(), in, out, count);
    case detail::ActivationMath::kGeluTanhBf16: return MapF32(GeluTanh<true>(), in, out, count);
    case detail::ActivationMath::kExpBf16: return MapF32(ExpNegBf16Fn(), in, out, count);
    case detail::ActivationMath::kNormalCdfBf16: return MapF32(NormalCdfBf16Fn(), in, out, count);
    case detail::ActivationMath::kQuickGelu: return MapF32(QuickGelu<false>(), in, out, count);
    case detail::ActivationMath::kQuickGeluBf16: return MapF32(QuickGelu<true>(), in, out, count);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace xllm_kernel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace xllm_kernel::cpu {

HWY_EXPORT(SiluAndMulRows);
HWY_EXPORT(GeluAndMulRows);
HWY_EXPORT(GeluTanhAndMulRows);
HWY_EXPORT(GeluRows);
HWY_EXPORT(GeluTanhRows);
HWY_EXPORT(QuickGeluRows);
HWY_EXPORT(ActivationMathF32);

namespace {

// Defence only: the bridge validates dtypes, shapes and pointers before calling.
Status Check(const ActivationParams& p, int64_t row_begin, int64_t row_end) {
  if (!kernels::valid_dtype(p.dtype)) return Status::invalid("activation: unknown dtype");
  // 2 * d elements per input row (gated) must be addressable.
  if (p.d < 1 || p.d > (INT64_MAX >> 3)) return Status::invalid("activation: d must be in [1, 2^60)");
  if (const char* why = kernels::invalid_rows(p.shape, row_begin, row_end)) return Status::invalid(why);
  if (row_begin < row_end && (p.input == nullptr || p.out == nullptr)) {
    return Status::invalid("activation: null input or out");
  }
  return Status::ok();
}

template <class Rows>
Status Run(Rows rows, const ActivationParams& p, int64_t row_begin, int64_t row_end) {
  const Status s = Check(p, row_begin, row_end);
  if (s.is_ok() && row_begin < row_end) rows(p, row_begin, row_end);
  return s;
}

}  // namespace

Status silu_and_mul(const ActivationParams& p, int64_t row_begin, int64_t row_end) {
  return Run(HWY_DYNAMIC_DISPATCH(SiluAndMulRows), p, row_begin, row_end);
}

Status gelu_and_mul(const ActivationParams& p, int64_t row_begin, int64_t row_end) {
  return Run(HWY_DYNAMIC_DISPATCH(GeluAndMulRows), p, row_begin, row_end);
}

Status gelu_tanh_and_mul(const ActivationParams& p, int64_t row_begin, int64_t row_end) {
  return Run(HWY_DYNAMIC_DISPATCH(GeluTanhAndMulRows), p, row_begin, row_end);
}

Status gelu(const ActivationParams& p, int64_t row_begin, int64_t row_end) {
  return Run(HWY_DYNAMIC_DISPATCH(GeluRows), p, row_begin, row_end);
}

Status gelu_tanh(const ActivationParams& p, int64_t row_begin, int64_t row_end) {
  return Run(HWY_DYNAMIC_DISPATCH(GeluTanhRows), p, row_begin, row_end);
}

Status quick_gelu(const ActivationParams& p, int64_t row_begin, int64_t row_end) {
  return Run(HWY_DYNAMIC_DISPATCH(QuickGeluRows), p, row_begin, row_end);
}

namespace detail {

void activation_math(ActivationMath f, const float* in, float* out, size_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(ActivationMathF32)(static_cast<int>(f), in, out, n);
}

}  // namespace detail

}  // namespace xllm_kernel::cpu
#endif  // HWY_ONCE
