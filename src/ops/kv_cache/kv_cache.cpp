// The kv_cache group: the reshape_and_cache contract, OPERATIONS, backend modules, the argument
// checks its bridges share, public API, fake (Meta) kernel and the dispatcher kernels that route
// torch.ops.xllm_kernel.reshape_and_cache to the prepared bindings.
#include "xllm_kernel/ops/kv_cache.h"

#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <vector>

#include "src/core/devices.h"
#include "src/ops/kv_cache/internal.h"
#include "xllm_kernel/boxing.h"

namespace xllm_kernel {

const OpContract& reshape_and_cache_contract() {
  static const OpContract contract{
      .operation = "reshape_and_cache",
      .version = 1,
      .schema = "reshape_and_cache(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, "
                "Tensor slot_mapping) -> ()",
      .mutates = {"key_cache", "value_cache"},
      .numerical_mode = NumericalMode::kExact,
      .semantics =
          "The paged KV-cache write (NHD layout, vLLM's reshape_and_cache_flash): for every token t with "
          "s = slot_mapping[t] >= 0, key_cache[s / block_size, s % block_size] = key[t] and value_cache[...] = "
          "value[t], bit for bit; a negative slot skips its token; nothing else of either cache changes. key, value "
          "[tokens, kv_heads, head_size] with any token and head strides and a contiguous last dimension; caches "
          "[num_blocks, block_size, kv_heads, head_size] of key's dtype, each block contiguous, any block stride of "
          "at least one block; slot_mapping int64 [tokens]. The caches must not share an element. A slot >= "
          "num_blocks * block_size or a non-negative slot given twice: an error on the CPU (before any write); on "
          "CUDA an out-of-range slot skips its token, and a duplicated slot ends with each element of its rows "
          "from one of its tokens, not necessarily the same token for every element (cuda.native writes 16-byte "
          "pieces where the rows are aligned).",
      .dtypes = "float32, bfloat16, float16 (caches in key's dtype); slot_mapping int64"};
  return contract;
}

const TypedOperation<ReshapeAndCacheFn>& reshape_and_cache_operation() {
  static const TypedOperation<ReshapeAndCacheFn> operation(
      reshape_and_cache_contract(), &boxed_function<ReshapeAndCacheFn>, &call_boxed<ReshapeAndCacheFn>);
  return operation;
}

namespace kv_cache {
namespace {

constexpr const char* kDomain =
    "float32/bfloat16/float16 key, value [tokens, kv_heads, head_size] (any token/head strides), caches "
    "[num_blocks, block_size, kv_heads, head_size] (blocks contiguous, any block stride), int64 slot_mapping";

std::vector<Implementation> implementations(const std::string& input_domain, int priority) {
  return {{.operation = &reshape_and_cache_operation(), .input_domain = input_domain, .priority = priority}};
}

// [first byte, one past the last byte) a tensor's elements span; empty for no elements.
struct Extent {
  const char* begin = nullptr;
  const char* end = nullptr;
};

Extent extent(const at::Tensor& t) {
  if (t.numel() == 0) return {};
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  const char* begin = static_cast<const char*>(t.const_data_ptr());
  return {begin, begin + (last + 1) * t.element_size()};
}

bool intersect(const Extent& a, const Extent& b) {
  return a.begin != nullptr && b.begin != nullptr && a.begin < b.end && b.begin < a.end;
}

// Whether the two caches (checked layouts: blocks of `block_bytes` contiguous bytes) share an
// element. Interleaved halves of one KV tensor ([num_blocks, 2, ...]) span the same bytes but
// never share an element: same block stride, the blocks' offsets at least a block apart modulo it.
bool caches_overlap(const at::Tensor& k, const at::Tensor& v, int64_t block_bytes) {
  if (!intersect(extent(k), extent(v))) return false;
  if (k.size(0) < 2 || k.stride(0) != v.stride(0)) return true;
  const int64_t period = k.stride(0) * k.element_size();
  const auto* pk = static_cast<const char*>(k.const_data_ptr());
  const auto* pv = static_cast<const char*>(v.const_data_ptr());
  const int64_t r = (pk > pv ? pk - pv : pv - pk) % period;
  return r < block_bytes || period - r < block_bytes;
}

void check_cache(const char* arg, const at::Tensor& cache, const at::Tensor& key, c10::DeviceType device) {
  bridge::check_floating_tensor(kOp, arg, cache, device);
  TORCH_CHECK(cache.dim() == 4, kOp, ": ", arg, " must be 4-D [num_blocks, block_size, kv_heads, head_size], got shape ",
              cache.sizes());
  TORCH_CHECK(cache.scalar_type() == key.scalar_type(), kOp, ": ", arg, " must have key's dtype ",
              bridge::dtype_name(key.scalar_type()), ", got ", bridge::dtype_name(cache.scalar_type()));
  TORCH_CHECK(cache.device() == key.device(), kOp, ": ", arg, " must be on key's device ", key.device(), ", got ",
              cache.device());
  TORCH_CHECK(cache.size(2) == key.size(1) && cache.size(3) == key.size(2), kOp, ": ", arg,
              " must be [num_blocks, block_size, kv_heads, head_size] with key's kv_heads = ", key.size(1),
              " and head_size = ", key.size(2), ", got shape ", cache.sizes());
  TORCH_CHECK(cache.size(1) >= 1, kOp, ": ", arg, " must have block_size >= 1, got shape ", cache.sizes());
  // Each block [block_size, kv_heads, head_size] contiguous (strides of size-1 dims are free).
  const int64_t head = cache.size(3), slot = cache.size(2) * head, block = cache.size(1) * slot;
  const bool contiguous_block = (cache.size(2) <= 1 || cache.stride(2) == head) &&
                                (cache.size(1) <= 1 || cache.stride(1) == slot) &&
                                (cache.size(0) <= 1 || cache.stride(0) >= block);
  TORCH_CHECK(contiguous_block, kOp, ": ", arg,
              " must hold each block contiguously: strides [>= ", block, ", ", slot, ", ", head,
              ", 1] (any block stride of at least one block), got strides ", cache.strides(), " for shape ",
              cache.sizes());
}

}  // namespace

const BackendModule& torch_cpu_module() {
  static const BackendModule module{.name = "kv_cache.torch_cpu",
                                    .device = Device::kCpu,
                                    .solution = "torch",
                                    .binding = "aten",
                                    .implementations = implementations(std::string("cpu tensors, ") + kDomain, 10)};
  return module;
}

const BackendModule& native_cpu_module() {
  static const BackendModule module{.name = "kv_cache.native_cpu",
                                    .device = Device::kCpu,
                                    .solution = "native",
                                    .binding = "highway",
                                    .implementations = implementations(std::string("cpu tensors, ") + kDomain, 20),
                                    .probe = &bridge::probe_highway};
  return module;
}

// Eager only: selecting the in-range slots without a kernel of our own takes a nonzero(), which
// synchronizes with the device and cannot be captured into a graph.
const BackendModule& torch_cuda_module() {
  static const BackendModule module{
      .name = "kv_cache.torch_cuda",
      .device = Device::kCuda,
      .solution = "torch",
      .binding = "aten",
      .execution_modes = {ExecutionMode::kEager},
      .implementations = implementations(std::string("cuda tensors (eager: synchronizes once), ") + kDomain, 10),
      .probe = &bridge::probe_torch_cuda};
  return module;
}

// Our CUDA kernels, in the plugin (src/ops/kv_cache/cuda/).
const BackendModule& native_cuda_module() {
  static const BackendModule module{
      .name = "kv_cache.native_cuda",
      .device = Device::kCuda,
      .solution = "native",
      .binding = "cuda",
      .execution_modes = {ExecutionMode::kEager, ExecutionMode::kGraph},
      .implementations = implementations(std::string("cuda tensors (sm_80+), ") + kDomain, 20),
      .probe = &bridge::probe_cuda_plugin,
      .plugin = "libxllm_kernel_cuda.so"};
  return module;
}

CacheShape check_arguments(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                           const at::Tensor& value_cache, const at::Tensor& slot_mapping, c10::DeviceType device) {
  bridge::check_floating_tensor(kOp, "key", key, device);
  TORCH_CHECK(key.dim() == 3, kOp, ": key must be 3-D [tokens, kv_heads, head_size], got shape ", key.sizes());
  TORCH_CHECK(key.size(1) >= 1 && key.size(2) >= 1, kOp,
              ": key must have kv_heads >= 1 and head_size >= 1 ([tokens, kv_heads, head_size]), got shape ",
              key.sizes());
  bridge::check_floating_tensor(kOp, "value", value, device);
  TORCH_CHECK(value.sizes() == key.sizes(), kOp, ": value must have key's shape ", key.sizes(), ", got ",
              value.sizes());
  TORCH_CHECK(value.scalar_type() == key.scalar_type(), kOp, ": value must have key's dtype ",
              bridge::dtype_name(key.scalar_type()), ", got ", bridge::dtype_name(value.scalar_type()));
  TORCH_CHECK(value.device() == key.device(), kOp, ": value must be on key's device ", key.device(), ", got ",
              value.device());
  check_cache("key_cache", key_cache, key, device);
  check_cache("value_cache", value_cache, key, device);
  TORCH_CHECK(value_cache.sizes() == key_cache.sizes(), kOp, ": value_cache must have key_cache's shape ",
              key_cache.sizes(), ", got ", value_cache.sizes());

  TORCH_CHECK(slot_mapping.defined(), kOp, ": slot_mapping must be a defined tensor, got an undefined one");
  TORCH_CHECK(slot_mapping.scalar_type() == at::kLong, kOp, ": slot_mapping must be int64, got ",
              bridge::dtype_name(slot_mapping.scalar_type()));
  TORCH_CHECK(slot_mapping.device() == key.device(), kOp, ": slot_mapping must be on key's device ", key.device(),
              ", got ", slot_mapping.device());
  TORCH_CHECK(slot_mapping.dim() == 1 && slot_mapping.size(0) == key.size(0), kOp,
              ": slot_mapping must be 1-D [tokens] with key's tokens = ", key.size(0), ", got shape ",
              slot_mapping.sizes());

  CacheShape s;
  s.tokens = key.size(0);
  s.kv_heads = key.size(1);
  s.head_size = key.size(2);
  s.num_blocks = key_cache.size(0);
  s.block_size = key_cache.size(1);
  TORCH_CHECK(!__builtin_mul_overflow(s.num_blocks, s.block_size, &s.slots), kOp,
              ": key_cache's num_blocks * block_size overflows int64, got shape ", key_cache.sizes());

  const int64_t block_bytes = s.block_size * s.kv_heads * s.head_size * key.element_size();
  TORCH_CHECK(!caches_overlap(key_cache, value_cache, block_bytes), kOp,
              ": key_cache and value_cache must not share an element, got overlapping views (key_cache at ",
              key_cache.const_data_ptr(), " strides ", key_cache.strides(), ", value_cache at ",
              value_cache.const_data_ptr(), " strides ", value_cache.strides(), ")");
  const Extent caches[] = {extent(key_cache), extent(value_cache)};
  const char* const cache_names[] = {"key_cache", "value_cache"};
  for (int c = 0; c < 2; ++c) {
    TORCH_CHECK(!intersect(extent(key), caches[c]), kOp, ": key must not overlap ", cache_names[c],
                " (the write would change what it reads), got overlapping memory");
    TORCH_CHECK(!intersect(extent(value), caches[c]), kOp, ": value must not overlap ", cache_names[c],
                " (the write would change what it reads), got overlapping memory");
  }
  return s;
}

namespace {

[[noreturn]] void duplicate_slot(const int64_t* slots, int64_t stride, int64_t tokens, int64_t slot) {
  int64_t first = -1, second = -1;
  for (int64_t t = 0; t < tokens && second < 0; ++t) {
    if (slots[t * stride] != slot) continue;
    (first < 0 ? first : second) = t;
  }
  TORCH_CHECK(false, kOp, ": slot_mapping must not give a non-negative slot twice, got slot ", slot, " for tokens ",
              first, " and ", second);
  std::abort();  // not reached
}

}  // namespace

int64_t check_slots_cpu(const CacheShape& shape, const at::Tensor& slot_mapping) {
  const int64_t* slots = slot_mapping.const_data_ptr<int64_t>();
  const int64_t stride = slot_mapping.stride(0);
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = -1, valid = 0;
  for (int64_t t = 0; t < shape.tokens; ++t) {
    const int64_t s = slots[t * stride];
    if (s < 0) continue;
    TORCH_CHECK(s < shape.slots, kOp, ": slot_mapping[", t, "] = ", s,
                " is out of range: the caches hold num_blocks * block_size = ", shape.num_blocks, " * ",
                shape.block_size, " = ", shape.slots, " slots (a negative slot skips its token)");
    lo = std::min(lo, s);
    hi = std::max(hi, s);
    ++valid;
  }
  if (valid < 2) return valid;
  // Duplicates: a bitmap over [lo, hi] where that range is not much wider than the slots given
  // (prefill and decode batches address nearby blocks), a sorted copy otherwise. Buffers are
  // reused by the calling thread.
  const uint64_t range = static_cast<uint64_t>(hi - lo) + 1;
  if (range <= 64 * static_cast<uint64_t>(valid) + 65536) {
    static thread_local std::vector<uint64_t> seen;
    seen.assign((range + 63) / 64, 0);
    for (int64_t t = 0; t < shape.tokens; ++t) {
      const int64_t s = slots[t * stride];
      if (s < 0) continue;
      const uint64_t i = static_cast<uint64_t>(s - lo), bit = uint64_t{1} << (i % 64);
      if (seen[i / 64] & bit) duplicate_slot(slots, stride, shape.tokens, s);
      seen[i / 64] |= bit;
    }
  } else {
    static thread_local std::vector<int64_t> sorted;
    sorted.clear();
    for (int64_t t = 0; t < shape.tokens; ++t) {
      if (slots[t * stride] >= 0) sorted.push_back(slots[t * stride]);
    }
    std::sort(sorted.begin(), sorted.end());
    const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
    if (dup != sorted.end()) duplicate_slot(slots, stride, shape.tokens, *dup);
  }
  return valid;
}

}  // namespace kv_cache

const Group& kv_cache_group() {
  static const Group group{.name = "kv_cache",
                           .operations = {&reshape_and_cache_operation()},
                           .modules = {&kv_cache::torch_cpu_module(), &kv_cache::native_cpu_module(),
                                       &kv_cache::torch_cuda_module(), &kv_cache::native_cuda_module()}};
  return group;
}
XLLM_REGISTER_GROUP(kv_cache_group);

namespace ops {

void reshape_and_cache(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache, at::Tensor& value_cache,
                       const at::Tensor& slot_mapping) {
  reshape_and_cache_operation().call(detail::device_of("reshape_and_cache", key), key, value, key_cache, value_cache,
                                     slot_mapping);
}

}  // namespace ops

namespace {

// The fake checks what metadata can tell (shapes and dtypes); it writes nothing.
void reshape_and_cache_fake(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                            at::Tensor& value_cache, const at::Tensor& slot_mapping) {
  TORCH_CHECK(key.dim() == 3 && value.sizes() == key.sizes(), "reshape_and_cache: key and value must be "
              "[tokens, kv_heads, head_size] of one shape, got ", key.sizes(), " and ", value.sizes());
  TORCH_CHECK(key_cache.dim() == 4 && value_cache.sizes() == key_cache.sizes(),
              "reshape_and_cache: key_cache and value_cache must be [num_blocks, block_size, kv_heads, head_size] of "
              "one shape, got ", key_cache.sizes(), " and ", value_cache.sizes());
  TORCH_CHECK(slot_mapping.dim() == 1 && slot_mapping.size(0) == key.size(0),
              "reshape_and_cache: slot_mapping must be 1-D [tokens] with key's tokens = ", key.size(0), ", got shape ",
              slot_mapping.sizes());
}

}  // namespace
}  // namespace xllm_kernel

TORCH_LIBRARY_IMPL(xllm_kernel, Meta, m) { m.impl("reshape_and_cache", &xllm_kernel::reshape_and_cache_fake); }

TORCH_LIBRARY_IMPL(xllm_kernel, CPU, m) { m.impl("reshape_and_cache", &xllm_kernel::ops::reshape_and_cache); }

TORCH_LIBRARY_IMPL(xllm_kernel, CUDA, m) { m.impl("reshape_and_cache", &xllm_kernel::ops::reshape_and_cache); }
