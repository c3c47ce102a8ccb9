// The quantization suites' reference: the contract's arithmetic in float64, with each float32
// operation of the contract rounded to float32 once (a float64 +, -, * or / of float32 operands
// rounded to float32 is the correctly rounded float32 result), and its own conversions to
// float8_e4m3fn and int8 from the values (powers of two, not bit tricks). It never calls an
// implementation.
//
// The rows a scheme quantizes are given as intervals [lo, hi] of values of the input's dtype:
// exact rows (lo == hi: the unfused operations, or a normalized row whose float64 value leaves its
// rounding no choice) must match q, scale and azp bit for bit; where the producer's float32
// rounding (rms_norm's, silu_and_mul's: fp32 accumulate, not exact) may give either neighbour,
// q and scale must lie between what the bounds give (every scheme is monotonic in its input and
// its scale). Besides, every finite element that does not saturate must round-trip within the
// quantization's error bound: |q * scale - x| <= scale / 2 for int8 (q - azp with a zero point),
// half an e4m3 ulp of x / scale times scale for fp8 (plus the float32 rounding of x / scale).
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "src/numerics/suite.h"

namespace xllm_kernel::numerics::quantization {

enum class Scheme { kPerToken, kPerTokenAzp, kStatic };

struct SchemeArgs {
  Scheme scheme = Scheme::kPerToken;
  bool fp8 = false;
  std::optional<float> scale_ub;  // per-token fp8
  float scale = 1;                // static
  std::optional<int32_t> azp;     // static int8
  // The rows' zeros may have either sign (silu_and_mul: the activation contract gives silu(-inf)
  // = 0 without a sign, so 0 * up is +-0): a q of +-0 matches either.
  bool zero_sign_free = false;
};

inline float f32(double v) { return static_cast<float>(v); }

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float reference_nan() {
  const uint32_t u = 0x7FC00000u;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The float8_e4m3fn value of v: nearest, ties to even, saturated to +-448, NaN stays NaN. The
// spacing of e4m3 values at |v|: 2^(e - 3) for 2^e <= |v| (e >= -6), 2^-9 below 2^-6.
inline double e4m3_value(double v) {
  if (std::isnan(v)) return v;
  const double a = std::fabs(v);
  if (a >= 448) return std::copysign(448.0, v);
  const int e = a == 0 ? -6 : std::max(-6, static_cast<int>(std::floor(std::log2(a))));
  const double spacing = std::ldexp(1.0, e - 3);
  double r = std::nearbyint(a / spacing) * spacing;  // a / spacing is exact; nearbyint: ties to even
  if (r > 448) r = 448;
  return std::copysign(r, v);
}

// The float8_e4m3fn bits of an e4m3 value (e4m3_value's result): NaN 0x7F.
inline uint8_t e4m3_bits(double r) {
  if (std::isnan(r)) return 0x7F;
  const uint8_t sign = std::signbit(r) ? 0x80 : 0;
  const double a = std::fabs(r);
  if (a < std::ldexp(1.0, -6)) return static_cast<uint8_t>(sign | static_cast<int>(a / std::ldexp(1.0, -9)));
  const int e = static_cast<int>(std::floor(std::log2(a)));
  const int m = static_cast<int>(a / std::ldexp(1.0, e) * 8) - 8;
  return static_cast<uint8_t>(sign | ((e + 7) << 3) | m);
}

// Half the e4m3 spacing at |v| (|v| < 448).
inline double e4m3_half_ulp(double v) {
  const double a = std::fabs(v);
  const int e = a == 0 ? -6 : std::max(-6, static_cast<int>(std::floor(std::log2(a))));
  return std::ldexp(1.0, e - 4);
}

// Rounded to nearest even, saturated to [lo, hi]; NaN gives 0.
inline double saturated_integer(double v, double lo, double hi) {
  if (std::isnan(v)) return 0;
  if (v >= hi) return hi;
  if (v <= lo) return lo;
  return std::nearbyint(v);
}
inline double int8_value(double v) { return saturated_integer(v, -128, 127); }
inline double int32_value(double v) { return saturated_integer(v, -2147483648.0, 2147483647.0); }

// A row's scale and multiplier (per token) or parameters (azp), from its amax (min, max).
struct RowParams {
  float scale = 0, multiplier = 0;
  int32_t azp = 0;
};

inline RowParams per_token_params(const SchemeArgs& a, double amax) {
  RowParams r;
  if (a.fp8) {
    double bounded = amax;
    if (a.scale_ub) bounded = (std::isnan(amax) || std::isnan(*a.scale_ub)) ? NAN : std::min<double>(amax, *a.scale_ub);
    if (std::isnan(bounded)) return {reference_nan(), reference_nan(), 0};
    const float s = f32(bounded / 448.0), lower = f32(1.0 / (448.0 * 512.0));
    r.scale = s > lower ? s : lower;
    return r;
  }
  if (std::isnan(amax)) return {reference_nan(), reference_nan(), 0};
  r.scale = f32(amax / 127.0);
  r.multiplier = amax == 0 ? 0.0f : f32(127.0 / amax);
  return r;
}

inline RowParams azp_params(double mn, double mx) {
  if (std::isnan(mn) || std::isnan(mx)) return {reference_nan(), reference_nan(), 0};
  RowParams r;
  r.scale = f32(f32(mx - mn) / 255.0);
  r.multiplier = f32(1.0 / r.scale);
  r.azp = static_cast<int32_t>(int32_value(f32(-128.0 - f32(mn / r.scale))));
  return r;
}

// The quantized value of x (a value of the input's dtype, or its normalized row) with a row's
// parameters: e4m3 or int8 values as doubles (an fp8 NaN as NaN).
inline double quantize(const SchemeArgs& a, const RowParams& r, double x) {
  switch (a.scheme) {
    case Scheme::kPerToken:
      return a.fp8 ? e4m3_value(f32(x / r.scale)) : int8_value(f32(x * r.multiplier));
    case Scheme::kPerTokenAzp:
      return saturated_integer(int32_value(f32(x * r.multiplier)) + r.azp, -128, 127);
    case Scheme::kStatic: {
      if (a.fp8) return e4m3_value(f32(x * f32(1.0 / a.scale)));
      if (!a.azp) return int8_value(f32(x / a.scale));
      return saturated_integer(int32_value(f32(x * f32(1.0 / a.scale))) + *a.azp, -128, 127);
    }
  }
  return 0;
}

// The value of a returned q element (int8 or float8_e4m3fn bits).
inline double q_value(bool fp8, uint8_t bits) {
  if (!fp8) return static_cast<int8_t>(bits);
  if ((bits & 0x7F) == 0x7F) return std::numeric_limits<double>::quiet_NaN();
  const int e = (bits >> 3) & 0xF, m = bits & 7;
  const double a = e == 0 ? m * std::ldexp(1.0, -9) : (8 + m) * std::ldexp(1.0, e - 10);
  return (bits & 0x80) ? -a : a;
}

// What the check found; folded into a Validation by the suite.
struct RowCheck {
  int64_t mismatches = 0;        // q, scale or azp elements outside what the reference allows
  int64_t ambiguous = 0;         // elements whose producer's rounding may give either neighbour
  int64_t round_trip_failures = 0;
  int64_t round_trips = 0;       // elements whose round trip was checked
  std::vector<std::string> failures;
};

namespace detail {
inline bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}
inline bool between(double v, double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(v) && std::isnan(a) && std::isnan(b);
  return !std::isnan(v) && v >= std::min(a, b) && v <= std::max(a, b);
}
}  // namespace detail

// Checks the returned rows against the reference. lo, hi: float64 [rows, hidden] (the values of
// the input's dtype the scheme quantizes; lo == hi where exact); q: uint8 bits [rows, hidden];
// scale: float32 [rows] (per token); azp: int32 [rows] (azp scheme).
inline RowCheck check_rows(const SchemeArgs& a, const at::Tensor& lo_t, const at::Tensor& hi_t, const at::Tensor& q_t,
                           const at::Tensor& scale_t, const at::Tensor& azp_t) {
  RowCheck out;
  const int64_t rows = lo_t.size(0), hidden = lo_t.size(1);
  const double* lo = lo_t.const_data_ptr<double>();
  const double* hi = hi_t.const_data_ptr<double>();
  const uint8_t* q = q_t.const_data_ptr<uint8_t>();
  auto fail = [&](const std::string& what) {
    ++out.mismatches;
    if (out.failures.size() < 8) out.failures.push_back(what);
  };
  for (int64_t r = 0; r < rows; ++r) {
    const double* l = lo + r * hidden;
    const double* h = hi + r * hidden;
    const uint8_t* qr = q + r * hidden;
    bool exact = true, nan = false;
    double amax_lo = 0, amax_hi = 0, mn = INFINITY, mx = -INFINITY;
    for (int64_t i = 0; i < hidden; ++i) {
      if (std::isnan(l[i]) || std::isnan(h[i])) nan = true;
      exact &= detail::same_value(l[i], h[i]);
      const double al = std::fabs(l[i]), ah = std::fabs(h[i]);
      const bool straddles = (l[i] < 0) != (h[i] < 0);
      amax_lo = std::max(amax_lo, straddles ? 0.0 : std::min(al, ah));
      amax_hi = std::max(amax_hi, std::max(al, ah));
      mn = std::min(mn, l[i]);
      mx = std::max(mx, l[i]);
      if (!detail::same_value(l[i], h[i])) ++out.ambiguous;
    }
    if (nan) amax_lo = amax_hi = mn = mx = NAN;
    RowParams got;
    if (a.scheme == Scheme::kPerToken) {
      got.scale = scale_t.const_data_ptr<float>()[r];
      const RowParams p_lo = per_token_params(a, amax_lo), p_hi = per_token_params(a, amax_hi);
      const bool ok = exact ? float_bits(got.scale) == float_bits(p_lo.scale)
                            : detail::between(got.scale, p_lo.scale, p_hi.scale);
      if (!ok) {
        fail("row " + std::to_string(r) + ": scale " + std::to_string(got.scale) + ", expected " +
             (exact ? std::to_string(p_lo.scale) : "[" + std::to_string(p_lo.scale) + ", " + std::to_string(p_hi.scale) + "]"));
        continue;
      }
      got.multiplier = p_lo.multiplier;
      // The multipliers the bounds allow (int8): q lies between what the corners give.
      for (int64_t i = 0; i < hidden; ++i) {
        double want_lo, want_hi;
        if (a.fp8) {
          want_lo = quantize(a, got, l[i]);
          want_hi = quantize(a, got, h[i]);
        } else {
          RowParams m_lo = p_lo, m_hi = p_hi;
          const double c[4] = {quantize(a, m_lo, l[i]), quantize(a, m_lo, h[i]), quantize(a, m_hi, l[i]),
                               quantize(a, m_hi, h[i])};
          want_lo = std::min({c[0], c[1], c[2], c[3]});
          want_hi = std::max({c[0], c[1], c[2], c[3]});
        }
        const double v = q_value(a.fp8, qr[i]);
        const bool element_exact = exact || (a.fp8 && detail::same_value(l[i], h[i]));
        const bool signless_zero = a.zero_sign_free && v == 0 && want_lo == 0 && want_hi == 0;
        const bool ok_q = signless_zero || (element_exact && detail::same_value(want_lo, want_hi)
                                                ? (a.fp8 ? qr[i] == e4m3_bits(want_lo) : v == want_lo)
                                                : detail::between(v, want_lo, want_hi));
        if (!ok_q) {
          fail("row " + std::to_string(r) + ", element " + std::to_string(i) + ": q " + std::to_string(v) +
               ", expected " + std::to_string(want_lo) + (want_lo == want_hi ? "" : " .. " + std::to_string(want_hi)) +
               " (x " + std::to_string(l[i]) + ", scale " + std::to_string(got.scale) + ")");
        }
      }
    } else if (a.scheme == Scheme::kPerTokenAzp) {
      const RowParams want = azp_params(mn, mx);
      got.scale = scale_t.const_data_ptr<float>()[r];
      got.azp = azp_t.const_data_ptr<int32_t>()[r];
      if (float_bits(got.scale) != float_bits(want.scale) || got.azp != want.azp) {
        fail("row " + std::to_string(r) + ": scale " + std::to_string(got.scale) + " azp " + std::to_string(got.azp) +
             ", expected " + std::to_string(want.scale) + " azp " + std::to_string(want.azp));
        continue;
      }
      got = want;
      for (int64_t i = 0; i < hidden; ++i) {
        const double want_q = quantize(a, want, l[i]);
        if (q_value(false, qr[i]) != want_q) {
          fail("row " + std::to_string(r) + ", element " + std::to_string(i) + ": q " +
               std::to_string(q_value(false, qr[i])) + ", expected " + std::to_string(want_q));
        }
      }
    } else {
      got.scale = a.scale;
      for (int64_t i = 0; i < hidden; ++i) {
        const double want_lo = quantize(a, got, l[i]), want_hi = quantize(a, got, h[i]);
        const double v = q_value(a.fp8, qr[i]);
        const bool ok_q = detail::same_value(l[i], h[i])
                              ? (a.fp8 ? qr[i] == e4m3_bits(want_lo) : v == want_lo)
                              : detail::between(v, want_lo, want_hi);
        if (!ok_q) {
          fail("row " + std::to_string(r) + ", element " + std::to_string(i) + ": q " + std::to_string(v) +
               ", expected " + std::to_string(want_lo) + (want_lo == want_hi ? "" : " .. " + std::to_string(want_hi)));
        }
      }
    }
    // The round trip of every finite, unsaturated element of an exact element's value.
    const double s = a.scheme == Scheme::kStatic ? a.scale : got.scale;
    if (!std::isfinite(s) || s <= 0) continue;
    const int32_t zp = a.scheme == Scheme::kPerTokenAzp ? got.azp : (a.scheme == Scheme::kStatic && a.azp ? *a.azp : 0);
    for (int64_t i = 0; i < hidden; ++i) {
      if (!detail::same_value(l[i], h[i]) || !std::isfinite(l[i])) continue;
      const double v = q_value(a.fp8, qr[i]);
      const double x = l[i];
      double err, bound;
      if (a.fp8) {
        const double t = x / s;
        if (std::isnan(v) || std::fabs(t) >= 448) continue;
        err = std::fabs(v * s - x);
        bound = e4m3_half_ulp(t) * s + std::fabs(x) * std::ldexp(1.0, -23);
      } else {
        if (v <= -128 || v >= 127) continue;  // may be saturated
        err = std::fabs((v - zp) * s - x);
        bound = s / 2 * (1 + std::ldexp(1.0, -20)) + std::fabs(x) * std::ldexp(1.0, -21);
      }
      ++out.round_trips;
      if (!(err <= bound)) {
        ++out.round_trip_failures;
        if (out.failures.size() < 8) {
          out.failures.push_back("row " + std::to_string(r) + ", element " + std::to_string(i) + ": round trip error " +
                                 std::to_string(err) + " above " + std::to_string(bound));
        }
      }
    }
  }
  return out;
}

// The float64 rows of t [..., hidden] (any layout, any device) as a contiguous [rows, hidden] tensor.
inline at::Tensor rows_f64(const at::Tensor& t) {
  return t.to(at::kCPU).to(at::kDouble).reshape({-1, t.size(-1)}).contiguous();
}

// The dtype's neighbours of float64 values v under a relative error `delta` of the producer: lo
// and hi (equal where delta leaves the rounding no choice). NaN stays NaN; infinities stay.
inline std::pair<at::Tensor, at::Tensor> rounding_interval(const at::Tensor& v, at::ScalarType dtype, double delta) {
  const at::Tensor a = v * (1 - delta), b = v * (1 + delta);
  const at::Tensor lo = at::minimum(a, b).to(at::kFloat).to(dtype).to(at::kDouble);
  const at::Tensor hi = at::maximum(a, b).to(at::kFloat).to(dtype).to(at::kDouble);
  const at::Tensor exact = v.to(at::kFloat).to(dtype).to(at::kDouble);
  // Where both bounds round alike, the rounded value itself (-0 included).
  const at::Tensor same = lo.eq(hi).logical_or(v.isnan()).logical_or(v.isinf());
  return {at::where(same, exact, lo), at::where(same, exact, hi)};
}

// The relative error the producers' float32 evaluation may have before the rounding to the dtype,
// as their own suites bound it: rms_norm's float32 accumulation over hidden elements (16 sqrt(n)
// float32 roundoffs, rms_norm's tolerance) and the products' roundings; silu_and_mul's float32
// evaluation (32 float32 ulps), or, for bfloat16 results, the cheaper float32 forms cpu.native
// uses (relative error below 2^-10: csrc/cpu/activation/activation.h).
inline double rms_norm_delta(int64_t hidden) {
  return 16 * std::sqrt(static_cast<double>(hidden)) * std::ldexp(1.0, -24) + std::ldexp(1.0, -21);
}
inline double silu_and_mul_delta(at::ScalarType dtype) {
  return dtype == at::kBFloat16 ? std::ldexp(1.0, -10) : 32 * std::ldexp(1.0, -24);
}

// rms_norm in float64 (the rounding to the dtype is left to rounding_interval): x * (1 / sqrt(
// mean(x^2) + eps)) * w, an infinity making the row's multiplier 0 (inf * 0: NaN).
inline at::Tensor reference_rms_norm(const at::Tensor& rows, const at::Tensor& weight, double eps) {
  const at::Tensor ss = rows.square().mean(-1, /*keepdim=*/true);
  const at::Tensor inv = (ss + eps).rsqrt();
  return rows * inv * weight.to(at::kCPU).to(at::kDouble).reshape({1, -1});
}

// silu(gate) * up in float64 with the activation contract's limits: silu(+inf) = +inf, silu(-inf) = 0.
inline at::Tensor reference_silu_and_mul(const at::Tensor& rows) {
  const int64_t d = rows.size(1) / 2;
  const at::Tensor g = rows.narrow(1, 0, d), u = rows.narrow(1, d, d);
  at::Tensor s = g / (1 + (-g).exp());
  s = at::where(g.isinf(), at::where(g.gt(0), g, at::zeros_like(g)), s);
  return (s * u).contiguous();
}

}  // namespace xllm_kernel::numerics::quantization
