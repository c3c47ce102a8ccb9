// Every CUDA reshape_and_cache implementation in the registry (cuda.native from the plugin,
// cuda.torch) on a GPU: the bridge checks the CPU tests run (test/ops/kv_cache/bridge_checks.h,
// where an out-of-range slot is skipped on CUDA instead of raising), CUDA-graph capture of
// cuda.native replaying to the bits of an eager call, and selection through initialize("cuda").
// Every test skips, saying why, where no usable GPU is.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>

#include "test/cuda/cuda_test_support.h"
#include "test/ops/kv_cache/bridge_checks.h"

namespace xllm_kernel::testing {
namespace {

using namespace kv_cache;  // NOLINT: the shared bodies of the bridge checks

const at::Device kGpu(at::kCUDA, 0);

class CudaKvCacheImpl : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaKvCacheImpl, BridgeChecks) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  check_bridge(GetParam(), kGpu);
}

// A call captured into a CUDA graph writes what an eager call writes (cuda.torch is eager only).
TEST_P(CudaKvCacheImpl, CapturedCallEqualsEager) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  if (!registry().find(GetParam())->spec.supports(ExecutionMode::kGraph)) GTEST_SKIP() << "eager only";
  auto fn = function_of<ReshapeAndCacheFn>(GetParam());
  const at::Tensor key = random_bits({300, 8, 128}, at::kBFloat16).to(kGpu);
  const at::Tensor value = random_bits({300, 8, 128}, at::kBFloat16).to(kGpu);
  const at::Tensor slots = random_slots(300, 40 * 16).to(kGpu);
  const at::Tensor kc0 = random_bits({40, 16, 8, 128}, at::kBFloat16).to(kGpu), vc0 = kc0.flip(0).contiguous();
  at::Tensor kc = kc0.clone(), vc = vc0.clone();
  at::cuda::CUDAGraph graph;
  c10::cuda::device_synchronize();
  {
    const c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool());
    fn(key, value, kc, vc, slots);  // warm-up on the capture stream
    c10::cuda::getCurrentCUDAStream().synchronize();
    graph.capture_begin();
    fn(key, value, kc, vc, slots);
    graph.capture_end();
  }
  c10::cuda::device_synchronize();
  kc.copy_(kc0);
  vc.copy_(vc0);
  graph.replay();
  c10::cuda::device_synchronize();
  at::Tensor ek = kc0.clone(), ev = vc0.clone();
  fn(key, value, ek, ev, slots);
  EXPECT_TRUE(at::equal(storage_bits(kc), storage_bits(ek)));
  EXPECT_TRUE(at::equal(storage_bits(vc), storage_bits(ev)));
}

INSTANTIATE_TEST_SUITE_P(All, CudaKvCacheImpl, ::testing::ValuesIn(cuda_implementations_of(kOperation)),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '.' ? '_' : c;
                           return n;
                         });

class CudaKvCacheSelection : public ::testing::Test {
 protected:
  void SetUp() override { runtime().reset_for_testing(); }
  void TearDown() override { runtime().reset_for_testing(); }
};

TEST_F(CudaKvCacheSelection, InitializePicksNativeAndThePublicApiReachesIt) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  auto b = initialize("cuda", {"reshape_and_cache"});
  EXPECT_EQ(b->at(kOperation).spec().name, "cuda.native.reshape_and_cache");
  const at::Tensor key = random_bits({5, 2, 64}, at::kHalf).to(kGpu), value = random_bits({5, 2, 64}, at::kHalf).to(kGpu);
  const at::Tensor slots = at::tensor({3, -1, 17, 0, 31}, at::kLong);
  at::Tensor kc = random_bits({2, 16, 2, 64}, at::kHalf), vc = random_bits({2, 16, 2, 64}, at::kHalf);
  at::Tensor want_k = kc.clone(), want_v = vc.clone();
  reference_reshape_and_cache(want_k, key.to(at::kCPU), slots);
  reference_reshape_and_cache(want_v, value.to(at::kCPU), slots);
  at::Tensor gk = kc.to(kGpu), gv = vc.to(kGpu);
  ops::reshape_and_cache(key, value, gk, gv, slots.to(kGpu));
  EXPECT_TRUE(at::equal(storage_bits(gk), storage_bits(want_k)));
  EXPECT_TRUE(at::equal(storage_bits(gv), storage_bits(want_v)));
}

}  // namespace
}  // namespace xllm_kernel::testing
