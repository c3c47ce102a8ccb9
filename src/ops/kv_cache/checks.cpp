// The argument checks every kv_cache bridge shares (src/ops/kv_cache/internal.h).
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <vector>

#include "src/ops/kv_cache/internal.h"

namespace xllm_kernel::kv_cache {
namespace {

// [first byte, one past the last byte) a tensor's elements span; empty for no elements.
struct Extent {
  const char* begin = nullptr;
  const char* end = nullptr;
};

Extent extent(const at::Tensor& t) {
  if (t.numel() == 0) return {};
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  const char* begin = static_cast<const char*>(t.const_data_ptr());
  return {begin, begin + (last + 1) * t.element_size()};
}

bool intersect(const Extent& a, const Extent& b) {
  return a.begin != nullptr && b.begin != nullptr && a.begin < b.end && b.begin < a.end;
}

// Whether the two caches (checked layouts: blocks of `block_bytes` contiguous bytes) share an
// element. Interleaved halves of one KV tensor ([num_blocks, 2, ...]) span the same bytes but
// never share an element: same block stride, the blocks' offsets at least a block apart modulo it.
bool caches_overlap(const at::Tensor& k, const at::Tensor& v, int64_t block_bytes) {
  if (!intersect(extent(k), extent(v))) return false;
  if (k.size(0) < 2 || k.stride(0) != v.stride(0)) return true;
  const int64_t period = k.stride(0) * k.element_size();
  const auto* pk = static_cast<const char*>(k.const_data_ptr());
  const auto* pv = static_cast<const char*>(v.const_data_ptr());
  const int64_t r = (pk > pv ? pk - pv : pv - pk) % period;
  return r < block_bytes || period - r < block_bytes;
}

void check_cache(const char* name, const char* arg, const at::Tensor& cache, const at::Tensor& key,
                 c10::DeviceType device, bool quant) {
  if (quant) {
    bridge::check_quantized_cache(name, arg, cache, device);
  } else {
    bridge::check_floating_tensor(name, arg, cache, device);
  }
  TORCH_CHECK(cache.dim() == 4, name, ": ", arg, " must be 4-D [num_blocks, block_size, kv_heads, head_size], got shape ",
              cache.sizes());
  if (!quant) {
    TORCH_CHECK(cache.scalar_type() == key.scalar_type(), name, ": ", arg, " must have key's dtype ",
                bridge::dtype_name(key.scalar_type()), ", got ", bridge::dtype_name(cache.scalar_type()));
  }
  TORCH_CHECK(cache.device() == key.device(), name, ": ", arg, " must be on key's device ", key.device(), ", got ",
              cache.device());
  TORCH_CHECK(cache.size(2) == key.size(1) && cache.size(3) == key.size(2), name, ": ", arg,
              " must be [num_blocks, block_size, kv_heads, head_size] with key's kv_heads = ", key.size(1),
              " and head_size = ", key.size(2), ", got shape ", cache.sizes());
  TORCH_CHECK(cache.size(1) >= 1, name, ": ", arg, " must have block_size >= 1, got shape ", cache.sizes());
  // Each block [block_size, kv_heads, head_size] contiguous (strides of size-1 dims are free).
  const int64_t head = cache.size(3), slot = cache.size(2) * head, block = cache.size(1) * slot;
  const bool contiguous_block = (cache.size(2) <= 1 || cache.stride(2) == head) &&
                                (cache.size(1) <= 1 || cache.stride(1) == slot) &&
                                (cache.size(0) <= 1 || cache.stride(0) >= block);
  TORCH_CHECK(contiguous_block, name, ": ", arg,
              " must hold each block contiguously: strides [>= ", block, ", ", slot, ", ", head,
              ", 1] (any block stride of at least one block), got strides ", cache.strides(), " for shape ",
              cache.sizes());
}

// The scales of a quantized cache: float32 on the cache's device; fp8 one element, int8
// [num_blocks, block_size, kv_heads] with each block contiguous and any block stride of at least one block.
void check_scale(const char* arg, const at::Tensor& scale, const at::Tensor& cache) {
  const char* name = reshape_and_cache_quant_operation().name().c_str();
  TORCH_CHECK(scale.defined(), name, ": ", arg, " must be a defined tensor, got an undefined one");
  TORCH_CHECK(scale.scalar_type() == at::kFloat, name, ": ", arg, " must be float32, got ",
              bridge::dtype_name(scale.scalar_type()));
  TORCH_CHECK(scale.device() == cache.device(), name, ": ", arg, " must be on the caches' device ", cache.device(),
              ", got ", scale.device());
  if (cache.scalar_type() == at::kFloat8_e4m3fn) {
    TORCH_CHECK(scale.numel() == 1, name, ": ", arg,
                " must hold one element (the per-tensor scale of a float8_e4m3fn cache), got shape ", scale.sizes());
    return;
  }
  const int64_t blocks = cache.size(0), rows = cache.size(1), heads = cache.size(2);
  TORCH_CHECK(scale.dim() == 3 && scale.size(0) == blocks && scale.size(1) == rows && scale.size(2) == heads, name, ": ",
              arg, " must be [num_blocks, block_size, kv_heads] = [", blocks, ", ", rows, ", ", heads,
              "] (the per-(token, head) scales of an int8 cache), got shape ", scale.sizes());
  const bool contiguous_block = (heads <= 1 || scale.stride(2) == 1) && (rows <= 1 || scale.stride(1) == heads) &&
                                (blocks <= 1 || scale.stride(0) >= rows * heads);
  TORCH_CHECK(contiguous_block, name, ": ", arg, " must hold each block contiguously: strides [>= ", rows * heads, ", ",
              heads, ", 1], got strides ", scale.strides());
}

}  // namespace

CacheShape check_arguments(const Call& call) {
  const char* const name = call_name(call);
  const bool quant = call.key_scale != nullptr;
  const at::Tensor& key = call.key;
  const at::Tensor& value = call.value;
  const at::Tensor& key_cache = call.key_cache;
  const at::Tensor& value_cache = call.value_cache;
  const at::Tensor& slot_mapping = call.slot_mapping;
  const c10::DeviceType device = call.device;
  bridge::check_floating_tensor(name, "key", key, device);
  TORCH_CHECK(key.dim() == 3, name, ": key must be 3-D [tokens, kv_heads, head_size], got shape ", key.sizes());
  TORCH_CHECK(key.size(1) >= 1 && key.size(2) >= 1, name,
              ": key must have kv_heads >= 1 and head_size >= 1 ([tokens, kv_heads, head_size]), got shape ",
              key.sizes());
  bridge::check_floating_tensor(name, "value", value, device);
  TORCH_CHECK(value.sizes() == key.sizes(), name, ": value must have key's shape ", key.sizes(), ", got ",
              value.sizes());
  TORCH_CHECK(value.scalar_type() == key.scalar_type(), name, ": value must have key's dtype ",
              bridge::dtype_name(key.scalar_type()), ", got ", bridge::dtype_name(value.scalar_type()));
  TORCH_CHECK(value.device() == key.device(), name, ": value must be on key's device ", key.device(), ", got ",
              value.device());
  check_cache(name, "key_cache", key_cache, key, device, quant);
  check_cache(name, "value_cache", value_cache, key, device, quant);
  TORCH_CHECK(value_cache.sizes() == key_cache.sizes(), name, ": value_cache must have key_cache's shape ",
              key_cache.sizes(), ", got ", value_cache.sizes());
  if (quant) {
    TORCH_CHECK(value_cache.scalar_type() == key_cache.scalar_type(), name, ": value_cache must have key_cache's dtype ",
                bridge::dtype_name(key_cache.scalar_type()), ", got ", bridge::dtype_name(value_cache.scalar_type()));
    check_scale("key_scale", *call.key_scale, key_cache);
    check_scale("value_scale", *call.value_scale, value_cache);
  }

  TORCH_CHECK(slot_mapping.defined(), name, ": slot_mapping must be a defined tensor, got an undefined one");
  TORCH_CHECK(slot_mapping.scalar_type() == at::kLong, name, ": slot_mapping must be int64, got ",
              bridge::dtype_name(slot_mapping.scalar_type()));
  TORCH_CHECK(slot_mapping.device() == key.device(), name, ": slot_mapping must be on key's device ", key.device(),
              ", got ", slot_mapping.device());
  TORCH_CHECK(slot_mapping.dim() == 1 && slot_mapping.size(0) == key.size(0), name,
              ": slot_mapping must be 1-D [tokens] with key's tokens = ", key.size(0), ", got shape ",
              slot_mapping.sizes());

  CacheShape s;
  s.tokens = key.size(0);
  s.kv_heads = key.size(1);
  s.head_size = key.size(2);
  s.num_blocks = key_cache.size(0);
  s.block_size = key_cache.size(1);
  TORCH_CHECK(!__builtin_mul_overflow(s.num_blocks, s.block_size, &s.slots), name,
              ": key_cache's num_blocks * block_size overflows int64, got shape ", key_cache.sizes());

  const int64_t block_bytes = s.block_size * s.kv_heads * s.head_size * key_cache.element_size();
  TORCH_CHECK(!caches_overlap(key_cache, value_cache, block_bytes), name,
              ": key_cache and value_cache must not share an element, got overlapping views (key_cache at ",
              key_cache.const_data_ptr(), " strides ", key_cache.strides(), ", value_cache at ",
              value_cache.const_data_ptr(), " strides ", value_cache.strides(), ")");
  const Extent caches[] = {extent(key_cache), extent(value_cache)};
  const char* const cache_names[] = {"key_cache", "value_cache"};
  for (int c = 0; c < 2; ++c) {
    TORCH_CHECK(!intersect(extent(key), caches[c]), name, ": key must not overlap ", cache_names[c],
                " (the write would change what it reads), got overlapping memory");
    TORCH_CHECK(!intersect(extent(value), caches[c]), name, ": value must not overlap ", cache_names[c],
                " (the write would change what it reads), got overlapping memory");
  }
  if (quant && key_cache.scalar_type() == at::kChar) {
    // The int8 scales are written too: they must not overlap a cache, the inputs or each other.
    const Extent scales[] = {extent(*call.key_scale), extent(*call.value_scale)};
    const char* const scale_names[] = {"key_scale", "value_scale"};
    // Interleaved halves of one [num_blocks, 2, block_size, kv_heads] tensor span the same bytes but
    // share no element.
    TORCH_CHECK(!caches_overlap(*call.key_scale, *call.value_scale, s.block_size * s.kv_heads * 4), name,
                ": key_scale and value_scale must not share an element, got overlapping views");
    for (int i = 0; i < 2; ++i) {
      for (int c = 0; c < 2; ++c) {
        TORCH_CHECK(!intersect(scales[i], caches[c]), name, ": ", scale_names[i], " must not overlap ", cache_names[c],
                    ", got overlapping memory");
      }
      TORCH_CHECK(!intersect(scales[i], extent(key)) && !intersect(scales[i], extent(value)), name, ": ",
                  scale_names[i], " must not overlap key or value, got overlapping memory");
    }
  }
  return s;
}

void check_fp8_scales_cpu(const Call& call) {
  if (call.key_scale == nullptr || call.key_cache.scalar_type() != at::kFloat8_e4m3fn) return;
  const char* const name = call_name(call);
  const at::Tensor* scales[] = {call.key_scale, call.value_scale};
  const char* const scale_names[] = {"key_scale", "value_scale"};
  for (int i = 0; i < 2; ++i) {
    const float v = *scales[i]->const_data_ptr<float>();
    TORCH_CHECK(std::isfinite(v) && v > 0, name, ": ", scale_names[i],
                " (the per-tensor scale of a float8_e4m3fn cache) must be positive and finite, got ", v);
  }
}

namespace {

[[noreturn]] void duplicate_slot(const char* name, const int64_t* slots, int64_t stride, int64_t tokens, int64_t slot) {
  int64_t first = -1, second = -1;
  for (int64_t t = 0; t < tokens && second < 0; ++t) {
    if (slots[t * stride] != slot) continue;
    (first < 0 ? first : second) = t;
  }
  TORCH_CHECK(false, name, ": slot_mapping must not give a non-negative slot twice, got slot ", slot, " for tokens ",
              first, " and ", second);
  std::abort();  // not reached
}

}  // namespace

int64_t check_slots_cpu(const CacheShape& shape, const at::Tensor& slot_mapping, const char* name) {
  const int64_t* slots = slot_mapping.const_data_ptr<int64_t>();
  const int64_t stride = slot_mapping.stride(0);
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = -1, valid = 0;
  for (int64_t t = 0; t < shape.tokens; ++t) {
    const int64_t s = slots[t * stride];
    if (s < 0) continue;
    TORCH_CHECK(s < shape.slots, name, ": slot_mapping[", t, "] = ", s,
                " is out of range: the caches hold num_blocks * block_size = ", shape.num_blocks, " * ",
                shape.block_size, " = ", shape.slots, " slots (a negative slot skips its token)");
    lo = std::min(lo, s);
    hi = std::max(hi, s);
    ++valid;
  }
  if (valid < 2) return valid;
  // Duplicates: a bitmap over [lo, hi] where that range is not much wider than the slots given
  // (prefill and decode batches address nearby blocks), a sorted copy otherwise. Buffers are
  // reused by the calling thread.
  const uint64_t range = static_cast<uint64_t>(hi - lo) + 1;
  if (range <= 64 * static_cast<uint64_t>(valid) + 65536) {
    static thread_local std::vector<uint64_t> seen;
    seen.assign((range + 63) / 64, 0);
    for (int64_t t = 0; t < shape.tokens; ++t) {
      const int64_t s = slots[t * stride];
      if (s < 0) continue;
      const uint64_t i = static_cast<uint64_t>(s - lo), bit = uint64_t{1} << (i % 64);
      if (seen[i / 64] & bit) duplicate_slot(name, slots, stride, shape.tokens, s);
      seen[i / 64] |= bit;
    }
  } else {
    static thread_local std::vector<int64_t> sorted;
    sorted.clear();
    for (int64_t t = 0; t < shape.tokens; ++t) {
      if (slots[t * stride] >= 0) sorted.push_back(slots[t * stride]);
    }
    std::sort(sorted.begin(), sorted.end());
    const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
    if (dup != sorted.end()) duplicate_slot(name, slots, stride, shape.tokens, *dup);
  }
  return valid;
}

}  // namespace xllm_kernel::kv_cache
