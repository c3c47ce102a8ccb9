// The argument checks every rotary bridge shares (src/ops/rotary/internal.h).
#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "src/ops/rotary/internal.h"
#include "xllm_kernel/ops/rotary.h"

namespace xllm_kernel::rotary {
namespace {

// `t` as [tokens, heads, head_size]: its heads and strides.
Heads check_heads(const char* arg, const at::Tensor& t, int64_t tokens, int64_t head_size) {
  TORCH_CHECK(t.dim() == 2 || t.dim() == 3, op_name(), ": ", arg,
              " must be [tokens, heads * head_size] or [tokens, heads, head_size], got shape ", t.sizes());
  TORCH_CHECK(t.size(0) == tokens, op_name(), ": ", arg, " must have ", tokens,
              " tokens (positions' length) in its first dimension, got shape ", t.sizes());
  Heads h;
  if (t.dim() == 2) {
    TORCH_CHECK(t.size(1) % head_size == 0, op_name(), ": ", arg, "'s last dimension must be a multiple of head_size ",
                head_size, " ([tokens, heads * head_size]), got ", t.size(1));
    h.heads = t.size(1) / head_size;
    h.head_stride = head_size;
  } else {
    TORCH_CHECK(t.size(2) == head_size, op_name(), ": ", arg, "'s last dimension must be head_size ", head_size,
                " ([tokens, heads, head_size]), got ", t.size(2));
    h.heads = t.size(1);
    h.head_stride = t.stride(1);
  }
  TORCH_CHECK(h.heads >= 1, op_name(), ": ", arg, " must have at least one head, got shape ", t.sizes());
  h.token_stride = t.stride(0);
  // Written in place: no element may be reachable twice. Dimensions sorted by stride, each stride
  // must clear the extent of the ones inside it (exact for the usual layouts, conservative for
  // interleavings that no model uses).
  std::vector<std::pair<int64_t, int64_t>> dims = {{h.token_stride, tokens}, {h.head_stride, h.heads}};
  std::sort(dims.begin(), dims.end());
  int64_t extent = head_size;
  for (const auto& [stride, size] : dims) {
    if (size <= 1) continue;
    TORCH_CHECK(stride >= extent, op_name(), ": ", arg, "'s elements must not overlap each other (it is written in place), "
                "got shape ", t.sizes(), " and strides ", t.strides());
    extent = stride * (size - 1) + extent;
  }
  return h;
}

// Whether the heads of two tensors of one storage may share an element. Exact where both step
// through tokens with one stride wider than a token's heads (slices of a fused qkv tensor);
// otherwise compares whole extents (conservative).
bool may_overlap(const at::Tensor& a, const Heads& ha, const at::Tensor& b, const Heads& hb, int64_t tokens,
                 int64_t head_size) {
  if (tokens == 0 || !a.is_alias_of(b)) return false;
  const int64_t span_a = (ha.heads - 1) * ha.head_stride + head_size;
  const int64_t span_b = (hb.heads - 1) * hb.head_stride + head_size;
  const int64_t delta = b.storage_offset() - a.storage_offset();  // b's first element, from a's
  if (tokens == 1) return delta < span_a && delta > -span_b;
  const int64_t stride = ha.token_stride;  // > 0: check_heads rejects a zero stride over tokens
  if (stride == hb.token_stride && stride >= std::max(span_a, span_b)) {
    // Token i of a meets token i + d of b iff -span_b < delta + d * stride < span_a; the largest
    // d with delta + d * stride < span_a decides.
    const int64_t last = tokens - 1;
    const int64_t num = span_a - 1 - delta;
    const int64_t floor = num >= 0 ? num / stride : -((-num + stride - 1) / stride);
    const int64_t d = std::min(last, floor);
    return d >= -last && delta + d * stride > -span_b;
  }
  const int64_t end_a = (tokens - 1) * ha.token_stride + span_a;
  const int64_t end_b = delta + (tokens - 1) * hb.token_stride + span_b;
  return delta < end_a && 0 < end_b;
}

void check_same_device(const char* arg, const at::Tensor& t, const at::Tensor& query) {
  TORCH_CHECK(t.device() == query.device(), op_name(), ": ", arg, " must be on query's device ", query.device(), ", got ",
              t.device());
}

}  // namespace

Layout check_arguments(const Call& call) {
  const at::Tensor& positions = call.positions;
  const at::Tensor& query = call.query;
  const std::optional<at::Tensor>& key = call.key;
  const int64_t head_size = call.head_size;
  const at::Tensor& cos_sin_cache = call.cos_sin_cache;
  const c10::DeviceType device = call.device;
  TORCH_CHECK(positions.defined(), op_name(), ": positions must be a defined tensor, got an undefined one");
  TORCH_CHECK(positions.device().type() == device, op_name(), ": positions must be on ", c10::DeviceTypeName(device, true),
              " for this implementation, got ", positions.device());
  TORCH_CHECK(positions.scalar_type() == at::kLong, op_name(), ": positions must be int64, got ",
              bridge::dtype_name(positions.scalar_type()));
  TORCH_CHECK(positions.dim() == 1, op_name(), ": positions must be 1-D [tokens], got shape ", positions.sizes());
  bridge::check_floating_tensor(op_name(), "query", query, device);
  TORCH_CHECK(head_size >= 1, op_name(), ": head_size must be >= 1, got ", head_size);
  bridge::check_floating_tensor(op_name(), "cos_sin_cache", cos_sin_cache, device);
  check_same_device("positions", positions, query);
  check_same_device("cos_sin_cache", cos_sin_cache, query);

  Layout l;
  l.tokens = positions.size(0);
  l.head_size = head_size;
  l.query = check_heads("query", query, l.tokens, head_size);
  const bool has_key = key.has_value() && key->defined();
  if (has_key) {
    bridge::check_floating_tensor(op_name(), "key", *key, device);
    check_same_device("key", *key, query);
    TORCH_CHECK(key->scalar_type() == query.scalar_type(), op_name(), ": key must have query's dtype ",
                bridge::dtype_name(query.scalar_type()), ", got ", bridge::dtype_name(key->scalar_type()));
    l.key = check_heads("key", *key, l.tokens, head_size);
    TORCH_CHECK(l.query.heads % l.key.heads == 0, op_name(), ": query's heads (", l.query.heads,
                ") must be a multiple of key's heads (", l.key.heads, ")");
  }

  TORCH_CHECK(cos_sin_cache.scalar_type() == at::kFloat || cos_sin_cache.scalar_type() == query.scalar_type(), op_name(),
              ": cos_sin_cache must be float32 or query's dtype ", bridge::dtype_name(query.scalar_type()), ", got ",
              bridge::dtype_name(cos_sin_cache.scalar_type()));
  TORCH_CHECK(cos_sin_cache.dim() == 2, op_name(), ": cos_sin_cache must be 2-D [max_position, rot_dim], got shape ",
              cos_sin_cache.sizes());
  l.max_position = cos_sin_cache.size(0);
  l.rot_dim = cos_sin_cache.size(1);
  TORCH_CHECK(l.rot_dim >= 2 && l.rot_dim % 2 == 0 && l.rot_dim <= head_size, op_name(),
              ": cos_sin_cache's last dimension rot_dim must be even and in [2, head_size ", head_size,
              "] (cos and sin halves), got ", l.rot_dim);

  TORCH_CHECK(!has_key || !may_overlap(query, l.query, *key, l.key, l.tokens, head_size), op_name(),
              ": query and key must not overlap in memory (both are written in place), got query of shape ",
              query.sizes(), ", strides ", query.strides(), " at storage offset ", query.storage_offset(),
              " and key of shape ", key->sizes(), ", strides ", key->strides(), " at storage offset ",
              key->storage_offset(), " in the same storage");
  return l;
}

void check_positions_in_range(const at::Tensor& positions, int64_t max_position) {
  const int64_t* p = positions.const_data_ptr<int64_t>();
  const int64_t n = positions.size(0), stride = positions.stride(0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = p[i * stride];
    TORCH_CHECK(v >= 0 && v < max_position, op_name(), ": positions must be in [0, max_position = ", max_position,
                ") (cos_sin_cache's rows), got positions[", i, "] = ", v);
  }
}

at::Tensor as_heads(const at::Tensor& t, const Layout& layout, const Heads& heads) {
  return t.as_strided({layout.tokens, heads.heads, layout.head_size}, {heads.token_stride, heads.head_stride, 1},
                      t.storage_offset());
}

}  // namespace xllm_kernel::rotary
