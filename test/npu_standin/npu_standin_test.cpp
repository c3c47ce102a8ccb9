// The stand-in as C++ code reaches it: dlopen the library, then only torch's dispatcher (as the
// npu plugin finds torch_npu's vendor ops by schema).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <gtest/gtest.h>

#include <dlfcn.h>

namespace {

class NpuStandin : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_NE(dlopen(XLLM_KERNEL_NPU_STANDIN_PATH, RTLD_NOW | RTLD_GLOBAL), nullptr) << dlerror();
  }
};

TEST_F(NpuStandin, NpuIsADeviceWithTwoIndices) {
  const at::Device d("npu:1");
  EXPECT_EQ(d.type(), c10::DeviceType::PrivateUse1);
  EXPECT_EQ(d.index(), 1);
  EXPECT_EQ(c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->deviceCount(), 2);
  const c10::DeviceGuard guard(d);
  EXPECT_EQ(at::empty({2}, at::device(c10::DeviceType::PrivateUse1)).device(), d);  // the current device
}

TEST_F(NpuStandin, ViewsWrittenInPlaceChangeTheBase) {
  const at::Tensor host = at::arange(12, at::kFloat);
  at::Tensor npu = host.to(at::Device("npu:1"));
  ASSERT_EQ(npu.device(), at::Device("npu:1"));
  npu.view({3, 4}).select(1, 0).mul_(-1);  // elements 0, 4, 8
  const at::Tensor back = npu.cpu();
  EXPECT_TRUE(back.device().is_cpu());
  EXPECT_EQ(back[4].item<float>(), -4.0f);
  EXPECT_EQ(back[5].item<float>(), 5.0f);
}

TEST_F(NpuStandin, VendorRmsNormThroughTheDispatcherMatchesFloat64) {
  const auto rms_norm = c10::Dispatcher::singleton()
                            .findSchemaOrThrow("npu::npu_rms_norm", "")
                            .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, double)>();
  const auto calls =
      c10::Dispatcher::singleton().findSchemaOrThrow("npu_standin::calls", "").typed<int64_t(c10::string_view)>();
  const int64_t before = calls.call("npu_rms_norm");
  const at::Tensor x = at::randn({8, 128});
  const at::Tensor gamma = at::rand({128}) + 0.5;
  const auto [y, rstd] = rms_norm.call(x.to(at::Device("npu:0")), gamma.to(at::Device("npu:0")), 1e-6);
  const at::Tensor x64 = x.to(at::kDouble);
  const at::Tensor want = x64 * at::rsqrt(x64.pow(2).mean({-1}, true) + 1e-6) * gamma.to(at::kDouble);
  EXPECT_EQ(y.device().type(), c10::DeviceType::PrivateUse1);
  EXPECT_EQ(rstd.sizes(), at::IntArrayRef({8, 1}));
  EXPECT_TRUE(at::allclose(y.cpu().to(at::kDouble), want, 1e-5, 1e-6));
  EXPECT_EQ(calls.call("npu_rms_norm"), before + 1);
}

TEST_F(NpuStandin, EventsMeasureHostTime) {
  const c10::Device d("npu:0");
  const c10::impl::VirtualGuardImpl impl(d.type());
  const c10::Stream stream = impl.getStream(d);
  c10::Event start(d.type(), c10::EventFlag::BACKEND_DEFAULT);
  c10::Event end(d.type(), c10::EventFlag::BACKEND_DEFAULT);
  start.record(stream);
  end.record(stream);
  end.synchronize();
  EXPECT_TRUE(start.query());
  EXPECT_GE(start.elapsedTime(end), 0.0);
}

}  // namespace
