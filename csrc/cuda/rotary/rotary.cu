// Launcher of the rotary embedding kernel (csrc/cuda/rotary/rotary.cuh): validate what the kernel
// relies on, plan the launch, enqueue on the caller's stream, check the launch.
#include <algorithm>
#include <limits>

#include "csrc/cuda/common/device.h"
#include "csrc/cuda/rotary/rotary.cuh"
#include "csrc/cuda/rotary/rotary.h"

namespace xllm_kernel::cuda {
namespace {

using ::xllm_kernel::kernels::valid_dtype;

// Pieces of one token at most (int arithmetic in the kernel).
constexpr int64_t kMaxPiecesPerToken = int64_t{1} << 30;

// What the kernel assumes (a bridge checked the tensors; this guards the torch-free API).
Status check(const RotaryParams& p) {
  if (!valid_dtype(p.dtype)) return Status::invalid("rotary_embedding: unknown dtype");
  if (p.cache_dtype != DType::kFloat32 && p.cache_dtype != p.dtype) {
    return Status::invalid("rotary_embedding: cache dtype must be float32 or the query's dtype");
  }
  if (p.rot_dim < 2 || p.rot_dim % 2 != 0 || p.rot_dim > p.head_size) {
    return Status::invalid("rotary_embedding: rot_dim must be even and in [2, head_size]");
  }
  if (p.tokens < 0) return Status::invalid("rotary_embedding: tokens must be >= 0");
  if (p.max_position < 0) return Status::invalid("rotary_embedding: max_position must be >= 0");
  if (p.query_heads < 1 || p.key_heads < 0 || (p.key == nullptr) != (p.key_heads == 0)) {
    return Status::invalid("rotary_embedding: query needs >= 1 head; key null exactly when it has 0 heads");
  }
  if (p.tokens == 0) return Status::ok();
  // An empty cache (max_position 0) may have no data: every position is then out of range.
  if (p.positions == nullptr || p.query == nullptr || (p.cos_sin_cache == nullptr && p.max_position > 0)) {
    return Status::invalid("rotary_embedding: null positions, query or cache");
  }
  // Pieces per token (at least one element or pair each) fit the kernel's int arithmetic.
  if (p.query_heads + p.key_heads > kMaxPiecesPerToken / p.rot_dim) {
    return Status::invalid("rotary_embedding: more than 2^30 pieces per token");
  }
  return Status::ok();
}

}  // namespace

bool vector_access(const RotaryParams& p) {
  if (!valid_dtype(p.dtype)) return false;
  const int64_t piece = kernels::kVectorBytes / ::xllm_kernel::kernels::element_size(p.dtype);
  const int64_t span = p.is_neox ? p.rot_dim / 2 : p.rot_dim;
  if (span % piece != 0 || !kernels::aligned16(p.query) || !kernels::aligned16(p.key)) return false;
  auto ok = [&](int64_t size, int64_t stride) { return size <= 1 || stride % piece == 0; };
  return ok(p.tokens, p.query_token_stride) && ok(p.query_heads, p.query_head_stride) &&
         (p.key == nullptr || (ok(p.tokens, p.key_token_stride) && ok(p.key_heads, p.key_head_stride)));
}

// Plan: pieces as wide as vector_access allows; threads = the token's pieces rounded up to a warp,
// at most 256 (they loop over the rest); one token per block, blocks = min(tokens, 16 waves of
// resident blocks), looping over the remaining tokens.
RotaryPlan plan_rotary(const RotaryParams& p, int sm_count) {
  RotaryPlan plan;
  if (!check(p).is_ok() || p.tokens == 0) return plan;
  const int64_t sms = std::clamp(sm_count, 1, 1 << 16);
  plan.vector = vector_access(p);
  const int64_t span = p.is_neox ? p.rot_dim / 2 : p.rot_dim;  // what the pieces of a head cover
  plan.piece = plan.vector ? kernels::kVectorBytes / ::xllm_kernel::kernels::element_size(p.dtype)
                           : (p.is_neox ? 1 : 2);
  plan.pieces_per_head = static_cast<int>(span / plan.piece);
  plan.pieces_per_token = static_cast<int>(plan.pieces_per_head * (p.query_heads + p.key_heads));
  constexpr int64_t kWarp = 32;
  plan.threads = static_cast<int>(
      std::min<int64_t>(kernels::kRotaryMaxThreads, (plan.pieces_per_token + kWarp - 1) / kWarp * kWarp));
  const int64_t blocks_per_sm = std::clamp<int64_t>(kResidentThreadsPerSm / plan.threads, 1, kResidentBlocksPerSm);
  plan.blocks = std::min(p.tokens, sms * blocks_per_sm * kMaxWaves);
  return plan;
}

Status rotary_embedding(const RotaryParams& p, cudaStream_t stream) {
  if (const Status s = check(p); !s.is_ok()) return s;
  // No tokens, or an empty cache: every position is out of range, so no row changes (the
  // contract's CUDA rule); nothing to launch.
  if (p.tokens == 0 || p.max_position == 0) return Status::ok();
  int sm_count = 0;
  if (cudaError_t e = current_sm_count(&sm_count); e != cudaSuccess) {
    return cuda_status(e, "querying the device's SM count");
  }
  kernels::RotaryArgs args;
  args.p = p;
  args.plan = plan_rotary(p, sm_count);
  const dim3 grid(static_cast<unsigned>(args.plan.blocks)), block(static_cast<unsigned>(args.plan.threads));
  const Status no_variant = Status::invalid("rotary_embedding: no kernel variant for the dtypes and plan");
  return kernels::dispatch_rotary(args, no_variant, [&](auto variant) {
    using V = decltype(variant);
    kernels::rotary_embedding_kernel<typename V::type, typename V::cache_type, V::neox, V::piece>
        <<<grid, block, 0, stream>>>(args);
    return cuda_status(cudaGetLastError(), "launching the kernel");
  });
}

}  // namespace xllm_kernel::cuda
