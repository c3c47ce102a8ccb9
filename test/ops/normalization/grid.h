// The grid and the registry walk shared by the CPU (test/ops) and CUDA (test/cuda)
// normalization tests: every registered implementation of an operation on a device, in every
// dtype, over the same tokens x hidden grid.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "test/ops/common/registered.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing {

inline const std::vector<int64_t> kTokens{0, 1, 7, 257};
inline const std::vector<int64_t> kHidden{1, 7, 64, 4096 + 13};
inline const std::vector<at::ScalarType> kDtypes{at::kFloat, at::kBFloat16, at::kHalf};

// Shapes (bfloat16) that reach the CUDA kernels' other launch paths (plan_launch in
// csrc/cuda/normalization/normalization.cu, for GPUs of 108-132 SMs): more rows than one grid
// holds, so blocks loop over rows, in both kernels; several rows per block, a warp each; rows that
// are not 16-byte aligned with several accesses per thread. The numerics tool's cuda defaults add
// the same shapes (src/ops/normalization/suites/normalization_common.cpp).
struct KernelPathShape {
  int64_t tokens, hidden;
  const char* path;
};
inline const std::vector<KernelPathShape> kCudaKernelPathShapes{
    {200000, 64, "warp per row, more rows than one grid holds"},
    {40000, 4096, "block per row, more rows than one grid holds"},
    {8192, 1024, "several rows per block, a warp each"},
    {2048, 4109, "misaligned rows, several accesses per thread"},
};

// weight = randn * 0.5 + 1 (away from zero), on `device`.
inline at::Tensor make_weight(int64_t hidden, at::ScalarType dtype, at::Device device) {
  return (at::randn({hidden}) * 0.5 + 1).to(dtype).to(device);
}

inline std::string case_name(int64_t tokens, int64_t hidden, at::ScalarType w, const char* layout) {
  return "tokens=" + std::to_string(tokens) + " hidden=" + std::to_string(hidden) + " weight=" +
         std::string(c10::toString(w)) + " " + layout;
}

// Test parameter: one implementation in one dtype. (A test file's own helpers of the same names
// call these qualified, ::xllm_kernel::testing::, since its unnamed namespace hides them.)
struct ImplAndDtype {
  std::string implementation;
  at::ScalarType dtype;
};
inline void PrintTo(const ImplAndDtype& p, std::ostream* os) {
  *os << p.implementation << " " << c10::toString(p.dtype);
}
inline std::string param_name(const ::testing::TestParamInfo<ImplAndDtype>& info) {
  std::string n = info.param.implementation + "_" + c10::toString(info.param.dtype);
  for (char& c : n)
    if (c == '.') c = '_';
  return n;
}
inline std::vector<ImplAndDtype> params_for(const std::vector<std::string>& implementations) {
  std::vector<ImplAndDtype> out;
  for (const auto& impl : implementations)
    for (auto dtype : kDtypes) out.push_back({impl, dtype});
  return out;
}

}  // namespace xllm_kernel::testing
