// Torch-free CPU kernel of the paged KV-cache write (Highway, runtime ISA dispatch):
//   key_cache[s / block_size, s % block_size] = key[t],  value_cache[...] = value[t]
// for every token t with 0 <= s = slot_mapping[t] < num_slots, copied bit for bit.
//
// The at::Tensor side (a bridge) checks every argument and every slot (out-of-range and duplicate
// slots are errors there), fills a KvCacheParams (csrc/common/kv_cache.h) and splits the tokens
// over threads. The kernel skips a slot outside [0, num_slots) (never writes out of bounds); it
// assumes distinct slots (tokens of one slot on concurrent ranges would race).
//
//   xllm_kernel::cpu::KvCacheParams p;  // the fields as in csrc/common/kv_cache.h
//   xllm_kernel::cpu::reshape_and_cache(p, 0, tokens);
#pragma once

#include <cstdint>

#include "csrc/common/kv_cache.h"
#include "csrc/common/rows.h"

namespace xllm_kernel::cpu {

using kernels::DType;
using kernels::Status;

// The parameters, shared with the CUDA launcher (csrc/common/kv_cache.h).
using kernels::KvCacheParams;
using kernels::KvTokenStrides;

// Copies the rows of tokens [token_begin, token_end); may run concurrently on disjoint ranges
// (with distinct slots). Pointers may be null when the range is empty. A quantized format
// (p.format, csrc/common/kv_cache.h) quantizes each (token, head) row into the cache instead, with
// the quantization family's row kernels (csrc/cpu/quantization): the same bits as per_token_quant
// of that row (int8, its scale written beside) or e4m3(x / scale) (fp8).
Status reshape_and_cache(const KvCacheParams& p, int64_t token_begin, int64_t token_end);

}  // namespace xllm_kernel::cpu
