// What the torch-free CUDA host tests check of a launcher's kernels::Status (csrc/common/rows.h):
//
//   EXPECT_TRUE(rejected(rms_norm(bad, nullptr), "hidden"));   // kInvalidArgument, reason says why
//   EXPECT_TRUE(accepted(rms_norm(empty, nullptr)));           // ok, nothing launched
//   if (!cuda_device_present()) EXPECT_TRUE(device_failure(rms_norm(good, nullptr)));
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>

#include "csrc/common/rows.h"

namespace xllm_kernel::cuda {

inline const char* code_name(::xllm_kernel::kernels::Status::Code c) {
  using S = ::xllm_kernel::kernels::Status;
  return c == S::kOk ? "kOk" : c == S::kInvalidArgument ? "kInvalidArgument" : c == S::kDeviceError ? "kDeviceError"
                                                                                                      : "unknown";
}

// `s` rejects the parameters (kInvalidArgument) with a reason that contains `why`.
inline testing::AssertionResult rejected(const ::xllm_kernel::kernels::Status& s, const char* why) {
  if (s.code != ::xllm_kernel::kernels::Status::kInvalidArgument) {
    return testing::AssertionFailure() << code_name(s.code) << " (\"" << s.reason << "\"), expected kInvalidArgument";
  }
  if (s.reason == nullptr || std::strstr(s.reason, why) == nullptr) {
    return testing::AssertionFailure() << "the reason \"" << (s.reason ? s.reason : "(null)") << "\" does not say \""
                                       << why << "\"";
  }
  return testing::AssertionSuccess();
}

// `s` is ok.
inline testing::AssertionResult accepted(const ::xllm_kernel::kernels::Status& s) {
  if (s.is_ok()) return testing::AssertionSuccess();
  return testing::AssertionFailure() << code_name(s.code) << " (\"" << s.reason << "\"), expected kOk";
}

// `s` is a kDeviceError carrying the runtime's error (not cudaSuccess) and naming the step.
inline testing::AssertionResult device_failure(const ::xllm_kernel::kernels::Status& s) {
  if (s.code != ::xllm_kernel::kernels::Status::kDeviceError) {
    return testing::AssertionFailure() << code_name(s.code) << " (\"" << s.reason << "\"), expected kDeviceError";
  }
  if (s.device_error == cudaSuccess) return testing::AssertionFailure() << "kDeviceError carrying cudaSuccess";
  if (s.reason == nullptr || s.reason[0] == '\0') return testing::AssertionFailure() << "kDeviceError without a step";
  return testing::AssertionSuccess();
}

// Whether the CUDA runtime sees a device. Where it does, a test must not hand a launcher valid
// parameters of host memory (the kernel would run on them).
inline bool cuda_device_present() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

}  // namespace xllm_kernel::cuda
