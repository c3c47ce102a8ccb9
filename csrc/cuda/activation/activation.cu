// Launchers of the gated activation kernels (csrc/cuda/activation/activation.cuh): validate what
// the kernels rely on, plan the launch, enqueue on the caller's stream, check the launch.
#include <algorithm>
#include <limits>

#include "csrc/cuda/activation/activation.cuh"
#include "csrc/cuda/activation/activation.h"
#include "csrc/cuda/common/device.h"

namespace xllm_kernel::cuda {
namespace {

using kernels::Act;
using kernels::ActivationArgs;

// Fewer items than this many per SM: the plan trades block size for blocks.
constexpr int64_t kItemsPerSm = 2;

using ::xllm_kernel::kernels::valid_dtype;

// What the kernels assume (a bridge checked the tensors; this guards the torch-free API).
Status check(const ActivationParams& p) {
  if (!valid_dtype(p.dtype)) return Status::invalid("activation: unknown dtype");
  if (p.d < 1) return Status::invalid("activation: d must be >= 1");
  if (const char* why = ::xllm_kernel::kernels::invalid_rows(p.shape, 0, p.shape.rows)) return Status::invalid(why);
  if (p.shape.rows == 0) return Status::ok();
  if (p.input == nullptr || p.out == nullptr) return Status::invalid("activation: null input or out");
  // Element offsets within the launch (rows * 2d) stay far inside int64.
  if (p.d > std::numeric_limits<int64_t>::max() / 4 / p.shape.rows) {
    return Status::invalid("activation: rows * 2d beyond int64");
  }
  return Status::ok();
}

int64_t pow2_ceil(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

template <Act kAct>
Status launch(const ActivationParams& p, cudaStream_t stream) {
  if (const Status s = check(p); !s.is_ok()) return s;
  if (p.shape.rows == 0) return Status::ok();
  int sm_count = 0;
  if (cudaError_t e = current_sm_count(&sm_count); e != cudaSuccess) {
    return cuda_status(e, "querying the device's SM count");
  }
  ActivationArgs args;
  args.p = p;
  args.plan = plan_activation(p, sm_count);
  const dim3 grid(static_cast<unsigned>(args.plan.blocks)), block(static_cast<unsigned>(args.plan.threads));
  const Status no_variant = Status::invalid("activation: no kernel variant for the dtype and plan");
  return kernels::dispatch_variant<kAct>(args, no_variant, [&](auto variant) {
    using V = decltype(variant);
    kernels::act_and_mul<V::act, typename V::type, V::piece, V::per_thread><<<grid, block, 0, stream>>>(args);
    return cuda_status(cudaGetLastError(), "launching the kernel");
  });
}

}  // namespace

bool vector_access(const ActivationParams& p) {
  if (!valid_dtype(p.dtype)) return false;
  const int64_t piece = kernels::kVectorBytes / ::xllm_kernel::kernels::element_size(p.dtype);
  if (p.d % piece != 0 || !kernels::aligned16(p.input) || !kernels::aligned16(p.out)) return false;
  const int ndim = std::clamp(p.shape.ndim, 0, kMaxRowDims);
  for (int d = 0; d < ndim; ++d) {
    if (p.shape.sizes[d] <= 1) continue;  // index 0 only: the stride is never used
    if (p.input_strides.s[d] % piece != 0 || p.out_strides.s[d] % piece != 0) return false;
  }
  return true;
}

// Plan rules (rows R, pieces per row P = ceil(d / piece), work W = R * P pieces, a wave = 2048
// threads per SM, "few items" = fewer than 2 per SM):
//   1. per_thread: 4 when W fills four waves, 2 when it fills two, else 1 (more loads in flight
//      per thread and fewer items once the GPU is full anyway); at most 2 on the vector path
//      (registers, see kernels::kMaxPerThreadVector). A row then needs N = ceil(P / per_thread)
//      threads.
//   2. Short rows (N <= 32): threads_per_row = the power of two >= N, one chunk per row, and
//      rows_per_block fills the block to 256 threads (not beyond the rows there are); few items:
//      halve rows_per_block down to 32 threads a block.
//   3. Long rows (N > 32): one row per block; chunks = ceil(N / M) for a cap M = 256 threads,
//      threads_per_row = N / chunks rounded up to a multiple of 32 (chunks of equal size, e.g.
//      224 threads x 4 chunks for bf16 d = 14336); few items: M = 128, 64, 32, so that 1 x 14336
//      spreads over 56 SMs instead of 4.
//   4. blocks = min(items, 16 waves of resident blocks); blocks loop over the rest.
ActivationPlan plan_activation(const ActivationParams& p, int sm_count) {
  ActivationPlan plan;
  if (!check(p).is_ok() || p.shape.rows == 0) return plan;
  const int64_t sms = std::clamp(sm_count, 1, 1 << 16);
  const int64_t rows = p.shape.rows;
  plan.vector = vector_access(p);
  plan.piece = plan.vector ? kernels::kVectorBytes / ::xllm_kernel::kernels::element_size(p.dtype) : 1;
  const int64_t pieces = ceil_div(p.d, plan.piece);
  const int64_t wave = sms * kResidentThreadsPerSm;
  const int64_t work = rows <= std::numeric_limits<int64_t>::max() / pieces ? rows * pieces
                                                                            : std::numeric_limits<int64_t>::max();
  plan.per_thread = work >= 4 * wave ? 4 : work >= 2 * wave ? 2 : 1;
  plan.per_thread = std::min(plan.per_thread,
                             plan.vector ? kernels::kMaxPerThreadVector : kernels::kMaxPerThreadScalar);
  const int64_t needed = ceil_div(pieces, plan.per_thread);  // threads that cover a row at once
  const int64_t few = kItemsPerSm * sms;

  constexpr int64_t kMaxThreads = kernels::kActivationMaxThreads;
  constexpr int64_t kWarp = 32;
  int64_t per_row = 0, rows_per_block = 1, chunks = 1;
  if (needed <= kWarp) {
    per_row = pow2_ceil(needed);
    rows_per_block = std::min(kMaxThreads / per_row, pow2_ceil(rows));
    while (ceil_div(rows, rows_per_block) < few && per_row * rows_per_block > kWarp) rows_per_block /= 2;
  } else {
    for (int64_t cap = kMaxThreads;; cap /= 2) {
      chunks = ceil_div(needed, cap);
      per_row = ceil_div(ceil_div(needed, chunks), kWarp) * kWarp;
      if (rows * chunks >= few || cap == kWarp) break;
    }
  }
  plan.threads_per_row = static_cast<int>(per_row);
  plan.rows_per_block = static_cast<int>(rows_per_block);
  plan.threads = plan.threads_per_row * plan.rows_per_block;
  plan.chunk = int64_t{plan.piece} * plan.per_thread * plan.threads_per_row;
  plan.chunks = ceil_div(p.d, plan.chunk);
  plan.items = ceil_div(rows, rows_per_block) * plan.chunks;
  const int64_t blocks_per_sm = std::clamp<int64_t>(kResidentThreadsPerSm / plan.threads, 1, kResidentBlocksPerSm);
  plan.blocks = std::min(plan.items, sms * blocks_per_sm * kMaxWaves);
  return plan;
}

Status silu_and_mul(const ActivationParams& p, cudaStream_t stream) { return launch<Act::kSilu>(p, stream); }

Status gelu_and_mul(const ActivationParams& p, cudaStream_t stream) { return launch<Act::kGelu>(p, stream); }

Status gelu_tanh_and_mul(const ActivationParams& p, cudaStream_t stream) {
  return launch<Act::kGeluTanh>(p, stream);
}

Status gelu(const ActivationParams& p, cudaStream_t stream) { return launch<Act::kPlainGelu>(p, stream); }

Status gelu_tanh(const ActivationParams& p, cudaStream_t stream) { return launch<Act::kPlainGeluTanh>(p, stream); }

Status quick_gelu(const ActivationParams& p, cudaStream_t stream) { return launch<Act::kQuickGelu>(p, stream); }

}  // namespace xllm_kernel::cuda
