// Kernel parameters that the CPU and CUDA kernel tests (test/csrc/, test/cuda/) start from: the
// smallest valid call of a kernel, for the tests that break one field at a time, and the model
// shape of the plan tests. Torch-free, no Highway, no CUDA.
//
//   KvCacheParams good = OneSlotKvCache(DType::kFloat32, 4, buf, buf + 4, buf + 8, &slot);
//   PagedAttentionParams p = Llama8BPagedAttention(16);  // then lengths, tables, pointers
#pragma once

#include <cstdint>

#include "csrc/common/attention.h"
#include "csrc/common/kv_cache.h"

namespace xllm_kernel::test {

// One token of one KV head of `head_size` elements into a cache of one slot (block size 1);
// key and value share `input`, the slot mapping is `slot`; strides are left to the caller.
inline kernels::KvCacheParams OneSlotKvCache(kernels::DType t, int64_t head_size, const void* input,
                                             void* key_cache, void* value_cache, const int64_t* slot) {
  kernels::KvCacheParams p;
  p.dtype = t;
  p.tokens = 1;
  p.kv_heads = 1;
  p.head_size = head_size;
  p.block_size = 1;
  p.num_slots = 1;
  p.key = p.value = input;
  p.key_cache = key_cache;
  p.value_cache = value_cache;
  p.slot_mapping = slot;
  return p;
}

// Llama 3 8B's attention in bf16 (32 query heads over 8 KV heads of 128) for `num_seqs`
// sequences of up to 4096 keys in blocks of 16, each with its own 256 blocks; no pointers.
inline kernels::PagedAttentionParams Llama8BPagedAttention(int64_t num_seqs) {
  kernels::PagedAttentionParams p;
  p.dtype = kernels::DType::kBFloat16;
  p.num_seqs = num_seqs;
  p.q_heads = 32;
  p.kv_heads = 8;
  p.head_size = 128;
  p.block_size = 16;
  p.max_blocks_per_seq = 256;
  p.num_blocks = num_seqs * 256;
  return p;
}

}  // namespace xllm_kernel::test
