// Torch-free CPU kernels of paged attention over the KV cache (Highway, runtime ISA dispatch):
// what csrc/common/attention.h describes, float32 accumulation, the softmax with a running
// maximum, one rounding of each output element.
//
// The at::Tensor side (a bridge) checks every argument and every value of block_tables,
// query_start_loc and seq_lens before calling (out-of-range block ids and lengths that contradict
// each other are errors there), fills a PagedAttentionParams, plans, allocates the plan's
// workspace and runs the plan's items, then its merges, over threads:
//
//   xllm_kernel::cpu::PagedAttentionParams p;  // the fields as in csrc/common/attention.h
//   const auto plan = xllm_kernel::cpu::plan_paged_attention(p, threads);
//   void* ws = std::aligned_alloc(64, (plan.workspace_bytes + 63) / 64 * 64);  // 64-byte aligned
//   parallel over [0, plan.items):  xllm_kernel::cpu::paged_attention(p, plan, ws, b, e);
//   parallel over [0, plan.merges): xllm_kernel::cpu::paged_attention_merge(p, plan, ws, b, e);
//
// Defensive, never out of bounds: a block id outside [0, num_blocks) is never dereferenced, and a
// sequence whose lengths contradict each other writes nothing (the bridge has rejected both).
#pragma once

#include <cstdint>
#include <vector>

#include "csrc/common/attention.h"
#include "csrc/common/rows.h"

namespace xllm_kernel::cpu {

using kernels::DType;
using kernels::Status;

// The parameters, shared with the CUDA launcher (csrc/common/attention.h).
using kernels::AttentionRowStrides;
using kernels::CacheStrides;
using kernels::PagedAttentionParams;

// One piece of work: query rows [query_begin, query_end) of sequence `seq`, KV heads [kv_head,
// kv_head_end) (all the query heads of their groups), keys [key_begin, key_end) of the positions
// those rows may see.
// Query rows are counted from the sequence's first row (0 .. q_len), keys are positions. split >=
// 0: a partial result (running maximum, sum and unnormalized output of each of the rows' query
// heads) written to the workspace at slot `split` of the states at float offset `state`, merged
// later; split < 0: the output written directly (`state` unused).
struct AttentionItem {
  int64_t seq = 0;
  int64_t kv_head = 0;
  int64_t kv_head_end = 1;
  int64_t query_begin = 0;
  int64_t query_end = 0;
  int64_t key_begin = 0;
  int64_t key_end = 0;
  int64_t split = -1;
  int64_t state = 0;  // float offset of split 0's state in the workspace
};

// A merge: the partial results of query rows [query_begin, query_end) of sequence `seq`, KV heads
// [kv_head, kv_head_end), splits [0, splits), into the output.
struct AttentionMerge {
  int64_t seq = 0;
  int64_t kv_head = 0;
  int64_t kv_head_end = 1;
  int64_t query_begin = 0;
  int64_t query_end = 0;
  int64_t splits = 0;
  int64_t state = 0;  // float offset of split 0's state in the workspace (as the items')
};

struct PagedAttentionPlan {
  std::vector<AttentionItem> work;    // independent of each other
  std::vector<AttentionMerge> merge;  // after every item; independent of each other
  int64_t items = 0;                  // work.size()
  int64_t merges = 0;                 // merge.size()
  int64_t workspace_bytes = 0;        // scratch shared by items and merges (64-byte aligned base)
};

// The work of one call for `threads` threads (>= 1), from the parameters and the values of
// query_start_loc, seq_lens and block_tables (host memory). An empty plan for no query rows.
// Items come longest first (for threads that each take the next unstarted one); query rows are
// tiled so that a tile's heads times rows fill about 32 KiB of float32 queries (where the AMX
// prefill kernel runs: up to 512 query vectors, fewer where the threads would get under 8 items
// each), an item with at most 16 query vectors per KV head (decode) takes every KV head, and the keys of the
// largest items are split when there are too few items to keep `threads` busy. A sequence whose
// lengths contradict each other, or whose table holds a block id outside [0, num_blocks) where
// its keys are, gets no items (its output rows are not written).
//
// p.batch_invariant: a sequence's items depend on that sequence alone, never on the thread count or
// the other sequences: query rows are tiled by a fixed count (the AMX prefill kernel's 512 query
// vectors where it runs), and the keys of an item are split into fixed chunks of
// kInvariantSplitKeys (more where that would exceed kMaxSplits), merged in key order. The same
// query row then gets the same bits in any batch and on any number of threads (it may differ when
// its prompt is prefilled in other chunks: the tiles start at the call's first row).
PagedAttentionPlan plan_paged_attention(const PagedAttentionParams& p, int64_t threads);

// The keys of an item of a batch-invariant plan are split into chunks of this many (a multiple of
// the kernels' key tile), merged in a fixed order.
inline constexpr int64_t kInvariantSplitKeys = 1024;

// Which kernel runs an item of p: the Highway kernel of the best allowed target, the AVX-512
// BF16 decode kernel (a bf16 query, at most 16 query vectors per KV head, head_size <= 256, on CPUs
// with AVX512_BF16 while the AVX3 target is allowed: hwy::SupportedTargets()), or the prefill tile
// kernel (a bf16 query, more than 16 query vectors per KV head, head_size <= 256, while the AVX3
// target is allowed) on AMX-BF16 tiles where the CPU has them and the OS grants the tile data, else
// on AVX-512 BF16 tiles (csrc/cpu/common/amx_tiles.h: vdpbf16ps) on CPUs with AVX512_BF16; it rounds
// the softmax weights, times the value scales where quantized, to bf16 before P.V, as torch's SDPA
// does. All of them read bf16, int8 and float8_e4m3fn caches. For tests and diagnostics;
// paged_attention makes the same choice.
enum class AttentionKernel { kHighway, kAvx512Bf16Decode, kAmxBf16Prefill, kAvx512Bf16Prefill };
AttentionKernel paged_attention_item_kernel(const PagedAttentionParams& p, const AttentionItem& item);

// Runs items [begin, end) of the plan; may run concurrently on disjoint ranges. workspace: at
// least plan.workspace_bytes, 64-byte aligned.
Status paged_attention(const PagedAttentionParams& p, const PagedAttentionPlan& plan, void* workspace,
                       int64_t begin, int64_t end);

// Runs merges [begin, end) of the plan, after every item; may run concurrently on disjoint ranges.
Status paged_attention_merge(const PagedAttentionParams& p, const PagedAttentionPlan& plan, void* workspace,
                             int64_t begin, int64_t end);

}  // namespace xllm_kernel::cpu
