// Torch-free CPU kernel of token sampling (Highway, runtime ISA dispatch): what
// csrc/common/sampling.h defines, without sorting a row. Per row: one pass over the logits for the
// maximum and the maxima of 256-token blocks; top-k by selection (the k-th largest block maximum
// bounds the k-th largest logit from below, so a compare-and-compress pass over the few blocks
// above it gives a small candidate set, selected exactly); top-p and large K without a small
// candidate set by a radix selection over the order keys with integer masses (a histogram pass,
// then one pass per descent collecting the chosen bin's tokens); then the exponential race over
// the kept tokens with Philox4x32-10 uniforms, four tokens per Philox call, vectorized.
//
// A bridge checks the tensors, fills a SamplingParams, plans from the shapes and the thread
// count, allocates the plan's workspace and runs the phases in order, each phase's items spread
// over its threads (any order, any split) with a barrier between phases:
//
//   xllm_kernel::kernels::SamplingParams p;  // the fields as in csrc/common/sampling.h
//   const auto plan = xllm_kernel::cpu::plan_sample(p, threads);
//   void* ws = std::aligned_alloc(64, (plan.workspace_bytes + 63) / 64 * 64);  // may be 0 bytes
//   for (int phase = 0; phase < plan.phase_items.size(); ++phase)
//     parallel over [0, plan.phase_items[phase]): xllm_kernel::cpu::sample(p, plan, ws, phase, b, e);
//
// A row's token is a function of its logits and parameters only: the same for every batch size,
// thread count, plan and split (the phases change who computes, never how).
#pragma once

#include <cstdint>
#include <vector>

#include "csrc/common/rows.h"
#include "csrc/common/sampling.h"

namespace xllm_kernel::cpu {

using kernels::DType;
using kernels::SamplingParams;
using kernels::Status;

// Tokens per block: the unit of the block maxima, of the skipping in later passes and of the
// split of a row between items.
inline constexpr int64_t kSampleBlock = 256;

struct SamplePlan {
  int64_t batch = 0;  // the shapes the plan was made for (sample() checks them)
  int64_t vocab = 0;
  int64_t blocks = 0;  // kSampleBlock-token blocks per row
  // Items per row in the split phases. 1: a single phase whose items are rows, each run from the
  // first pass to the token (the row stays in this core's cache between passes). > 1 (fewer rows
  // than threads): six phases,
  //   0 scan      (row, segment)  maximum, NaN, block maxima of the segment's blocks
  //   1 prepare   row             greedy and candidate-set rows finish here
  //   2 histogram (row, segment)  level-1 histogram of keys and masses (rows needing a radix select)
  //   3 select    row             the radix select's last levels: the kept set's boundary
  //   4 race      (row, segment)  the best race quotient of the segment's kept tokens
  //   5 finish    row             the best of the segments
  // Items of a (row, segment) phase are row * segments + segment.
  int64_t segments = 1;
  int64_t segment_blocks = 0;  // blocks per segment (the last may have fewer)
  std::vector<int64_t> phase_items;
  int64_t workspace_bytes = 0;  // 64-byte aligned base, uninitialized, shared by all items
  // Byte offsets in the workspace (split plans): per-row state, block maxima (block_stride floats
  // per row), per-(row, segment) state, per-(row, segment) histograms.
  int64_t row_state_offset = 0;
  int64_t block_max_offset = 0;
  int64_t block_stride = 0;
  int64_t segment_state_offset = 0;
  int64_t histogram_offset = 0;
};

// The work of one call from the shapes (batch, vocab) and the thread count (>= 1) only: never
// reads the logits or the per-row parameters. Invalid shapes give a one-phase plan of
// max(batch, 0) items whose sample() calls report the reason.
SamplePlan plan_sample(const SamplingParams& p, int threads);

// Runs items [begin, end) of phase `phase` of the plan; may run concurrently with other items of
// the same phase. Writes out[r] (and row_nan[r] where row_nan is not null) for every row by the
// end of the last phase. An invalid status (null pointers where rows exist, vocab outside
// [1, 2^31), an unknown dtype, a negative batch, a row stride below vocab with more than one row,
// a plan of other shapes, a phase or item range outside the plan, a null or misaligned workspace
// the plan needs) writes nothing.
Status sample(const SamplingParams& p, const SamplePlan& plan, void* workspace, int phase, int64_t begin,
              int64_t end);

}  // namespace xllm_kernel::cpu
