// Shared by the attention group's bridges (not public).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include <cstdint>

#include "csrc/common/attention.h"
#include "src/ops/common/bridge.h"
#include "src/ops/common/family.h"
#include "xllm_kernel/catalog.h"
#include "xllm_kernel/ops/attention.h"

namespace xllm_kernel::attention {

// The operation's name, from its contract, for messages.
inline const char* op_name() { return paged_attention_operation().name().c_str(); }

// The largest head_size the contract accepts.
inline constexpr int64_t kMaxHeadSize = 512;

// The sizes every bridge needs, from checked arguments.
struct AttentionShape {
  int64_t tokens = 0;  // query rows
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_size = 0;
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t num_seqs = 0;
  int64_t max_blocks_per_seq = 0;
};

// One call's arguments as its bridge received them: what check_arguments checks and kernel_params
// reads. `sliding_window` for kernel_params only (check_arguments accepts every value: <= 0 is off).
//   const Call call{.query = query, .key_cache = key_cache, .value_cache = value_cache, .block_tables = block_tables,
//                   .query_start_loc = query_start_loc, .seq_lens = seq_lens, .scale = scale, .soft_cap = soft_cap,
//                   .sliding_window = sliding_window, .device = kDevice};
struct Call {
  const at::Tensor& query;
  const at::Tensor& key_cache;
  const at::Tensor& value_cache;
  const at::Tensor& block_tables;
  const at::Tensor& query_start_loc;
  const at::Tensor& seq_lens;
  double scale = 0;
  double soft_cap = 0;         // 0: off
  int64_t sliding_window = 0;  // <= 0: off
  c10::DeviceType device = c10::DeviceType::CPU;  // the implementation's
  // paged_attention_quant only (non-null): the caches are float8_e4m3fn or int8 with these scales.
  const at::Tensor* key_scale = nullptr;
  const at::Tensor* value_scale = nullptr;
};

// The name of the call's operation, for messages.
inline const char* call_name(const Call& call) {
  return call.key_scale != nullptr ? paged_attention_quant_operation().name().c_str() : op_name();
}

// The kernel's format of a checked call's caches.
inline kernels::KvCacheFormat cache_format(const Call& call) {
  if (call.key_scale == nullptr) return kernels::KvCacheFormat::kPlain;
  return call.key_cache.scalar_type() == at::kChar ? kernels::KvCacheFormat::kInt8 : kernels::KvCacheFormat::kFp8E4M3;
}

// Checks every argument of paged_attention (or paged_attention_quant) for an implementation on `call.device` (shapes, dtypes,
// devices, layouts, the scalars; not the values of block_tables, query_start_loc and seq_lens);
// errors name the operation, the argument, what was expected and what was given.
AttentionShape check_arguments(const Call& call);

// The CPU implementations' check of the values (host tensors), before any compute:
// query_start_loc starts at 0, never decreases and ends at most at the query's rows (the rest is padding); 0 <= q_len <=
// seq_lens[s] <= max_blocks_per_seq * block_size; every block a query row reads (its window
// included) in [0, num_blocks). Errors name the sequence, the entry and the value.
void check_values_cpu(const AttentionShape& shape, const at::Tensor& block_tables, const at::Tensor& query_start_loc,
                      const at::Tensor& seq_lens, int64_t sliding_window, const char* name = op_name());

// A new [tokens, q_heads, head_size] contiguous tensor of query's dtype and device.
at::Tensor new_output(const at::Tensor& query);

// The kernel parameters from checked arguments, for the CPU and the CUDA kernel alike.
inline kernels::PagedAttentionParams kernel_params(const Call& call, const AttentionShape& s, at::Tensor& out) {
  const at::Tensor& query = call.query;
  const at::Tensor& key_cache = call.key_cache;
  const at::Tensor& value_cache = call.value_cache;
  const at::Tensor& block_tables = call.block_tables;
  kernels::PagedAttentionParams p;
  p.dtype = bridge::kernel_dtype(query.scalar_type());
  p.num_seqs = s.num_seqs;
  p.query_tokens = s.tokens;
  p.q_heads = s.q_heads;
  p.kv_heads = s.kv_heads;
  p.head_size = s.head_size;
  p.block_size = s.block_size;
  p.num_blocks = s.num_blocks;
  p.max_blocks_per_seq = s.max_blocks_per_seq;
  p.query = query.const_data_ptr();
  p.query_strides = {query.stride(0), query.stride(1)};
  p.key_cache = key_cache.const_data_ptr();
  p.key_cache_strides = {key_cache.stride(0), key_cache.stride(1), key_cache.stride(2)};
  p.value_cache = value_cache.const_data_ptr();
  p.value_cache_strides = {value_cache.stride(0), value_cache.stride(1), value_cache.stride(2)};
  p.out = out.mutable_data_ptr();
  p.out_strides = {out.stride(0), out.stride(1)};
  p.block_tables = block_tables.const_data_ptr<int32_t>();
  p.block_table_stride = block_tables.stride(0);
  p.query_start_loc = call.query_start_loc.const_data_ptr<int32_t>();
  p.seq_lens = call.seq_lens.const_data_ptr<int32_t>();
  p.scale = static_cast<float>(call.scale);
  p.soft_cap = static_cast<float>(call.soft_cap);
  p.sliding_window = call.sliding_window;
  p.cache_format = cache_format(call);
  if (p.cache_format != kernels::KvCacheFormat::kPlain) {
    const at::Tensor &ks = *call.key_scale, &vs = *call.value_scale;
    p.key_scale = ks.const_data_ptr<float>();
    p.value_scale = vs.const_data_ptr<float>();
    if (p.cache_format == kernels::KvCacheFormat::kInt8) {
      p.key_scale_strides = {ks.stride(0), ks.stride(1), ks.stride(2)};
      p.value_scale_strides = {vs.stride(0), vs.stride(1), vs.stride(2)};
    }
  }
  return p;
}

// The two operations' signatures over one function of a Call on kDevice (each bridge's run), so
// that a bridge writes its work once for paged_attention and paged_attention_quant:
//   XLLM_REGISTER_NAMED("cpu.native.paged_attention", ..., paged_attention_entry<kCpu, run<false>>);
template <c10::DeviceType kDevice, at::Tensor (*kRun)(const Call&)>
at::Tensor paged_attention_entry(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache,
                                 const at::Tensor& block_tables, const at::Tensor& query_start_loc,
                                 const at::Tensor& seq_lens, double scale, double soft_cap, int64_t sliding_window) {
  return kRun({.query = query, .key_cache = key_cache, .value_cache = value_cache, .block_tables = block_tables,
               .query_start_loc = query_start_loc, .seq_lens = seq_lens, .scale = scale, .soft_cap = soft_cap,
               .sliding_window = sliding_window, .device = kDevice});
}

template <c10::DeviceType kDevice, at::Tensor (*kRun)(const Call&)>
at::Tensor paged_attention_quant_entry(const at::Tensor& query, const at::Tensor& key_cache,
                                       const at::Tensor& value_cache, const at::Tensor& key_scale,
                                       const at::Tensor& value_scale, const at::Tensor& block_tables,
                                       const at::Tensor& query_start_loc, const at::Tensor& seq_lens, double scale,
                                       double soft_cap, int64_t sliding_window) {
  return kRun({.query = query, .key_cache = key_cache, .value_cache = value_cache, .block_tables = block_tables,
               .query_start_loc = query_start_loc, .seq_lens = seq_lens, .scale = scale, .soft_cap = soft_cap,
               .sliding_window = sliding_window, .device = kDevice, .key_scale = &key_scale,
               .value_scale = &value_scale});
}

// The group's backend modules (src/ops/attention/attention.cpp).
const family::StandardModules& modules();

}  // namespace xllm_kernel::attention
