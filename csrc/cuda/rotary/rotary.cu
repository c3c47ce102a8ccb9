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
bool valid(const RotaryParams& p) {
  if (!valid_dtype(p.dtype) || (p.cache_dtype != DType::kFloat32 && p.cache_dtype != p.dtype)) return false;
  if (p.rot_dim < 2 || p.rot_dim % 2 != 0 || p.rot_dim > p.head_size) return false;
  if (p.tokens < 0 || p.max_position < 0 || p.query_heads < 1 || p.key_heads < 0) return false;
  if ((p.key == nullptr) != (p.key_heads == 0)) return false;
  if (p.tokens == 0) return true;
  if (p.positions == nullptr || p.query == nullptr || p.cos_sin_cache == nullptr) return false;
  // Pieces per token (at least one element or pair each) fit the kernel's int arithmetic.
  return p.query_heads + p.key_heads <= kMaxPiecesPerToken / p.rot_dim;
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
  if (!valid(p) || p.tokens == 0) return plan;
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

cudaError_t rotary_embedding(const RotaryParams& p, cudaStream_t stream) {
  if (!valid(p)) return cudaErrorInvalidValue;
  if (p.tokens == 0) return cudaSuccess;
  int sm_count = 0;
  if (cudaError_t e = current_sm_count(&sm_count); e != cudaSuccess) return e;
  kernels::RotaryArgs args;
  args.p = p;
  args.plan = plan_rotary(p, sm_count);
  const dim3 grid(static_cast<unsigned>(args.plan.blocks)), block(static_cast<unsigned>(args.plan.threads));
  return kernels::dispatch_rotary(args, cudaErrorInvalidValue, [&](auto variant) {
    using V = decltype(variant);
    kernels::rotary_embedding_kernel<typename V::type, typename V::cache_type, V::neox, V::piece>
        <<<grid, block, 0, stream>>>(args);
    return cudaGetLastError();
  });
}

}  // namespace xllm_kernel::cuda
