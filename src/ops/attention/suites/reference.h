// The float64 reference of paged_attention, from the pages (never from an implementation), for the
// suite and the bridge checks (test/ops/attention/bridge_checks.h).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace xllm_kernel::attention {

// out[t, h] for every query row of every sequence, in float64 on the CPU ([tokens, q_heads,
// head_size]; padding rows zero). Inputs of any dtype and device; the values must be valid (the
// reference checks nothing). Per sequence, its keys and values are read block by block from the
// caches, the rows past its length never touched.
inline at::Tensor reference_paged_attention(const at::Tensor& query, const at::Tensor& key_cache,
                                            const at::Tensor& value_cache, const at::Tensor& block_tables,
                                            const at::Tensor& query_start_loc, const at::Tensor& seq_lens,
                                            double scale, double soft_cap, int64_t window) {
  const at::Tensor q = query.to(at::kCPU, at::kDouble);
  const at::Tensor table = block_tables.to(at::kCPU, at::kLong);
  const at::Tensor qsl = query_start_loc.to(at::kCPU, at::kLong);
  const at::Tensor lens = seq_lens.to(at::kCPU, at::kLong);
  const at::Tensor kc = key_cache.to(at::kCPU), vc = value_cache.to(at::kCPU);
  const int64_t block_size = key_cache.size(1), kv_heads = key_cache.size(2);
  const int64_t q_heads = query.size(1), head_size = query.size(2), group = q_heads / kv_heads;
  at::Tensor out = at::zeros(query.sizes(), at::TensorOptions().dtype(at::kDouble));
  for (int64_t s = 0; s < lens.size(0); ++s) {
    const int64_t begin = qsl[s].item<int64_t>(), q_len = qsl[s + 1].item<int64_t>() - begin;
    const int64_t len = lens[s].item<int64_t>();
    if (q_len == 0) continue;
    const int64_t first = len - q_len;
    const int64_t lo = window > 0 ? std::max<int64_t>(0, first - window + 1) : 0;
    // Keys and values of positions [lo, len), block by block: [keys, kv_heads, head_size].
    std::vector<at::Tensor> ks, vs;
    for (int64_t pos = lo; pos < len;) {
      const int64_t b = pos / block_size, row = pos % block_size;
      const int64_t n = std::min(block_size - row, len - pos);
      const int64_t id = table[s][b].item<int64_t>();
      ks.push_back(kc.select(0, id).narrow(0, row, n).to(at::kDouble));
      vs.push_back(vc.select(0, id).narrow(0, row, n).to(at::kDouble));
      pos += n;
    }
    const at::Tensor k = at::cat(ks).permute({1, 0, 2});  // [kv_heads, keys, head_size]
    const at::Tensor v = at::cat(vs).permute({1, 0, 2});
    // [kv_heads, group, q_len, head_size]
    const at::Tensor qs = q.narrow(0, begin, q_len).permute({1, 0, 2}).reshape({kv_heads, group, q_len, head_size});
    at::Tensor logits = at::matmul(qs, k.unsqueeze(1).transpose(-1, -2)).mul_(scale);  // [.., q_len, keys]
    if (soft_cap > 0) logits = at::tanh(logits / soft_cap).mul_(soft_cap);
    const at::Tensor row_pos = at::arange(first, len, at::kLong).unsqueeze(1);
    const at::Tensor key_pos = at::arange(lo, len, at::kLong).unsqueeze(0);
    at::Tensor visible = key_pos.le(row_pos);
    if (window > 0) visible.logical_and_(key_pos.gt(row_pos - window));
    logits.masked_fill_(visible.logical_not(), -std::numeric_limits<double>::infinity());
    const at::Tensor weights = at::softmax(logits, -1);
    const at::Tensor o = at::matmul(weights, v.unsqueeze(1));  // [kv_heads, group, q_len, head_size]
    out.narrow(0, begin, q_len).copy_(o.reshape({q_heads, q_len, head_size}).permute({1, 0, 2}));
  }
  return out;
}

}  // namespace xllm_kernel::attention
