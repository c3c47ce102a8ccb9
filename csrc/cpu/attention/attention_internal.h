// Helpers shared by the CPU attention kernels (attention.cpp, the Highway kernel on every target,
// attention_decode_avx512.cpp, the AVX-512 BF16 decode kernel, and attention_prefill_amx_kernel.h,
// the AMX prefill kernel): tile and state layout, a
// sequence's rows and keys, per-thread scratch. Internal to csrc/cpu/attention.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "csrc/cpu/attention/attention.h"
#include "hwy/aligned_allocator.h"

namespace xllm_kernel::cpu::attention_detail {

// Keys per tile: one AVX-512 vector of logits per query head.
inline constexpr int64_t kTileKeys = 16;
// The float stride of a state's rows (a multiple of every x86 vector length).
inline constexpr int64_t kStatePad = 16;

inline int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// One split's state of M query vectors: max[M], sum[M] (padded to kStatePad floats), then
// acc[M][RoundUp(head_size, kStatePad)].
inline int64_t StateRowStride(int64_t head_size) { return RoundUp(head_size, kStatePad); }
inline int64_t SplitFloats(int64_t m, int64_t head_size) {
  return RoundUp(2 * m, kStatePad) + m * StateRowStride(head_size);
}

// A sequence's rows and context, or false when they contradict each other (or the parameters).
struct SeqSpan {
  int64_t q_begin = 0;  // first query row (a token of query / out)
  int64_t q_len = 0;
  int64_t context = 0;  // seq_lens[s], the new rows included
};

inline bool SeqSpanOf(const PagedAttentionParams& p, int64_t s, SeqSpan& span) {
  const int64_t b = p.query_start_loc[s], e = p.query_start_loc[s + 1], ctx = p.seq_lens[s];
  if (b < 0 || e < b || e > p.query_tokens || ctx < e - b || ctx > kernels::max_context(p)) return false;
  span = {b, e - b, ctx};
  return true;
}

// Position of query row r (counted from the sequence's first row) and the first key it sees.
inline int64_t PositionOf(const SeqSpan& span, int64_t r) { return span.context - span.q_len + r; }
inline int64_t FirstKeyOf(const PagedAttentionParams& p, int64_t pos) {
  return p.sliding_window > 0 ? std::max<int64_t>(0, pos - p.sliding_window + 1) : 0;
}

// Per-thread scratch, grown (rarely) to the largest item a thread has run.
inline float* Scratch(size_t floats) {
  thread_local hwy::AlignedFreeUniquePtr<float[]> buf;
  thread_local size_t capacity = 0;
  if (capacity < floats) {
    buf = hwy::AllocateAligned<float>(floats);
    capacity = buf ? floats : 0;
  }
  return buf.get();
}

}  // namespace xllm_kernel::cpu::attention_detail

namespace xllm_kernel::cpu::attention_detail {

// The AVX-512 BF16 decode kernel (attention_decode_avx512.cpp): items of few query vectors per KV
// head of bf16 caches, Q.K with vdpbf16ps straight from the cache rows, P.V with the rows widened
// in registers. The entry points use it where the CPU has it, the AVX3 target is allowed
// (hwy::SupportedTargets(), which tests restrict) and it accepts the item; otherwise the Highway
// kernel runs the item.
inline constexpr int64_t kDecodeMaxVectors = 16;  // query vectors (rows x group heads) per KV head
inline constexpr int64_t kDecodeMaxHeadSize = 256;

// Whether this CPU and OS run AVX512F/BW/VL/BF16 code.
bool DecodeAvx512Bf16Supported();
// Whether the kernel takes the item: a bf16 query (and bf16, int8 or float8_e4m3fn caches),
// head_size <= kDecodeMaxHeadSize, at most kDecodeMaxVectors query vectors per KV head.
inline bool DecodeAvx512Bf16Accepts(const PagedAttentionParams& p, const AttentionItem& item) {
  return p.dtype == DType::kBFloat16 && p.head_size <= kDecodeMaxHeadSize &&
         (item.query_end - item.query_begin) * kernels::query_heads_per_kv(p) <= kDecodeMaxVectors;
}
// Runs one accepted item (only where DecodeAvx512Bf16Supported()); the results as the Highway
// kernel's (output rows or a split's state), within the same float32 error bounds.
void RunDecodeItemAvx512Bf16(const PagedAttentionParams& p, const AttentionItem& item, float* workspace);

}  // namespace xllm_kernel::cpu::attention_detail
