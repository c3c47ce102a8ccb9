#include "src/numerics/verify.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

namespace xllm_kernel::numerics {
namespace {

struct Format {
  int mantissa_bits;
  int min_exponent;
};

Format format_of(at::ScalarType dtype) {
  switch (dtype) {
    case at::kBFloat16: return {7, -126};
    case at::kHalf: return {10, -14};
    case at::kDouble: return {52, -1022};
    default: return {23, -126};
  }
}

}  // namespace

double unit_roundoff(at::ScalarType dtype) { return std::ldexp(1.0, -format_of(dtype).mantissa_bits - 1); }

Tolerance accumulate_tolerance(at::ScalarType dtype, int64_t reduction) {
  const double roundoff = unit_roundoff(dtype);
  const double accumulate = 16 * std::sqrt(static_cast<double>(std::max<int64_t>(reduction, 1))) * std::ldexp(1.0, -24);
  const double t = 2 * roundoff + accumulate;
  return {t, t};
}

void compare(Validation& v, const std::string& name, const std::string& kind, const at::Tensor& got,
             const at::Tensor& want, Tolerance tol) {
  json check{{"name", name}, {"kind", kind}, {"atol", tol.atol}, {"rtol", tol.rtol}};
  if (got.sizes() != want.sizes()) {
    std::ostringstream s;
    s << kind << " " << name << ": shape " << got.sizes() << ", expected " << want.sizes();
    v.passed = false;
    v.failures.push_back(s.str());
    check["passed"] = false;
    check["failure"] = s.str();
    v.checks.push_back(check);
    return;
  }
  const int64_t n = got.numel();
  double max_abs = 0, max_rel = 0, max_ulp = 0, headroom = 0;
  int64_t mismatches = 0;
  if (n > 0) {
    at::Tensor g = got.to(at::kCPU).to(at::kDouble).contiguous();
    at::Tensor w = want.to(at::kDouble).contiguous();
    at::Tensor diff = (g - w).abs();
    // A NaN or infinity where the reference is finite is an infinite error.
    at::Tensor bad = at::isnan(diff).logical_or(at::isinf(diff));
    diff = at::where(bad, at::full({}, std::numeric_limits<double>::infinity(), diff.options()), diff);
    at::Tensor limit = w.abs() * tol.rtol + tol.atol;
    at::Tensor ratio = diff / limit;
    const Format f = format_of(got.scalar_type());
    // ULPs of values below the absolute tolerance are counted at the tolerance's magnitude:
    // near zero a ULP says nothing about accuracy (layer_norm with hidden 1 returns exactly bias).
    at::Tensor magnitude = w.abs().clamp_min(std::max(tol.atol, std::ldexp(1.0, f.min_exponent)));
    at::Tensor exponent = at::floor(at::log2(magnitude)).clamp_min(f.min_exponent);
    at::Tensor ulp = at::exp2(exponent - f.mantissa_bits);
    max_abs = diff.max().item<double>();
    at::Tensor nonzero = w.abs() > 0;
    max_rel = nonzero.any().item<bool>() ? (diff / w.abs()).masked_select(nonzero).max().item<double>() : 0.0;
    max_ulp = (diff / ulp).max().item<double>();
    headroom = ratio.max().item<double>();
    mismatches = (ratio > 1).sum().item<int64_t>();
  }
  check.update({{"elements", n}, {"max_abs_error", max_abs}, {"max_rel_error", max_rel}, {"max_ulp", max_ulp},
                {"headroom", headroom}, {"mismatches", mismatches}, {"passed", mismatches == 0}});
  v.checks.push_back(check);
  v.max_abs_error = std::max(v.max_abs_error, max_abs);
  v.max_rel_error = std::max(v.max_rel_error, max_rel);
  v.max_ulp = std::max(v.max_ulp, max_ulp);
  v.headroom = std::max(v.headroom, headroom);
  v.mismatches += mismatches;
  if (mismatches > 0) {
    v.passed = false;
    std::ostringstream s;
    s << kind << " " << name << ": " << mismatches << " of " << n << " elements outside tolerance (max abs error "
      << max_abs << ", headroom " << headroom << ")";
    v.failures.push_back(s.str());
  }
}

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  if (a.numel() == 0) return true;
  at::Tensor x = a.to(at::kCPU).contiguous(), y = b.to(at::kCPU).contiguous();
  return std::memcmp(x.const_data_ptr(), y.const_data_ptr(), x.nbytes()) == 0;
}

}  // namespace xllm_kernel::numerics
