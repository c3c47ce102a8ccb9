// bridge::check_launch (src/ops/common/cuda/launch.h): a CUDA launcher's status as an error that
// names the operation and the reason. Needs no GPU.
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>

#include "src/ops/common/cuda/launch.h"

namespace xllm_kernel::bridge {
namespace {

// The message check_launch throws for `s`, or "" when it does not throw.
std::string message_of(const kernels::Status& s) {
  try {
    check_launch("rms_norm", s);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(CheckLaunch, PassesOk) { EXPECT_EQ(message_of(kernels::Status::ok()), ""); }

TEST(CheckLaunch, RejectedParametersAreABugInTheBridge) {
  const std::string m = message_of(kernels::Status::invalid("normalization: hidden must be >= 1"));
  EXPECT_NE(m.find("rms_norm: cuda.native kernel rejected its parameters (normalization: hidden must be >= 1); "
                   "this is a bug in the bridge"),
            std::string::npos)
      << m;
}

TEST(CheckLaunch, DeviceErrorsNameTheStepAndTheRuntimesError) {
  const std::string m =
      message_of(kernels::Status::device(static_cast<int>(cudaErrorLaunchOutOfResources), "launching the kernel"));
  const std::string want = std::string("rms_norm: cuda.native kernel failed to launch (launching the kernel): ") +
                           cudaGetErrorName(cudaErrorLaunchOutOfResources) + " (" +
                           cudaGetErrorString(cudaErrorLaunchOutOfResources) + ")";
  EXPECT_NE(m.find(want), std::string::npos) << m;
  EXPECT_NE(m.find("cudaErrorLaunchOutOfResources"), std::string::npos) << m;
}

}  // namespace
}  // namespace xllm_kernel::bridge
