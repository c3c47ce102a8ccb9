// Every CUDA activation implementation in the registry (cuda.native.* from the plugin,
// cuda.torch.*) on a GPU: the bridge checks the CPU tests run (test/ops/activation/
// bridge_checks.h), rows 2^31 elements apart, CUDA-graph capture equal to eager, and selection
// through initialize("cuda"). Every test skips, saying why, where no usable GPU is.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>

#include "test/cuda/cuda_test_support.h"
#include "test/ops/activation/bridge_checks.h"

namespace xllm_kernel::testing {
namespace {

using namespace activation;  // NOLINT: the shared bodies of the bridge checks

const at::Device kGpu(at::kCUDA, 0);

std::vector<std::string> implementations() {
  std::vector<std::string> out;
  for (const std::string& op : operations()) {
    for (const auto& name : cuda_implementations_of(op)) out.push_back(name);
  }
  return out;
}

class CudaActivationImpl : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaActivationImpl, BridgeChecks) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  check_bridge(GetParam(), kGpu);
}

TEST_P(CudaActivationImpl, RowStrideBeyond2To31Elements) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  if (!check_row_stride_beyond_2_to_31(GetParam(), kGpu)) GTEST_SKIP() << "needs 4 GiB of free device memory";
}

// The bridge runs on the input's device, not the current one.
TEST_P(CudaActivationImpl, RunsOnTheInputsDevice) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  if (c10::cuda::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices, found " << int{c10::cuda::device_count()};
  const at::Device second(at::kCUDA, 1);
  const c10::cuda::CUDAGuard current(0);
  const at::Tensor x = (at::randn({7, 2 * 4099}) * 3).to(at::kHalf).to(second);
  const at::Tensor out = call(GetParam(), x);
  EXPECT_EQ(out.device(), second);
  EXPECT_LE(headroom(GetParam(), out, x), 1.0);
}

// A call captured into a CUDA graph replays to the bits of an eager call.
TEST_P(CudaActivationImpl, CapturedCallEqualsEager) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  auto fn = function_of<ActivationFn>(GetParam());
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    SCOPED_TRACE(c10::toString(dtype));
    const at::Tensor x = (at::randn({257, 2 * 4099}) * 3).to(dtype).to(kGpu);
    at::Tensor captured;
    at::cuda::CUDAGraph graph;
    c10::cuda::device_synchronize();
    {
      const c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool());
      fn(x);  // warm-up on the capture stream
      c10::cuda::getCurrentCUDAStream().synchronize();
      graph.capture_begin();
      captured = fn(x);
      graph.capture_end();
    }
    c10::cuda::device_synchronize();
    captured.zero_();
    graph.replay();
    c10::cuda::device_synchronize();
    EXPECT_TRUE(at::equal(captured, fn(x)));
  }
}

INSTANTIATE_TEST_SUITE_P(All, CudaActivationImpl, ::testing::ValuesIn(implementations()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '.' ? '_' : c;
                           return n;
                         });

class CudaActivationSelection : public ::testing::Test {
 protected:
  void SetUp() override { runtime().reset_for_testing(); }
  void TearDown() override { runtime().reset_for_testing(); }
};

TEST_F(CudaActivationSelection, InitializePicksNativeAndThePublicApiReachesIt) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  auto b = initialize("cuda", {"silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"});
  const at::Tensor x = (at::randn({3, 2 * 100}) * 3).to(at::kBFloat16).to(kGpu);
  const std::pair<const char*, at::Tensor (*)(const at::Tensor&)> api[] = {
      {"silu_and_mul", &ops::silu_and_mul}, {"gelu_and_mul", &ops::gelu_and_mul},
      {"gelu_tanh_and_mul", &ops::gelu_tanh_and_mul}};
  for (const auto& [op, fn] : api) {
    SCOPED_TRACE(op);
    EXPECT_EQ(b->at(op).spec().name, std::string("cuda.native.") + op);
    const at::Tensor via_api = fn(x);
    EXPECT_TRUE(at::equal(b->at(op).function<ActivationFn>()(x), via_api));
    const auto handle = c10::Dispatcher::singleton().findSchemaOrThrow((std::string("xllm_kernel::") + op).c_str(), "");
    EXPECT_TRUE(at::equal(handle.typed<at::Tensor(const at::Tensor&)>().call(x), via_api));
  }
}

}  // namespace
}  // namespace xllm_kernel::testing
