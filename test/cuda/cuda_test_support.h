// Shared by the CUDA tests: whether this machine can run them (and why not), the CUDA
// implementations in the registry.
#pragma once

#include <string>
#include <vector>

#include "test/ops/common/registered.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing {

// The verdict explain("cuda", operation) gives `name`; loads the cuda modules (and the plugin,
// where its probe passes) on first use. Throws what explain throws (a broken plugin).
inline Candidate cuda_candidate(const std::string& operation, const std::string& name) {
  for (const Candidate& c : explain("cuda", operation).candidates) {
    if (c.name == name) return c;
  }
  Candidate missing;
  missing.name = name;
  missing.reason = name + " is not a candidate of " + operation + " on cuda";
  return missing;
}

// Empty when cuda.native.* can run here; otherwise why not ("missing dependency: no CUDA driver
// (libcuda.so.1 not found)", "missing dependency: no CUDA device", ...).
inline std::string native_cuda_unavailable() {
  const Candidate c = cuda_candidate("rms_norm", "cuda.native.rms_norm");
  return c.verdict == Verdict::kExcluded ? c.reason : std::string();
}

// Skips the calling test, saying why, on a machine where the CUDA kernels cannot run.
#define XLLM_SKIP_WITHOUT_CUDA_DEVICE()                                                                  \
  do {                                                                                                   \
    const std::string _why = ::xllm_kernel::testing::native_cuda_unavailable();                          \
    if (!_why.empty()) GTEST_SKIP() << "no usable CUDA device: cuda.native.rms_norm is excluded (" << _why \
                                    << ")";                                                              \
  } while (0)

// Every registered CUDA implementation of `operation` (cuda.torch.*, and cuda.native.* once the
// plugin is loaded). Loads the cuda modules first; a failure there is reported by the selection
// tests, not here (this runs while tests are being registered).
inline std::vector<std::string> cuda_implementations_of(const std::string& operation) {
  try {
    explain("cuda", operation);
  } catch (const std::exception&) {
  }
  return registered_implementations(operation, Device::kCuda);
}

}  // namespace xllm_kernel::testing
