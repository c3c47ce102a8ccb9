// Every registered CPU normalization implementation (not only the selected one): the shared bridge
// checks (test/ops/normalization/bridge_checks.h, which the CUDA tests run on a GPU) over the grid,
// every argument error, and the public API through the process-wide runtime.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "test/ops/normalization/bridge_checks.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing {
namespace {

using namespace normalization;  // NOLINT: the shared bodies of the bridge checks

const at::Device kCpu(at::kCPU);

std::vector<std::string> implementations_of(const std::string& operation) {
  return registered_implementations(operation, Device::kCpu);
}

std::vector<ImplAndDtype> params_for(const std::string& operation) {
  return ::xllm_kernel::testing::params_for(implementations_of(operation));
}

class RmsNormImpl : public ::testing::TestWithParam<ImplAndDtype> {};
class FusedAddRmsNormImpl : public ::testing::TestWithParam<ImplAndDtype> {};
class LayerNormImpl : public ::testing::TestWithParam<ImplAndDtype> {};

TEST_P(RmsNormImpl, MatchesFloat64ReferenceOverGrid) {
  check_rms_norm_grid(GetParam().implementation, GetParam().dtype, kCpu);
}
TEST_P(FusedAddRmsNormImpl, MatchesFloat64ReferenceOverGrid) {
  check_fused_add_rms_norm_grid(GetParam().implementation, GetParam().dtype, kCpu);
}
TEST_P(LayerNormImpl, MatchesFloat64ReferenceOverGrid) {
  check_layer_norm_grid(GetParam().implementation, GetParam().dtype, kCpu);
}

INSTANTIATE_TEST_SUITE_P(All, RmsNormImpl, ::testing::ValuesIn(params_for("rms_norm")), param_name);
INSTANTIATE_TEST_SUITE_P(All, FusedAddRmsNormImpl, ::testing::ValuesIn(params_for("fused_add_rms_norm")), param_name);
INSTANTIATE_TEST_SUITE_P(All, LayerNormImpl, ::testing::ValuesIn(params_for("layer_norm")), param_name);

TEST_P(FusedAddRmsNormImpl, HalvesOfOneBufferAreDisjoint) {
  check_fused_add_rms_norm_halves_of_one_buffer(GetParam().implementation, kCpu);
}

TEST(NormalizationLargeStride, RowStrideBeyond2To31Elements) {
  if (!check_row_stride_beyond_2_to_31(kCpu, implementations_of)) GTEST_SKIP() << "cannot reserve 8 GiB";
}

TEST(NormalizationErrors, RmsNorm) { expect_errors(implementations_of("rms_norm"), rms_norm_bad_cases(kCpu)); }
TEST(NormalizationErrors, FusedAddRmsNorm) {
  expect_errors(implementations_of("fused_add_rms_norm"), fused_add_rms_norm_bad_cases(kCpu));
}
TEST(NormalizationErrors, LayerNorm) { expect_errors(implementations_of("layer_norm"), layer_norm_bad_cases(kCpu)); }

// ---- the public API through the process-wide runtime ----

class PublicApi : public ::testing::Test {
 protected:
  void SetUp() override { runtime().reset_for_testing(); }
  void TearDown() override { runtime().reset_for_testing(); }
};

TEST_F(PublicApi, CallBeforeInitializeIsAnError) {
  at::Tensor x = at::randn({2, 8}), w = at::ones({8});
  const std::string e = error_message([&] { ops::rms_norm(x, w, 1e-6); });
  EXPECT_NE(e.find("rms_norm: device cpu is not initialized; call xllm_kernel::initialize(\"cpu\")"), std::string::npos) << e;
}

TEST_F(PublicApi, SelectsNativeAndExplainShowsSimdTarget) {
  auto b = initialize("cpu");
  EXPECT_EQ(b->size(), builtin_operations().size());
  for (const char* op : {"rms_norm", "fused_add_rms_norm", "layer_norm"}) {
    EXPECT_EQ(b->at(op).spec().solution, "native") << op;
    const Explanation ex = explain("cpu", op);
    ASSERT_TRUE(ex.selected());
    EXPECT_FALSE(ex.selected()->detail.empty());  // the SIMD target, e.g. AVX2
    EXPECT_EQ(ex.selected()->binding, "highway");
    ASSERT_EQ(ex.candidates.size(), 2u);
    EXPECT_EQ(ex.candidates[1].verdict, Verdict::kLowerPriority);
  }
  at::Tensor x = at::randn({3, 40}, at::kBFloat16), w = at::ones({40});
  EXPECT_LE(headroom(ops::rms_norm(x, w, 1e-6), reference_rms_norm(x, w, 1e-6), tolerance_for(at::kBFloat16)), 1.0);
  // The binding's function and the public API agree bitwise.
  EXPECT_TRUE(at::equal(b->at("rms_norm").function<RmsNormFn>()(x, w, 1e-6), ops::rms_norm(x, w, 1e-6)));
}

TEST_F(PublicApi, OverrideSelectsTorchSolution) {
  auto b = initialize("cpu", {"layer_norm"}, {{"layer_norm", "torch"}});
  EXPECT_EQ(b->at("layer_norm").spec().name, "cpu.torch.layer_norm");
  EXPECT_EQ(layer_norm_operation().prepared(Device::kCpu)->spec().name, "cpu.torch.layer_norm");
}

TEST_F(PublicApi, CpuHasNoGraphMode) {
  const std::string e = error_message([] { initialize("cpu", {"rms_norm"}, {}, "graph"); });
  EXPECT_NE(e.find("rms_norm: no eligible implementation on cpu in graph mode"), std::string::npos) << e;
  EXPECT_NE(e.find("unsupported mode graph (supports eager)"), std::string::npos) << e;
}

TEST_F(PublicApi, UninitializedDeviceOfInputIsReported) {
  initialize("cpu");
  at::Tensor x = at::randn({2, 8}, at::TensorOptions().device(at::kMeta));
  const std::string e = error_message([&] { ops::rms_norm(x, x[0], 1e-6); });
  EXPECT_NE(e.find("rms_norm: input must be on cpu, cuda or npu, got meta"), std::string::npos) << e;
}

}  // namespace
}  // namespace xllm_kernel::testing
