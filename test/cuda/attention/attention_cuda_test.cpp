// Every CUDA paged_attention implementation in the registry (cuda.native from the plugin,
// cuda.torch) on a GPU: the bridge checks the CPU tests run (test/ops/attention/bridge_checks.h,
// where bad values give NaN rows on CUDA instead of raising), CUDA-graph capture of cuda.native
// replaying to the bits of an eager call with other lengths between capture and replay (the
// workspace comes from the shapes), batch invariance of the implementations that declare it, and
// selection through initialize("cuda"). Every test skips,
// saying why, where no usable GPU is.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>

#include "test/cuda/cuda_test_support.h"
#include "test/ops/attention/bridge_checks.h"

namespace xllm_kernel::testing {
namespace {

using namespace attention;  // NOLINT: the shared bodies of the bridge checks

const at::Device kGpu(at::kCUDA, 0);

class CudaAttentionImpl : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaAttentionImpl, BridgeChecks) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  check_bridge(GetParam(), kGpu);
}

// Few long sequences (split over blocks and merged) and many short ones give the reference.
TEST_P(CudaAttentionImpl, SplitAndManySequencesGiveTheReference) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  for (const Batch& b : {Batch{{8000}, {1}, 32, 8, 128}, Batch{{3000, 17}, {1, 17}, 16, 1, 256},
                         Batch{std::vector<int64_t>(64, 300), std::vector<int64_t>(64, 1), 32, 8, 128}}) {
    const Call c = make_call(b, at::kBFloat16, kContiguous, kGpu);
    expect_close(call(GetParam(), c), reference(c), at::kBFloat16);
  }
}

// A call captured into a CUDA graph, replayed after the lengths changed in place, gives what an
// eager call with those lengths gives (cuda.torch is eager only).
TEST_P(CudaAttentionImpl, CapturedCallEqualsEager) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  if (!registry().find(GetParam())->spec.supports(ExecutionMode::kGraph)) GTEST_SKIP() << "eager only";
  auto fn = function_of<PagedAttentionFn>(GetParam());
  Call c = make_call({std::vector<int64_t>(16, 900), std::vector<int64_t>(16, 1), 32, 8, 128}, at::kBFloat16,
                     kContiguous, kGpu);
  at::Tensor out;
  at::cuda::CUDAGraph graph;
  c10::cuda::device_synchronize();
  {
    const c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool());
    fn(c.query, c.key_cache, c.value_cache, c.block_tables, c.query_start_loc, c.seq_lens, c.scale, 0, 0);
    c10::cuda::getCurrentCUDAStream().synchronize();
    graph.capture_begin();
    out = fn(c.query, c.key_cache, c.value_cache, c.block_tables, c.query_start_loc, c.seq_lens, c.scale, 0, 0);
    graph.capture_end();
  }
  c10::cuda::device_synchronize();
  c.seq_lens.copy_(at::arange(100, 100 + 16 * 50, 50, at::kInt));  // shorter contexts, every row still valid
  graph.replay();
  c10::cuda::device_synchronize();
  const at::Tensor eager = fn(c.query, c.key_cache, c.value_cache, c.block_tables, c.query_start_loc, c.seq_lens,
                              c.scale, 0, 0);
  EXPECT_TRUE(at::equal(out, eager));
  expect_close(out, reference(c), at::kBFloat16);
}

// The CUDA implementations that declare batch invariance (cuda.native.paged_attention.batch_invariant):
// every sequence of a mixed batch alone and in the reversed batch gives the same bits.
TEST(CudaAttention, BatchInvariantRowsAreTheSameAloneAndInAnyBatch) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  int checked = 0;
  for (const auto& name : cuda_implementations_of(kOperation)) {
    if (!registry().find(name)->spec.batch_invariant) continue;
    check_batch_invariance(name, kGpu);
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no CUDA paged_attention implementation declares batch invariance";
}

INSTANTIATE_TEST_SUITE_P(All, CudaAttentionImpl, ::testing::ValuesIn(cuda_implementations_of(kOperation)),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '.' ? '_' : c;
                           return n;
                         });

class CudaAttentionSelection : public ::testing::Test {
 protected:
  void SetUp() override { runtime().reset_for_testing(); }
  void TearDown() override { runtime().reset_for_testing(); }
};

TEST_F(CudaAttentionSelection, InitializePicksNativeAndThePublicApiReachesIt) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  auto b = initialize("cuda", {"paged_attention"});
  EXPECT_EQ(b->at(kOperation).spec().name, "cuda.native.paged_attention");
  const Call c = make_call({{33, 5}, {2, 1}, 8, 2, 64}, at::kHalf, kContiguous, kGpu);
  expect_close(ops::paged_attention(c.query, c.key_cache, c.value_cache, c.block_tables, c.query_start_loc, c.seq_lens,
                                    c.scale, 0, 0),
               reference(c), at::kHalf);
}

}  // namespace
}  // namespace xllm_kernel::testing
