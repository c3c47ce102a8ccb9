// Torch-free CUDA kernels of paged attention over the KV cache: what csrc/common/attention.h
// describes, float32 accumulation, the softmax with a running maximum, one rounding of each output
// element. A thread block takes one query row and the query heads of a KV head's group (up to 8
// heads; larger groups in chunks of at most 8), so decode reads each KV row once for all the heads
// of its group, in 16-byte loads where the layout allows. Few rows with long contexts are split
// over blocks along the keys and merged by a second kernel. Prefill, chunked prefill and mixed
// batches go through the same kernels, one block per (query row, KV head, head chunk, split): a
// block finds its row's sequence by a binary search over query_start_loc on the device.
//
// The at::Tensor side (a bridge) checks every argument's shape, dtype, device and layout (not the
// values of block_tables, query_start_loc and seq_lens: that would synchronize), fills a
// PagedAttentionParams, allocates paged_attention_workspace_bytes(p, sm_count) bytes of device
// memory (a size from the shapes alone, so the call can be captured into a CUDA graph) and passes
// the current stream. The launcher enqueues its kernels on `stream` and never synchronizes.
//
// Values the host did not check, handled on the device without reading or writing outside the
// arguments: a query row that would read a block whose id is outside [0, num_blocks) gets NaN in
// every element of its output (its other rows are unaffected); a sequence whose query_start_loc
// entries are decreasing, negative or past query_tokens, or whose query rows outnumber seq_lens[s]
// or whose seq_lens[s] exceeds max_blocks_per_seq * block_size, writes NaN to the output rows of
// [query_start_loc[s], query_start_loc[s + 1]) that lie within [0, query_tokens) (nothing when
// there are none). A row's sequence is the s that a binary search finds with query_start_loc[s] <=
// row < query_start_loc[s + 1] (the last such s for non-decreasing entries); a row before
// query_start_loc[0] belongs to no sequence and gets NaN; the rows from query_start_loc[num_seqs] on
// are padding (a batch padded to a fixed shape) and get zeros; and where the entries
// are not non-decreasing a row inside the ranges of two sequences gets the result of one of them or
// NaN.
//
// Quantized caches (p.cache_format, paged_attention_quant; csrc/common/kv_cache.h): the caches
// hold float8_e4m3fn or int8 codes, one byte per element, and every key and value element read is
// dequantized in registers, x = float(q) * scale in float32 (fp8: *key_scale / *value_scale,
// read on the device; int8: the scale of its (block, row, KV head)), then used exactly as a plain
// cache's element. The scales of rows that no valid key reads are never read.
//
//   xllm_kernel::cuda::PagedAttentionParams p;  // the fields as in csrc/common/attention.h
//   const int64_t bytes = xllm_kernel::cuda::paged_attention_workspace_bytes(p, sm_count);
//   Status s = xllm_kernel::cuda::paged_attention(p, workspace, bytes, stream);  // device pointers
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "csrc/common/attention.h"
#include "csrc/common/rows.h"

namespace xllm_kernel::cuda {

using ::xllm_kernel::kernels::DType;
using ::xllm_kernel::kernels::Status;

// The parameters, shared with the CPU kernel (csrc/common/attention.h).
using ::xllm_kernel::kernels::AttentionRowStrides;
using ::xllm_kernel::kernels::CacheStrides;
using ::xllm_kernel::kernels::PagedAttentionParams;

// Device workspace bytes a call with these shapes needs on a GPU with `sm_count` SMs (from the
// shapes only, never from the values of seq_lens); 0 when it needs none.
int64_t paged_attention_workspace_bytes(const PagedAttentionParams& p, int sm_count);

// Enqueues the attention on `stream`; every pointer is device memory of the current device, and
// workspace holds at least paged_attention_workspace_bytes(p, the device's SM count) bytes (256-byte
// aligned). Returns kInvalidArgument with the reason for parameters the kernels cannot handle (unknown
// dtype or cache format, sizes < 1, head_size > 512, negative counts, q_heads not a multiple of
// kv_heads, negative strides (an int8 cache's scale strides included), scale or soft_cap not finite
// or soft_cap < 0, offsets beyond int64, a null pointer where rows exist (a quantized cache's scales
// where blocks exist), a workspace too small, null or not 256-byte aligned), ok without launching
// for zero query rows, kDeviceError for a failing SM-count query or launch, otherwise ok.
Status paged_attention(const PagedAttentionParams& p, void* workspace, int64_t workspace_bytes, cudaStream_t stream);

// How a launch is shaped, from the shapes, the pointers' alignment and the SM count only (never
// from the values of block_tables, query_start_loc or seq_lens); exposed so that tests can see and
// host-run it. The attention kernel has `blocks` blocks of `threads` threads that take the items
// b, b + blocks, ...; item = ((row * kv_heads + kv_head) * head_chunks + chunk) * splits + split.
// An item's keys are a row's [lo, pos] cut into `splits` ranges of ceil(count / splits) keys
// rounded up to a multiple of 128 (kernels::kAttentionTile), computed on the device from the row's
// length (later ranges may be empty). splits == 1: the items write the output; otherwise each writes a partial
// result (running maximum, sum and unnormalized float32 output) to the workspace and the merge
// kernel (merge_blocks x merge_threads threads over merge_pieces = query_tokens * q_heads * pieces
// pieces) writes the output.
//
// p.batch_invariant: a row's key ranges come from that row alone: ranges of kInvariantSplitKeys
// keys from its first key (more where the row would need over kMaxSplits of them: ceil(count / 32)
// rounded up to 128), always through the merge (splits >= 2, ceil(max_context / 1024) up to 32;
// a row's empty ranges add nothing and the merge adds the rest in key order). Neither the SM count
// nor the other rows change a row's ranges or its order of additions.
struct PagedAttentionPlan {
  bool vector = false;        // 16-byte accesses of query, caches and out (kVec elements; a quantized
                              // cache's kVec one-byte elements in one load); else elements
  int vec = 0;                // elements per access: 16 / element size, or 1
  int64_t pieces = 0;         // accesses per head row: head_size / vec
  int threads = 0;            // per block of the attention kernel
  int64_t heads_per_block = 0;  // query heads an item takes (<= 8)
  int64_t head_chunks = 0;      // items per (row, KV head) and split: ceil(group / heads_per_block)
  int64_t slices = 0;         // key slices of the value pass: max(1, threads / pieces)
  int64_t splits = 0;         // key ranges per row
  int64_t items = 0;          // query_tokens * kv_heads * head_chunks * splits
  int64_t blocks = 0;         // grid of the attention kernel
  size_t shared_bytes = 0;    // its dynamic shared memory (at most 34 KiB: no opt-in needed)
  int64_t merge_pieces = 0;   // 0 when splits == 1
  int merge_threads = 0;
  int64_t merge_blocks = 0;
  // Workspace: partial outputs [query_tokens, q_heads, splits, head_size] float32 at byte 0, then
  // maxima and sums [query_tokens, q_heads, splits] float32 at max_offset and sum_offset.
  int64_t max_offset = 0;
  int64_t sum_offset = 0;
  int64_t workspace_bytes = 0;  // 0 when splits == 1
};

// The key range of a batch-invariant plan's split (a multiple of the kernels' 128-key tile).
inline constexpr int64_t kInvariantSplitKeys = 1024;

// What paged_attention checks before it launches on a GPU with `sm_count` SMs: its rejections
// (kInvalidArgument with the reason, the workspace included), else ok. Host code (tests).
Status paged_attention_check(const PagedAttentionParams& p, const void* workspace, int64_t workspace_bytes,
                             int sm_count);

// The plan the launcher uses for `p` on a GPU with `sm_count` SMs; all zero for zero query rows or
// parameters the launcher rejects (the workspace aside).
PagedAttentionPlan plan_paged_attention(const PagedAttentionParams& p, int sm_count);

}  // namespace xllm_kernel::cuda
