// What the cuda device looks like where it cannot run, and the plugin's packaging. Runs on any
// machine: the checks of a machine without a usable GPU skip (saying why) where one exists.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>

#include "src/core/cuda_driver.h"
#include "test/cuda/cuda_test_support.h"

namespace xllm_kernel::testing {
namespace {

const char* const kOperations[] = {"rms_norm", "fused_add_rms_norm", "layer_norm"};

// Empty when torch's CUDA can run here (then initialize("cuda") succeeds); otherwise why not.
std::string torch_cuda_unavailable() {
  const Candidate c = cuda_candidate("rms_norm", "cuda.torch.rms_norm");
  return c.verdict == Verdict::kExcluded ? c.reason : std::string();
}

#define XLLM_SKIP_WITH_CUDA_DEVICE()                                                                        \
  do {                                                                                                      \
    if (torch_cuda_unavailable().empty()) GTEST_SKIP() << "a usable CUDA device is present; the GPU tests " \
                                                          "(normalization_cuda_test.cpp) cover this machine"; \
  } while (0)

class NoCudaDevice : public ::testing::Test {
 protected:
  void SetUp() override { runtime().reset_for_testing(); }
  void TearDown() override { runtime().reset_for_testing(); }
};

// explain lists both CUDA solutions as excluded, with the probe's missing dependency.
TEST_F(NoCudaDevice, ExplainExcludesCudaImplementationsWithTheReason) {
  XLLM_SKIP_WITH_CUDA_DEVICE();
  for (const char* op : kOperations) {
    SCOPED_TRACE(op);
    const Explanation ex = explain("cuda", op);
    EXPECT_EQ(ex.selected(), nullptr);
    EXPECT_NE(ex.error.find(std::string(op) + ": no eligible implementation on cuda in eager mode"), std::string::npos)
        << ex.error;
    for (const std::string solution : {"native", "torch"}) {
      const std::string name = "cuda." + solution + "." + op;
      const Candidate c = cuda_candidate(op, name);
      EXPECT_EQ(c.verdict, Verdict::kExcluded) << name;
      // "no CUDA driver (libcuda.so.1 not found)" here; "no CUDA device" with a driver only.
      EXPECT_EQ(c.reason.rfind("missing dependency: no CUDA driver", 0) == 0 ||
                    c.reason.rfind("missing dependency: no CUDA device", 0) == 0 ||
                    c.reason.rfind("missing dependency: CUDA driver unusable", 0) == 0,
                true)
          << name << ": " << c.reason;
    }
    const std::string table = ex.to_string();
    EXPECT_NE(table.find(std::string("cuda.native.") + op), std::string::npos) << table;
    EXPECT_NE(table.find("excluded: missing dependency: "), std::string::npos) << table;
  }
}

// initialize("cuda") fails with an error naming the operation and every candidate's reason;
// nothing is published, and the process goes on (cpu still initializes).
TEST_F(NoCudaDevice, InitializeFailsWithAClearError) {
  XLLM_SKIP_WITH_CUDA_DEVICE();
  std::string e = error_message([] { initialize("cuda", {"rms_norm"}); });
  EXPECT_NE(e.find("initialize(cuda): rms_norm: no eligible implementation on cuda in eager mode"), std::string::npos)
      << e;
  EXPECT_NE(e.find("cuda.native.rms_norm"), std::string::npos) << e;
  EXPECT_NE(e.find("missing dependency: "), std::string::npos) << e;
  e = error_message([] { initialize("cuda"); });
  EXPECT_NE(e.find("no eligible implementation on cuda"), std::string::npos) << e;
  e = error_message([] { initialize("cuda", {"layer_norm"}, {}, "graph"); });
  EXPECT_NE(e.find("layer_norm: no eligible implementation on cuda in graph mode"), std::string::npos) << e;
  e = error_message([] { initialize("cuda", {"rms_norm"}, {{"rms_norm", "native"}}); });
  EXPECT_NE(e.find("every implementation of that solution is excluded: cuda.native.rms_norm: missing dependency: "),
            std::string::npos)
      << e;
  EXPECT_EQ(runtime().bindings(Device::kCuda), nullptr);
  const at::Tensor x = at::randn({2, 8}), w = at::ones({8});
  e = error_message([&] { rms_norm_operation().call(Device::kCuda, x, w, 1e-6); });
  EXPECT_NE(e.find("rms_norm: device cuda is not initialized"), std::string::npos) << e;
  EXPECT_NO_THROW(initialize("cpu"));
}

// The runtime looks for the plugin beside libxllm_kernel.so, where the build puts it.
TEST(CudaPlugin, IsBuiltBesideTheLibrary) {
  const std::filesystem::path plugin(XLLM_KERNEL_CUDA_PLUGIN_PATH);
  EXPECT_EQ(plugin.filename(), "libxllm_kernel_cuda.so");
  EXPECT_TRUE(std::filesystem::exists(plugin)) << plugin;
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(&xllm_kernel::registry), &info), 0);
  EXPECT_EQ(std::filesystem::canonical(std::filesystem::path(info.dli_fname).parent_path()),
            std::filesystem::canonical(plugin.parent_path()));
  EXPECT_EQ(std::filesystem::canonical(XLLM_KERNEL_LIBRARY_DIR), std::filesystem::canonical(plugin.parent_path()));
}

// Loading the plugin needs no GPU (its symbols resolve, its registrations succeed), and its
// bridges reject tensors of another device before touching CUDA.
TEST(CudaPlugin, LoadsRegistersAndChecksArgumentsWithoutADevice) {
  runtime().reset_for_testing();  // registering needs an unfrozen cuda registry
  void* handle = dlopen(XLLM_KERNEL_CUDA_PLUGIN_PATH, RTLD_NOW | RTLD_GLOBAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  EXPECT_TRUE(registry().errors().empty()) << registry().errors().front();
  for (const char* op : kOperations) {
    const auto k = registry().find(std::string("cuda.native.") + op);
    ASSERT_TRUE(k) << op;
    EXPECT_EQ(k->spec.device, Device::kCuda);
    EXPECT_EQ(k->spec.solution, "native");
    EXPECT_EQ(k->spec.binding, "cuda");
    EXPECT_EQ(k->spec.priority, 20);
    EXPECT_TRUE(k->spec.supports(ExecutionMode::kEager));
    EXPECT_TRUE(k->spec.supports(ExecutionMode::kGraph));
  }
  const at::Tensor x = at::randn({4, 16}), w = at::ones({16});
  for (const std::string solution : {"native", "torch"}) {
    SCOPED_TRACE(solution);
    std::string e = error_message([&] { function_of<RmsNormFn>("cuda." + solution + ".rms_norm")(x, w, 1e-6); });
    EXPECT_NE(e.find("rms_norm: input must be on cuda for this implementation, got cpu"), std::string::npos) << e;
    e = error_message([&] {
      at::Tensor a = x.clone(), r = x.clone();
      function_of<FusedAddRmsNormFn>("cuda." + solution + ".fused_add_rms_norm")(a, r, w, 1e-6);
    });
    EXPECT_NE(e.find("fused_add_rms_norm: input must be on cuda for this implementation, got cpu"), std::string::npos)
        << e;
    e = error_message([&] { function_of<LayerNormFn>("cuda." + solution + ".layer_norm")(x, w, std::nullopt, 1e-5); });
    EXPECT_NE(e.find("layer_norm: input must be on cuda for this implementation, got cpu"), std::string::npos) << e;
  }
  // Still excluded for the probe's reason where there is no device, now that it is registered.
  if (!torch_cuda_unavailable().empty()) {
    const Candidate c = cuda_candidate("rms_norm", "cuda.native.rms_norm");
    EXPECT_EQ(c.verdict, Verdict::kExcluded);
    EXPECT_EQ(c.reason.rfind("missing dependency: ", 0), 0u) << c.reason;
    EXPECT_EQ(c.priority, 20);
  }
}

// The plugin loads where any device is sm_80+; whether one device can run cuda.native.* is decided
// by its own capability (the bridges reject an input on another device with these words).
TEST(CudaDriver, CapabilityIsDecidedPerDevice) {
  detail::CudaDriver d;
  d.version = 13000;
  d.capabilities = {90, 75, 0};  // 0: the driver could not tell
  EXPECT_TRUE(d.capable(0, detail::kCudaPluginMinCapability));
  for (int index : {1, 2, 3, -1}) EXPECT_FALSE(d.capable(index, detail::kCudaPluginMinCapability)) << index;
  EXPECT_EQ(d.capable_devices(80), std::vector<int>{0});
  EXPECT_EQ(d.capable_devices(70), (std::vector<int>{0, 1}));
  EXPECT_EQ(d.capability_shortfall(0, 80), "");
  EXPECT_EQ(d.capability_shortfall(1, 80), "cuda:1 is sm_75, below sm_80");
  EXPECT_EQ(d.capability_shortfall(2, 80), "cuda:2 has an unknown compute capability, below sm_80");
  EXPECT_EQ(d.capability_shortfall(3, 80), "cuda:3 is not among the 3 devices the driver sees");
  EXPECT_EQ(d.best_capability(), 90);  // what the old any-device probe looked at
  detail::CudaDriver none;
  none.missing = "no CUDA device";
  EXPECT_EQ(none.capability_shortfall(0, 80), "cuda:0 cannot be used: no CUDA device");
  EXPECT_TRUE(none.capable_devices(80).empty());
}

}  // namespace
}  // namespace xllm_kernel::testing
