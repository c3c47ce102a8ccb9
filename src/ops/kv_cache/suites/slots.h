// The slot mappings of the KV-cache write suites (reshape_and_cache.cpp,
// reshape_and_cache_quant.cpp): the same draws from the same generator, so a plain and a quantized
// case of one point write the same slots.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>

namespace xllm_kernel::numerics::kv_cache {

// Distinct slots of [0, slots) in random order, about one token in eight -1 (none for one token);
// more tokens than slots: the rest -1.
inline at::Tensor random_slots(int64_t tokens, int64_t slots, at::Generator& g) {
  at::Tensor out = at::full({tokens}, -1, at::kLong);
  if (tokens == 0) return out;
  const at::Tensor perm = at::randperm(slots, g, at::kLong);
  const at::Tensor pad = at::rand({tokens}, g, at::kDouble);
  int64_t* o = out.mutable_data_ptr<int64_t>();
  const int64_t* p = perm.const_data_ptr<int64_t>();
  const double* r = pad.const_data_ptr<double>();
  for (int64_t t = 0, next = 0; t < tokens && next < slots; ++t) {
    if (tokens > 1 && r[t] < 0.125) continue;
    o[t] = p[next++];
  }
  return out;
}

// A prefill batch: sequences of 1 to 1024 tokens (random lengths), each filling blocks from
// offset 0 in order, a sequence's next block the next one of a shuffled free list; tokens for
// which no block is left: -1.
inline at::Tensor prefill_slots(int64_t tokens, int64_t num_blocks, int64_t block_size, at::Generator& g) {
  at::Tensor out = at::full({tokens}, -1, at::kLong);
  if (tokens == 0) return out;
  const at::Tensor free_list = at::randperm(num_blocks, g, at::kLong);
  const at::Tensor lengths = at::randint(1, 1025, {tokens}, g, at::kLong);
  int64_t* o = out.mutable_data_ptr<int64_t>();
  const int64_t* blocks = free_list.const_data_ptr<int64_t>();
  const int64_t* length = lengths.const_data_ptr<int64_t>();
  for (int64_t t = 0, next = 0, sequence = 0; t < tokens; ++sequence) {
    const int64_t end = std::min(tokens, t + length[sequence]);
    for (int64_t i = 0; t < end; ++i, ++t) {
      if (i % block_size == 0) ++next;
      if (next > num_blocks) return out;
      o[t] = blocks[next - 1] * block_size + i % block_size;
    }
  }
  return out;
}

}  // namespace xllm_kernel::numerics::kv_cache
