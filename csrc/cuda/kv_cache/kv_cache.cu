// Launcher of the paged KV-cache write (csrc/cuda/kv_cache/kv_cache.cuh): validate what the kernel
// relies on, plan the launch, enqueue on the caller's stream, check the launch.
#include <algorithm>
#include <limits>

#include "csrc/cuda/common/device.h"
#include "csrc/cuda/kv_cache/kv_cache.cuh"
#include "csrc/cuda/kv_cache/kv_cache.h"

namespace xllm_kernel::cuda {
namespace {

using ::xllm_kernel::kernels::KvCacheFormat;
using ::xllm_kernel::kernels::valid_dtype;
using ::xllm_kernel::kernels::valid_kv_cache_format;
using kernels::KvCacheArgs;

constexpr int64_t kMaxThreads = kernels::kKvCacheMaxThreads;
constexpr int64_t kWarp = 32;

// What the kernel assumes (a bridge checked the tensors; this guards the torch-free API).
Status check(const KvCacheParams& p) {
  if (!valid_dtype(p.dtype)) return Status::invalid("reshape_and_cache: unknown dtype");
  if (!valid_kv_cache_format(p.format)) return Status::invalid("reshape_and_cache: unknown cache format");
  const bool quant = p.format != KvCacheFormat::kPlain, int8 = p.format == KvCacheFormat::kInt8;
  if (p.kv_heads < 1 || p.head_size < 1 || p.block_size < 1) {
    return Status::invalid("reshape_and_cache: kv_heads, head_size and block_size must be >= 1");
  }
  if (p.tokens < 0 || p.num_slots < 0) return Status::invalid("reshape_and_cache: tokens and num_slots must be >= 0");
  if (p.key_strides.token < 0 || p.key_strides.head < 0 || p.value_strides.token < 0 || p.value_strides.head < 0 ||
      p.key_cache_block_stride < 0 || p.value_cache_block_stride < 0 || p.slot_stride < 0) {
    return Status::invalid("reshape_and_cache: negative stride");
  }
  if (int8 && (p.key_scale_block_stride < 0 || p.value_scale_block_stride < 0)) {
    return Status::invalid("reshape_and_cache: negative stride (int8 key_scale or value_scale)");
  }
  if (p.tokens == 0 || p.num_slots == 0) return Status::ok();
  if (p.key == nullptr || p.value == nullptr || p.key_cache == nullptr || p.value_cache == nullptr ||
      p.slot_mapping == nullptr) {
    return Status::invalid("reshape_and_cache: null pointer");
  }
  if (quant && (p.key_scale == nullptr || p.value_scale == nullptr)) {
    return Status::invalid(int8 ? "reshape_and_cache: null pointer (key_scale or value_scale of an int8 cache)"
                                : "reshape_and_cache: null pointer (key_scale or value_scale of a float8_e4m3fn cache)");
  }
  // Byte offsets (token * stride, block * block stride, a row) stay inside int64.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max() / 8;
  const Status beyond = Status::invalid("reshape_and_cache: byte offsets beyond int64");
  const int64_t row = p.kv_heads * p.head_size;
  if (p.head_size > kMax / p.kv_heads || row > kMax / p.block_size) return beyond;
  // The quantized plan's rows (tokens * 2 * kv_heads) are counted in int64 too.
  if (quant && p.tokens > kMax / (2 * p.kv_heads)) return beyond;
  const int64_t num_blocks = (p.num_slots + p.block_size - 1) / p.block_size;
  const int64_t strides[] = {p.key_strides.token, p.value_strides.token, p.slot_stride};
  for (int64_t s : strides) {
    if (s > 0 && p.tokens > kMax / s) return beyond;
  }
  if (p.key_strides.head > 0 && p.kv_heads > kMax / p.key_strides.head) return beyond;
  if (p.value_strides.head > 0 && p.kv_heads > kMax / p.value_strides.head) return beyond;
  for (int64_t s : {p.key_cache_block_stride, p.value_cache_block_stride}) {
    if (s > 0 && num_blocks > kMax / s) return beyond;
  }
  if (int8) {
    // A block's scales: [block_size, kv_heads] contiguous after block * scale block stride.
    if (p.kv_heads > kMax / p.block_size) return beyond;
    for (int64_t s : {p.key_scale_block_stride, p.value_scale_block_stride}) {
      if (s > 0 && num_blocks > kMax / s) return beyond;
    }
  }
  return Status::ok();
}

int64_t pow2_ceil(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

}  // namespace

bool kv_cache_vector_access(const KvCacheParams& p) {
  if (!valid_dtype(p.dtype) || !valid_kv_cache_format(p.format)) return false;
  const bool quant = p.format != KvCacheFormat::kPlain;
  const int64_t es = ::xllm_kernel::kernels::element_size(p.dtype);
  const int64_t ces = quant ? 1 : es;  // bytes per cache element
  const int64_t v = kernels::kVectorBytes;
  // A piece: 16 bytes of the caches (and of the inputs), or 16 elements (16 bytes of the caches).
  if (quant ? p.head_size % kernels::kKvQuantPiece != 0 : (p.head_size * es) % v != 0) return false;
  for (const void* ptr : {p.key, p.value, static_cast<const void*>(p.key_cache),
                          static_cast<const void*>(p.value_cache)}) {
    if (!kernels::aligned16(ptr)) return false;
  }
  // Strides of a dimension of size 1 are never used.
  if (p.tokens > 1 && ((p.key_strides.token * es) % v != 0 || (p.value_strides.token * es) % v != 0)) return false;
  if (p.kv_heads > 1 && ((p.key_strides.head * es) % v != 0 || (p.value_strides.head * es) % v != 0)) return false;
  if (p.num_slots > p.block_size &&
      ((p.key_cache_block_stride * ces) % v != 0 || (p.value_cache_block_stride * ces) % v != 0)) {
    return false;
  }
  return true;
}

// Plan rules (kPlain): pieces of 16 bytes where kv_cache_vector_access holds, else of one element. A
// token's P = pieces_per_token pieces are taken by threads_per_token = the power of two >= P up to
// 32, above that P rounded up to a multiple of 32, at most 256 (a bf16 token of 8 x 128 is 256
// pieces: one per thread). Blocks of 256 threads hold 256 / threads_per_token tokens (but not more
// than the tokens there are, rounded up to a power of two), and the grid holds at most 16 waves
// of resident blocks; blocks loop over the rest.
//
// Quantized formats: pieces of 16 elements where kv_cache_vector_access holds, else of one. A
// row's pieces_per_head pieces are taken by threads_per_row = the power of two >= pieces_per_head,
// at most 32 (one warp's shuffle reduces the int8 amax); blocks of up to 256 threads hold
// 256 / threads_per_row rows (not more than the rows there are, rounded up to a power of two); the
// grid as above.
KvCachePlan plan_kv_cache(const KvCacheParams& p, int sm_count) {
  KvCachePlan plan;
  if (!check(p).is_ok() || p.tokens == 0 || p.num_slots == 0) return plan;
  const int64_t sms = std::clamp(sm_count, 1, 1 << 16);
  plan.vector = kv_cache_vector_access(p);
  const int64_t es = ::xllm_kernel::kernels::element_size(p.dtype);
  if (p.format != KvCacheFormat::kPlain) {
    plan.piece_bytes = plan.vector ? kernels::kKvQuantPiece : 1;
    plan.pieces_per_head = p.head_size / plan.piece_bytes;
    plan.pieces_per_token = 2 * p.kv_heads * plan.pieces_per_head;
    plan.rows = p.tokens * 2 * p.kv_heads;
    const int64_t per_row = std::min(kWarp, pow2_ceil(plan.pieces_per_head));
    const int64_t rows_per_block = std::min(kMaxThreads / per_row, pow2_ceil(plan.rows));
    plan.threads_per_row = static_cast<int>(per_row);
    plan.rows_per_block = static_cast<int>(rows_per_block);
    plan.threads = plan.threads_per_row * plan.rows_per_block;
    plan.items = ceil_div(plan.rows, rows_per_block);
  } else {
    plan.piece_bytes = plan.vector ? kernels::kVectorBytes : static_cast<int>(es);
    plan.pieces_per_head = p.head_size * es / plan.piece_bytes;
    plan.pieces_per_token = 2 * p.kv_heads * plan.pieces_per_head;
    const int64_t per_token = plan.pieces_per_token <= kWarp
                                  ? pow2_ceil(plan.pieces_per_token)
                                  : std::min(kMaxThreads, ceil_div(plan.pieces_per_token, kWarp) * kWarp);
    const int64_t tokens_per_block = std::min(kMaxThreads / per_token, pow2_ceil(p.tokens));
    plan.threads_per_token = static_cast<int>(per_token);
    plan.tokens_per_block = static_cast<int>(tokens_per_block);
    plan.threads = plan.threads_per_token * plan.tokens_per_block;
    plan.items = ceil_div(p.tokens, tokens_per_block);
  }
  const int64_t blocks_per_sm = std::clamp<int64_t>(kResidentThreadsPerSm / plan.threads, 1, kResidentBlocksPerSm);
  plan.blocks = std::min(plan.items, sms * blocks_per_sm * kMaxWaves);
  return plan;
}

Status reshape_and_cache(const KvCacheParams& p, cudaStream_t stream) {
  if (const Status s = check(p); !s.is_ok()) return s;
  if (p.tokens == 0 || p.num_slots == 0) return Status::ok();
  int sm_count = 0;
  if (cudaError_t e = current_sm_count(&sm_count); e != cudaSuccess) {
    return cuda_status(e, "querying the device's SM count");
  }
  KvCacheArgs args;
  args.p = p;
  args.plan = plan_kv_cache(p, sm_count);
  const dim3 grid(static_cast<unsigned>(args.plan.blocks)), block(static_cast<unsigned>(args.plan.threads));
  if (p.format != KvCacheFormat::kPlain) {
    const Status no_variant = Status::invalid("reshape_and_cache: no kernel variant for the dtype and cache format");
    return kernels::dispatch_kv_quant_format(p.format, no_variant, [&](auto format) {
      return kernels::dispatch_dtype(p.dtype, no_variant, [&](auto element) {
        constexpr KvCacheFormat kFormat = decltype(format)::value;
        using T = typename decltype(element)::type;
        if (args.plan.vector) {
          kernels::reshape_and_cache_quant_kernel<kFormat, T, kernels::kKvQuantPiece><<<grid, block, 0, stream>>>(args);
        } else {
          kernels::reshape_and_cache_quant_kernel<kFormat, T, 1><<<grid, block, 0, stream>>>(args);
        }
        return cuda_status(cudaGetLastError(), "launching the kernel");
      });
    });
  }
  const Status no_variant = Status::invalid("reshape_and_cache: no kernel variant for the plan's piece size");
  return kernels::dispatch_piece(args.plan, no_variant, [&](auto bytes) {
    kernels::reshape_and_cache_kernel<decltype(bytes)::value><<<grid, block, 0, stream>>>(args);
    return cuda_status(cudaGetLastError(), "launching the kernel");
  });
}

}  // namespace xllm_kernel::cuda
