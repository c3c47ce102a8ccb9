// The argument checks every attention bridge shares (src/ops/attention/internal.h).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "src/ops/attention/internal.h"
#include "xllm_kernel/ops/attention.h"

namespace xllm_kernel::attention {
namespace {

void check_index_tensor(const char* name, const char* arg, const at::Tensor& t, const at::Tensor& query, int64_t dim) {
  TORCH_CHECK(t.defined(), name, ": ", arg, " must be a defined tensor, got an undefined one");
  TORCH_CHECK(t.device() == query.device(), name, ": ", arg, " must be on query's device ", query.device(),
              ", got ", t.device());
  TORCH_CHECK(t.scalar_type() == at::kInt, name, ": ", arg, " must be int32, got ",
              bridge::dtype_name(t.scalar_type()));
  TORCH_CHECK(t.dim() == dim, name, ": ", arg, " must be ", dim, "-D, got shape ", t.sizes());
  TORCH_CHECK(t.size(-1) <= 1 || t.stride(-1) == 1, name, ": ", arg,
              "'s last dimension must be contiguous (stride 1), got stride ", t.stride(-1));
}

void check_cache(const char* name, const char* arg, const at::Tensor& cache, const at::Tensor& query,
                 c10::DeviceType device, bool quant) {
  if (quant) {
    bridge::check_quantized_cache(name, arg, cache, device);
  } else {
    bridge::check_floating_tensor(name, arg, cache, device);
  }
  TORCH_CHECK(cache.device() == query.device(), name, ": ", arg, " must be on query's device ", query.device(),
              ", got ", cache.device());
  TORCH_CHECK(cache.dim() == 4, name, ": ", arg, " must be [num_blocks, block_size, kv_heads, head_size], got shape ",
              cache.sizes());
  TORCH_CHECK(quant || cache.scalar_type() == query.scalar_type(), name, ": ", arg, " must have query's dtype ",
              bridge::dtype_name(query.scalar_type()), ", got ", bridge::dtype_name(cache.scalar_type()));
  TORCH_CHECK(cache.size(3) == query.size(2), name, ": ", arg, "'s head_size (last dimension) must be query's ",
              query.size(2), ", got shape ", cache.sizes());
  TORCH_CHECK(cache.size(0) >= 1 && cache.size(1) >= 1 && cache.size(2) >= 1, name, ": ", arg,
              " must have at least one block, one row a block and one KV head, got shape ", cache.sizes());
  for (int64_t d = 0; d < 3; ++d) {
    TORCH_CHECK(cache.stride(d) >= 0, name, ": ", arg, " must have non-negative strides, got ", cache.strides());
  }
}

// A quantized cache's scales: float32 on query's device; fp8 one element, int8 [num_blocks,
// block_size, kv_heads] with non-negative strides.
void check_scale(const char* name, const char* arg, const at::Tensor& scale, const at::Tensor& cache,
                 const at::Tensor& query) {
  TORCH_CHECK(scale.defined(), name, ": ", arg, " must be a defined tensor, got an undefined one");
  TORCH_CHECK(scale.scalar_type() == at::kFloat, name, ": ", arg, " must be float32, got ",
              bridge::dtype_name(scale.scalar_type()));
  TORCH_CHECK(scale.device() == query.device(), name, ": ", arg, " must be on query's device ", query.device(),
              ", got ", scale.device());
  if (cache.scalar_type() == at::kFloat8_e4m3fn) {
    TORCH_CHECK(scale.numel() == 1, name, ": ", arg,
                " must hold one element (the per-tensor scale of a float8_e4m3fn cache), got shape ", scale.sizes());
    return;
  }
  TORCH_CHECK(scale.dim() == 3 && scale.size(0) == cache.size(0) && scale.size(1) == cache.size(1) &&
                  scale.size(2) == cache.size(2),
              name, ": ", arg, " must be [num_blocks, block_size, kv_heads] = [", cache.size(0), ", ", cache.size(1),
              ", ", cache.size(2), "] (the per-(token, head) scales of an int8 cache), got shape ", scale.sizes());
  for (int64_t d = 0; d < 3; ++d) {
    TORCH_CHECK(scale.stride(d) >= 0, name, ": ", arg, " must have non-negative strides, got ", scale.strides());
  }
}

}  // namespace

AttentionShape check_arguments(const Call& call) {
  const char* const name = call_name(call);
  const bool quant = call.key_scale != nullptr;
  const at::Tensor& query = call.query;
  const at::Tensor& key_cache = call.key_cache;
  const at::Tensor& value_cache = call.value_cache;
  const at::Tensor& block_tables = call.block_tables;
  const at::Tensor& query_start_loc = call.query_start_loc;
  const at::Tensor& seq_lens = call.seq_lens;
  const double scale = call.scale, soft_cap = call.soft_cap;
  const c10::DeviceType device = call.device;
  bridge::check_floating_tensor(name, "query", query, device);
  TORCH_CHECK(query.dim() == 3, name, ": query must be [tokens, q_heads, head_size], got shape ", query.sizes());
  TORCH_CHECK(query.size(1) >= 1, name, ": query must have at least one head, got shape ", query.sizes());
  TORCH_CHECK(query.size(2) >= 1 && query.size(2) <= kMaxHeadSize, name, ": query's head_size must be in [1, ",
              kMaxHeadSize, "], got shape ", query.sizes());
  check_cache(name, "key_cache", key_cache, query, device, quant);
  check_cache(name, "value_cache", value_cache, query, device, quant);
  TORCH_CHECK(value_cache.sizes() == key_cache.sizes(), name, ": value_cache must have key_cache's shape ",
              key_cache.sizes(), ", got ", value_cache.sizes());
  if (quant) {
    TORCH_CHECK(value_cache.scalar_type() == key_cache.scalar_type(), name, ": value_cache must have key_cache's dtype ",
                bridge::dtype_name(key_cache.scalar_type()), ", got ", bridge::dtype_name(value_cache.scalar_type()));
    check_scale(name, "key_scale", *call.key_scale, key_cache, query);
    check_scale(name, "value_scale", *call.value_scale, value_cache, query);
  }
  const int64_t q_heads = query.size(1), kv_heads = key_cache.size(2);
  TORCH_CHECK(q_heads % kv_heads == 0, name, ": query's heads (", q_heads,
              ") must be a multiple of the caches' kv_heads (", kv_heads, "), got query shape ", query.sizes(),
              " and key_cache shape ", key_cache.sizes());

  check_index_tensor(name, "block_tables", block_tables, query, 2);
  check_index_tensor(name, "seq_lens", seq_lens, query, 1);
  check_index_tensor(name, "query_start_loc", query_start_loc, query, 1);
  const int64_t seqs = seq_lens.size(0);
  TORCH_CHECK(block_tables.size(0) == seqs, name, ": block_tables must have a row per sequence (seq_lens' ", seqs,
              "), got shape ", block_tables.sizes());
  TORCH_CHECK(block_tables.stride(0) >= 0, name, ": block_tables must have a non-negative row stride, got ",
              block_tables.strides());
  TORCH_CHECK(query_start_loc.size(0) == seqs + 1, name, ": query_start_loc must be [seqs + 1] with seq_lens' seqs = ",
              seqs, ", got shape ", query_start_loc.sizes());
  TORCH_CHECK(seq_lens.is_contiguous() && query_start_loc.is_contiguous(), name,
              ": seq_lens and query_start_loc must be contiguous, got strides ", seq_lens.strides(), " and ",
              query_start_loc.strides());

  constexpr double kFloatMax = std::numeric_limits<float>::max();
  TORCH_CHECK(std::isfinite(scale) && scale > 0 && scale <= kFloatMax, name,
              ": scale must be positive and finite (a float32), got ", scale);
  TORCH_CHECK(std::isfinite(soft_cap) && soft_cap >= 0 && soft_cap <= kFloatMax, name,
              ": soft_cap must be finite and >= 0 (0: off), got ", soft_cap);

  AttentionShape s;
  s.tokens = query.size(0);
  s.q_heads = q_heads;
  s.kv_heads = kv_heads;
  s.head_size = query.size(2);
  s.num_blocks = key_cache.size(0);
  s.block_size = key_cache.size(1);
  s.num_seqs = seqs;
  s.max_blocks_per_seq = block_tables.size(1);
  return s;
}

void check_values_cpu(const AttentionShape& s, const at::Tensor& block_tables, const at::Tensor& query_start_loc,
                      const at::Tensor& seq_lens, int64_t sliding_window, const char* name) {
  const int32_t* qsl = query_start_loc.const_data_ptr<int32_t>();
  const int32_t* lens = seq_lens.const_data_ptr<int32_t>();
  const int32_t* table = block_tables.const_data_ptr<int32_t>();
  const int64_t row_stride = block_tables.stride(0);
  const int64_t max_context = s.max_blocks_per_seq * s.block_size;
  TORCH_CHECK(qsl[0] == 0, name, ": query_start_loc[0] must be 0, got ", qsl[0]);
  TORCH_CHECK(qsl[s.num_seqs] <= s.tokens, name, ": query_start_loc[", s.num_seqs,
              "] (the last entry) must be at most query's rows ", s.tokens, ", got ", qsl[s.num_seqs]);
  for (int64_t q = 0; q < s.num_seqs; ++q) {
    const int64_t q_len = int64_t{qsl[q + 1]} - qsl[q];
    TORCH_CHECK(q_len >= 0, name, ": query_start_loc must not decrease, got query_start_loc[", q, "] = ", qsl[q],
                " and query_start_loc[", q + 1, "] = ", qsl[q + 1]);
    const int64_t len = lens[q];
    TORCH_CHECK(len >= q_len && len <= max_context, name, ": seq_lens[", q, "] must be in [", q_len,
                " (the sequence's query rows), ", max_context, " (block_tables' ", s.max_blocks_per_seq,
                " blocks of ", s.block_size, ")], got ", len);
    if (q_len == 0) continue;
    // The positions the sequence's rows read: from the first row's window start to the last row.
    const int64_t first = len - q_len;
    const int64_t lo = sliding_window > 0 ? std::max<int64_t>(0, first - sliding_window + 1) : 0;
    for (int64_t b = lo / s.block_size; b <= (len - 1) / s.block_size; ++b) {
      const int32_t id = table[q * row_stride + b];
      TORCH_CHECK(id >= 0 && id < s.num_blocks, name, ": block_tables[", q, ", ", b, "] must be a block in [0, ",
                  s.num_blocks, ") (sequence ", q, " reads it), got ", id);
    }
  }
}

at::Tensor new_output(const at::Tensor& query) {
  return at::empty(query.sizes(), query.options().memory_format(at::MemoryFormat::Contiguous));
}

}  // namespace xllm_kernel::attention
