// One body per check of an activation bridge, for every device: the CPU tests (test/ops) and the
// CUDA tests (test/cuda) call the same functions with their device. Inputs are drawn on the CPU
// and moved; the references are the suites' (src/ops/activation/suites/reference.h), float64 on
// the CPU, with the suites' tolerance model. Values over the full grid are the numerics suites'
// job (test/numerics and test/cuda run them for every implementation).
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/ops/activation/suites/reference.h"
#include "test/ops/common/registered.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing::activation {

// The family's operations, from the tables its suites are made from (kGatedActivations, then
// kPlainActivations).
inline std::vector<std::string> operations() {
  std::vector<std::string> out;
  for (const auto& a : numerics::activation::kGatedActivations) out.push_back(a.contract().operation);
  for (const auto& a : numerics::activation::kPlainActivations) out.push_back(a.contract().operation);
  return out;
}

inline std::string operation_of(const std::string& impl) { return registry().find(impl)->operation->name(); }

// Whether the operation has the gate (out = act(x[..., :d]) * x[..., d:]) or not (out = act(x)).
inline bool gated(const std::string& op) {
  for (const auto& a : numerics::activation::kGatedActivations) {
    if (a.contract().operation == op) return true;
  }
  return false;
}

// The input width of an output row of d elements.
inline int64_t input_width(const std::string& op, int64_t d) { return gated(op) ? 2 * d : d; }

// float64 [..., d] on the CPU from the input ([..., 2d] gated, [..., d] plain) on any device: the
// suites' reference.
inline at::Tensor reference(const std::string& op, const at::Tensor& input) {
  namespace act = numerics::activation;
  if (gated(op)) return act::reference_gated(act::gated_activation(op).act, input);
  for (const auto& a : act::kPlainActivations) {
    if (a.contract().operation == op) return act::reference_plain(a.act, input);
  }
  throw std::invalid_argument("not an activation: " + op);
}

// The largest |a b| (gated) or |a| (plain) of the input: the scale of the float32 evaluation's error.
inline double max_product(const std::string& op, const at::Tensor& input) {
  if (input.numel() == 0) return 0.0;
  at::Tensor x = input.to(at::kCPU).to(at::kDouble);
  if (!gated(op)) return x.abs().max().item<double>();
  const int64_t d = input.size(-1) / 2;
  return (x.narrow(-1, 0, d) * x.narrow(-1, d, d)).abs().max().item<double>();
}

// max |got - want| / (atol + rtol |want|) with the suites' tolerance model (one rounding to the
// dtype, 32 float32 ulps of the largest |a b| or |a| for the float32 evaluation).
inline double headroom(const std::string& impl, const at::Tensor& got, const at::Tensor& input) {
  const at::ScalarType dtype = input.scalar_type();
  const double u = dtype == at::kFloat ? std::ldexp(1.0, -24) : dtype == at::kBFloat16 ? std::ldexp(1.0, -8)
                                                                                        : std::ldexp(1.0, -11);
  const std::string op = operation_of(impl);
  const double atol = 32 * std::ldexp(1.0, -24) * std::max(max_product(op, input), 1.0), rtol = 2 * u;
  const at::Tensor want = reference(op, input);
  const at::Tensor err = (got.to(at::kCPU).to(at::kDouble) - want).abs() / (atol + rtol * want.abs());
  return err.numel() == 0 ? 0.0 : err.max().item<double>();
}

inline at::Tensor call(const std::string& impl, const at::Tensor& input) {
  return function_of<ActivationFn>(impl)(input);
}

// A [5, 3, 2d] (gated) or [5, 3, d] view with padded rows (leading dims that cannot merge), in every
// dtype: a new contiguous output of the right shape, dtype and device, the input's storage
// unchanged, values within the suites' tolerance.
inline void check_output_layout_and_values(const std::string& impl, at::Device device) {
  const int64_t width = input_width(operation_of(impl), 37);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    SCOPED_TRACE(c10::toString(dtype));
    const at::Tensor buffer = (at::randn({5, 4, width + 6}) * 3).to(dtype).to(device);
    const at::Tensor input = buffer.narrow(1, 0, 3).narrow(2, 0, width);
    const at::Tensor before = buffer.clone();
    const at::Tensor out = call(impl, input);
    EXPECT_EQ(out.device(), device);
    EXPECT_EQ(out.sizes(), (std::vector<int64_t>{5, 3, 37}));
    EXPECT_TRUE(out.is_contiguous());
    EXPECT_EQ(out.scalar_type(), dtype);
    EXPECT_TRUE(at::equal(buffer, before)) << "the input's storage changed";
    EXPECT_LE(headroom(impl, out, input), 1.0);
  }
}

// An input that starts one element past an aligned address (rows not 16-byte aligned).
inline void check_misaligned_rows(const std::string& impl, at::Device device) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    SCOPED_TRACE(c10::toString(dtype));
    const int64_t rows = 9, width = input_width(operation_of(impl), 1031);
    const at::Tensor buffer = (at::randn({rows * width + 1}) * 3).to(dtype).to(device);
    const at::Tensor input = buffer.narrow(0, 1, rows * width).view({rows, width});
    EXPECT_LE(headroom(impl, call(impl, input), input), 1.0);
  }
}

// Two rows 2^31 + 64 elements apart, as a strided view of one large allocation would be (4 GiB of
// bfloat16 reserved, two rows touched). Returns false where the memory cannot be reserved.
inline bool check_row_stride_beyond_2_to_31(const std::string& impl, at::Device device) {
  const int64_t width = input_width(operation_of(impl), 32), stride = (int64_t{1} << 31) + 64;
  at::Tensor storage;
  try {
    storage = at::empty({stride + width}, at::TensorOptions().dtype(at::kBFloat16).device(device));
  } catch (const c10::Error&) {
    return false;
  }
  const at::Tensor input = storage.as_strided({2, width}, {stride, 1});
  input.copy_(at::randn({2, width}) * 3);
  EXPECT_LE(headroom(impl, call(impl, input), input), 1.0);
  return true;
}

inline void check_zero_rows(const std::string& impl, at::Device device) {
  const int64_t d = gated(operation_of(impl)) ? 4 : 8;
  EXPECT_EQ(call(impl, at::randn({0, 8}).to(device)).sizes(), (std::vector<int64_t>{0, d}));
  EXPECT_EQ(call(impl, at::randn({3, 0, 8}, at::kHalf).to(device)).sizes(), (std::vector<int64_t>{3, 0, d}));
}

// Without the gate: NaN stays NaN, act(+inf) = +inf, act(-inf) = 0 (each of these functions tends
// to 0 there; a * sigmoid(a) or a * Phi(a) computed naively would give NaN), in every dtype.
inline void check_non_finite_inputs_plain(const std::string& impl, at::Device device) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    SCOPED_TRACE(c10::toString(dtype));
    at::Tensor x = at::zeros({1, 19});
    x[0][0] = NAN;
    x[0][1] = INFINITY;
    x[0][2] = -INFINITY;
    x[0][17] = NAN;  // past the first SIMD vectors: the tail
    x[0][18] = -INFINITY;
    const at::Tensor out = call(impl, x.to(dtype).to(device)).to(at::kCPU).to(at::kFloat);
    EXPECT_TRUE(std::isnan(out[0][0].item<float>()));
    EXPECT_EQ(out[0][1].item<float>(), INFINITY);
    EXPECT_EQ(out[0][2].item<float>(), 0.0f);
    EXPECT_EQ(out[0][3].item<float>(), 0.0f);
    EXPECT_TRUE(std::isnan(out[0][17].item<float>()));
    EXPECT_EQ(out[0][18].item<float>(), 0.0f);
  }
}

inline void check_non_finite_inputs(const std::string& impl, at::Device device) {
  if (!gated(operation_of(impl))) return check_non_finite_inputs_plain(impl, device);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    SCOPED_TRACE(c10::toString(dtype));
    // A gate of -inf gives act = 0 (the limit), times a finite up: 0; a gate of +inf times 2: +inf.
    at::Tensor g = at::ones({2, 38});
    g[0][0] = -INFINITY;
    g[0][1] = INFINITY;
    g[0][19] = 2;  // up of column 0
    g[0][20] = 2;  // up of column 1
    g[1][18] = -INFINITY;  // the last column (the tail)
    const at::Tensor out = call(impl, g.to(dtype).to(device)).to(at::kCPU).to(at::kFloat);
    EXPECT_EQ(out[0][0].item<float>(), 0.0f);
    EXPECT_EQ(out[0][1].item<float>(), INFINITY);
    EXPECT_EQ(out[1][18].item<float>(), 0.0f);
  }
  at::Tensor x = at::zeros({1, 8});
  x[0][0] = NAN;       // gate NaN -> NaN
  x[0][5] = NAN;       // up NaN -> NaN
  x[0][2] = INFINITY;  // act(inf) * 0 is NaN in IEEE arithmetic (inf * 0)
  x[0][6] = 0;
  x[0][3] = 1;
  x[0][7] = INFINITY;  // act(1) * inf = inf
  const at::Tensor out = call(impl, x.to(device)).to(at::kCPU);
  EXPECT_TRUE(std::isnan(out[0][0].item<float>()));
  EXPECT_TRUE(std::isnan(out[0][1].item<float>()));
  EXPECT_TRUE(std::isnan(out[0][2].item<float>()));
  EXPECT_TRUE(std::isinf(out[0][3].item<float>()) && out[0][3].item<float>() > 0);
}

// Every argument error names the operation, the argument, what was expected and what was given.
inline void check_argument_errors(const std::string& impl, at::Device device) {
  struct Bad {
    at::Tensor input;
    std::string expected;
  };
  const at::Device other = device.is_cpu() ? at::Device(at::kMeta) : at::Device(at::kCPU);
  const std::string type = c10::DeviceTypeName(device.type(), /*lower_case=*/true);
  const auto on = [device](const at::Tensor& t) { return t.to(device); };
  const bool gate = gated(operation_of(impl));
  std::vector<Bad> cases = {
      {on(at::randn({4, 0})), gate ? "input's last dimension must be even and >= 2"
                                   : "input's last dimension must be >= 1 ([..., d] with d >= 1), got "},
      {on(at::ones({4, 8}, at::kDouble)), "input must be float32, bfloat16 or float16, got float64"},
      {on(at::ones({4, 8}, at::kInt)), "input must be float32, bfloat16 or float16, got int32"},
      {on(at::randn({8, 4})).t(), "input's last dimension must be contiguous (stride 1), got stride 4"},
      {on(at::ones({}, at::kFloat)), "input must have at least 1 dimension"},
      {at::randn({4, 8}).to(other), "input must be on " + type + " for this implementation, got " + other.str()},
      {at::Tensor(), "input must be a defined tensor"},
  };
  if (gate) cases.push_back({on(at::randn({4, 7})), "input's last dimension must be even and >= 2 ([..., 2d] with d >= 1"});
  const std::string op = operation_of(impl);
  for (const auto& c : cases) {
    const std::string e = error_message([&] { call(impl, c.input); });
    EXPECT_NE(e.find(op + ": " + c.expected), std::string::npos) << impl << ": " << e;
  }
}

// Every check above for one implementation.
inline void check_bridge(const std::string& impl, at::Device device) {
  SCOPED_TRACE(impl);
  check_output_layout_and_values(impl, device);
  check_misaligned_rows(impl, device);
  check_zero_rows(impl, device);
  check_non_finite_inputs(impl, device);
  check_argument_errors(impl, device);
}

}  // namespace xllm_kernel::testing::activation
