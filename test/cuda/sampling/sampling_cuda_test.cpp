// Every CUDA sample implementation in the registry (cuda.native from the plugin, cuda.torch) on a
// GPU: the bridge checks the CPU tests run (test/ops/sampling/bridge_checks.h, where bad values
// give -1 rows on CUDA instead of raising), the same tokens as cpu.native where the reference
// allows one, CUDA-graph capture replaying to the tokens of an eager call with new seeds and
// offsets written in place, and selection through initialize("cuda"). Every test skips, saying
// why, where no usable GPU is.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>

#include "test/cuda/cuda_test_support.h"
#include "test/ops/sampling/bridge_checks.h"

namespace xllm_kernel::testing {
namespace {

using namespace sampling;  // NOLINT: the shared bodies of the bridge checks

const at::Device kGpu(at::kCUDA, 0);
const at::Device kCpu(at::kCPU);

class CudaSamplingImpl : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaSamplingImpl, BridgeChecks) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  check_bridge(GetParam(), kGpu);
}

// The same token as the CPU's native kernel for every row whose reference allows one token: the
// generator and the arithmetic are the contract's on both devices.
TEST_P(CudaSamplingImpl, SameTokensAsTheCpu) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  for (const int64_t vocab : {1000, 128256}) {
    const int64_t batch = 64;
    const at::Tensor l = at::randn({batch, vocab}, at::TensorOptions().dtype(at::kFloat));
    std::vector<Row> params;
    for (int64_t r = 0; r < batch; ++r) {
      params.push_back({r % 8 == 0 ? 0.0f : 0.5f + 0.02f * r, static_cast<int32_t>(r % 4) * 30, 0.6f + 0.005f * r,
                        0.01f * (r % 3), 77 * r - 5, r});
    }
    const Call cpu = make_call(l, params, kCpu);
    const Call gpu = make_call(l, params, kGpu);
    const auto rows = reference(cpu);
    const auto want = tokens_of(call("cpu.native.sample", cpu));
    const auto got = tokens_of(call(GetParam(), gpu));
    for (int64_t r = 0; r < batch; ++r) {
      if (rows[r].exact) EXPECT_EQ(got[r], want[r]) << "vocab " << vocab << ", row " << r;
    }
  }
}

// A call captured into a CUDA graph, replayed after the seeds, offsets and temperatures changed in
// place, gives the tokens an eager call with those values gives.
TEST_P(CudaSamplingImpl, CapturedCallEqualsEager) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  if (!registry().find(GetParam())->spec.supports(ExecutionMode::kGraph)) GTEST_SKIP() << "eager only";
  auto fn = function_of<SampleFn>(GetParam());
  const at::Tensor l = at::randn({32, 32000}, at::TensorOptions().dtype(at::kBFloat16));
  Call c = make_call(l, same_rows(32, {0.8f, 50, 0.9f}), kGpu);
  at::Tensor out;
  at::cuda::CUDAGraph graph;
  c10::cuda::device_synchronize();
  {
    const c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool());
    fn(c.logits, c.temperature, c.top_k, c.top_p, c.min_p, c.seeds, c.offsets);
    c10::cuda::getCurrentCUDAStream().synchronize();
    graph.capture_begin();
    out = fn(c.logits, c.temperature, c.top_k, c.top_p, c.min_p, c.seeds, c.offsets);
    graph.capture_end();
  }
  c10::cuda::device_synchronize();
  c.offsets.add_(1000);
  c.seeds.mul_(3).add_(1);
  c.temperature.fill_(1.1f);
  graph.replay();
  c10::cuda::device_synchronize();
  const at::Tensor eager = fn(c.logits, c.temperature, c.top_k, c.top_p, c.min_p, c.seeds, c.offsets);
  EXPECT_TRUE(at::equal(out, eager));
  expect_allowed(out, c);
}

INSTANTIATE_TEST_SUITE_P(All, CudaSamplingImpl, ::testing::ValuesIn(cuda_implementations_of(kOperation)),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& ch : n) ch = ch == '.' ? '_' : ch;
                           return n;
                         });

class CudaSamplingSelection : public ::testing::Test {
 protected:
  void SetUp() override { runtime().reset_for_testing(); }
  void TearDown() override { runtime().reset_for_testing(); }
};

TEST_F(CudaSamplingSelection, InitializePicksNativeAndThePublicApiReachesIt) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  auto b = initialize("cuda", {"sample"});
  EXPECT_EQ(b->at(kOperation).spec().name, "cuda.native.sample");
  const Call c = make_call(at::randn({6, 3000}, at::TensorOptions().dtype(at::kHalf)), same_rows(6, {0.8f, 50, 0.9f}), kGpu);
  expect_allowed(ops::sample(c.logits, c.temperature, c.top_k, c.top_p, c.min_p, c.seeds, c.offsets), c);
}

}  // namespace
}  // namespace xllm_kernel::testing
