// Launcher of paged attention (csrc/cuda/attention/attention.cuh): validate what the kernels rely
// on, plan the launch from the shapes, enqueue on the caller's stream, check each launch.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "csrc/cuda/attention/attention.cuh"
#include "csrc/cuda/attention/attention.h"
#include "csrc/cuda/common/device.h"

namespace xllm_kernel::cuda {
namespace {

using ::xllm_kernel::kernels::element_size;
using ::xllm_kernel::kernels::KvCacheFormat;
using ::xllm_kernel::kernels::max_context;
using ::xllm_kernel::kernels::valid_dtype;
using ::xllm_kernel::kernels::valid_kv_cache_format;
using kernels::AttentionArgs;
using kernels::AttentionShared;

constexpr int64_t kThreads = kernels::kAttentionThreads;
constexpr int64_t kMaxHeads = kernels::kAttentionMaxHeads;
// Blocks of the attention kernel an SM keeps resident, as the plan assumes: the kernel is compiled
// for 4 (__launch_bounds__, at most 128 registers per thread); the plan lowers it where shared
// memory allows fewer. Only the number of splits depends on it.
constexpr int64_t kBlocksPerSm = kernels::kAttentionMinBlocksPerSm;
// Shared memory an SM gives its blocks (sm_80: 164 KiB; sm_90 has more), less 1 KiB per block
// the runtime reserves.
constexpr int64_t kSharedPerSm = 163 * 1024;
// A split has at least this many keys: fewer would cost more in partial results than it gains.
constexpr int64_t kMinKeysPerSplit = 2 * kernels::kAttentionTile;
constexpr int64_t kMaxSplits = kernels::kAttentionMaxSplits;
static_assert(kInvariantSplitKeys == kernels::kAttentionInvariantSplitKeys &&
                  kInvariantSplitKeys % kernels::kAttentionTile == 0,
              "the batch-invariant range: one value, a multiple of the key tile");
constexpr int64_t kWorkspaceAlign = 256;
// Element offsets times the element size (and float32 workspace offsets) stay inside int64.
constexpr int64_t kMaxOffset = std::numeric_limits<int64_t>::max() / 8;

// a * b + c <= kMaxOffset, for a, b, c >= 0.
bool fits(int64_t a, int64_t b, int64_t c = 0) {
  int64_t product = 0, sum = 0;
  return !__builtin_mul_overflow(a, b, &product) && !__builtin_add_overflow(product, c, &sum) && sum <= kMaxOffset;
}

// The last element of a [rows, heads, head_size] view stays inside int64.
bool rows_fit(int64_t rows, int64_t heads, const AttentionRowStrides& s, int64_t head_size) {
  if (rows == 0) return true;
  return fits(rows - 1, s.token) && fits(heads - 1, s.head) &&
         fits(1, (rows - 1) * s.token, (heads - 1) * s.head + head_size);
}

bool cache_fits(const PagedAttentionParams& p, const CacheStrides& s) {
  if (p.num_blocks == 0) return true;
  if (!fits(p.num_blocks - 1, s.block) || !fits(p.block_size - 1, s.row) || !fits(p.kv_heads - 1, s.head)) {
    return false;
  }
  const int64_t a = (p.num_blocks - 1) * s.block, b = (p.block_size - 1) * s.row, c = (p.kv_heads - 1) * s.head;
  return fits(1, a, b) && fits(1, a + b, c + p.head_size);
}

// An int8 cache's scales [num_blocks, block_size, kv_heads]: the last one's offset stays inside int64.
bool scales_fit(const PagedAttentionParams& p, const CacheStrides& s) {
  if (p.num_blocks == 0) return true;
  if (!fits(p.num_blocks - 1, s.block) || !fits(p.block_size - 1, s.row) || !fits(p.kv_heads - 1, s.head)) {
    return false;
  }
  const int64_t a = (p.num_blocks - 1) * s.block, b = (p.block_size - 1) * s.row, c = (p.kv_heads - 1) * s.head;
  return fits(1, a, b) && fits(1, a + b, c + 1);
}

// What the kernels assume (a bridge checked the tensors; this guards the torch-free API).
Status check(const PagedAttentionParams& p) {
  if (!valid_dtype(p.dtype)) return Status::invalid("paged_attention: unknown dtype");
  if (!valid_kv_cache_format(p.cache_format)) return Status::invalid("paged_attention: unknown cache format");
  const bool quant = p.cache_format != KvCacheFormat::kPlain, int8 = p.cache_format == KvCacheFormat::kInt8;
  if (p.q_heads < 1 || p.kv_heads < 1 || p.head_size < 1 || p.block_size < 1) {
    return Status::invalid("paged_attention: q_heads, kv_heads, head_size and block_size must be >= 1");
  }
  if (p.head_size > kernels::kAttentionMaxHeadSize) return Status::invalid("paged_attention: head_size must be <= 512");
  if (p.q_heads % p.kv_heads != 0) return Status::invalid("paged_attention: q_heads must be a multiple of kv_heads");
  if (p.num_seqs < 0 || p.query_tokens < 0 || p.num_blocks < 0 || p.max_blocks_per_seq < 0) {
    return Status::invalid("paged_attention: num_seqs, query_tokens, num_blocks and max_blocks_per_seq must be >= 0");
  }
  const int64_t strides[] = {p.query_strides.token,       p.query_strides.head,       p.out_strides.token,
                             p.out_strides.head,          p.key_cache_strides.block,  p.key_cache_strides.row,
                             p.key_cache_strides.head,    p.value_cache_strides.block, p.value_cache_strides.row,
                             p.value_cache_strides.head,  p.block_table_stride};
  for (int64_t s : strides) {
    if (s < 0) return Status::invalid("paged_attention: negative stride");
  }
  if (int8) {
    for (const CacheStrides& s : {p.key_scale_strides, p.value_scale_strides}) {
      if (s.block < 0 || s.row < 0 || s.head < 0) {
        return Status::invalid("paged_attention: negative stride (int8 key_scale or value_scale)");
      }
    }
  }
  if (!std::isfinite(p.scale)) return Status::invalid("paged_attention: scale must be finite");
  if (!std::isfinite(p.soft_cap) || p.soft_cap < 0) {
    return Status::invalid("paged_attention: soft_cap must be finite and >= 0");
  }
  const Status beyond = Status::invalid("paged_attention: offsets beyond int64");
  if (!fits(p.max_blocks_per_seq, p.block_size) || !fits(p.num_seqs, p.block_table_stride, p.max_blocks_per_seq) ||
      !fits(p.query_tokens, p.q_heads) || !rows_fit(p.query_tokens, p.q_heads, p.query_strides, p.head_size) ||
      !rows_fit(p.query_tokens, p.q_heads, p.out_strides, p.head_size) || !cache_fits(p, p.key_cache_strides) ||
      !cache_fits(p, p.value_cache_strides) ||
      !fits(p.query_tokens * p.q_heads, kMaxSplits * kernels::kAttentionMaxHeadSize)) {
    return beyond;
  }
  if (int8 && (!scales_fit(p, p.key_scale_strides) || !scales_fit(p, p.value_scale_strides))) return beyond;
  if (p.query_tokens == 0) return Status::ok();
  if (p.query == nullptr || p.out == nullptr || p.query_start_loc == nullptr) {
    return Status::invalid("paged_attention: null query, out or query_start_loc");
  }
  if (p.num_seqs > 0 && (p.seq_lens == nullptr || (p.max_blocks_per_seq > 0 && p.block_tables == nullptr))) {
    return Status::invalid("paged_attention: null seq_lens or block_tables");
  }
  if (p.num_blocks > 0 && (p.key_cache == nullptr || p.value_cache == nullptr)) {
    return Status::invalid("paged_attention: null key_cache or value_cache");
  }
  if (quant && p.num_blocks > 0 && (p.key_scale == nullptr || p.value_scale == nullptr)) {
    return Status::invalid("paged_attention: null key_scale or value_scale (a quantized cache's scales)");
  }
  return Status::ok();
}

// Whether 16-byte accesses are safe: the head row a multiple of 16 bytes, every base 16-byte
// aligned and so every stride that is used (of a dimension of size > 1). A quantized cache's
// piece is vec = 16 / element size one-byte elements: its base and strides must be multiples of
// vec bytes.
bool vector_access(const PagedAttentionParams& p) {
  const int64_t es = element_size(p.dtype), v = kernels::kVectorBytes;
  if ((p.head_size * es) % v != 0) return false;
  for (const void* ptr : {p.query, static_cast<const void*>(p.out)}) {
    if (!kernels::aligned16(ptr)) return false;
  }
  auto used = [&](int64_t size, int64_t stride) { return size > 1 && (stride * es) % v != 0; };
  if (used(p.query_tokens, p.query_strides.token) || used(p.q_heads, p.query_strides.head) ||
      used(p.query_tokens, p.out_strides.token) || used(p.q_heads, p.out_strides.head)) {
    return false;
  }
  const bool quant = p.cache_format != KvCacheFormat::kPlain;
  const int64_t cache_es = quant ? 1 : es, cache_align = quant ? v / es : v;
  for (const void* ptr : {p.key_cache, p.value_cache}) {
    if (reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(cache_align) != 0) return false;
  }
  auto cache_used = [&](int64_t size, int64_t stride) { return size > 1 && (stride * cache_es) % cache_align != 0; };
  for (const CacheStrides& s : {p.key_cache_strides, p.value_cache_strides}) {
    if (cache_used(p.num_blocks, s.block) || cache_used(p.block_size, s.row) || cache_used(p.kv_heads, s.head)) {
      return false;
    }
  }
  return true;
}

int64_t align_up(int64_t n, int64_t a) { return ceil_div(n, a) * a; }

template <class T, class C, int N>
Status launch_typed(const AttentionArgs& args, cudaStream_t stream) {
  const PagedAttentionPlan& plan = args.plan;
  kernels::paged_attention_kernel<T, C, N>
      <<<static_cast<unsigned>(plan.blocks), static_cast<unsigned>(plan.threads), plan.shared_bytes, stream>>>(args);
  if (const Status s = cuda_status(cudaGetLastError(), "launching the attention kernel"); !s.is_ok()) return s;
  if (plan.splits == 1) return Status::ok();
  kernels::paged_attention_merge_kernel<T, N>
      <<<static_cast<unsigned>(plan.merge_blocks), static_cast<unsigned>(plan.merge_threads), 0, stream>>>(args);
  return cuda_status(cudaGetLastError(), "launching the merge kernel");
}

}  // namespace

// Plan rules: 16-byte pieces where vector_access holds, else elements. An item takes at most 8
// query heads: a group of G heads is cut into ceil(G / 8) chunks of equal size (+-1). Blocks of
// 128 threads; the value step's threads cover a head row's pieces `slices` times (128 / pieces,
// at least 1). Splits: the items without splits (units = query_tokens * kv_heads * chunks) are
// compared with the blocks the GPU keeps resident (sm_count * blocks_per_sm); fewer units get
// floor(resident / units) splits, at most ceil(max_context / 256) and 32, so that one wave of
// blocks covers every (row, head, split). The grid holds at most 16 waves; blocks loop over the rest.
PagedAttentionPlan plan_paged_attention(const PagedAttentionParams& p, int sm_count) {
  PagedAttentionPlan plan;
  if (!check(p).is_ok() || p.query_tokens == 0) return plan;
  const int64_t sms = std::clamp(sm_count, 1, 1 << 16);
  const int64_t es = element_size(p.dtype);
  plan.vector = vector_access(p);
  plan.vec = plan.vector ? static_cast<int>(kernels::kVectorBytes / es) : 1;
  plan.pieces = p.head_size / plan.vec;
  plan.threads = static_cast<int>(kThreads);
  const int64_t group = p.q_heads / p.kv_heads;
  plan.head_chunks = ceil_div(group, kMaxHeads);
  plan.heads_per_block = ceil_div(group, plan.head_chunks);
  plan.slices = std::max<int64_t>(1, kThreads / plan.pieces);
  const int64_t floats = kernels::attention_shared_floats(plan.heads_per_block, p.head_size, plan.slices);
  plan.shared_bytes = sizeof(AttentionShared) + sizeof(float) * static_cast<size_t>(floats);
  const int64_t blocks_per_sm =
      std::clamp<int64_t>(kSharedPerSm / (static_cast<int64_t>(plan.shared_bytes) + 1024), 1, kBlocksPerSm);
  const int64_t resident = sms * blocks_per_sm;
  const int64_t units = p.query_tokens * p.kv_heads * plan.head_chunks;
  const int64_t most = std::min(kMaxSplits, std::max<int64_t>(1, ceil_div(max_context(p), kMinKeysPerSplit)));
  plan.splits = units >= resident ? 1 : std::clamp<int64_t>(resident / units, 1, most);
  if (p.batch_invariant) {
    // From the table's width only: every row's ranges fit, and the merge always runs.
    plan.splits = std::clamp<int64_t>(ceil_div(max_context(p), kInvariantSplitKeys), 2, kMaxSplits);
  }
  plan.items = units * plan.splits;
  plan.blocks = std::min(plan.items, resident * kMaxWaves);
  if (plan.splits > 1) {
    const int64_t partials = p.query_tokens * p.q_heads * plan.splits;
    plan.merge_pieces = p.query_tokens * p.q_heads * plan.pieces;
    plan.merge_threads = kernels::kAttentionMergeThreads;
    plan.merge_blocks = std::min(ceil_div(plan.merge_pieces, plan.merge_threads),
                                 sms * (kResidentThreadsPerSm / plan.merge_threads) * kMaxWaves);
    plan.max_offset = align_up(partials * p.head_size * static_cast<int64_t>(sizeof(float)), kWorkspaceAlign);
    plan.sum_offset = plan.max_offset + align_up(partials * static_cast<int64_t>(sizeof(float)), kWorkspaceAlign);
    plan.workspace_bytes = plan.sum_offset + align_up(partials * static_cast<int64_t>(sizeof(float)), kWorkspaceAlign);
  }
  return plan;
}

int64_t paged_attention_workspace_bytes(const PagedAttentionParams& p, int sm_count) {
  return plan_paged_attention(p, sm_count).workspace_bytes;
}

Status paged_attention_check(const PagedAttentionParams& p, const void* workspace, int64_t workspace_bytes,
                             int sm_count) {
  if (const Status s = check(p); !s.is_ok()) return s;
  const int64_t needed = paged_attention_workspace_bytes(p, sm_count);
  if (needed == 0) return Status::ok();
  if (workspace == nullptr || workspace_bytes < needed) {
    return Status::invalid("paged_attention: workspace too small for the plan (paged_attention_workspace_bytes)");
  }
  if (reinterpret_cast<uintptr_t>(workspace) % kWorkspaceAlign != 0) {
    return Status::invalid("paged_attention: workspace must be 256-byte aligned");
  }
  return Status::ok();
}

Status paged_attention(const PagedAttentionParams& p, void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
  if (const Status s = check(p); !s.is_ok()) return s;
  if (p.query_tokens == 0) return Status::ok();
  int sm_count = 0;
  if (cudaError_t e = current_sm_count(&sm_count); e != cudaSuccess) {
    return cuda_status(e, "querying the device's SM count");
  }
  if (const Status s = paged_attention_check(p, workspace, workspace_bytes, sm_count); !s.is_ok()) return s;
  AttentionArgs args;
  args.p = p;
  args.plan = plan_paged_attention(p, sm_count);
  if (args.plan.workspace_bytes > 0) {
    auto* base = static_cast<unsigned char*>(workspace);
    args.partial_out = reinterpret_cast<float*>(base);
    args.partial_max = reinterpret_cast<float*>(base + args.plan.max_offset);
    args.partial_sum = reinterpret_cast<float*>(base + args.plan.sum_offset);
  }
  const Status no_variant = Status::invalid("paged_attention: unknown dtype or cache format");
  return kernels::dispatch_dtype(p.dtype, no_variant, [&](auto element) {
    using T = typename decltype(element)::type;
    return kernels::dispatch_cache_element<T>(p.cache_format, no_variant, [&](auto cache_element) {
      using C = typename decltype(cache_element)::type;
      return args.plan.vector ? launch_typed<T, C, kernels::kVec<T>>(args, stream) : launch_typed<T, C, 1>(args, stream);
    });
  });
}

}  // namespace xllm_kernel::cuda
