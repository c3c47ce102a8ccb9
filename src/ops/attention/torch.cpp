// cpu.torch.paged_attention and cuda.torch.paged_attention: what an engine does without a kernel
// library. Per sequence, its pages are gathered into contiguous K and V (index_select over its
// block ids) and handed to torch's scaled_dot_product_attention with the causal (and window) mask of
// its query rows; with a soft cap, which SDPA lacks, the same steps are written out in float32.
// The loop over sequences needs the lengths on the host: on CUDA they are copied there (one
// synchronization), so the CUDA module is eager only, and the values the CPU rejects are applied as
// the contract says for CUDA (NaN rows) from the host copies instead of raised.
//
// cpu.torch.paged_attention_quant and cuda.torch.paged_attention_quant: the same, with each
// sequence's gathered pages dequantized (float(q) * scale) and the attention computed in float32.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "src/ops/attention/internal.h"
#include "src/ops/common/registration.h"
#include "xllm_kernel/ops/attention.h"

namespace xllm_kernel::attention {
namespace {

// One sequence of the call: its rows [begin, begin + q_len) of the query, at positions len - q_len + i,
// and its row of the block table.
struct Sequence {
  const int32_t* ids = nullptr;
  int64_t begin = 0;
  int64_t q_len = 0;
  int64_t len = 0;
};

// torch's memory-efficient SDPA kernel on CUDA chooses its 16-byte-aligned variant from the
// strides alone; a view whose data starts off a 16-byte boundary (a row offset into the query, or
// into the gathered pages) then faults with "misaligned address" (pytorch/pytorch#183484, seen
// with torch 2.11 on an H200). Such a view is copied first; an aligned one is passed as it is.
at::Tensor aligned_for_sdpa(const at::Tensor& t) {
  if (!t.is_cuda() || reinterpret_cast<std::uintptr_t>(t.const_data_ptr()) % 16 == 0) return t;
  return t.clone(at::MemoryFormat::Contiguous);
}

// The rows of one sequence, over its pages.
void attend(const AttentionShape& s, const Call& call, const Sequence& seq, at::Tensor& out) {
  const at::Tensor &query = call.query, &key_cache = call.key_cache, &value_cache = call.value_cache;
  const int32_t* ids = seq.ids;
  const int64_t begin = seq.begin, q_len = seq.q_len, len = seq.len, window = call.sliding_window;
  const double scale = call.scale, soft_cap = call.soft_cap;
  const int64_t first = len - q_len;
  const int64_t lo = window > 0 ? std::max<int64_t>(0, first - window + 1) : 0;  // the first position read
  const int64_t block_lo = lo / s.block_size, block_hi = (len - 1) / s.block_size + 1;
  std::vector<int64_t> blocks(ids + block_lo, ids + block_hi);
  // CUDA only (the CPU checked every id): a block outside the cache is read as block 0 and its
  // positions poison the rows that attend to them.
  std::vector<int64_t> bad_blocks;
  for (size_t b = 0; b < blocks.size(); ++b) {
    if (blocks[b] < 0 || blocks[b] >= s.num_blocks) {
      bad_blocks.push_back(static_cast<int64_t>(b));
      blocks[b] = 0;
    }
  }
  const at::Tensor index = at::tensor(blocks, at::kLong).to(key_cache.device());
  const int64_t offset = lo - block_lo * s.block_size;  // position lo within the gathered rows
  const int64_t keys = len - lo;
  const bool quant = call.key_scale != nullptr;
  auto gather = [&](const at::Tensor& cache, const at::Tensor* scale) {  // [kv_heads, keys, head_size]
    const at::Tensor rows = cache.index_select(0, index).flatten(0, 1).narrow(0, offset, keys).permute({1, 0, 2});
    if (scale == nullptr) return rows;
    // paged_attention_quant: the gathered rows dequantized, float(q) * scale in float32.
    if (cache.scalar_type() == at::kFloat8_e4m3fn) return rows.to(at::kFloat).mul_(scale->reshape({}));
    const at::Tensor row_scales = scale->index_select(0, index).flatten(0, 1).narrow(0, offset, keys);  // [keys, kv_heads]
    return rows.to(at::kFloat).mul_(row_scales.t().unsqueeze(-1));
  };
  const at::Tensor k = gather(key_cache, call.key_scale), v = gather(value_cache, call.value_scale);
  // Quantized caches: the query in float32 beside the float32 keys and values, one rounding at the end.
  at::Tensor q = query.narrow(0, begin, q_len).permute({1, 0, 2});  // [q_heads, q_len, head_size]
  if (quant) q = q.to(at::kFloat);

  // mask[i, j]: query row i (position first + i) sees key j (position lo + j).
  at::Tensor mask;
  const bool need_mask = q_len > 1 || (window > 0 && len > window);
  const auto device = query.device();
  if (need_mask) {
    const auto positions = at::TensorOptions().dtype(at::kLong).device(device);
    const at::Tensor row_pos = at::arange(first, len, positions).unsqueeze(1);
    const at::Tensor key_pos = at::arange(lo, len, positions).unsqueeze(0);
    mask = key_pos.le(row_pos);
    if (window > 0) mask.logical_and_(key_pos.gt(row_pos - window));
  }

  at::Tensor result;  // [q_heads, q_len, head_size]
  const int64_t group = s.q_heads / s.kv_heads;
  if (soft_cap == 0) {
    const std::optional<at::Tensor> m = need_mask ? std::optional<at::Tensor>(mask) : std::nullopt;
    result = at::scaled_dot_product_attention(aligned_for_sdpa(q).unsqueeze(0), aligned_for_sdpa(k).unsqueeze(0),
                                              aligned_for_sdpa(v).unsqueeze(0), m, 0.0,
                                              /*is_causal=*/false, scale, /*enable_gqa=*/group > 1)
                 .squeeze(0)
                 .to(query.scalar_type());
  } else {
    const at::Tensor qf = q.to(at::kFloat).reshape({s.kv_heads, group, q_len, s.head_size});
    const at::Tensor kf = k.to(at::kFloat).unsqueeze(1), vf = v.to(at::kFloat).unsqueeze(1);
    at::Tensor scores = at::matmul(qf, kf.transpose(-1, -2)).mul_(scale);  // [kv_heads, group, q_len, keys]
    scores = at::tanh(scores.div_(soft_cap)).mul_(soft_cap);
    if (need_mask) scores.masked_fill_(mask.logical_not(), -std::numeric_limits<float>::infinity());
    result = at::matmul(at::softmax(scores, -1), vf).reshape({s.q_heads, q_len, s.head_size}).to(query.scalar_type());
  }
  at::Tensor rows = out.narrow(0, begin, q_len);  // [q_len, q_heads, head_size]
  rows.copy_(result.permute({1, 0, 2}));
  if (!bad_blocks.empty()) {
    // Row i reads positions [max(lo, first + i - window + 1), first + i]; it is poisoned when one
    // of them lies in a bad block.
    std::vector<int64_t> poisoned;
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t pos = first + i, start = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
      const bool reads_bad = std::any_of(bad_blocks.begin(), bad_blocks.end(), [&](int64_t b) {
        const int64_t block_first = (block_lo + b) * s.block_size;
        return block_first <= pos && block_first + s.block_size - 1 >= start;
      });
      if (reads_bad) poisoned.push_back(i);
    }
    if (!poisoned.empty()) {
      rows.index_fill_(0, at::tensor(poisoned, at::kLong).to(device), std::numeric_limits<double>::quiet_NaN());
    }
  }
}

template <c10::DeviceType kDevice>
at::Tensor run(const Call& call) {
  const at::Tensor &query = call.query, &block_tables = call.block_tables, &query_start_loc = call.query_start_loc,
                   &seq_lens = call.seq_lens;
  const AttentionShape s = check_arguments(call);
  at::Tensor out = at::zeros(query.sizes(), query.options().memory_format(at::MemoryFormat::Contiguous));
  if constexpr (kDevice == c10::DeviceType::CPU) {
    check_values_cpu(s, block_tables, query_start_loc, seq_lens, call.sliding_window, call_name(call));
  }
  if (s.tokens == 0 || s.num_seqs == 0) return out;
  const at::Tensor qsl_host = query_start_loc.cpu(), lens_host = seq_lens.cpu(), table_host = block_tables.cpu();
  const int32_t* qsl = qsl_host.const_data_ptr<int32_t>();
  const int32_t* lens = lens_host.const_data_ptr<int32_t>();
  const int32_t* table = table_host.const_data_ptr<int32_t>();
  const int64_t max_context = s.max_blocks_per_seq * s.block_size;
  for (int64_t q = 0; q < s.num_seqs; ++q) {
    const int64_t begin = qsl[q], end = qsl[q + 1], len = lens[q];
    const int64_t q_len = end - begin;
    if constexpr (kDevice != c10::DeviceType::CPU) {
      // Lengths that contradict each other (the CPU raised before): NaN in the rows within the query.
      const bool contradicts = q_len < 0 || begin < 0 || end > s.tokens || len < q_len || len > max_context;
      if (contradicts) {
        const int64_t b = std::clamp<int64_t>(std::min(begin, end), 0, s.tokens);
        const int64_t e = std::clamp<int64_t>(std::max(begin, end), 0, s.tokens);
        if (e > b) out.narrow(0, b, e - b).fill_(std::numeric_limits<double>::quiet_NaN());
        continue;
      }
    }
    if (q_len == 0) continue;
    attend(s, call, {.ids = table + q * table_host.stride(0), .begin = begin, .q_len = q_len, .len = len}, out);
  }
  return out;
}

}  // namespace

XLLM_REGISTER_NAMED("cpu.torch.paged_attention_quant", modules().torch_cpu, paged_attention_quant_operation(),
                    (paged_attention_quant_entry<c10::DeviceType::CPU, run<c10::DeviceType::CPU>>));
XLLM_REGISTER_NAMED("cuda.torch.paged_attention_quant", modules().torch_cuda, paged_attention_quant_operation(),
                    (paged_attention_quant_entry<c10::DeviceType::CUDA, run<c10::DeviceType::CUDA>>));
XLLM_REGISTER_NAMED("cpu.torch.paged_attention", modules().torch_cpu, paged_attention_operation(),
                    (paged_attention_entry<c10::DeviceType::CPU, run<c10::DeviceType::CPU>>));
XLLM_REGISTER_NAMED("cuda.torch.paged_attention", modules().torch_cuda, paged_attention_operation(),
                    (paged_attention_entry<c10::DeviceType::CUDA, run<c10::DeviceType::CUDA>>));

}  // namespace xllm_kernel::attention
