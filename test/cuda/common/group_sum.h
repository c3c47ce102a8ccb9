// The device's order of additions for the CUDA host tests that run a group's lanes in turn
// (test/cuda/<family>/*_host_test.cpp): kernels::warp_sum (width 32) and kernels::block_sum
// (csrc/cuda/common/reduce.cuh). A sequential sum of 1024 partials would be less accurate than
// the device and fail the float32 tolerances.
//
//   for (int lane = 0; lane < width; ++lane) partials[lane] = partial_of(lane);
//   const float total = group_sum(partials);  // what every lane of the group ends with
#pragma once

#include <cstring>
#include <vector>

namespace xllm_kernel::cuda {

// The device's xor butterfly over 32 values (what every lane ends with).
inline float butterfly(const float* values) {
  float v[32];
  std::memcpy(v, values, sizeof v);
  for (int m = 16; m > 0; m /= 2) {
    float next[32];
    for (int i = 0; i < 32; ++i) next[i] = v[i] + v[i ^ m];
    std::memcpy(v, next, sizeof v);
  }
  return v[0];
}

// A butterfly per warp of 32 partials, then one over the warps' totals (zero-padded to 32).
inline float group_sum(const std::vector<float>& partials) {
  const int warps = static_cast<int>(partials.size()) / 32;
  if (warps == 1) return butterfly(partials.data());
  float totals[32] = {};
  for (int w = 0; w < warps; ++w) totals[w] = butterfly(partials.data() + 32 * w);
  return butterfly(totals);
}

}  // namespace xllm_kernel::cuda
