// Launchers of the CUDA quantization kernels (csrc/cuda/quantization/quantization.cuh): validate what
// the kernels rely on, plan the launch, enqueue on the caller's stream, check the launch.
#include <algorithm>
#include <cmath>
#include <limits>

#include "csrc/cuda/common/device.h"
#include "csrc/cuda/normalization/normalization.h"
#include "csrc/cuda/quantization/quantization.cuh"
#include "csrc/cuda/quantization/quantization.h"

namespace xllm_kernel::cuda {
namespace {

using kernels::QuantArgs;

bool is_norm(QuantProducer op) { return ::xllm_kernel::kernels::producer_normalizes(op); }

template <QuantProducer kOp>
Status launch(const QuantParams& p, cudaStream_t stream) {
  if (const Status s = check_quant(p, kOp); !s.is_ok()) return s;
  if (p.shape.rows == 0) return Status::ok();
  int sm_count = 0;
  if (cudaError_t e = current_sm_count(&sm_count); e != cudaSuccess) {
    return cuda_status(e, "querying the device's SM count");
  }
  QuantArgs args;
  args.p = p;
  args.plan = plan_quant(p, kOp, sm_count);
  args.eps = static_cast<float>(p.eps);
  args.weights_aligned = kernels::aligned16(p.weight);
  const QuantPlan& plan = args.plan;
  const dim3 grid(static_cast<unsigned>(plan.blocks)), block(static_cast<unsigned>(plan.threads));
  const Status no_variant = Status::invalid("quantization: no kernel variant for the dtype and weight_dtype");
  return kernels::dispatch_quant_types<kOp>(p, no_variant, [&](auto element, auto weight) {
    using T = typename decltype(element)::type;
    using W = typename decltype(weight)::type;
    if (plan.warp_per_row) {
      kernels::quant_rows<kOp, T, W, true><<<grid, block, plan.shared_bytes, stream>>>(args);
    } else {
      kernels::quant_rows<kOp, T, W, false><<<grid, block, plan.shared_bytes, stream>>>(args);
    }
    return cuda_status(cudaGetLastError(), "launching the kernel");
  });
}

bool aligned_strides(const QuantParams& p, const RowStrides& s, int64_t element_bytes) {
  const int ndim = std::clamp(p.shape.ndim, 0, ::xllm_kernel::kernels::kMaxRowDims);
  for (int d = 0; d < ndim; ++d) {
    if (p.shape.sizes[d] <= 1) continue;  // index 0 only: the stride is never used
    if ((s.s[d] * element_bytes) % kernels::kVectorBytes != 0) return false;
  }
  return true;
}

}  // namespace

Status check_quant(const QuantParams& p, QuantProducer op) {
  if (op != QuantProducer::kInput && op != QuantProducer::kSiluAndMul && !is_norm(op)) {
    return Status::invalid("quantization: unknown operation");
  }
  // The CPU kernels' check (csrc/common/quantization.h), then what a launch adds.
  if (const char* why = ::xllm_kernel::kernels::invalid_quant_params(p, op, 0, p.shape.rows)) return Status::invalid(why);
  if (p.shape.rows == 0) return Status::ok();
  // Element offsets within the launch (rows * 2 * hidden) stay far inside int64.
  if (p.hidden > std::numeric_limits<int64_t>::max() / 4 / p.shape.rows) {
    return Status::invalid("quantization: rows * 2 * hidden beyond int64");
  }
  return Status::ok();
}

bool quant_vector_access(const QuantParams& p, QuantProducer op) {
  if (!::xllm_kernel::kernels::valid_dtype(p.dtype) || p.hidden < 1) return false;
  const int64_t bytes = ::xllm_kernel::kernels::element_size(p.dtype);
  if (!kernels::aligned16(p.input) || !kernels::aligned16(p.out)) return false;
  if (!aligned_strides(p, p.input_strides, bytes) || !aligned_strides(p, p.out_strides, 1)) return false;
  if (op == QuantProducer::kSiluAndMul && (p.hidden * bytes) % kernels::kVectorBytes != 0) return false;  // the up half
  if (is_norm(op) && !kernels::aligned16(p.weight)) return false;
  if (op == QuantProducer::kFusedAddRmsNorm) {
    if (!kernels::aligned16(p.residual) || !aligned_strides(p, p.residual_strides, bytes)) return false;
  }
  return true;
}

// The normalization kernel's launch shape for every operation: for the norms it must be (their sum
// of squares is the rms_norm kernel's, which depends on the group width); for quant and
// silu_and_mul it is as good a row shape as any (a warp per row for short rows and many rows, else
// a block per row sized to the row).
QuantPlan plan_quant(const QuantParams& p, QuantProducer op, int sm_count) {
  QuantPlan plan;
  if (!check_quant(p, op).is_ok() || p.shape.rows == 0) return plan;
  const LaunchPlan lp = plan_launch(p.shape.rows, p.hidden,
                                    static_cast<size_t>(::xllm_kernel::kernels::element_size(p.dtype)), sm_count);
  plan.warp_per_row = lp.warp_per_row;
  plan.threads = lp.threads;
  plan.width = lp.warp_per_row ? kernels::kWarp : lp.threads;
  plan.blocks = lp.blocks;
  plan.shared_bytes =
      lp.warp_per_row ? 0 : static_cast<size_t>(kernels::quant_scratch_floats(lp.threads)) * sizeof(float);
  plan.vector = quant_vector_access(p, op);
  return plan;
}

Status quant(const QuantParams& p, cudaStream_t stream) { return launch<QuantProducer::kInput>(p, stream); }

Status rms_norm_quant(const QuantParams& p, cudaStream_t stream) { return launch<QuantProducer::kRmsNorm>(p, stream); }

Status fused_add_rms_norm_quant(const QuantParams& p, cudaStream_t stream) {
  return launch<QuantProducer::kFusedAddRmsNorm>(p, stream);
}

Status silu_and_mul_quant(const QuantParams& p, cudaStream_t stream) {
  return launch<QuantProducer::kSiluAndMul>(p, stream);
}

}  // namespace xllm_kernel::cuda
