// The rotary group: the contract, OPERATIONS, backend modules, argument checks every bridge shares,
// public API, fake (Meta) kernel and the dispatcher kernels that route
// torch.ops.xllm_kernel.rotary_embedding to the prepared bindings.
#include "xllm_kernel/ops/rotary.h"

#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "src/core/devices.h"
#include "src/ops/rotary/internal.h"
#include "xllm_kernel/boxing.h"

namespace xllm_kernel {

const OpContract& rotary_embedding_contract() {
  static const OpContract contract{
      .operation = "rotary_embedding",
      .version = 1,
      .schema = "rotary_embedding(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, "
                "Tensor cos_sin_cache, bool is_neox) -> ()",
      .mutates = {"query", "key"},
      .numerical_mode = NumericalMode::kFp32Accumulate,
      .semantics =
          "Rotates the first rot_dim elements of every head of query and key (when given) in place by the angle "
          "of the token's position (vLLM's semantics): with c, s = cos_sin_cache[positions[t]][i], "
          "cos_sin_cache[positions[t]][rot_dim/2 + i], each pair (x1, x2) <- (x1 c - x2 s, x2 c + x1 s), pairs "
          "(x[i], x[i + rot_dim/2]) when is_neox, else (x[2i], x[2i + 1]) (GPT-J); computed in float32 and rounded "
          "once to the dtype; elements past rot_dim are left bitwise unchanged. positions is int64 [tokens]; query "
          "is [tokens, heads * head_size] or [tokens, heads, head_size], key likewise with its own head count "
          "(query's heads a multiple of it) or None; cos_sin_cache is [max_position, rot_dim] (cos, then sin), "
          "rot_dim even and <= head_size. Any token and head strides with a contiguous last dimension: query and "
          "key may be slices of one fused qkv tensor but must not overlap. Zero tokens allowed. Positions outside "
          "[0, max_position): an error on the CPU (before anything is written); on CUDA that token's rows are left "
          "unchanged. Returns nothing.",
      .dtypes = "query and key float32, bfloat16 or float16 (the same); cos_sin_cache float32 or the query's dtype; "
                "positions int64"};
  return contract;
}

const TypedOperation<RotaryEmbeddingFn>& rotary_embedding_operation() {
  static const TypedOperation<RotaryEmbeddingFn> operation(
      rotary_embedding_contract(), &boxed_function<RotaryEmbeddingFn>, &call_boxed<RotaryEmbeddingFn>);
  return operation;
}

namespace rotary {
namespace {

constexpr const char* kOp = "rotary_embedding";
constexpr const char* kDomain =
    "query/key float32/bfloat16/float16 [tokens, heads(*)head_size], cache float32 or query's dtype, "
    "contiguous last dim, any token and head strides, NeoX and GPT-J, partial rotary";

std::vector<Implementation> implementations(const std::string& input_domain, int priority) {
  return {{.operation = &rotary_embedding_operation(), .input_domain = input_domain, .priority = priority}};
}

// `t` as [tokens, heads, head_size]: its heads and strides.
Heads check_heads(const char* arg, const at::Tensor& t, int64_t tokens, int64_t head_size) {
  TORCH_CHECK(t.dim() == 2 || t.dim() == 3, kOp, ": ", arg,
              " must be [tokens, heads * head_size] or [tokens, heads, head_size], got shape ", t.sizes());
  TORCH_CHECK(t.size(0) == tokens, kOp, ": ", arg, " must have ", tokens,
              " tokens (positions' length) in its first dimension, got shape ", t.sizes());
  Heads h;
  if (t.dim() == 2) {
    TORCH_CHECK(t.size(1) % head_size == 0, kOp, ": ", arg, "'s last dimension must be a multiple of head_size ",
                head_size, " ([tokens, heads * head_size]), got ", t.size(1));
    h.heads = t.size(1) / head_size;
    h.head_stride = head_size;
  } else {
    TORCH_CHECK(t.size(2) == head_size, kOp, ": ", arg, "'s last dimension must be head_size ", head_size,
                " ([tokens, heads, head_size]), got ", t.size(2));
    h.heads = t.size(1);
    h.head_stride = t.stride(1);
  }
  TORCH_CHECK(h.heads >= 1, kOp, ": ", arg, " must have at least one head, got shape ", t.sizes());
  h.token_stride = t.stride(0);
  // Written in place: no element may be reachable twice. Dimensions sorted by stride, each stride
  // must clear the extent of the ones inside it (exact for the usual layouts, conservative for
  // interleavings that no model uses).
  std::vector<std::pair<int64_t, int64_t>> dims = {{h.token_stride, tokens}, {h.head_stride, h.heads}};
  std::sort(dims.begin(), dims.end());
  int64_t extent = head_size;
  for (const auto& [stride, size] : dims) {
    if (size <= 1) continue;
    TORCH_CHECK(stride >= extent, kOp, ": ", arg, "'s elements must not overlap each other (it is written in place), "
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
  TORCH_CHECK(t.device() == query.device(), kOp, ": ", arg, " must be on query's device ", query.device(), ", got ",
              t.device());
}

}  // namespace

Layout check_arguments(const at::Tensor& positions, const at::Tensor& query, const std::optional<at::Tensor>& key,
                       int64_t head_size, const at::Tensor& cos_sin_cache, c10::DeviceType device) {
  TORCH_CHECK(positions.defined(), kOp, ": positions must be a defined tensor, got an undefined one");
  TORCH_CHECK(positions.device().type() == device, kOp, ": positions must be on ", c10::DeviceTypeName(device, true),
              " for this implementation, got ", positions.device());
  TORCH_CHECK(positions.scalar_type() == at::kLong, kOp, ": positions must be int64, got ",
              bridge::dtype_name(positions.scalar_type()));
  TORCH_CHECK(positions.dim() == 1, kOp, ": positions must be 1-D [tokens], got shape ", positions.sizes());
  bridge::check_floating_tensor(kOp, "query", query, device);
  TORCH_CHECK(head_size >= 1, kOp, ": head_size must be >= 1, got ", head_size);
  bridge::check_floating_tensor(kOp, "cos_sin_cache", cos_sin_cache, device);
  check_same_device("positions", positions, query);
  check_same_device("cos_sin_cache", cos_sin_cache, query);

  Layout l;
  l.tokens = positions.size(0);
  l.head_size = head_size;
  l.query = check_heads("query", query, l.tokens, head_size);
  const bool has_key = key.has_value() && key->defined();
  if (has_key) {
    bridge::check_floating_tensor(kOp, "key", *key, device);
    check_same_device("key", *key, query);
    TORCH_CHECK(key->scalar_type() == query.scalar_type(), kOp, ": key must have query's dtype ",
                bridge::dtype_name(query.scalar_type()), ", got ", bridge::dtype_name(key->scalar_type()));
    l.key = check_heads("key", *key, l.tokens, head_size);
    TORCH_CHECK(l.query.heads % l.key.heads == 0, kOp, ": query's heads (", l.query.heads,
                ") must be a multiple of key's heads (", l.key.heads, ")");
  }

  TORCH_CHECK(cos_sin_cache.scalar_type() == at::kFloat || cos_sin_cache.scalar_type() == query.scalar_type(), kOp,
              ": cos_sin_cache must be float32 or query's dtype ", bridge::dtype_name(query.scalar_type()), ", got ",
              bridge::dtype_name(cos_sin_cache.scalar_type()));
  TORCH_CHECK(cos_sin_cache.dim() == 2, kOp, ": cos_sin_cache must be 2-D [max_position, rot_dim], got shape ",
              cos_sin_cache.sizes());
  l.max_position = cos_sin_cache.size(0);
  l.rot_dim = cos_sin_cache.size(1);
  TORCH_CHECK(l.rot_dim >= 2 && l.rot_dim % 2 == 0 && l.rot_dim <= head_size, kOp,
              ": cos_sin_cache's last dimension rot_dim must be even and in [2, head_size ", head_size,
              "] (cos and sin halves), got ", l.rot_dim);

  TORCH_CHECK(!has_key || !may_overlap(query, l.query, *key, l.key, l.tokens, head_size), kOp,
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
    TORCH_CHECK(v >= 0 && v < max_position, kOp, ": positions must be in [0, max_position = ", max_position,
                ") (cos_sin_cache's rows), got positions[", i, "] = ", v);
  }
}

at::Tensor as_heads(const at::Tensor& t, const Layout& layout, const Heads& heads) {
  return t.as_strided({layout.tokens, heads.heads, layout.head_size}, {heads.token_stride, heads.head_stride, 1},
                      t.storage_offset());
}

const BackendModule& torch_cpu_module() {
  static const BackendModule module{.name = "rotary.torch_cpu",
                                    .device = Device::kCpu,
                                    .solution = "torch",
                                    .binding = "aten",
                                    .implementations = implementations(std::string("cpu tensors, ") + kDomain, 10)};
  return module;
}

const BackendModule& native_cpu_module() {
  static const BackendModule module{.name = "rotary.native_cpu",
                                    .device = Device::kCpu,
                                    .solution = "native",
                                    .binding = "highway",
                                    .implementations = implementations(std::string("cpu tensors, ") + kDomain, 20),
                                    .probe = &bridge::probe_highway};
  return module;
}

const BackendModule& torch_cuda_module() {
  static const BackendModule module{.name = "rotary.torch_cuda",
                                    .device = Device::kCuda,
                                    .solution = "torch",
                                    .binding = "aten",
                                    .execution_modes = {ExecutionMode::kEager, ExecutionMode::kGraph},
                                    .implementations = implementations(std::string("cuda tensors, ") + kDomain, 10),
                                    .probe = &bridge::probe_torch_cuda};
  return module;
}

// Our CUDA kernel, in the plugin (src/ops/rotary/cuda/).
const BackendModule& native_cuda_module() {
  static const BackendModule module{
      .name = "rotary.native_cuda",
      .device = Device::kCuda,
      .solution = "native",
      .binding = "cuda",
      .execution_modes = {ExecutionMode::kEager, ExecutionMode::kGraph},
      .implementations = implementations(std::string("cuda tensors (sm_80+), ") + kDomain, 20),
      .probe = &bridge::probe_cuda_plugin,
      .plugin = "libxllm_kernel_cuda.so"};
  return module;
}

}  // namespace rotary

const Group& rotary_group() {
  static const Group group{.name = "rotary",
                           .operations = {&rotary_embedding_operation()},
                           .modules = {&rotary::torch_cpu_module(), &rotary::native_cpu_module(),
                                       &rotary::torch_cuda_module(), &rotary::native_cuda_module()}};
  return group;
}
XLLM_REGISTER_GROUP(rotary_group);

namespace ops {

void rotary_embedding(const at::Tensor& positions, at::Tensor& query, const std::optional<at::Tensor>& key,
                      int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox) {
  rotary_embedding_operation().call(detail::device_of("rotary_embedding", query), positions, query, key, head_size,
                                    cos_sin_cache, is_neox);
}

}  // namespace ops

namespace {

// Metadata only: the op returns nothing and mutates its arguments in place.
void rotary_embedding_fake(const at::Tensor& positions, at::Tensor& query, const std::optional<at::Tensor>& key,
                           int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox) {
  TORCH_CHECK(head_size >= 1, "rotary_embedding: head_size must be >= 1, got ", head_size);
  TORCH_CHECK(positions.dim() == 1, "rotary_embedding: positions must be 1-D [tokens], got shape ", positions.sizes());
}

}  // namespace
}  // namespace xllm_kernel

TORCH_LIBRARY_IMPL(xllm_kernel, Meta, m) { m.impl("rotary_embedding", &xllm_kernel::rotary_embedding_fake); }

TORCH_LIBRARY_IMPL(xllm_kernel, CPU, m) { m.impl("rotary_embedding", &xllm_kernel::ops::rotary_embedding); }

TORCH_LIBRARY_IMPL(xllm_kernel, CUDA, m) { m.impl("rotary_embedding", &xllm_kernel::ops::rotary_embedding); }
