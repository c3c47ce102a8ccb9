#include "src/numerics/verify.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>

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
    // Non-finite references are matched exactly: a NaN by any NaN, an infinity by the same
    // infinity (error 0). Elsewhere a NaN or infinity where the reference is finite, and any
    // finite value where it is not, is an infinite error.
    const at::Tensor matched = at::isnan(w).logical_and(at::isnan(g)).logical_or(at::isinf(w).logical_and(g == w));
    at::Tensor diff = at::where(matched, at::zeros({}, w.options()), (g - w).abs());
    at::Tensor bad = at::isnan(diff).logical_or(at::isinf(diff));
    diff = at::where(bad, at::full({}, std::numeric_limits<double>::infinity(), diff.options()), diff);
    w = at::where(w.isfinite(), w, at::zeros({}, w.options()));  // for the limits and ulps below
    at::Tensor limit = w.abs() * tol.rtol + tol.atol;
    if (tol.elementwise_atol.defined()) {
      TORCH_CHECK(tol.elementwise_atol.sizes() == want.sizes(), "compare: ", kind, " ", name,
                  ": elementwise_atol has shape ", tol.elementwise_atol.sizes(), ", expected ", want.sizes());
      const at::Tensor e = tol.elementwise_atol.to(at::kCPU).to(at::kDouble).contiguous();
      limit = limit + e;
      check["elementwise_atol_max"] = e.max().item<double>();
    }
    at::Tensor ratio = at::where(diff == 0, at::zeros({}, diff.options()), diff / limit);  // 0 / 0 is no error
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

at::Tensor whole_storage(const at::Tensor& t) {
  return t.as_strided({static_cast<int64_t>(t.storage().nbytes() / t.element_size())}, {1}, 0);
}

at::Tensor copy_with_layout(const at::Tensor& t, const at::Device& device) {
  if (!t.defined()) return t;
  at::Tensor copy = whole_storage(t).to(device, /*non_blocking=*/false, /*copy=*/true);
  return copy.as_strided(t.sizes(), t.strides(), t.storage_offset());
}

namespace {

// Do two tensors share any byte of storage?
bool overlaps(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined() || !b.defined() || a.numel() == 0 || b.numel() == 0) return false;
  if (!a.has_storage() || !b.has_storage()) return false;
  const auto* a0 = static_cast<const char*>(a.storage().data());
  const auto* b0 = static_cast<const char*>(b.storage().data());
  if (a0 == nullptr || b0 == nullptr) return false;
  return a0 < b0 + b.storage().nbytes() && b0 < a0 + a.storage().nbytes();
}

Tolerance tolerance_of(const TensorCheck& c, const std::string& name) {
  auto it = c.tolerance_overrides.find(name);
  return it == c.tolerance_overrides.end() ? c.tolerance : it->second;
}

bool declared_mutated(const TensorCheck& c, const std::string& name) {
  return std::find(c.mutates.begin(), c.mutates.end(), name) != c.mutates.end();
}

// The outputs: as many as the reference's (false when not: nothing else is checked then), each
// against the reference, none aliasing an input unless the contract says so.
bool check_outputs(const TensorCheck& c, Validation& v) {
  if (c.expected.check_outputs) {
    c.expected.check_outputs(v, c.outputs);
  } else if (c.outputs.size() != c.expected.outputs.size()) {
    v.passed = false;
    v.failures.push_back("returned " + std::to_string(c.outputs.size()) + " outputs, expected " +
                         std::to_string(c.expected.outputs.size()));
    return false;
  }
  for (size_t k = 0; k < c.outputs.size(); ++k) {
    const std::string name = "out" + std::to_string(k);
    if (!c.expected.check_outputs) compare(v, name, "output", c.outputs[k], c.expected.outputs[k], tolerance_of(c, name));
    if (!c.aliases_inputs) {
      for (size_t i = 0; i < c.inputs.size(); ++i) {
        if (overlaps(c.outputs[k], c.inputs[i])) {
          v.passed = false;
          v.failures.push_back("output " + name + " aliases input " + c.names[i] + ", which the contract does not allow");
          v.checks.push_back({{"name", name}, {"kind", "alias"}, {"passed", false}, {"aliases", c.names[i]}});
        }
      }
    }
  }
  return true;
}

// Each tensor argument: a declared mutation against the reference; any other bitwise unchanged.
void check_arguments(const TensorCheck& c, Validation& v) {
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const std::string& name = c.names[i];
    if (!c.inputs[i].defined()) continue;
    if (declared_mutated(c, name)) {
      auto want = c.expected.mutated.find(name);
      if (want == c.expected.mutated.end()) {
        v.passed = false;
        v.failures.push_back("reference gives no value for mutated argument " + name);
        continue;
      }
      compare(v, name, "mutation", c.inputs[i], want->second, tolerance_of(c, name));
    } else {
      // Undeclared mutation: the whole storage (padding included) must be bitwise unchanged.
      const at::Tensor& now = c.inputs[i];
      const at::Tensor& before = c.pristine[i];
      const bool same = bitwise_equal(whole_storage(now), whole_storage(before));
      v.checks.push_back({{"name", name}, {"kind", "unchanged"}, {"passed", same}});
      if (!same) {
        v.passed = false;
        v.failures.push_back("input " + name + " was modified, but the contract does not declare it mutated");
      }
    }
  }
}

// Declared mutations must not spill outside the viewed elements either.
void check_bounds(const TensorCheck& c, Validation& v) {
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const std::string& name = c.names[i];
    if (!c.inputs[i].defined() || !declared_mutated(c, name)) continue;
    at::Tensor now = c.inputs[i].to(at::kCPU);
    at::Tensor expected_storage = copy_with_layout(c.pristine[i], at::kCPU);
    expected_storage.copy_(now);  // the view's elements as written; the rest as before
    const bool same = bitwise_equal(whole_storage(copy_with_layout(c.inputs[i], at::kCPU)), whole_storage(expected_storage));
    if (!same) {
      v.passed = false;
      v.failures.push_back("mutated argument " + name + " was written outside its elements");
      v.checks.push_back({{"name", name}, {"kind", "bounds"}, {"passed", false}});
    }
  }
}

}  // namespace

Validation check_tensors(const TensorCheck& c) {
  if (c.names.size() != c.inputs.size() || c.pristine.size() != c.inputs.size()) {
    throw std::invalid_argument("check_tensors: " + std::to_string(c.names.size()) + " names, " +
                                std::to_string(c.inputs.size()) + " inputs and " + std::to_string(c.pristine.size()) +
                                " pristine copies; expected one of each per argument");
  }
  Validation v;
  if (!check_outputs(c, v)) return v;
  check_arguments(c, v);
  check_bounds(c, v);
  return v;
}

}  // namespace xllm_kernel::numerics
