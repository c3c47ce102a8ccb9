// Launcher of the CUDA scaled_mm kernel (csrc/cuda/linear/scaled_mm.cuh): validate what the kernel
// relies on, plan the grid, enqueue on the caller's stream, check the launch.
#include <algorithm>
#include <limits>

#include "csrc/cuda/common/device.h"
#include "csrc/cuda/linear/scaled_mm.cuh"
#include "csrc/cuda/linear/scaled_mm.h"

namespace xllm_kernel::cuda {

Status check_scaled_mm(const ScaledMmParams& p) {
  using ::xllm_kernel::kernels::kScaledMmMaxK;
  const bool int8 = p.scheme == LinearScheme::kW8A8Int8, fp8 = p.scheme == LinearScheme::kW8A8Fp8,
             w4a8 = p.scheme == LinearScheme::kW4A8;
  if (!int8 && !fp8 && !w4a8) return Status::invalid("scaled_mm: scheme must be w8a8-int8, w8a8-fp8 or w4a8");
  if (p.out_dtype != DType::kFloat32 && p.out_dtype != DType::kBFloat16 && p.out_dtype != DType::kFloat16) {
    return Status::invalid("scaled_mm: unknown out_dtype");
  }
  if (p.m < 0) return Status::invalid("scaled_mm: m must be >= 0");
  if (p.n < 1 || p.n > std::numeric_limits<int32_t>::max()) return Status::invalid("scaled_mm: n must be in [1, 2^31)");
  if (p.k < 1 || p.k > kScaledMmMaxK) return Status::invalid("scaled_mm: k must be in [1, kScaledMmMaxK]");
  if (int8 && p.group != p.k) return Status::invalid("scaled_mm: w8a8-int8 has one group of K");
  if (fp8 && p.group != p.k && p.group != std::min<int64_t>(p.k, ::xllm_kernel::kernels::kFp8Block)) {
    return Status::invalid("scaled_mm: w8a8-fp8 groups must be K or min(K, 128)");
  }
  if (w4a8 && (p.group < 8 || p.group % 8 != 0 || p.k % p.group != 0)) {
    return Status::invalid("scaled_mm: w4a8 groups must be a multiple of 8 dividing K");
  }
  if (p.groups != ::xllm_kernel::kernels::ceil_div(p.k, p.group)) {
    return Status::invalid("scaled_mm: groups must be ceil(K / group)");
  }
  if (p.a_stride < 0 || p.out_stride < p.n || p.scale_a_stride < 0 || p.azp_stride < 0) {
    return Status::invalid("scaled_mm: negative stride, or out_stride < n");
  }
  if (p.azp != nullptr && (!int8 || p.sums == nullptr)) {
    return Status::invalid("scaled_mm: azp is for w8a8-int8 with sums");
  }
  if (p.zeros != nullptr && !w4a8) return Status::invalid("scaled_mm: zeros are for w4a8");
  if (p.m == 0) return Status::ok();
  if (p.a == nullptr || p.out == nullptr || p.weights == nullptr || p.scales == nullptr || p.scale_a == nullptr) {
    return Status::invalid("scaled_mm: null a, out, weights, scales or scale_a");
  }
  // Element offsets (m * stride + k) stay far inside int64.
  const int64_t widest = std::max({p.a_stride, p.out_stride, p.k});
  if (widest > std::numeric_limits<int64_t>::max() / 4 / p.m) {
    return Status::invalid("scaled_mm: m * stride beyond int64");
  }
  return Status::ok();
}

ScaledMmPlan plan_scaled_mm(const ScaledMmParams& p) {
  ScaledMmPlan plan;
  if (!check_scaled_mm(p).is_ok() || p.m == 0) return plan;
  plan.row_tiles = ceil_div(p.m, kScaledMmTileM);
  plan.col_tiles = ceil_div(p.n, kScaledMmTileN);
  plan.grid_x = plan.col_tiles;
  plan.grid_y = std::min(plan.row_tiles, kScaledMmMaxRowBlocks);
  return plan;
}

Status scaled_mm(const ScaledMmParams& p, cudaStream_t stream) {
  if (const Status s = check_scaled_mm(p); !s.is_ok()) return s;
  if (p.m == 0) return Status::ok();
  const ScaledMmPlan plan = plan_scaled_mm(p);
  const dim3 grid(static_cast<unsigned>(plan.grid_x), static_cast<unsigned>(plan.grid_y));
  const dim3 block(kScaledMmThreads);
  return kernels::dispatch_scaled_mm(p, Status::invalid("scaled_mm: no kernel variant"), [&](auto scheme, auto out) {
    using T = typename decltype(out)::type;
    kernels::scaled_mm_tiles<decltype(scheme)::value, T><<<grid, block, 0, stream>>>(p, plan.row_tiles);
    return cuda_status(cudaGetLastError(), "launching the kernel");
  });
}

}  // namespace xllm_kernel::cuda
