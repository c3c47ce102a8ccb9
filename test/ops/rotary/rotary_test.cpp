// Every registered CPU rotary_embedding implementation through the shared bridge checks
// (test/ops/rotary/bridge_checks.h, which the CUDA tests run on a GPU): argument errors, fused qkv
// slices, layouts, out-of-range positions, inputs left unchanged outside the rotated elements; and
// the public API through the binding and the dispatcher.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "test/ops/rotary/bridge_checks.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing {
namespace {

using namespace rotary;  // NOLINT: the shared bodies of the bridge checks

const at::Device kCpu(at::kCPU);

TEST(Rotary, EveryCpuImplementationIsRegistered) {
  const auto names = registered_implementations(kOperation, Device::kCpu);
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu.torch.rotary_embedding"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu.native.rotary_embedding"), names.end());
}

class RotaryImpl : public ::testing::TestWithParam<std::string> {};

TEST_P(RotaryImpl, BridgeChecks) { check_bridge(GetParam(), kCpu); }

TEST_P(RotaryImpl, TokenStrideBeyond2To31Elements) {
  if (!check_token_stride_beyond_2_to_31(GetParam(), kCpu)) GTEST_SKIP() << "cannot reserve 4 GiB";
}

// Both implementations agree within the tolerance on a model-sized fused qkv (32/8 heads of 128).
TEST_P(RotaryImpl, ModelShapeAgainstTheReference) {
  const int64_t tokens = 33, q = 32 * 128, k = 8 * 128;
  for (bool neox : {true, false}) {
    const at::Tensor qkv = at::randn({tokens, q + 2 * k}).to(at::kBFloat16);
    const at::Tensor before = qkv.clone();
    const at::Tensor positions = at::randint(0, 4096, {tokens}, at::kLong);
    const at::Tensor cache = cos_sin_cache(4096, 128, at::kFloat);
    call(GetParam(), positions, qkv.narrow(1, 0, q), qkv.narrow(1, q, k), 128, cache, neox);
    double terms = 0;
    const at::Tensor want_q = reference_rotary_embedding(positions, before.narrow(1, 0, q), 128, cache, neox, terms);
    const at::Tensor want_k = reference_rotary_embedding(positions, before.narrow(1, q, k), 128, cache, neox, terms);
    EXPECT_LE(headroom(qkv.narrow(1, 0, q), want_q, terms), 1.0);
    EXPECT_LE(headroom(qkv.narrow(1, q, k), want_k, terms), 1.0);
    EXPECT_TRUE(at::equal(qkv.narrow(1, q + k, k), before.narrow(1, q + k, k)));
  }
}

INSTANTIATE_TEST_SUITE_P(All, RotaryImpl, ::testing::ValuesIn(registered_implementations(kOperation, Device::kCpu)),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '.' ? '_' : c;
                           return n;
                         });

class RotaryApi : public ::testing::Test {
 protected:
  void SetUp() override { runtime().reset_for_testing(); }
  void TearDown() override { runtime().reset_for_testing(); }
};

TEST_F(RotaryApi, SelectsNativeAndPublicApiMatchesTheBinding) {
  auto b = initialize("cpu", {"rotary_embedding"});
  EXPECT_EQ(b->at(kOperation).spec().name, "cpu.native.rotary_embedding");
  EXPECT_EQ(b->at(kOperation).spec().binding, "highway");
  const Explanation ex = explain("cpu", kOperation);
  ASSERT_TRUE(ex.selected());
  EXPECT_FALSE(ex.selected()->detail.empty());  // the SIMD target

  const at::Tensor positions = at::randint(0, 128, {5}, at::kLong);
  const at::Tensor cache = cos_sin_cache(128, 64, at::kFloat);
  const at::Tensor q0 = at::randn({5, 4 * 64}).to(at::kHalf), k0 = at::randn({5, 64}).to(at::kHalf);
  at::Tensor q1 = q0.clone(), k1 = k0.clone(), q2 = q0.clone(), k2 = k0.clone(), q3 = q0.clone(), k3 = k0.clone();
  b->at(kOperation).function<RotaryEmbeddingFn>()(positions, q1, k1, 64, cache, false);
  ops::rotary_embedding(positions, q2, k2, 64, cache, false);
  EXPECT_TRUE(at::equal(q1, q2));
  EXPECT_TRUE(at::equal(k1, k2));
  EXPECT_FALSE(at::equal(q1, q0));
  // And through the dispatcher, as torch.ops.xllm_kernel.rotary_embedding.
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow("xllm_kernel::rotary_embedding", "");
  handle.typed<void(const at::Tensor&, at::Tensor&, const std::optional<at::Tensor>&, int64_t, const at::Tensor&, bool)>()
      .call(positions, q3, k3, 64, cache, false);
  EXPECT_TRUE(at::equal(q3, q1));
  EXPECT_TRUE(at::equal(k3, k1));
}

TEST_F(RotaryApi, CallBeforeInitializeIsAnError) {
  at::Tensor q = at::randn({2, 64});
  const std::string e = error_message([&] {
    ops::rotary_embedding(at::zeros({2}, at::kLong), q, std::nullopt, 64, cos_sin_cache(4, 64, at::kFloat), true);
  });
  EXPECT_NE(e.find("rotary_embedding: device cpu is not initialized"), std::string::npos) << e;
}

}  // namespace
}  // namespace xllm_kernel::testing
