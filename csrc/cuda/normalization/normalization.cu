// Launchers of the CUDA normalization kernels (csrc/cuda/normalization/normalization.cuh): validate what the
// kernels rely on, shape the launch, enqueue on the caller's stream, check the launch.
#include <algorithm>
#include <cmath>

#include "csrc/cuda/common/device.h"
#include "csrc/cuda/normalization/normalization.cuh"
#include "csrc/cuda/normalization/normalization.h"

namespace xllm_kernel::cuda {
namespace {

using kernels::KernelArgs;
using kernels::kWarp;
using kernels::Op;

using ::xllm_kernel::kernels::valid_dtype;

constexpr int kMaxThreads = 1024;
// Blocks a warp-per-row launch puts in one block (256 threads).
constexpr int kRowsPerWarpBlock = 8;

// What the kernels assume (the bridge checked the tensors; this guards the torch-free API).
Status check(const NormParams& p, Op op) {
  if (!valid_dtype(p.dtype)) return Status::invalid("normalization: unknown dtype");
  if (p.weight_dtype != DType::kFloat32 && p.weight_dtype != p.dtype) {
    return Status::invalid("normalization: weight_dtype must be float32 or dtype");
  }
  if (p.hidden < 1) return Status::invalid("normalization: hidden must be >= 1");
  if (const char* why = ::xllm_kernel::kernels::invalid_rows(p.row_ndim, p.row_sizes, p.rows, 0, p.rows)) {
    return Status::invalid(why);
  }
  if (!std::isfinite(p.eps) || p.eps < 0) return Status::invalid("normalization: eps must be finite and >= 0");
  if (p.rows == 0) return Status::ok();
  if (p.input == nullptr || p.weight == nullptr) return Status::invalid("normalization: null input or weight");
  if (op == Op::kFusedAddRmsNorm) {
    return p.residual != nullptr ? Status::ok() : Status::invalid("fused_add_rms_norm: null residual");
  }
  if (p.out == nullptr) return Status::invalid(op == Op::kLayerNorm ? "layer_norm: null out" : "rms_norm: null out");
  if (op == Op::kRmsNorm && p.bias != nullptr) return Status::invalid("rms_norm: bias is for layer_norm only");
  return Status::ok();
}

template <Op kOp, class T, class W>
Status launch_typed(const KernelArgs& args, const LaunchPlan& plan, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(plan.blocks)), block(static_cast<unsigned>(plan.threads));
  if (plan.warp_per_row) {
    kernels::norm_rows<kOp, T, W, true><<<grid, block, plan.shared_bytes, stream>>>(args);
  } else {
    kernels::norm_rows<kOp, T, W, false><<<grid, block, plan.shared_bytes, stream>>>(args);
  }
  return cuda_status(cudaGetLastError(), "launching the kernel");
}

template <Op kOp>
Status launch(const NormParams& p, cudaStream_t stream) {
  if (const Status s = check(p, kOp); !s.is_ok()) return s;
  if (p.rows == 0) return Status::ok();
  int sm_count = 0;
  if (cudaError_t e = current_sm_count(&sm_count); e != cudaSuccess) {
    return cuda_status(e, "querying the device's SM count");
  }
  KernelArgs args;
  args.p = p;
  args.eps = static_cast<float>(p.eps);
  args.weights_aligned = kernels::aligned16(p.weight) && kernels::aligned16(p.bias);
  const size_t element_bytes = static_cast<size_t>(::xllm_kernel::kernels::element_size(p.dtype));
  const LaunchPlan plan = plan_launch(p.rows, p.hidden, element_bytes, sm_count);
  const bool float_weight = p.weight_dtype == DType::kFloat32;
  switch (p.dtype) {
    case DType::kFloat32:
      return launch_typed<kOp, float, float>(args, plan, stream);
    case DType::kBFloat16:
      return float_weight ? launch_typed<kOp, __nv_bfloat16, float>(args, plan, stream)
                          : launch_typed<kOp, __nv_bfloat16, __nv_bfloat16>(args, plan, stream);
    case DType::kFloat16:
      return float_weight ? launch_typed<kOp, __half, float>(args, plan, stream)
                          : launch_typed<kOp, __half, __half>(args, plan, stream);
  }
  return Status::invalid("normalization: unknown dtype");
}

}  // namespace

LaunchPlan plan_launch(int64_t rows, int64_t hidden, size_t element_bytes, int sm_count) {
  LaunchPlan plan;
  if (rows <= 0 || hidden <= 0 || element_bytes == 0) return plan;
  sm_count = std::max(sm_count, 1);
  const int64_t vec = std::max<int64_t>(1, kernels::kVectorBytes / static_cast<int64_t>(element_bytes));
  const int64_t pieces = ceil_div(hidden, vec);  // 16-byte accesses per row
  // Rows enough to give every SM 32 warps: a warp per row then keeps the GPU busy without
  // block barriers, as long as a row is a few accesses per lane.
  const bool many_rows = rows >= int64_t{sm_count} * 32;
  if (pieces <= kWarp || (pieces <= 4 * kWarp && many_rows)) {
    const int64_t rows_per_block = std::min<int64_t>(kRowsPerWarpBlock, rows);
    plan.warp_per_row = true;
    plan.threads = static_cast<int>(rows_per_block) * kWarp;
    plan.blocks = ceil_div(rows, rows_per_block);
    plan.shared_bytes = 0;
  } else {
    // A block per row. Few rows (less than two per SM): as many threads as the row has accesses,
    // so that a lone row is read with the most parallelism. Many rows: about four accesses per
    // thread, leaving room for several rows in flight per SM.
    const int64_t per_thread = rows >= 2 * int64_t{sm_count} ? 4 : 1;
    const int64_t threads = ceil_div(ceil_div(pieces, per_thread), kWarp) * kWarp;
    plan.warp_per_row = false;
    plan.threads = static_cast<int>(std::clamp<int64_t>(threads, kWarp, kMaxThreads));
    plan.blocks = rows;
    // Two alternating slots per warp (see kernels::block_sum).
    plan.shared_bytes = 2 * static_cast<size_t>(plan.threads / kWarp) * sizeof(float);
  }
  const int64_t max_blocks = int64_t{sm_count} * std::max<int64_t>(1, kResidentThreadsPerSm / plan.threads) * kMaxWaves;
  plan.blocks = std::min(plan.blocks, max_blocks);
  return plan;
}

Status rms_norm(const NormParams& p, cudaStream_t stream) { return launch<Op::kRmsNorm>(p, stream); }

Status fused_add_rms_norm(const NormParams& p, cudaStream_t stream) { return launch<Op::kFusedAddRmsNorm>(p, stream); }

Status layer_norm(const NormParams& p, cudaStream_t stream) { return launch<Op::kLayerNorm>(p, stream); }

}  // namespace xllm_kernel::cuda
