// Every registered CPU paged_attention implementation through the shared bridge checks
// (test/ops/attention/bridge_checks.h, which the CUDA tests run on a GPU): values over modes,
// layouts and dtypes against the float64 reference, padding, value errors before any compute,
// argument errors; the threads' split of one long sequence; batch invariance of the
// implementations that declare it; and the public API and dispatcher.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "test/ops/attention/bridge_checks.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing {
namespace {

using namespace attention;  // NOLINT: the shared bodies of the bridge checks

const at::Device kCpu(at::kCPU);

TEST(Attention, EveryCpuImplementationIsRegistered) {
  const auto names = registered_implementations(kOperation, Device::kCpu);
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu.torch.paged_attention"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu.native.paged_attention"), names.end());
}

class AttentionImpl : public ::testing::TestWithParam<std::string> {};

TEST_P(AttentionImpl, BridgeChecks) { check_bridge(GetParam(), kCpu); }

// One or two long sequences on every thread count: the KV range split over threads and merged
// gives the reference, as do many sequences of a mixed batch.
TEST_P(AttentionImpl, SplitsOverThreadsGiveTheReference) {
  const int threads = at::get_num_threads();
  for (const int n : {1, 3, 8}) {
    at::set_num_threads(n);
    SCOPED_TRACE("threads " + std::to_string(n));
    for (const Batch& b : {Batch{{2000}, {1}, 32, 8, 128}, Batch{{700, 1500}, {1, 1}, 16, 1, 64},
                           Batch{{600, 900, 33, 34, 35}, {200, 1, 1, 1, 35}, 8, 2, 96}}) {
      const Call c = make_call(b, at::kBFloat16, kContiguous, kCpu);
      expect_close(call(GetParam(), c), reference(c), at::kBFloat16);
    }
  }
  at::set_num_threads(threads);
}

// The implementations that declare batch invariance (KernelSpec::batch_invariant; the suite names
// this test for them): check_batch_invariance (bridge_checks.h) on each.
TEST(CpuAttention, BatchInvariantRowsAreTheSameAloneAndInAnyBatch) {
  std::vector<std::string> invariant;
  for (const auto& name : registered_implementations(kOperation, Device::kCpu)) {
    if (registry().find(name)->spec.batch_invariant) invariant.push_back(name);
  }
  ASSERT_FALSE(invariant.empty()) << "no CPU paged_attention implementation declares batch invariance";
  for (const std::string& impl : invariant) check_batch_invariance(impl, kCpu);
}

INSTANTIATE_TEST_SUITE_P(All, AttentionImpl, ::testing::ValuesIn(registered_implementations(kOperation, Device::kCpu)),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '.' ? '_' : c;
                           return n;
                         });

class AttentionApi : public ::testing::Test {
 protected:
  void SetUp() override { runtime().reset_for_testing(); }
  void TearDown() override { runtime().reset_for_testing(); }
};

TEST_F(AttentionApi, SelectsNativeAndPublicApiAndDispatcherGiveTheReference) {
  auto b = initialize("cpu", {"paged_attention"});
  EXPECT_EQ(b->at(kOperation).spec().name, "cpu.native.paged_attention");
  EXPECT_EQ(b->at(kOperation).spec().binding, "highway");
  const Call c = make_call({{33, 5}, {2, 1}, 8, 2, 64}, at::kHalf, kContiguous, kCpu);
  const at::Tensor want = reference(c);
  expect_close(ops::paged_attention(c.query, c.key_cache, c.value_cache, c.block_tables, c.query_start_loc, c.seq_lens,
                                    c.scale, c.soft_cap, c.window),
               want, at::kHalf);
  // And through the dispatcher, as torch.ops.xllm_kernel.paged_attention.
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow("xllm_kernel::paged_attention", "");
  const at::Tensor out = handle.typed<PagedAttentionFn>().call(c.query, c.key_cache, c.value_cache, c.block_tables,
                                                               c.query_start_loc, c.seq_lens, c.scale, c.soft_cap,
                                                               c.window);
  expect_close(out, want, at::kHalf);
}

TEST_F(AttentionApi, CallBeforeInitializeIsAnError) {
  const Call c = make_call({{3}, {1}}, at::kFloat, kContiguous, kCpu);
  const std::string e = error_message([&] {
    ops::paged_attention(c.query, c.key_cache, c.value_cache, c.block_tables, c.query_start_loc, c.seq_lens, 0.125, 0, 0);
  });
  EXPECT_NE(e.find("paged_attention: device cpu is not initialized"), std::string::npos) << e;
}

}  // namespace
}  // namespace xllm_kernel::testing
