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

#include <limits>

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

// The quantized write on the GPU equals the CPU implementations' bit for bit: caches and int8
// scales over their whole storage (the int8 scales' blocks padded), for every dtype, vector and
// element head sizes, rows with NaN, infinities, zeros and values past the fp8 range, padding and
// out-of-range slots (skipped on both: cpu.torch checks them first, so they are only -1 here).
TEST(CudaKvCacheQuant, NativeWriteEqualsTheCpuImplementationsBitForBit) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  for (const at::ScalarType cache_dtype : {at::kFloat8_e4m3fn, at::kChar}) {
    for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      for (const int64_t head_size : {128, 80, 3}) {
        SCOPED_TRACE(std::string(c10::toString(cache_dtype)) + " " + c10::toString(dtype) + " head_size " +
                     std::to_string(head_size));
        const int64_t tokens = 37, heads = 4, blocks = 6, block_size = 16;
        at::manual_seed(head_size);
        at::Tensor key = (at::randn({tokens, heads, head_size}) * 3), value = at::randn({tokens, heads, head_size});
        key[1][0][head_size / 2] = std::numeric_limits<float>::quiet_NaN();
        key[2][1][0] = std::numeric_limits<float>::infinity();
        key[3][2].zero_();
        value[4][3].fill_(-0.0);
        value[6][0].mul_(1e4);
        value[7][1].mul_(1e-6);
        key = key.to(dtype);
        value = value.to(dtype);
        const at::Tensor slots = random_slots(tokens, blocks * block_size);
        const at::Tensor kc0 = at::randint(-128, 128, {blocks, block_size, heads, head_size}, at::kChar).view(cache_dtype);
        const at::Tensor vc0 = at::randint(-128, 128, {blocks, block_size, heads, head_size}, at::kChar).view(cache_dtype);
        const bool int8 = cache_dtype == at::kChar;
        const int64_t scale_block = block_size * heads + 5;
        const at::Tensor ks0 = int8 ? at::randn({blocks * scale_block}) : at::full({1}, 0.05f);
        const at::Tensor vs0 = int8 ? at::randn({blocks * scale_block}) : at::full({1}, 0.02f);
        auto scale_view = [&](const at::Tensor& base) {
          return int8 ? base.as_strided({blocks, block_size, heads}, {scale_block, heads, 1}) : base;
        };
        // Each implementation on its own copies.
        auto run = [&](const std::string& impl, at::Device device) {
          at::Tensor kc = kc0.clone().to(device), vc = vc0.clone().to(device);
          at::Tensor ks_base = ks0.clone().to(device), vs_base = vs0.clone().to(device);
          at::Tensor ks = scale_view(ks_base), vs = scale_view(vs_base);
          function_of<ReshapeAndCacheQuantFn>(impl)(key.to(device), value.to(device), kc, vc, slots.to(device), ks, vs);
          return std::vector<at::Tensor>{kc.view(at::kByte).cpu(), vc.view(at::kByte).cpu(),
                                         ks_base.view(at::kInt).cpu(), vs_base.view(at::kInt).cpu()};
        };
        const std::vector<at::Tensor> got = run("cuda.native.reshape_and_cache_quant", kGpu);
        for (const char* cpu : {"cpu.torch.reshape_and_cache_quant", "cpu.native.reshape_and_cache_quant"}) {
          const std::vector<at::Tensor> want = run(cpu, at::kCPU);
          const char* what[] = {"key_cache", "value_cache", "key_scale", "value_scale"};
          for (int i = 0; i < 4; ++i) {
            EXPECT_TRUE(at::equal(got[i], want[i])) << what[i] << " differs from " << cpu << "'s in "
                                                    << got[i].ne(want[i]).sum().item<int64_t>() << " elements";
          }
        }
      }
    }
  }
}

// The quantized write captured into a CUDA graph replays to the bits of an eager call.
TEST(CudaKvCacheQuant, CapturedQuantizedWriteEqualsEager) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  auto fn = function_of<ReshapeAndCacheQuantFn>("cuda.native.reshape_and_cache_quant");
  const at::Tensor key = at::randn({300, 8, 128}, at::kBFloat16).to(kGpu);
  const at::Tensor value = at::randn({300, 8, 128}, at::kBFloat16).to(kGpu);
  const at::Tensor slots = random_slots(300, 40 * 16).to(kGpu);
  const at::Tensor kc0 = at::zeros({40, 16, 8, 128}, at::kChar).to(kGpu), vc0 = kc0.clone();
  const at::Tensor ks0 = at::zeros({40, 16, 8}, at::kFloat).to(kGpu), vs0 = ks0.clone();
  at::Tensor kc = kc0.clone(), vc = vc0.clone(), ks = ks0.clone(), vs = vs0.clone();
  at::cuda::CUDAGraph graph;
  c10::cuda::device_synchronize();
  {
    const c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool());
    fn(key, value, kc, vc, slots, ks, vs);
    c10::cuda::getCurrentCUDAStream().synchronize();
    graph.capture_begin();
    fn(key, value, kc, vc, slots, ks, vs);
    graph.capture_end();
  }
  c10::cuda::device_synchronize();
  kc.copy_(kc0);
  vc.copy_(vc0);
  ks.copy_(ks0);
  vs.copy_(vs0);
  graph.replay();
  c10::cuda::device_synchronize();
  at::Tensor ek = kc0.clone(), ev = vc0.clone(), eks = ks0.clone(), evs = vs0.clone();
  fn(key, value, ek, ev, slots, eks, evs);
  EXPECT_TRUE(at::equal(kc, ek));
  EXPECT_TRUE(at::equal(vc, ev));
  EXPECT_TRUE(at::equal(ks.view(at::kInt), eks.view(at::kInt)));
  EXPECT_TRUE(at::equal(vs.view(at::kInt), evs.view(at::kInt)));
}

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
