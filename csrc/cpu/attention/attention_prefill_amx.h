// The prefill tile kernel of paged attention (attention_prefill_amx_kernel.h): items of many query
// vectors per KV head (prefill, chunked prefill) of a bf16 query over bf16, int8 or float8_e4m3fn
// caches, Q.K and P.V on BF16 tiles: AMX's where the CPU has AMX-BF16 and the OS granted this
// process the tile data state, else their AVX-512 BF16 form (Avx512Bf16Tiles, amx_tiles.h) where
// the CPU has AVX512_BF16. Internal to csrc/cpu/attention; the entry points (attention.cpp) use it
// where the AVX3 target is allowed (hwy::SupportedTargets(), which tests restrict) and it accepts
// the item; otherwise another kernel runs the item.
#pragma once

#include <cstdint>

#include "csrc/cpu/attention/attention_internal.h"

namespace xllm_kernel::cpu::attention_detail {

inline constexpr int64_t kAmxMaxHeadSize = 256;

// Whether this CPU has AMX-TILE, AMX-BF16 and AVX512F/BW/VL/DQ/BF16 and the OS let this process
// use the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, asked once per process; a refusal is
// remembered and answers false).
bool PrefillAmxBf16Supported();

// Whether the kernel takes the item: a bf16 query (the caches bf16, int8 or float8_e4m3fn),
// head_size <= kAmxMaxHeadSize, more than kDecodeMaxVectors query vectors (rows x group heads) per
// KV head (fewer go to the decode kernel).
inline bool PrefillAmxBf16Accepts(const PagedAttentionParams& p, const AttentionItem& item) {
  return p.dtype == DType::kBFloat16 && p.head_size <= kAmxMaxHeadSize &&
         (item.query_end - item.query_begin) * kernels::query_heads_per_kv(p) > kDecodeMaxVectors;
}

// Runs one accepted item (only where PrefillAmxBf16Supported()): the output rows or a split's state,
// as the Highway kernel's, except that the softmax weights (times the value scales where quantized)
// are rounded to bf16 before P.V.
void RunPrefillItemAmxBf16(const PagedAttentionParams& p, const AttentionItem& item, float* workspace);

// The same on AVX-512 BF16 tiles (only where the CPU has AVX512_BF16).
void RunPrefillItemAvx512Bf16(const PagedAttentionParams& p, const AttentionItem& item, float* workspace);

}  // namespace xllm_kernel::cpu::attention_detail
