// Every registered CPU activation implementation through the shared bridge checks
// (test/ops/activation/bridge_checks.h, which the CUDA tests run on a GPU): argument errors, output
// layout, inputs left unchanged, agreement with the float64 definitions on layouts the suites do
// not build; and the public API.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "test/ops/activation/bridge_checks.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing {
namespace {

using namespace activation;  // NOLINT: the shared bodies of the bridge checks

const at::Device kCpu(at::kCPU);

std::vector<std::string> implementations() {
  std::vector<std::string> out;
  for (const std::string& op : operations()) {
    for (const auto& name : registered_implementations(op, Device::kCpu)) out.push_back(name);
  }
  return out;
}

TEST(Activation, EveryCpuImplementationIsRegistered) {
  for (const std::string& op : operations()) {
    const auto names = registered_implementations(op, Device::kCpu);
    EXPECT_NE(std::find(names.begin(), names.end(), "cpu.torch." + op), names.end()) << op;
    EXPECT_NE(std::find(names.begin(), names.end(), "cpu.native." + op), names.end()) << op;
  }
}

class ActivationImpl : public ::testing::TestWithParam<std::string> {};

TEST_P(ActivationImpl, BridgeChecks) { check_bridge(GetParam(), kCpu); }

TEST_P(ActivationImpl, RowStrideBeyond2To31Elements) {
  if (!check_row_stride_beyond_2_to_31(GetParam(), kCpu)) GTEST_SKIP() << "cannot reserve 4 GiB";
}

INSTANTIATE_TEST_SUITE_P(All, ActivationImpl, ::testing::ValuesIn(implementations()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '.' ? '_' : c;
                           return n;
                         });

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
