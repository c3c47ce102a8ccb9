// Torch-free CPU kernel of the paged KV-cache write: a row copy per token (or per token and head
// where the input's heads are not adjacent). This translation unit is compiled once per Highway
// target (foreach_target) and the entry point picks the best one at runtime.
#include "csrc/cpu/kv_cache/kv_cache.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "csrc/cpu/kv_cache/kv_cache.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "csrc/cpu/common/stream-inl.h"
#include "csrc/cpu/quantization/quantization.h"

HWY_BEFORE_NAMESPACE();
namespace xllm_kernel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// bytes from src to dst (not overlapping) in full vectors, four at a time, then a memcpy tail.
// kStream: full vectors are stored non-temporally (dst aligned to the vector size).
template <bool kStream>
HWY_INLINE void CopyRow(const uint8_t* HWY_RESTRICT src, uint8_t* HWY_RESTRICT dst, size_t bytes) {
  const hn::ScalableTag<uint8_t> d;
  const size_t n = hn::Lanes(d);
  size_t i = 0;
  for (; i + 4 * n <= bytes; i += 4 * n) {
    const auto v0 = hn::LoadU(d, src + i), v1 = hn::LoadU(d, src + i + n);
    const auto v2 = hn::LoadU(d, src + i + 2 * n), v3 = hn::LoadU(d, src + i + 3 * n);
    StoreVec<kStream>(v0, d, dst + i);
    StoreVec<kStream>(v1, d, dst + i + n);
    StoreVec<kStream>(v2, d, dst + i + 2 * n);
    StoreVec<kStream>(v3, d, dst + i + 3 * n);
  }
  for (; i + n <= bytes; i += n) StoreVec<kStream>(hn::LoadU(d, src + i), d, dst + i);
  if (i < bytes) std::memcpy(dst + i, src + i, bytes - i);
}

HWY_INLINE void Copy(const uint8_t* src, uint8_t* dst, size_t bytes, bool stream) {
  if (stream && StreamAligned(dst)) {
    CopyRow<true>(src, dst, bytes);
  } else {
    CopyRow<false>(src, dst, bytes);
  }
}

// Destination rows are scattered over caches far larger than the last-level cache and the TLB's
// reach: each starts with a page walk and a cache miss. Touching the first line of a row this many
// tokens ahead starts both early, so that they overlap the copies in between. Only the first line:
// the rest of the row is on the same page, and reading the lines a streamed row overwrites would
// be wasted traffic.
constexpr int64_t kPrefetchTokens = 16;

// Byte offset of a slot's row in a cache whose blocks are block_stride elements apart.
HWY_INLINE int64_t RowOffset(const KvCacheParams& p, int64_t slot, int64_t block_stride, int64_t es,
                             int64_t slot_bytes) {
  return (slot / p.block_size) * block_stride * es + (slot % p.block_size) * slot_bytes;
}

// Starts the page walks (and the first lines) of token t's destination rows; a slot out of range
// is skipped (the copy skips it too).
HWY_INLINE void PrefetchDestination(const KvCacheParams& p, int64_t t, int64_t es, int64_t slot_bytes) {
  const int64_t slot = p.slot_mapping[t * p.slot_stride];
  if (slot < 0 || slot >= p.num_slots) return;
  hwy::Prefetch(static_cast<const uint8_t*>(p.key_cache) + RowOffset(p, slot, p.key_cache_block_stride, es, slot_bytes));
  hwy::Prefetch(static_cast<const uint8_t*>(p.value_cache) +
                RowOffset(p, slot, p.value_cache_block_stride, es, slot_bytes));
}

// Tokens [t, end) whose slots continue slot s within its block (s + 1, s + 2, ...): a prefill
// fills its blocks in order, so these rows are adjacent in the cache too and go as one copy.
HWY_INLINE int64_t SlotRun(const KvCacheParams& p, int64_t t, int64_t end, int64_t slot) {
  const int64_t block_end = (slot / p.block_size + 1) * p.block_size;
  int64_t run = 1;
  while (t + run < end && slot + run < block_end && p.slot_mapping[(t + run) * p.slot_stride] == slot + run) ++run;
  return run;
}

void ReshapeAndCacheTokens(const KvCacheParams& p, int64_t token_begin, int64_t token_end) {
  const int64_t es = kernels::element_size(p.dtype);
  const int64_t head_bytes = p.head_size * es, slot_bytes = p.kv_heads * head_bytes;
  // One copy per token where the input's heads are adjacent (a contiguous [kv_heads, head_size]).
  const bool whole_key = p.kv_heads == 1 || p.key_strides.head == p.head_size;
  const bool whole_value = p.kv_heads == 1 || p.value_strides.head == p.head_size;
  // One copy per run of slots where the input's tokens are adjacent too.
  const int64_t row = p.kv_heads * p.head_size;
  const bool runs = whole_key && whole_value && p.key_strides.token == row && p.value_strides.token == row;
  const auto* key = static_cast<const uint8_t*>(p.key);
  const auto* value = static_cast<const uint8_t*>(p.value);
  auto* key_cache = static_cast<uint8_t*>(p.key_cache);
  auto* value_cache = static_cast<uint8_t*>(p.value_cache);
  int64_t prefetched = token_begin;  // tokens whose destinations were touched: [token_begin, prefetched)
  for (int64_t t = token_begin; t < token_end;) {
    for (const int64_t ahead = std::min(token_end, t + kPrefetchTokens); prefetched < ahead; ++prefetched) {
      PrefetchDestination(p, prefetched, es, slot_bytes);
    }
    const int64_t slot = p.slot_mapping[t * p.slot_stride];
    if (slot < 0 || slot >= p.num_slots) {
      ++t;
      continue;
    }
    uint8_t* kd = key_cache + RowOffset(p, slot, p.key_cache_block_stride, es, slot_bytes);
    uint8_t* vd = value_cache + RowOffset(p, slot, p.value_cache_block_stride, es, slot_bytes);
    const uint8_t* ks = key + t * p.key_strides.token * es;
    const uint8_t* vs = value + t * p.value_strides.token * es;
    if (runs) {
      const int64_t run = SlotRun(p, t, token_end, slot);
      Copy(ks, kd, static_cast<size_t>(run * slot_bytes), p.stream_out);
      Copy(vs, vd, static_cast<size_t>(run * slot_bytes), p.stream_out);
      t += run;
      continue;
    }
    if (whole_key) {
      Copy(ks, kd, static_cast<size_t>(slot_bytes), p.stream_out);
    } else {
      for (int64_t h = 0; h < p.kv_heads; ++h) {
        Copy(ks + h * p.key_strides.head * es, kd + h * head_bytes, static_cast<size_t>(head_bytes), p.stream_out);
      }
    }
    if (whole_value) {
      Copy(vs, vd, static_cast<size_t>(slot_bytes), p.stream_out);
    } else {
      for (int64_t h = 0; h < p.kv_heads; ++h) {
        Copy(vs + h * p.value_strides.head * es, vd + h * head_bytes, static_cast<size_t>(head_bytes), p.stream_out);
      }
    }
    ++t;
  }
  if (p.stream_out) hwy::FlushStream();  // order the non-temporal stores before returning
}

}  // namespace HWY_NAMESPACE
}  // namespace xllm_kernel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace xllm_kernel::cpu {

HWY_EXPORT(ReshapeAndCacheTokens);

namespace {

// The quantized write: each (token, KV head) row of head_size elements goes through the quantization
// family's row kernel (cpu::quant, csrc/cpu/quantization) straight into its cache row: int8 as
// per_token_quant (its scale into the scales beside the cache), fp8 as a static quantization that
// divides by the cache's scale. One call per token and tensor: its kv_heads rows.
Status QuantizeTokens(const KvCacheParams& p, int64_t token_begin, int64_t token_end) {
  const int64_t es = kernels::element_size(p.dtype);
  const int64_t slot_elems = p.kv_heads * p.head_size;
  const bool int8 = p.format == kernels::KvCacheFormat::kInt8;
  QuantParams q;
  q.dtype = p.dtype;
  q.qdtype = int8 ? QuantDType::kInt8 : QuantDType::kFloat8E4M3;
  q.scheme = int8 ? QuantScheme::kPerToken : QuantScheme::kStatic;
  q.static_divide = !int8;
  q.hidden = p.head_size;
  q.shape.rows = p.kv_heads;
  q.shape.ndim = 1;
  q.shape.sizes[0] = p.kv_heads;
  q.out_strides.s[0] = p.head_size;
  q.scale_strides.s[0] = 1;
  for (int64_t t = token_begin; t < token_end; ++t) {
    const int64_t slot = p.slot_mapping[t * p.slot_stride];
    if (slot < 0 || slot >= p.num_slots) continue;
    const int64_t block = slot / p.block_size, offset = slot % p.block_size;
    for (int kv = 0; kv < 2; ++kv) {
      const KvTokenStrides& in = kv == 0 ? p.key_strides : p.value_strides;
      q.input = static_cast<const uint8_t*>(kv == 0 ? p.key : p.value) + t * in.token * es;
      q.input_strides.s[0] = in.head;
      q.out = static_cast<uint8_t*>(kv == 0 ? p.key_cache : p.value_cache) +
              block * (kv == 0 ? p.key_cache_block_stride : p.value_cache_block_stride) + offset * slot_elems;
      float* scale = kv == 0 ? p.key_scale : p.value_scale;
      if (int8) {
        q.scale_out = scale + block * (kv == 0 ? p.key_scale_block_stride : p.value_scale_block_stride) +
                      offset * p.kv_heads;
      } else {
        q.static_scale = scale;
      }
      const Status s = quant(q, 0, p.kv_heads);
      if (!s.is_ok()) return s;
    }
  }
  return Status::ok();
}

// Defence only: the bridge validates shapes, layouts and slots before calling.
Status Check(const KvCacheParams& p, int64_t token_begin, int64_t token_end) {
  if (!kernels::valid_dtype(p.dtype)) return Status::invalid("reshape_and_cache: unknown dtype");
  if (!kernels::valid_kv_cache_format(p.format)) return Status::invalid("reshape_and_cache: unknown cache format");
  if (p.format != kernels::KvCacheFormat::kPlain && token_begin < token_end &&
      (p.key_scale == nullptr || p.value_scale == nullptr)) {
    return Status::invalid("reshape_and_cache: null scale of a quantized cache");
  }
  if (p.kv_heads < 1 || p.head_size < 1 || p.block_size < 1 || p.num_slots < 0) {
    return Status::invalid("reshape_and_cache: kv_heads, head_size and block_size must be >= 1");
  }
  if (p.tokens < 0 || token_begin < 0 || token_begin > token_end || token_end > p.tokens) {
    return Status::invalid("reshape_and_cache: token range not within [0, tokens]");
  }
  if (token_begin < token_end && (p.key == nullptr || p.value == nullptr || p.slot_mapping == nullptr ||
                                  (p.num_slots > 0 && (p.key_cache == nullptr || p.value_cache == nullptr)))) {
    return Status::invalid("reshape_and_cache: null pointer");
  }
  return Status::ok();
}

}  // namespace

Status reshape_and_cache(const KvCacheParams& p, int64_t token_begin, int64_t token_end) {
  const Status s = Check(p, token_begin, token_end);
  if (!s.is_ok() || token_begin == token_end) return s;
  if (p.format != kernels::KvCacheFormat::kPlain) return QuantizeTokens(p, token_begin, token_end);
  HWY_DYNAMIC_DISPATCH(ReshapeAndCacheTokens)(p, token_begin, token_end);
  return s;
}

}  // namespace xllm_kernel::cpu
#endif  // HWY_ONCE
