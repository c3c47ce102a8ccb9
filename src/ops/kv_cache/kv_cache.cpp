// The kv_cache group: the reshape_and_cache contract, the declared operation (with its fake
// kernel), the module table and the public API. torch.ops.xllm_kernel.reshape_and_cache reaches the
// prepared bindings through the declared operation (src/ops/common/family.h); the argument checks
// are in checks.cpp.
#include "xllm_kernel/ops/kv_cache.h"

#include <c10/util/Exception.h>

#include "src/ops/kv_cache/internal.h"
#include "src/ops/common/family.h"

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
          "value[t], bit for bit (NaN payloads, infinities and signed zeros included: a copy, no arithmetic); a negative slot skips its token; nothing else of either cache changes. key, value "
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

namespace kv_cache {
namespace {

// The fake checks what metadata can tell (shapes and dtypes); it writes nothing.
void reshape_and_cache_fake(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                            at::Tensor& value_cache, const at::Tensor& slot_mapping) {
  TORCH_CHECK(key.dim() == 3 && value.sizes() == key.sizes(), op_name(), ": key and value must be "
              "[tokens, kv_heads, head_size] of one shape, got ", key.sizes(), " and ", value.sizes());
  TORCH_CHECK(key_cache.dim() == 4 && value_cache.sizes() == key_cache.sizes(), op_name(),
              ": key_cache and value_cache must be [num_blocks, block_size, kv_heads, head_size] of "
              "one shape, got ", key_cache.sizes(), " and ", value_cache.sizes());
  TORCH_CHECK(slot_mapping.dim() == 1 && slot_mapping.size(0) == key.size(0), op_name(),
              ": slot_mapping must be 1-D [tokens] with key's tokens = ", key.size(0), ", got shape ",
              slot_mapping.sizes());
}

const family::DeclaredOperation<ReshapeAndCacheFn>& declared() {
  static const family::DeclaredOperation<ReshapeAndCacheFn> operation(reshape_and_cache_contract(),
                                                                       &reshape_and_cache_fake);
  return operation;
}

}  // namespace

// cuda.torch is eager only: selecting the in-range slots without a kernel of our own takes a
// nonzero(), which synchronizes with the device and cannot be captured into a graph.
const family::StandardModules& modules() {
  static const family::StandardModules modules = family::standard_modules(
      {.family = "kv_cache",
       .operations = {&reshape_and_cache_operation()},
       .domain = "float32/bfloat16/float16 key, value [tokens, kv_heads, head_size] (any token/head strides), caches "
                 "[num_blocks, block_size, kv_heads, head_size] (blocks contiguous, any block stride), int64 "
                 "slot_mapping",
       .torch_cuda_modes = {ExecutionMode::kEager},
       .torch_cuda_note = "eager: synchronizes once",
       .batch_invariant = {.native_cpu = true}});
  return modules;
}

}  // namespace kv_cache

const TypedOperation<ReshapeAndCacheFn>& reshape_and_cache_operation() { return kv_cache::declared(); }

const Group& kv_cache_group() {
  static const Group group = kv_cache::modules().group();
  return group;
}
XLLM_REGISTER_GROUP(kv_cache_group);

namespace ops {

void reshape_and_cache(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache, at::Tensor& value_cache,
                       const at::Tensor& slot_mapping) {
  kv_cache::declared()(key, value, key_cache, value_cache, slot_mapping);
}

}  // namespace ops
}  // namespace xllm_kernel
