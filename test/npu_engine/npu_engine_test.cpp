// The C++ engine's path to the Ascend implementations, run here on the CPU stand-in of an NPU
// (test/npu_standin: PrivateUse1 named "npu" over host memory, and the npu:: vendor operators with
// host kernels). What runs for real: the module probe and the vendor operators' schema checks,
// loading libxllm_kernel_npu.so, the bridges' argument mapping and the dispatcher lookup by schema,
// torch.ops.xllm_kernel.* on the PrivateUse1 key, the NPU DeviceApi's events. What does not: the
// vendor's kernels (the stand-in computes the documented formula) and ACLGraph.
//
// Each test is a process of its own under CTest (gtest_discover_tests); the exclusion test needs a
// process where the stand-in was never loaded and skips otherwise.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceType.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

#include "xllm_kernel/device_api.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel {
namespace {

bool plugin_loaded() { return dlopen("libxllm_kernel_npu.so", RTLD_NOW | RTLD_NOLOAD) != nullptr; }

const Candidate* find_candidate(const Explanation& ex, const std::string& name) {
  for (const Candidate& c : ex.candidates) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

TEST(NpuExclusion, WithoutTorchNpuEveryNpuCandidateIsAMissingDependency) {
  if (c10::is_privateuse1_backend_registered()) GTEST_SKIP() << "PrivateUse1 is registered in this process already";
  Runtime rt(registry(), [] { return builtin_groups(); }, /*publish=*/false);
  for (const char* op : {"rms_norm", "fused_add_rms_norm", "layer_norm"}) {
    const Explanation ex = rt.explain(Device::kNpu, op);
    const Candidate* c = find_candidate(ex, std::string("npu.torch.") + op);
    ASSERT_NE(c, nullptr) << ex.to_string();
    EXPECT_EQ(c->verdict, Verdict::kExcluded);
    EXPECT_EQ(c->rejection, Rejection::kMissingDependency);
    EXPECT_NE(c->reason.find("torch_npu is not loaded in this process"), std::string::npos) << c->reason;
  }
  try {
    rt.initialize(Device::kNpu, InitializeOptions{{"rms_norm"}});
    FAIL() << "initialize(npu) succeeded without torch_npu";
  } catch (const std::exception& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("rms_norm: no eligible implementation on npu"), std::string::npos) << message;
    EXPECT_NE(message.find("npu.torch.rms_norm"), std::string::npos) << message;
    EXPECT_NE(message.find("torch_npu is not loaded"), std::string::npos) << message;
  }
  EXPECT_FALSE(plugin_loaded()) << "the plugin must not load while its dependency is missing";
}

class NpuStandIn : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_NE(dlopen(XLLM_NPU_STANDIN_PATH, RTLD_NOW | RTLD_GLOBAL), nullptr) << dlerror();
    ASSERT_EQ(c10::get_privateuse1_backend(), "npu");
    // The operations with npu implementations (the whole catalog would fail: the other families
    // have none on npu).
    bindings_ = initialize(Device::kNpu, InitializeOptions{{"rms_norm", "fused_add_rms_norm", "layer_norm"}});
  }
  static at::Device npu(int index = 0) { return at::Device(c10::DeviceType::PrivateUse1, index); }
  static int64_t vendor_calls(const std::string& name) {
    auto op = c10::Dispatcher::singleton().findSchemaOrThrow("npu_standin::calls", "");
    std::vector<c10::IValue> stack{c10::IValue(name)};
    op.callBoxed(stack);
    return stack.at(0).toInt();
  }
  // float64 reference of the contract's rms_norm (rows of the last dimension).
  static at::Tensor rms_norm_reference(const at::Tensor& x, const at::Tensor& w, double eps) {
    const at::Tensor xd = x.cpu().to(at::kDouble);
    return xd * at::rsqrt(xd.pow(2).mean({-1}, true) + eps) * w.cpu().to(at::kDouble);
  }
  static inline std::shared_ptr<const Bindings> bindings_;
};

TEST_F(NpuStandIn, InitializeLoadsThePluginAndSelectsTheVendorOperators) {
  ASSERT_NE(bindings_, nullptr);
  EXPECT_TRUE(plugin_loaded());
  for (const char* op : {"rms_norm", "fused_add_rms_norm", "layer_norm"}) {
    const Explanation ex = explain("npu", op);
    ASSERT_NE(ex.selected(), nullptr) << ex.to_string();
    EXPECT_EQ(ex.selected()->name, std::string("npu.torch.") + op);
    EXPECT_EQ(ex.selected()->binding, "torch_npu");
    EXPECT_NE(ex.selected()->detail.find("torch_npu, 2 NPU devices"), std::string::npos) << ex.selected()->detail;
  }
  // The plugin registered the kernels (no other front door here).
  for (const char* name : {"npu.torch.rms_norm", "npu.torch.fused_add_rms_norm", "npu.torch.layer_norm"}) {
    EXPECT_NE(registry().find(name), nullptr) << name;
  }
}

TEST_F(NpuStandIn, RmsNormCallsTheVendorOperatorThroughTheDispatcher) {
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    const at::Tensor x = at::randn({5, 96}).to(dtype);
    const at::Tensor w = at::randn({96}).to(dtype);
    const int64_t before = vendor_calls("npu_rms_norm");
    const at::Tensor y = ops::rms_norm(x.to(npu()), w.to(npu()), 1e-6);
    EXPECT_EQ(vendor_calls("npu_rms_norm"), before + 1);
    EXPECT_EQ(y.device(), npu());
    EXPECT_EQ(y.scalar_type(), dtype);
    EXPECT_TRUE(y.is_contiguous());
    const double tol = dtype == at::kFloat ? 1e-5 : 2e-2;
    EXPECT_TRUE(at::allclose(y.cpu().to(at::kDouble), rms_norm_reference(x, w, 1e-6), tol, tol)) << dtype;
  }
}

TEST_F(NpuStandIn, RmsNormWithAFloat32WeightRunsOnAFloat32CopyOfTheInput) {
  const at::Tensor x = at::randn({3, 64}).to(at::kBFloat16);
  const at::Tensor w = at::randn({64});
  const at::Tensor y = ops::rms_norm(x.to(npu()), w.to(npu()), 1e-5);
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  // One rounding of the float32 result: exactly what float32 arithmetic on the widened input gives.
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor expected = (xf * at::rsqrt(xf.pow(2).mean({-1}, true) + 1e-5) * w).to(at::kBFloat16);
  EXPECT_LE((y.cpu().to(at::kFloat) - expected.to(at::kFloat)).abs().max().item<float>(),
            expected.abs().max().item<float>() * 8e-3);
}

TEST_F(NpuStandIn, FusedAddRmsNormWritesTheSumAndTheNormBackInPlace) {
  for (auto weight_dtype : {at::kBFloat16, at::kFloat}) {
    const at::Tensor x = at::randn({4, 128}).to(at::kBFloat16);
    const at::Tensor r = at::randn({4, 128}).to(at::kBFloat16);
    const at::Tensor w = at::randn({128}).to(weight_dtype);
    at::Tensor input = x.to(npu()), residual = r.to(npu());
    const void* input_data = input.data_ptr();
    ops::fused_add_rms_norm(input, residual, w.to(npu()), 1e-6);
    EXPECT_EQ(input.data_ptr(), input_data) << "written in place";
    const at::Tensor sum = (x.to(at::kFloat) + r.to(at::kFloat)).to(at::kBFloat16);  // rounded once
    EXPECT_TRUE(at::equal(residual.cpu(), sum)) << weight_dtype;
    EXPECT_TRUE(at::allclose(input.cpu().to(at::kDouble), rms_norm_reference(sum, w, 1e-6), 2e-2, 2e-2))
        << weight_dtype;
  }
}

TEST_F(NpuStandIn, LayerNormRunsAtenOnNpuTensors) {
  const at::Tensor x = at::randn({6, 80});
  const at::Tensor w = at::randn({80}), b = at::randn({80});
  const at::Tensor y = ops::layer_norm(x.to(npu()), w.to(npu()), b.to(npu()), 1e-5);
  EXPECT_EQ(y.device(), npu());
  EXPECT_TRUE(at::allclose(y.cpu(), at::layer_norm(x, {80}, w, b, 1e-5), 1e-5, 1e-5));
}

TEST_F(NpuStandIn, TorchOpsDispatchOnThePrivateUse1KeyToTheBinding) {
  const at::Tensor x = at::randn({2, 32}).to(npu()), w = at::randn({32}).to(npu());
  auto op = c10::Dispatcher::singleton()
                .findSchemaOrThrow("xllm_kernel::rms_norm", "")
                .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double)>();
  const int64_t before = vendor_calls("npu_rms_norm");
  const at::Tensor y = op.call(x, w, 1e-6);
  EXPECT_EQ(vendor_calls("npu_rms_norm"), before + 1);
  EXPECT_TRUE(at::equal(y.cpu(), ops::rms_norm(x, w, 1e-6).cpu()));
}

TEST_F(NpuStandIn, BadInputNamesTheOperationAndTheArgument) {
  const at::Tensor x = at::randn({2, 32}).to(npu());
  try {
    ops::rms_norm(x, at::randn({32}), 1e-6);  // weight on the CPU
    FAIL() << "a CPU weight was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("rms_norm: weight"), std::string::npos) << e.what();
  }
  try {
    ops::rms_norm(x, at::randn({31}).to(npu()), 1e-6);
    FAIL() << "a weight of the wrong length was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("rms_norm: weight"), std::string::npos) << e.what();
  }
}

TEST_F(NpuStandIn, DeviceApiTimesWithEventsAndExplainsWhyGraphsAreUnavailable) {
  const DeviceApi* api = device_api(Device::kNpu);
  ASSERT_NE(api, nullptr);
  EXPECT_TRUE(api->has_device_events());
  EXPECT_NE(api->description(1).find("npu:1"), std::string::npos) << api->description(1);
  const at::Tensor x = at::randn({64, 256}).to(npu()), w = at::randn({256}).to(npu());
  const double seconds = api->time_interval(0, [&] { ops::rms_norm(x, w, 1e-6); });
  EXPECT_GT(seconds, 0.0);
  auto timer = api->timer(0);
  timer->start();
  ops::rms_norm(x, w, 1e-6);
  EXPECT_GT(timer->stop(), 0.0);
  api->synchronize(0);
  // ACLGraph needs libxllm_kernel_npu_graph.so, which needs torch_npu's own library and CANN.
  const auto reason = api->graph_unsupported_reason();
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("ACLGraph"), std::string::npos) << *reason;
}

}  // namespace
}  // namespace xllm_kernel
