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
// this test for them): every sequence of a mixed batch (long decodes split over keys, a chunk, a
// prefill, short decodes) gives the same bits alone, in the reversed batch and on 1, 2, 3 and 8
// threads, with a soft cap and a window too.
TEST(CpuAttention, BatchInvariantRowsAreTheSameAloneAndInAnyBatch) {
  std::vector<std::string> invariant;
  for (const auto& name : registered_implementations(kOperation, Device::kCpu)) {
    if (registry().find(name)->spec.batch_invariant) invariant.push_back(name);
  }
  ASSERT_FALSE(invariant.empty()) << "no CPU paged_attention implementation declares batch invariance";
  const int threads = at::get_num_threads();
  const Batch batch{{2600, 37, 1500, 300, 9, 1100}, {1, 1, 40, 300, 9, 1}, 8, 2, 128};
  const int64_t seqs = static_cast<int64_t>(batch.lengths.size());
  for (const std::string& impl : invariant) {
    for (const at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
      for (const auto& [soft_cap, window] : {std::pair<double, int64_t>{0, 0}, {30, 0}, {0, 700}}) {
        SCOPED_TRACE(impl + " " + c10::toString(dtype) + " soft_cap " + std::to_string(soft_cap) + " window " +
                     std::to_string(window));
        Call c = make_call(batch, dtype, kContiguous, kCpu, 7);
        c.soft_cap = soft_cap;
        c.window = window;
        at::set_num_threads(2);
        const at::Tensor whole = call(impl, c);
        const at::Tensor starts = c.query_start_loc.to(at::kLong);
        // On other thread counts.
        for (const int n : {1, 3, 8}) {
          at::set_num_threads(n);
          EXPECT_TRUE(at::equal(call(impl, c), whole)) << "threads " << n;
        }
        at::set_num_threads(2);
        // Each sequence alone, then the batch reversed.
        std::vector<int32_t> reversed_starts = {0};
        std::vector<int64_t> order;
        for (int64_t s = seqs - 1; s >= 0; --s) order.push_back(s);
        for (int64_t s = 0; s < seqs; ++s) {
          const int64_t begin = starts[s].item<int64_t>(), rows = starts[s + 1].item<int64_t>() - begin;
          Call alone = c;
          alone.query = c.query.narrow(0, begin, rows).clone();
          alone.block_tables = c.block_tables.narrow(0, s, 1).clone();
          alone.query_start_loc = at::tensor(std::vector<int32_t>{0, static_cast<int32_t>(rows)}, at::kInt);
          alone.seq_lens = c.seq_lens.narrow(0, s, 1).clone();
          EXPECT_TRUE(at::equal(call(impl, alone), whole.narrow(0, begin, rows))) << "sequence " << s << " alone";
        }
        std::vector<at::Tensor> queries, tables;
        for (const int64_t s : order) {
          const int64_t begin = starts[s].item<int64_t>(), rows = starts[s + 1].item<int64_t>() - begin;
          queries.push_back(c.query.narrow(0, begin, rows));
          tables.push_back(c.block_tables.narrow(0, s, 1));
          reversed_starts.push_back(reversed_starts.back() + static_cast<int32_t>(rows));
        }
        Call reversed = c;
        reversed.query = at::cat(queries);
        reversed.block_tables = at::cat(tables);
        reversed.query_start_loc = at::tensor(reversed_starts, at::kInt);
        reversed.seq_lens = c.seq_lens.index_select(0, at::tensor(order, at::kLong)).contiguous();
        const at::Tensor out = call(impl, reversed);
        for (size_t i = 0; i < order.size(); ++i) {
          const int64_t s = order[i], begin = starts[s].item<int64_t>(), rows = starts[s + 1].item<int64_t>() - begin;
          EXPECT_TRUE(at::equal(out.narrow(0, reversed_starts[i], rows), whole.narrow(0, begin, rows)))
              << "sequence " << s << " in the reversed batch";
        }
        expect_close(whole, reference(c), dtype);
      }
    }
  }
  at::set_num_threads(threads);
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
