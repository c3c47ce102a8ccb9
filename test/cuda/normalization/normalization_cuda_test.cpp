// Every CUDA normalization implementation in the registry (cuda.native.* from the plugin,
// cuda.torch.*) on a GPU: the bridge checks the CPU tests run (test/ops/normalization/
// bridge_checks.h: the grid against the float64 reference, every argument error), the shapes of
// the kernels' other launch paths (many rows, rows per block), a second GPU, CUDA-graph capture
// equal to eager, and selection through initialize("cuda"). Every test skips, saying why, where no
// usable GPU is.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>

#include <functional>

#include "test/cuda/cuda_test_support.h"
#include "test/ops/normalization/bridge_checks.h"

namespace xllm_kernel::testing {
namespace {

using namespace normalization;  // NOLINT: the shared bodies of the bridge checks

const at::Device kGpu(at::kCUDA, 0);

at::Tensor make_weight(int64_t hidden, at::ScalarType dtype) {
  return ::xllm_kernel::testing::make_weight(hidden, dtype, kGpu);
}

std::vector<ImplAndDtype> params_for(const std::string& operation) {
  return ::xllm_kernel::testing::params_for(cuda_implementations_of(operation));
}

at::Tensor cpu(const at::Tensor& t) { return t.to(at::kCPU); }

class CudaRmsNormImpl : public ::testing::TestWithParam<ImplAndDtype> {};
class CudaFusedAddRmsNormImpl : public ::testing::TestWithParam<ImplAndDtype> {};
class CudaLayerNormImpl : public ::testing::TestWithParam<ImplAndDtype> {};

TEST_P(CudaRmsNormImpl, MatchesFloat64ReferenceOverGrid) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  check_rms_norm_grid(GetParam().implementation, GetParam().dtype, kGpu);
}
TEST_P(CudaFusedAddRmsNormImpl, MatchesFloat64ReferenceOverGrid) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  check_fused_add_rms_norm_grid(GetParam().implementation, GetParam().dtype, kGpu);
}
TEST_P(CudaFusedAddRmsNormImpl, HalvesOfOneBufferAreDisjoint) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  check_fused_add_rms_norm_halves_of_one_buffer(GetParam().implementation, kGpu);
}
TEST_P(CudaLayerNormImpl, MatchesFloat64ReferenceOverGrid) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  check_layer_norm_grid(GetParam().implementation, GetParam().dtype, kGpu);
}

INSTANTIATE_TEST_SUITE_P(All, CudaRmsNormImpl, ::testing::ValuesIn(params_for("rms_norm")), param_name);
INSTANTIATE_TEST_SUITE_P(All, CudaFusedAddRmsNormImpl, ::testing::ValuesIn(params_for("fused_add_rms_norm")),
                         param_name);
INSTANTIATE_TEST_SUITE_P(All, CudaLayerNormImpl, ::testing::ValuesIn(params_for("layer_norm")), param_name);

TEST(CudaNormalizationLargeStride, RowStrideBeyond2To31Elements) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  if (!check_row_stride_beyond_2_to_31(kGpu, cuda_implementations_of)) {
    GTEST_SKIP() << "needs 8 GiB of free device memory";
  }
}

// The argument errors of the CPU tests, on the GPU (a CPU tensor is the wrong device here).
TEST(CudaNormalizationErrors, RmsNorm) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  expect_errors(cuda_implementations_of("rms_norm"), rms_norm_bad_cases(kGpu));
}
TEST(CudaNormalizationErrors, FusedAddRmsNorm) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  expect_errors(cuda_implementations_of("fused_add_rms_norm"), fused_add_rms_norm_bad_cases(kGpu));
}
TEST(CudaNormalizationErrors, LayerNorm) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  expect_errors(cuda_implementations_of("layer_norm"), layer_norm_bad_cases(kGpu));
}

// The launch paths the grid above does not reach (kCudaKernelPathShapes), bfloat16, every
// implementation of each operation against one reference per shape.
TEST(CudaNormalizationKernelPaths, ManyRowsRowsPerBlockAndMisalignedRows) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  const Tolerance tol = tolerance_for(at::kBFloat16);
  at::manual_seed(5);
  for (const KernelPathShape& shape : kCudaKernelPathShapes) {
    SCOPED_TRACE(std::to_string(shape.tokens) + "x" + std::to_string(shape.hidden) + " (" + shape.path + ")");
    const at::Tensor x = (at::randn({shape.tokens, shape.hidden}) + 4).to(at::kBFloat16).to(at::kCUDA);
    const at::Tensor r = (at::randn({shape.tokens, shape.hidden}) + 3).to(at::kBFloat16).to(at::kCUDA);
    const at::Tensor w = make_weight(shape.hidden, at::kBFloat16);
    const at::Tensor b = at::randn({shape.hidden}).to(at::kBFloat16).to(at::kCUDA);
    const at::Tensor x_cpu = cpu(x), w_cpu = cpu(w);
    const at::Tensor want_rms = reference_rms_norm(x_cpu, w_cpu, 1e-6);
    for (const auto& impl : cuda_implementations_of("rms_norm")) {
      SCOPED_TRACE(impl);
      EXPECT_LE(headroom(cpu(function_of<RmsNormFn>(impl)(x, w, 1e-6)), want_rms, tol), 1.0);
    }
    const at::Tensor want_ln = reference_layer_norm(x_cpu, w_cpu, cpu(b), 1e-5);
    for (const auto& impl : cuda_implementations_of("layer_norm")) {
      SCOPED_TRACE(impl);
      EXPECT_LE(headroom(cpu(function_of<LayerNormFn>(impl)(x, w, b, 1e-5)), want_ln, tol), 1.0);
    }
    const FusedAddRmsNormReference want = reference_fused_add_rms_norm(x_cpu, cpu(r), w_cpu, 1e-6);
    for (const auto& impl : cuda_implementations_of("fused_add_rms_norm")) {
      SCOPED_TRACE(impl);
      at::Tensor xi = x.clone(), ri = r.clone();
      function_of<FusedAddRmsNormFn>(impl)(xi, ri, w, 1e-6);
      EXPECT_TRUE(at::equal(cpu(ri), want.residual)) << "residual is not the rounded sum";
      EXPECT_LE(headroom(cpu(xi), want.input, tol), 1.0);
    }
  }
}

// ---- a tensor on another GPU ----
TEST(CudaNormalizationErrors, TensorOnAnotherGpu) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  if (c10::cuda::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices, found " << int{c10::cuda::device_count()};
  const at::Tensor x = at::randn({4, 16}, at::TensorOptions().dtype(at::kBFloat16).device(kGpu));
  const at::Tensor w = at::ones({16}, at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA, 1));
  for (const auto& impl : cuda_implementations_of("rms_norm")) {
    EXPECT_NE(error_message([&] { function_of<RmsNormFn>(impl)(x, w, 1e-6); })
                  .find("rms_norm: weight must be on cuda:0 (the input's device), got cuda:1"),
              std::string::npos)
        << impl;
  }
}

// The bridge runs on the input's device, not the current one.
TEST(CudaNormalization, RunsOnTheInputsDevice) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  if (c10::cuda::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices, found " << int{c10::cuda::device_count()};
  const at::Device second(at::kCUDA, 1);
  const c10::cuda::CUDAGuard current(0);
  const at::Tensor x = (at::randn({7, 4109}) + 1).to(at::kHalf).to(second), w = make_weight(4109, at::kFloat).to(second);
  for (const auto& impl : cuda_implementations_of("rms_norm")) {
    SCOPED_TRACE(impl);
    const at::Tensor out = function_of<RmsNormFn>(impl)(x, w, 1e-6);
    EXPECT_EQ(out.device(), second);
    EXPECT_LE(headroom(cpu(out), reference_rms_norm(cpu(x), cpu(w), 1e-6), tolerance_for(at::kHalf)), 1.0);
  }
}

// ---- CUDA graphs: a captured call replays to the same bits as an eager one ----

// Warms `enqueue` up on a side stream, captures one call into a graph, and returns it.
std::unique_ptr<at::cuda::CUDAGraph> capture(const std::function<void()>& enqueue) {
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  c10::cuda::device_synchronize();
  {
    const c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool());
    enqueue();
    c10::cuda::getCurrentCUDAStream().synchronize();
    graph->capture_begin();
    enqueue();
    graph->capture_end();
  }
  c10::cuda::device_synchronize();
  return graph;
}

TEST(CudaGraphs, CapturedCallsEqualEager) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  at::manual_seed(4);
  for (at::ScalarType dtype : kDtypes)
    for (int64_t tokens : {1, 257})
      for (int64_t hidden : {64, 4109}) {
        const std::string shape = std::string(c10::toString(dtype)) + " " + std::to_string(tokens) + "x" +
                                  std::to_string(hidden);
        const at::Tensor x0 = (at::randn({tokens, hidden}) + 2).to(dtype).to(at::kCUDA);
        const at::Tensor r0 = (at::randn({tokens, hidden}) + 3).to(dtype).to(at::kCUDA);
        const at::Tensor w = make_weight(hidden, at::kFloat), b = at::randn({hidden}).to(at::kCUDA);
        for (const auto& impl : cuda_implementations_of("rms_norm")) {
          SCOPED_TRACE(impl + " " + shape);
          auto fn = function_of<RmsNormFn>(impl);
          at::Tensor x = x0.clone(), captured;
          auto graph = capture([&] { captured = fn(x, w, 1e-6); });
          captured.zero_();
          graph->replay();
          EXPECT_TRUE(at::equal(captured, fn(x0, w, 1e-6)));
        }
        for (const auto& impl : cuda_implementations_of("layer_norm")) {
          SCOPED_TRACE(impl + " " + shape);
          auto fn = function_of<LayerNormFn>(impl);
          for (bool with_bias : {false, true}) {
            std::optional<at::Tensor> bias;
            if (with_bias) bias = b;
            at::Tensor x = x0.clone(), captured;
            auto graph = capture([&] { captured = fn(x, w, bias, 1e-5); });
            captured.zero_();
            graph->replay();
            EXPECT_TRUE(at::equal(captured, fn(x0, w, bias, 1e-5))) << (with_bias ? "bias" : "no bias");
          }
        }
        for (const auto& impl : cuda_implementations_of("fused_add_rms_norm")) {
          SCOPED_TRACE(impl + " " + shape);
          auto fn = function_of<FusedAddRmsNormFn>(impl);
          at::Tensor x = x0.clone(), r = r0.clone();
          auto graph = capture([&] { fn(x, r, w, 1e-6); });
          at::Tensor want_x = x0.clone(), want_r = r0.clone();
          fn(want_x, want_r, w, 1e-6);
          for (int replay = 0; replay < 2; ++replay) {  // replays are repeatable after a reset
            x.copy_(x0);
            r.copy_(r0);
            graph->replay();
            EXPECT_TRUE(at::equal(x, want_x)) << "input, replay " << replay;
            EXPECT_TRUE(at::equal(r, want_r)) << "residual, replay " << replay;
          }
        }
      }
}

// ---- selection through the process-wide runtime ----

class CudaSelection : public ::testing::Test {
 protected:
  void SetUp() override { runtime().reset_for_testing(); }
  void TearDown() override { runtime().reset_for_testing(); }
};

// Where torch sees a device the plugin supports, the plugin must have loaded (no false skips).
TEST_F(CudaSelection, NativeIsAvailableWhereTorchSeesAnSm80Device) {
  if (c10::cuda::device_count() == 0) GTEST_SKIP() << "torch sees no CUDA device";
  int best = 0;
  for (int d = 0; d < c10::cuda::device_count(); ++d) {
    const cudaDeviceProp* props = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(d));
    best = std::max(best, 10 * props->major + props->minor);
  }
  if (best < 80) GTEST_SKIP() << "no device of compute capability >= 8.0 (best sm_" << best << ")";
  EXPECT_EQ(native_cuda_unavailable(), "");
}

TEST_F(CudaSelection, InitializePicksNativeAndExplainShowsIt) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  for (const char* mode : {"eager", "graph"}) {
    SCOPED_TRACE(mode);
    runtime().reset_for_testing();
    auto b = initialize("cuda", {"rms_norm", "fused_add_rms_norm", "layer_norm"}, {}, mode);
    ASSERT_EQ(b->size(), 3u);
    for (const char* op : {"rms_norm", "fused_add_rms_norm", "layer_norm"}) {
      EXPECT_EQ(b->at(op).spec().name, std::string("cuda.native.") + op);
      const Explanation ex = explain("cuda", op);
      ASSERT_TRUE(ex.selected()) << ex.to_string();
      EXPECT_EQ(ex.selected()->name, std::string("cuda.native.") + op);
      EXPECT_EQ(ex.selected()->binding, "cuda");
      EXPECT_NE(ex.selected()->detail.find("driver"), std::string::npos) << ex.selected()->detail;
      ASSERT_GE(ex.candidates.size(), 2u);
      EXPECT_EQ(ex.candidates[1].name, std::string("cuda.torch.") + op);
      EXPECT_EQ(ex.candidates[1].verdict, Verdict::kLowerPriority);
      EXPECT_NE(ex.to_string().find(std::string("cuda.native.") + op), std::string::npos);
    }
  }
}

TEST_F(CudaSelection, PublicApiAndDispatcherReachTheBinding) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  initialize("cuda");
  const at::Tensor x = (at::randn({3, 40}) + 1).to(at::kBFloat16).to(at::kCUDA), w = make_weight(40, at::kFloat);
  const at::Tensor via_api = ops::rms_norm(x, w, 1e-6);
  EXPECT_LE(headroom(cpu(via_api), reference_rms_norm(cpu(x), cpu(w), 1e-6), tolerance_for(at::kBFloat16)), 1.0);
  const auto op = c10::Dispatcher::singleton()
                      .findSchemaOrThrow("xllm_kernel::rms_norm", "")
                      .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double)>();
  EXPECT_TRUE(at::equal(op.call(x, w, 1e-6), via_api));
  EXPECT_TRUE(at::equal(initialize("cuda")->at("rms_norm").function<RmsNormFn>()(x, w, 1e-6), via_api));
}

TEST_F(CudaSelection, OverrideSelectsTorch) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  auto b = initialize("cuda", {"layer_norm"}, {{"layer_norm", "torch"}});
  EXPECT_EQ(b->at("layer_norm").spec().name, "cuda.torch.layer_norm");
  EXPECT_EQ(layer_norm_operation().prepared(Device::kCuda)->spec().name, "cuda.torch.layer_norm");
}

}  // namespace
}  // namespace xllm_kernel::testing
