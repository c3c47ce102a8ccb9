// One body per check of an activation bridge, for every device: the CPU tests (test/ops) and the
// CUDA tests (test/cuda) call the same functions with their device. Inputs are drawn on the CPU
// and moved; the references are the suites' (src/ops/activation/suites/reference.h), float64 on
// the CPU, with the suites' tolerance model. Values over the full grid are the numerics suites'
// job (test/numerics and test/cuda run them for every implementation).
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "src/ops/activation/suites/reference.h"
#include "test/ops/common/registered.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing::activation {

// The family's operations, from the table its suites are made from (kGatedActivations).
inline std::vector<std::string> operations() {
  std::vector<std::string> out;
  for (const auto& a : numerics::activation::kGatedActivations) out.push_back(a.contract().operation);
  return out;
}

inline std::string operation_of(const std::string& impl) { return registry().find(impl)->operation->name(); }

// float64 [..., d] on the CPU from [..., 2d] on any device: the suites' reference.
inline at::Tensor reference(const std::string& op, const at::Tensor& input) {
  return numerics::activation::reference_gated(numerics::activation::gated_activation(op).act, input);
}

inline double max_product(const at::Tensor& input) {
  const int64_t d = input.size(-1) / 2;
  at::Tensor x = input.to(at::kCPU).to(at::kDouble);
  return input.numel() == 0 ? 0.0 : (x.narrow(-1, 0, d) * x.narrow(-1, d, d)).abs().max().item<double>();
}

// max |got - want| / (atol + rtol |want|) with the suites' tolerance model (one rounding to the
// dtype, 32 float32 ulps of the largest |a b| for the float32 evaluation).
inline double headroom(const std::string& impl, const at::Tensor& got, const at::Tensor& input) {
  const at::ScalarType dtype = input.scalar_type();
  const double u = dtype == at::kFloat ? std::ldexp(1.0, -24) : dtype == at::kBFloat16 ? std::ldexp(1.0, -8)
                                                                                        : std::ldexp(1.0, -11);
  const double atol = 32 * std::ldexp(1.0, -24) * std::max(max_product(input), 1.0), rtol = 2 * u;
  const at::Tensor want = reference(operation_of(impl), input);
  const at::Tensor err = (got.to(at::kCPU).to(at::kDouble) - want).abs() / (atol + rtol * want.abs());
  return err.numel() == 0 ? 0.0 : err.max().item<double>();
}

inline at::Tensor call(const std::string& impl, const at::Tensor& input) {
  return function_of<ActivationFn>(impl)(input);
}

// A [5, 3, 2d] view with padded rows (leading dims that cannot merge), in every dtype: a new
// contiguous output of the right shape, dtype and device, the input's storage unchanged, values
// within the suites' tolerance.
inline void check_output_layout_and_values(const std::string& impl, at::Device device) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    SCOPED_TRACE(c10::toString(dtype));
    const at::Tensor buffer = (at::randn({5, 4, 2 * 37 + 6}) * 3).to(dtype).to(device);
    const at::Tensor input = buffer.narrow(1, 0, 3).narrow(2, 0, 2 * 37);
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
    const int64_t rows = 9, d = 1031;
    const at::Tensor buffer = (at::randn({rows * 2 * d + 1}) * 3).to(dtype).to(device);
    const at::Tensor input = buffer.narrow(0, 1, rows * 2 * d).view({rows, 2 * d});
    EXPECT_LE(headroom(impl, call(impl, input), input), 1.0);
  }
}

// Two rows 2^31 + 64 elements apart, as a strided view of one large allocation would be (4 GiB of
// bfloat16 reserved, two rows touched). Returns false where the memory cannot be reserved.
inline bool check_row_stride_beyond_2_to_31(const std::string& impl, at::Device device) {
  const int64_t d = 32, stride = (int64_t{1} << 31) + 64;
  at::Tensor storage;
  try {
    storage = at::empty({stride + 2 * d}, at::TensorOptions().dtype(at::kBFloat16).device(device));
  } catch (const c10::Error&) {
    return false;
  }
  const at::Tensor input = storage.as_strided({2, 2 * d}, {stride, 1});
  input.copy_(at::randn({2, 2 * d}) * 3);
  EXPECT_LE(headroom(impl, call(impl, input), input), 1.0);
  return true;
}

inline void check_zero_rows(const std::string& impl, at::Device device) {
  EXPECT_EQ(call(impl, at::randn({0, 8}).to(device)).sizes(), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(call(impl, at::randn({3, 0, 8}, at::kHalf).to(device)).sizes(), (std::vector<int64_t>{3, 0, 4}));
}

inline void check_non_finite_inputs(const std::string& impl, at::Device device) {
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
  const auto on = [&](const at::Tensor& t) { return t.to(device); };
  const std::vector<Bad> cases = {
      {on(at::randn({4, 7})), "input's last dimension must be even and >= 2 ([..., 2d] with d >= 1"},
      {on(at::randn({4, 0})), "input's last dimension must be even and >= 2"},
      {on(at::ones({4, 8}, at::kDouble)), "input must be float32, bfloat16 or float16, got float64"},
      {on(at::ones({4, 8}, at::kInt)), "input must be float32, bfloat16 or float16, got int32"},
      {on(at::randn({8, 4})).t(), "input's last dimension must be contiguous (stride 1), got stride 4"},
      {on(at::ones({}, at::kFloat)), "input must have at least 1 dimension"},
      {at::randn({4, 8}).to(other), "input must be on " + type + " for this implementation, got " + other.str()},
      {at::Tensor(), "input must be a defined tensor"},
  };
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
