// Every registered CPU activation implementation: argument errors, output layout, inputs left
// unchanged, agreement with the float64 definitions on layouts the suites do not build (huge row
// strides, a 4-D input), and the public API. Values over the full grid are the numerics suites'
// job (test/numerics runs them for every implementation).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <cmath>

#include "test/ops/common/registered.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing {
namespace {

const char* const kOperations[] = {"silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"};

double act(const std::string& op, double a) {
  if (op == "silu_and_mul") return a / (1 + std::exp(-a));
  if (op == "gelu_and_mul") return 0.5 * a * (1 + std::erf(a / std::sqrt(2.0)));
  return 0.5 * a * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a)));
}

// float64 [..., d] from [..., 2d].
at::Tensor reference(const std::string& op, const at::Tensor& input) {
  const int64_t d = input.size(-1) / 2;
  at::Tensor x = input.to(at::kDouble);
  at::Tensor gate = x.narrow(-1, 0, d).contiguous(), up = x.narrow(-1, d, d);
  at::Tensor a = gate.clone();
  double* p = a.data_ptr<double>();
  for (int64_t i = 0; i < a.numel(); ++i) p[i] = act(op, p[i]);
  return a * up;
}

// max |got - want| / (atol + rtol |want|) with the suites' tolerance model.
double headroom(const at::Tensor& got, const at::Tensor& want, at::ScalarType dtype, double max_product) {
  const double u = dtype == at::kFloat ? std::ldexp(1.0, -24) : dtype == at::kBFloat16 ? std::ldexp(1.0, -8)
                                                                                        : std::ldexp(1.0, -11);
  const double atol = 32 * std::ldexp(1.0, -24) * std::max(max_product, 1.0), rtol = 2 * u;
  at::Tensor err = (got.to(at::kDouble) - want).abs() / (atol + rtol * want.abs());
  return err.numel() == 0 ? 0.0 : err.max().item<double>();
}

double max_product(const at::Tensor& input) {
  const int64_t d = input.size(-1) / 2;
  at::Tensor x = input.to(at::kDouble);
  return input.numel() == 0 ? 0.0 : (x.narrow(-1, 0, d) * x.narrow(-1, d, d)).abs().max().item<double>();
}

std::vector<std::string> implementations() {
  std::vector<std::string> out;
  for (const char* op : kOperations) {
    for (const auto& name : registered_implementations(op, Device::kCpu)) out.push_back(name);
  }
  return out;
}

std::string operation_of(const std::string& impl) { return registry().find(impl)->operation->name(); }

TEST(Activation, EveryCpuImplementationIsRegistered) {
  for (const char* op : kOperations) {
    const auto names = registered_implementations(op, Device::kCpu);
    EXPECT_NE(std::find(names.begin(), names.end(), std::string("cpu.torch.") + op), names.end()) << op;
    EXPECT_NE(std::find(names.begin(), names.end(), std::string("cpu.native.") + op), names.end()) << op;
  }
}

TEST(Activation, OutputIsNewContiguousAndInputUnchanged) {
  for (const auto& impl : implementations()) {
    SCOPED_TRACE(impl);
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      // A [5, 3, 2d] view with padded rows: leading dims that cannot merge.
      at::Tensor buffer = (at::randn({5, 4, 2 * 37 + 6}) * 3).to(dtype);
      at::Tensor input = buffer.narrow(1, 0, 3).narrow(2, 0, 2 * 37);
      const at::Tensor before = buffer.clone();
      at::Tensor out = function_of<ActivationFn>(impl)(input);
      EXPECT_EQ(out.sizes(), (std::vector<int64_t>{5, 3, 37}));
      EXPECT_TRUE(out.is_contiguous());
      EXPECT_EQ(out.scalar_type(), dtype);
      EXPECT_TRUE(at::equal(buffer, before)) << "the input's storage changed";
      EXPECT_LE(headroom(out, reference(operation_of(impl), input), dtype, max_product(input)), 1.0);
    }
  }
}

TEST(Activation, RowStrideBeyond2To31Elements) {
  // Two rows 2^31 + 64 elements apart, as a strided view of one large allocation would be; the
  // storage is 2^31 + 64 + 2d bf16 elements (4 GiB + a little), mapped lazily.
  const int64_t d = 32, stride = (int64_t{1} << 31) + 64;
  at::Tensor storage = at::empty({stride + 2 * d}, at::kBFloat16);
  at::Tensor input = storage.as_strided({2, 2 * d}, {stride, 1});
  input.copy_(at::randn({2, 2 * d}) * 3);
  for (const auto& impl : implementations()) {
    SCOPED_TRACE(impl);
    at::Tensor out = function_of<ActivationFn>(impl)(input);
    EXPECT_LE(headroom(out, reference(operation_of(impl), input), at::kBFloat16, max_product(input)), 1.0);
  }
}

TEST(Activation, ZeroRowsAndZeroSizedLeadingDimensions) {
  for (const auto& impl : implementations()) {
    SCOPED_TRACE(impl);
    EXPECT_EQ(function_of<ActivationFn>(impl)(at::randn({0, 8})).sizes(), (std::vector<int64_t>{0, 4}));
    EXPECT_EQ(function_of<ActivationFn>(impl)(at::randn({3, 0, 8}, at::kHalf)).sizes(), (std::vector<int64_t>{3, 0, 4}));
  }
}

TEST(Activation, NonFiniteInputsPropagate) {
  for (const auto& impl : implementations()) {
    SCOPED_TRACE(impl);
    at::Tensor x = at::zeros({1, 8});
    x[0][0] = NAN;      // gate NaN -> NaN
    x[0][5] = NAN;      // up NaN -> NaN
    x[0][2] = INFINITY;  // act(inf) * 0 is NaN in IEEE arithmetic (inf * 0)
    x[0][6] = 0;
    x[0][3] = 1;
    x[0][7] = INFINITY;  // act(1) * inf = inf
    at::Tensor out = function_of<ActivationFn>(impl)(x);
    EXPECT_TRUE(std::isnan(out[0][0].item<float>()));
    EXPECT_TRUE(std::isnan(out[0][1].item<float>()));
    EXPECT_TRUE(std::isnan(out[0][2].item<float>()));
    EXPECT_TRUE(std::isinf(out[0][3].item<float>()) && out[0][3].item<float>() > 0);
  }
}

TEST(ActivationErrors, EveryImplementationNamesOpArgumentExpectedAndGiven) {
  struct Bad {
    at::Tensor input;
    std::string expected;
  };
  const std::vector<Bad> cases = {
      {at::randn({4, 7}), "input's last dimension must be even and >= 2 ([..., 2d] with d >= 1"},
      {at::randn({4, 0}), "input's last dimension must be even and >= 2"},
      {at::ones({4, 8}, at::kDouble), "input must be float32, bfloat16 or float16, got float64"},
      {at::ones({4, 8}, at::kInt), "input must be float32, bfloat16 or float16, got int32"},
      {at::randn({8, 4}).t(), "input's last dimension must be contiguous (stride 1), got stride 4"},
      {at::ones({}, at::kFloat), "input must have at least 1 dimension"},
      {at::randn({4, 8}, at::TensorOptions().device(at::kMeta)), "input must be on cpu for this implementation, got meta"},
      {at::Tensor(), "input must be a defined tensor"},
  };
  for (const auto& impl : implementations()) {
    const std::string op = operation_of(impl);
    for (const auto& c : cases) {
      const std::string e = error_message([&] { function_of<ActivationFn>(impl)(c.input); });
      EXPECT_NE(e.find(op + ": " + c.expected), std::string::npos) << impl << ": " << e;
    }
  }
}

class ActivationApi : public ::testing::Test {
 protected:
  void SetUp() override { runtime().reset_for_testing(); }
  void TearDown() override { runtime().reset_for_testing(); }
};

TEST_F(ActivationApi, SelectsNativeAndPublicApiMatchesTheBinding) {
  auto b = initialize("cpu", {"silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"});
  at::Tensor x = (at::randn({3, 2 * 100}) * 3).to(at::kBFloat16);
  const std::pair<const char*, at::Tensor (*)(const at::Tensor&)> api[] = {
      {"silu_and_mul", &ops::silu_and_mul}, {"gelu_and_mul", &ops::gelu_and_mul},
      {"gelu_tanh_and_mul", &ops::gelu_tanh_and_mul}};
  for (const auto& [op, fn] : api) {
    SCOPED_TRACE(op);
    EXPECT_EQ(b->at(op).spec().name, std::string("cpu.native.") + op);
    EXPECT_EQ(b->at(op).spec().binding, "highway");
    EXPECT_TRUE(at::equal(b->at(op).function<ActivationFn>()(x), fn(x)));
    const Explanation ex = explain("cpu", op);
    ASSERT_TRUE(ex.selected());
    EXPECT_FALSE(ex.selected()->detail.empty());  // the SIMD target
  }
  // And through the dispatcher, as torch.ops.xllm_kernel.silu_and_mul.
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow("xllm_kernel::silu_and_mul", "");
  at::Tensor via_dispatcher = handle.template typed<at::Tensor(const at::Tensor&)>().call(x);
  EXPECT_TRUE(at::equal(via_dispatcher, ops::silu_and_mul(x)));
}

TEST_F(ActivationApi, CallBeforeInitializeIsAnError) {
  const std::string e = error_message([] { ops::gelu_and_mul(at::randn({2, 8})); });
  EXPECT_NE(e.find("gelu_and_mul: device cpu is not initialized"), std::string::npos) << e;
}

}  // namespace
}  // namespace xllm_kernel::testing
