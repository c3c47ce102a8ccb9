// The reference of reshape_and_cache, shared by the suite (reshape_and_cache.cpp, in float64) and
// the bridge checks (test/ops/kv_cache/bridge_checks.h, on the inputs' own bits, on every device):
// a row-by-row copy on the CPU, independent of every registered implementation. A copy is exact in
// any dtype, so one reference serves both.
//
//   at::Tensor want = key_cache.to(at::kCPU, at::kDouble, false, /*copy=*/true);
//   reference_reshape_and_cache(want, key, slot_mapping);
#pragma once

#include <ATen/ATen.h>

namespace xllm_kernel::numerics::kv_cache {

// Writes each token's row of `rows` ([tokens, kv_heads, head_size], any device and dtype) into
// `cache` ([num_blocks, block_size, kv_heads, head_size] on the CPU, any strides, written in place)
// at its slot: cache[slot / block_size][slot % block_size] = rows[t]. Tokens whose slot is outside
// [0, num_blocks * block_size) are skipped: -1 is padding, and the CUDA kernels skip a slot out of
// range (the CPU bridges reject one before writing).
inline void reference_reshape_and_cache(at::Tensor cache, const at::Tensor& rows, const at::Tensor& slot_mapping) {
  const at::Tensor src = rows.to(at::kCPU).to(cache.scalar_type());
  const at::Tensor slots = slot_mapping.to(at::kCPU).to(at::kLong).contiguous();
  const int64_t block_size = cache.size(1), num_slots = cache.size(0) * block_size;
  const int64_t* slot = slots.const_data_ptr<int64_t>();
  for (int64_t t = 0; t < src.size(0); ++t) {
    if (slot[t] < 0 || slot[t] >= num_slots) continue;
    cache.select(0, slot[t] / block_size).select(0, slot[t] % block_size).copy_(src.select(0, t));
  }
}

}  // namespace xllm_kernel::numerics::kv_cache
