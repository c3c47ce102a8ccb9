// Every CUDA rotary_embedding implementation in the registry (cuda.native.* from the plugin,
// cuda.torch.*) on a GPU: the bridge checks the CPU tests run (test/ops/rotary/bridge_checks.h,
// including out-of-range positions leaving their rows unchanged), token strides 2^31 elements
// apart, the input's device, CUDA-graph capture equal to eager, and selection through
// initialize("cuda"). Every test skips, saying why, where no usable GPU is.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>

#include "test/cuda/cuda_test_support.h"
#include "test/ops/rotary/bridge_checks.h"

namespace xllm_kernel::testing {
namespace {

using namespace rotary;  // NOLINT: the shared bodies of the bridge checks

const at::Device kGpu(at::kCUDA, 0);

class CudaRotaryImpl : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaRotaryImpl, BridgeChecks) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  check_bridge(GetParam(), kGpu);
}

TEST_P(CudaRotaryImpl, TokenStrideBeyond2To31Elements) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  if (!check_token_stride_beyond_2_to_31(GetParam(), kGpu)) GTEST_SKIP() << "needs 4 GiB of free device memory";
}

// The bridge runs on the query's device, not the current one.
TEST_P(CudaRotaryImpl, RunsOnTheInputsDevice) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  if (c10::cuda::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices, found " << int{c10::cuda::device_count()};
  const at::Device second(at::kCUDA, 1);
  const c10::cuda::CUDAGuard current(0);
  const at::Tensor positions = at::randint(0, 64, {7}, at::kLong).to(second);
  const at::Tensor cache = cos_sin_cache(64, 128, at::kFloat).to(second);
  const at::Tensor query = at::randn({7, 4 * 128}).to(at::kHalf).to(second), q0 = query.clone();
  call(GetParam(), positions, query, std::nullopt, 128, cache, true);
  double terms = 0;
  EXPECT_LE(headroom(query, reference_rotary_embedding(positions, q0, 128, cache, true, terms), terms), 1.0);
}

// A call captured into a CUDA graph replays to the bits of an eager call.
TEST_P(CudaRotaryImpl, CapturedCallEqualsEager) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  auto fn = function_of<RotaryEmbeddingFn>(GetParam());
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    SCOPED_TRACE(c10::toString(dtype));
    const int64_t q = 32 * 128, k = 8 * 128;
    const at::Tensor qkv0 = at::randn({257, q + 2 * k}).to(dtype).to(kGpu);
    const at::Tensor positions = at::randint(0, 4096, {257}, at::kLong).to(kGpu);
    const at::Tensor cache = cos_sin_cache(4096, 128, at::kFloat).to(kGpu);
    at::Tensor qkv = qkv0.clone();
    at::Tensor query = qkv.narrow(1, 0, q);
    const std::optional<at::Tensor> key = qkv.narrow(1, q, k);
    at::cuda::CUDAGraph graph;
    c10::cuda::device_synchronize();
    {
      const c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool());
      fn(positions, query, key, 128, cache, true);  // warm-up on the capture stream
      c10::cuda::getCurrentCUDAStream().synchronize();
      graph.capture_begin();
      fn(positions, query, key, 128, cache, true);
      graph.capture_end();
    }
    c10::cuda::device_synchronize();
    qkv.copy_(qkv0);
    graph.replay();
    c10::cuda::device_synchronize();
    at::Tensor eager = qkv0.clone();
    at::Tensor eager_query = eager.narrow(1, 0, q);
    fn(positions, eager_query, eager.narrow(1, q, k), 128, cache, true);
    EXPECT_TRUE(at::equal(qkv, eager));
  }
}

INSTANTIATE_TEST_SUITE_P(All, CudaRotaryImpl, ::testing::ValuesIn(cuda_implementations_of(kOperation)),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '.' ? '_' : c;
                           return n;
                         });

class CudaRotarySelection : public ::testing::Test {
 protected:
  void SetUp() override { runtime().reset_for_testing(); }
  void TearDown() override { runtime().reset_for_testing(); }
};

TEST_F(CudaRotarySelection, InitializePicksNativeAndThePublicApiReachesIt) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  auto b = initialize("cuda", {"rotary_embedding"});
  EXPECT_EQ(b->at(kOperation).spec().name, "cuda.native.rotary_embedding");
  const at::Tensor positions = at::randint(0, 100, {3}, at::kLong).to(kGpu);
  const at::Tensor cache = cos_sin_cache(100, 64, at::kFloat).to(kGpu);
  const at::Tensor q0 = at::randn({3, 4 * 64}).to(at::kBFloat16).to(kGpu);
  at::Tensor q1 = q0.clone(), q2 = q0.clone(), q3 = q0.clone();
  b->at(kOperation).function<RotaryEmbeddingFn>()(positions, q1, std::nullopt, 64, cache, true);
  ops::rotary_embedding(positions, q2, std::nullopt, 64, cache, true);
  EXPECT_TRUE(at::equal(q1, q2));
  const auto handle = c10::Dispatcher::singleton().findSchemaOrThrow("xllm_kernel::rotary_embedding", "");
  handle.typed<void(const at::Tensor&, at::Tensor&, const std::optional<at::Tensor>&, int64_t, const at::Tensor&, bool)>()
      .call(positions, q3, std::nullopt, 64, cache, true);
  EXPECT_TRUE(at::equal(q3, q1));
}

}  // namespace
}  // namespace xllm_kernel::testing
