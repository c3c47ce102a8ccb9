// The layout shared by every Highway target of csrc/cpu/sampling/sampling.cpp: the workspace
// records that carry a row from one phase to the next, the histograms of the radix select and the
// limits of the candidate path. Internal to csrc/cpu/sampling.
#pragma once

#include <cstdint>

#include "csrc/cpu/sampling/sampling.h"

namespace xllm_kernel::cpu::sampling_detail {

// Radix levels over the 32-bit order key: bits 31..21, 20..10, 9..0.
inline constexpr int kBins1 = 2048;
inline constexpr int kBins2 = 2048;
inline constexpr int kBins3 = 1024;
inline constexpr int kShift1 = 21;
inline constexpr int kShift2 = 10;

// The candidate path takes rows whose candidate set (the tokens at or above the K-th largest
// block maximum, or every token of a small vocabulary) has at most kMaxCandidates tokens, for K
// up to kMaxCandidateK; the others take the radix select.
inline constexpr int64_t kMaxCandidates = 4096;
inline constexpr int64_t kMaxCandidateK = 1024;

// A split plan's segments hold at least this many blocks (4096 tokens).
inline constexpr int64_t kMinSegmentBlocks = 16;

// What a row still needs after a phase.
enum Stage : int32_t {
  kStageDone = 0,       // out[r] written
  kStageHistogram = 1,  // the radix select (phases 2 and 3), then the race
  kStageRace = 2,       // the race over the kept set (phases 4 and 5)
};

// The kept set after top-k and top-p: tokens l > bound, or l == bound with index <= bound_index
// (logits NaN-cleaned, as compared in the order); min-p and w > 0 are applied in the race.
struct alignas(64) RowState {
  float l_max = 0.0f;
  int32_t stage = kStageDone;
  float bound = 0.0f;
  int32_t pad = 0;
  int64_t bound_index = 0;
};

// One (row, segment)'s results: phase 0 (maximum, NaN) and phase 4 (best quotient, its token).
struct alignas(64) SegmentState {
  float max = 0.0f;
  uint32_t nan = 0;
  float best_q = 0.0f;
  int32_t best_index = -1;
};

// Counts and integer masses (w * 2^mass_shift, truncated) of tokens per bin of the top 11 key
// bits. Integer sums do not depend on the order of addition, so a split row gets the bits of an
// unsplit one.
struct alignas(64) Histogram1 {
  uint32_t count[kBins1];
  uint64_t mass[kBins1];
};

// The float whose order key is k (the inverse of kernels::logit_order_key on cleaned values).
inline float float_of_key(uint32_t k) {
  return kernels::float_from_bits((k & 0x80000000u) ? (k ^ 0x80000000u) : ~k);
}

// The integer masses' scale 2^s: the largest that keeps a row's total (at most vocab * 2^s)
// below 2^62.
inline int mass_shift(int64_t vocab) {
  int bits = 0;
  while (bits < 63 && (int64_t{1} << bits) <= vocab) ++bits;
  return 62 - bits;
}

}  // namespace xllm_kernel::cpu::sampling_detail
