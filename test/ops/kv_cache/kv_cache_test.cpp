// Every registered CPU reshape_and_cache implementation through the shared bridge checks
// (test/ops/kv_cache/bridge_checks.h, which the CUDA tests run on a GPU): bits copied over every
// layout, the rest of the caches' storage unchanged, slot errors before any write, argument
// errors; and the public API and dispatcher.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "test/ops/kv_cache/bridge_checks.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing {
namespace {

using namespace kv_cache;  // NOLINT: the shared bodies of the bridge checks

const at::Device kCpu(at::kCPU);

TEST(KvCache, EveryCpuImplementationIsRegistered) {
  const auto names = registered_implementations(kOperation, Device::kCpu);
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu.torch.reshape_and_cache"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu.native.reshape_and_cache"), names.end());
}

class KvCacheImpl : public ::testing::TestWithParam<std::string> {};

TEST_P(KvCacheImpl, BridgeChecks) { check_bridge(GetParam(), kCpu); }

// Many tokens over several threads: every row lands (the threads split the tokens).
TEST_P(KvCacheImpl, ManyTokensOnEveryThread) {
  const int64_t tokens = 5000, heads = 8, head_size = 128, blocks = 400, block_size = 16;
  const at::Tensor key = random_bits({tokens, heads, head_size}, at::kBFloat16);
  const at::Tensor value = random_bits({tokens, heads, head_size}, at::kBFloat16);
  at::Tensor kc = random_bits({blocks, block_size, heads, head_size}, at::kBFloat16);
  at::Tensor vc = random_bits({blocks, block_size, heads, head_size}, at::kBFloat16);
  const at::Tensor slots = random_slots(tokens, blocks * block_size);
  at::Tensor want_k = kc.clone(), want_v = vc.clone();
  reference_reshape_and_cache(want_k, key, slots);
  reference_reshape_and_cache(want_v, value, slots);
  call(GetParam(), key, value, kc, vc, slots);
  EXPECT_TRUE(at::equal(storage_bits(kc), storage_bits(want_k)));
  EXPECT_TRUE(at::equal(storage_bits(vc), storage_bits(want_v)));
}

INSTANTIATE_TEST_SUITE_P(All, KvCacheImpl, ::testing::ValuesIn(registered_implementations(kOperation, Device::kCpu)),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '.' ? '_' : c;
                           return n;
                         });

class KvCacheApi : public ::testing::Test {
 protected:
  void SetUp() override { runtime().reset_for_testing(); }
  void TearDown() override { runtime().reset_for_testing(); }
};

TEST_F(KvCacheApi, SelectsNativeAndPublicApiAndDispatcherWriteTheCaches) {
  auto b = initialize("cpu", {"reshape_and_cache"});
  EXPECT_EQ(b->at(kOperation).spec().name, "cpu.native.reshape_and_cache");
  EXPECT_EQ(b->at(kOperation).spec().binding, "highway");
  const at::Tensor key = random_bits({6, 2, 64}, at::kHalf), value = random_bits({6, 2, 64}, at::kHalf);
  const at::Tensor slots = at::tensor({7, -1, 0, 31, 12, 3}, at::kLong);
  at::Tensor kc = random_bits({2, 16, 2, 64}, at::kHalf), vc = random_bits({2, 16, 2, 64}, at::kHalf);
  at::Tensor want_k = kc.clone(), want_v = vc.clone();
  reference_reshape_and_cache(want_k, key, slots);
  reference_reshape_and_cache(want_v, value, slots);
  at::Tensor kc2 = kc.clone(), vc2 = vc.clone();
  ops::reshape_and_cache(key, value, kc, vc, slots);
  EXPECT_TRUE(at::equal(storage_bits(kc), storage_bits(want_k)));
  EXPECT_TRUE(at::equal(storage_bits(vc), storage_bits(want_v)));
  // And through the dispatcher, as torch.ops.xllm_kernel.reshape_and_cache.
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow("xllm_kernel::reshape_and_cache", "");
  handle.typed<void(const at::Tensor&, const at::Tensor&, at::Tensor&, at::Tensor&, const at::Tensor&)>().call(
      key, value, kc2, vc2, slots);
  EXPECT_TRUE(at::equal(storage_bits(kc2), storage_bits(want_k)));
  EXPECT_TRUE(at::equal(storage_bits(vc2), storage_bits(want_v)));
}

TEST_F(KvCacheApi, CallBeforeInitializeIsAnError) {
  at::Tensor kc = at::zeros({1, 16, 1, 8}), vc = at::zeros({1, 16, 1, 8});
  const std::string e = error_message(
      [&] { ops::reshape_and_cache(at::zeros({1, 1, 8}), at::zeros({1, 1, 8}), kc, vc, at::zeros({1}, at::kLong)); });
  EXPECT_NE(e.find("reshape_and_cache: device cpu is not initialized"), std::string::npos) << e;
}

}  // namespace
}  // namespace xllm_kernel::testing
