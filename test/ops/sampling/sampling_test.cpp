// Every registered CPU sample implementation through the shared bridge checks
// (test/ops/sampling/bridge_checks.h, which the CUDA tests run on a GPU): greedy and ties, the
// boundaries of top-k, top-p and min-p, infinities, a grid against the float64 reference, batch
// invariance, the distribution, value and argument errors; the implementations token for token;
// the torch implementations' generator against the kernels'; the public API and dispatcher.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "src/ops/sampling/internal.h"
#include "test/ops/sampling/bridge_checks.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing {
namespace {

using namespace sampling;  // NOLINT: the shared bodies of the bridge checks

const at::Device kCpu(at::kCPU);

TEST(Sampling, EveryCpuImplementationIsRegistered) {
  const auto names = registered_implementations(kOperation, Device::kCpu);
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu.torch.sample"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu.native.sample"), names.end());
}

// The torch implementations' Philox4x32-10 in tensor operations gives the header's uniforms, bit
// for bit, over seeds and offsets of all of int64 and tokens of every residue mod 4.
TEST(Sampling, TorchGeneratorIsTheKernelsGenerator) {
  const auto i64 = at::TensorOptions().dtype(at::kLong);
  const at::Tensor seeds = at::randint(INT64_MIN, INT64_MAX, {64}, i64);
  const at::Tensor offsets = at::randint(INT64_MIN, INT64_MAX, {64}, i64);
  const at::Tensor tokens = at::randint(0, INT32_MAX, {64, 33}, i64);
  const at::Tensor u = xllm_kernel::sampling::uniforms(seeds, offsets, tokens);
  ASSERT_EQ(u.scalar_type(), at::kFloat);
  for (int64_t r = 0; r < 64; ++r) {
    for (int64_t j = 0; j < 33; ++j) {
      const float want = kernels::sampling_uniform(seeds[r].item<int64_t>(), offsets[r].item<int64_t>(),
                                                   tokens[r][j].item<int64_t>());
      ASSERT_EQ(u[r][j].item<float>(), want) << "row " << r << " token " << tokens[r][j].item<int64_t>();
    }
  }
}

class SamplingImpl : public ::testing::TestWithParam<std::string> {};

TEST_P(SamplingImpl, BridgeChecks) { check_bridge(GetParam(), kCpu); }

// Every thread count (rows split over threads, and one row split within when rows are fewer) gives
// the same tokens.
TEST_P(SamplingImpl, ThreadCountsGiveTheSameTokens) {
  const int threads = at::get_num_threads();
  const at::Tensor l = at::randn({5, 128256}, at::TensorOptions().dtype(at::kFloat));
  const Call c = make_call(l, {{0.0f}, {0.8f, 50, 0.9f}, {1.0f, 0, 0.95f}, {1.2f, 0, 1.0f, 0.1f}, {0.7f}}, kCpu);
  at::set_num_threads(1);
  const auto one = tokens_of(call(GetParam(), c));
  for (const int n : {2, 3, 8}) {
    at::set_num_threads(n);
    EXPECT_EQ(tokens_of(call(GetParam(), c)), one) << n << " threads";
    EXPECT_EQ(tokens_of(call(GetParam(), make_call(l.narrow(0, 1, 1), {{0.8f, 50, 0.9f}}, kCpu))),
              (std::vector<int64_t>{one[1]}))
        << n << " threads, one row";
  }
  at::set_num_threads(threads);
  expect_allowed(call(GetParam(), c), c);
}

INSTANTIATE_TEST_SUITE_P(All, SamplingImpl, ::testing::ValuesIn(registered_implementations(kOperation, Device::kCpu)),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& ch : n) ch = ch == '.' ? '_' : ch;
                           return n;
                         });

// The CPU implementations agree token for token on rows whose reference allows one token.
TEST(Sampling, CpuImplementationsAgreeTokenForToken) {
  const auto names = registered_implementations(kOperation, Device::kCpu);
  ASSERT_GE(names.size(), 2u);
  for (const int64_t vocab : {1000, 32000}) {
    const int64_t batch = 64;
    const at::Tensor l = at::randn({batch, vocab}, at::TensorOptions().dtype(at::kBFloat16));
    std::vector<Row> params;
    for (int64_t r = 0; r < batch; ++r) params.push_back({0.4f + 0.05f * r, static_cast<int32_t>(r % 5) * 20, 0.5f + 0.007f * r, 0.01f * (r % 4), r, 99});
    const Call c = make_call(l, params, kCpu);
    const auto rows = reference(c);
    const auto first = tokens_of(call(names[0], c));
    for (size_t i = 1; i < names.size(); ++i) {
      const auto other = tokens_of(call(names[i], c));
      for (int64_t r = 0; r < batch; ++r) {
        if (rows[r].exact) EXPECT_EQ(other[r], first[r]) << names[i] << " vs " << names[0] << ", row " << r;
      }
    }
  }
}

class SamplingApi : public ::testing::Test {
 protected:
  void SetUp() override { runtime().reset_for_testing(); }
  void TearDown() override { runtime().reset_for_testing(); }
};

TEST_F(SamplingApi, SelectsNativeAndPublicApiAndDispatcherGiveTheReference) {
  auto b = initialize("cpu", {"sample"});
  EXPECT_EQ(b->at(kOperation).spec().name, "cpu.native.sample");
  EXPECT_EQ(b->at(kOperation).spec().binding, "highway");
  const at::Tensor l = at::randn({6, 3000}, at::TensorOptions().dtype(at::kHalf));
  const Call c = make_call(l, same_rows(6, {0.8f, 50, 0.9f}), kCpu);
  const at::Tensor got = ops::sample(c.logits, c.temperature, c.top_k, c.top_p, c.min_p, c.seeds, c.offsets);
  expect_allowed(got, c);
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow("xllm_kernel::sample", "");
  const at::Tensor via = handle.typed<SampleFn>().call(c.logits, c.temperature, c.top_k, c.top_p, c.min_p, c.seeds, c.offsets);
  EXPECT_TRUE(at::equal(via, got));
}

TEST_F(SamplingApi, CallBeforeInitializeIsAnError) {
  const Call c = make_call(at::randn({2, 10}), same_rows(2, {1.0f}), kCpu);
  const std::string e = error_message([&] { ops::sample(c.logits, c.temperature, c.top_k, c.top_p, c.min_p, c.seeds, c.offsets); });
  EXPECT_NE(e.find("sample: device cpu is not initialized"), std::string::npos) << e;
}

}  // namespace
}  // namespace xllm_kernel::testing
