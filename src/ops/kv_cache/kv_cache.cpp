// The kv_cache group: the reshape_and_cache contract, the declared operation (with its fake
// kernel), the module table and the public API. torch.ops.xllm_kernel.reshape_and_cache reaches the
// prepared bindings through the declared operation (src/ops/common/family.h); the argument checks
// are in checks.cpp.
#include "xllm_kernel/ops/kv_cache.h"

#include <c10/util/Exception.h>

#include "src/ops/kv_cache/internal.h"
#include "src/ops/common/dependencies.h"
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

const OpContract& reshape_and_cache_quant_contract() {
  static const OpContract contract{
      .operation = "reshape_and_cache_quant",
      .version = 1,
      .schema = "reshape_and_cache_quant(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, "
                "Tensor slot_mapping, Tensor(c!) key_scale, Tensor(d!) value_scale) -> ()",
      .mutates = {"key_cache", "value_cache", "key_scale", "value_scale"},
      .numerical_mode = NumericalMode::kExact,
      .semantics =
          "The quantized paged KV-cache write: reshape_and_cache's rows, slots and layout, into caches of one byte "
          "per element. float8_e4m3fn caches (vLLM's kv_cache_dtype=\"fp8\"): key_scale and value_scale hold one "
          "float32 each, given by the caller and only read; each element is q = e4m3(x / scale), a true division "
          "(static_quant multiplies by 1 / scale instead, as vLLM's static quantization does), rounded to nearest "
          "even, |x / scale| >= 448 and infinities saturating to +-448, NaN to 0x7F. int8 caches: key_scale and "
          "value_scale are float32 [num_blocks, block_size, kv_heads], and each written (token, KV head) row of "
          "head_size elements is per_token_quant(row, int8) bit for bit: scale = amax / 127 stored at the row's "
          "(block, offset, head), q = int8(x * (127 / amax)) rounded to nearest even (a row of zeros: scale 0, q 0; "
          "a row with a NaN: scale NaN, q 0; a row with an infinity: scale inf, q 0). Dequantized, x ~ q * scale. "
          "Nothing else of the caches or the scales changes. Caches of one dtype, each block contiguous (any block "
          "stride); the int8 scales with each block's [block_size, kv_heads] contiguous (any block stride), not "
          "overlapping the caches, the inputs or each other. On the CPU an fp8 scale must be positive and finite "
          "(an error); on CUDA it is not read on the host (0 and NaN follow IEEE: x / 0 saturates, 0 / 0 is NaN). "
          "Slots as reshape_and_cache's (CPU: errors before any write; CUDA: out-of-range slots skipped).",
      .dtypes = "key, value float32, bfloat16, float16; caches float8_e4m3fn or int8; scales float32; slot_mapping "
                "int64"};
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

void reshape_and_cache_quant_fake(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                                  at::Tensor& value_cache, const at::Tensor& slot_mapping, at::Tensor& key_scale,
                                  at::Tensor& value_scale) {
  const char* name = reshape_and_cache_quant_contract().operation.c_str();
  TORCH_CHECK(key.dim() == 3 && value.sizes() == key.sizes(), name, ": key and value must be "
              "[tokens, kv_heads, head_size] of one shape, got ", key.sizes(), " and ", value.sizes());
  TORCH_CHECK(key_cache.dim() == 4 && value_cache.sizes() == key_cache.sizes(), name,
              ": key_cache and value_cache must be [num_blocks, block_size, kv_heads, head_size] of "
              "one shape, got ", key_cache.sizes(), " and ", value_cache.sizes());
  TORCH_CHECK(key_cache.scalar_type() == at::kFloat8_e4m3fn || key_cache.scalar_type() == at::kChar, name,
              ": key_cache must be float8_e4m3fn or int8, got ", key_cache.scalar_type());
  TORCH_CHECK(slot_mapping.dim() == 1 && slot_mapping.size(0) == key.size(0), name,
              ": slot_mapping must be 1-D [tokens] with key's tokens = ", key.size(0), ", got shape ",
              slot_mapping.sizes());
  TORCH_CHECK(key_scale.scalar_type() == at::kFloat && value_scale.scalar_type() == at::kFloat, name,
              ": key_scale and value_scale must be float32, got ", key_scale.scalar_type(), " and ",
              value_scale.scalar_type());
}

const family::DeclaredOperation<ReshapeAndCacheQuantFn>& quant_declared() {
  static const family::DeclaredOperation<ReshapeAndCacheQuantFn> operation(reshape_and_cache_quant_contract(),
                                                                            &reshape_and_cache_quant_fake);
  return operation;
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
       .operations = {&reshape_and_cache_operation(), &reshape_and_cache_quant_operation()},
       .domain = "float32/bfloat16/float16 key, value [tokens, kv_heads, head_size] (any token/head strides), caches "
                 "[num_blocks, block_size, kv_heads, head_size] (blocks contiguous, any block stride) of key's dtype, "
                 "or float8_e4m3fn / int8 with their float32 scales (quant), int64 slot_mapping",
       .torch_cuda_modes = {ExecutionMode::kEager},
       .torch_cuda_note = "eager: synchronizes once",
       .batch_invariant = {.native_cpu = true}});
  return modules;
}

}  // namespace kv_cache

const TypedOperation<ReshapeAndCacheFn>& reshape_and_cache_operation() { return kv_cache::declared(); }
const TypedOperation<ReshapeAndCacheQuantFn>& reshape_and_cache_quant_operation() { return kv_cache::quant_declared(); }

const Group& kv_cache_group() {
  static const Group group = kv_cache::modules().group();
  return group;
}
XLLM_REGISTER_GROUP(kv_cache_group);
// The quantized write quantizes with the quantization family's kernels and arithmetic.
XLLM_FAMILY_BUILDS_ON(kv_cache, "quantization");

namespace ops {

void reshape_and_cache(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache, at::Tensor& value_cache,
                       const at::Tensor& slot_mapping) {
  kv_cache::declared()(key, value, key_cache, value_cache, slot_mapping);
}

void reshape_and_cache_quant(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                             at::Tensor& value_cache, const at::Tensor& slot_mapping, at::Tensor& key_scale,
                             at::Tensor& value_scale) {
  kv_cache::quant_declared()(key, value, key_cache, value_cache, slot_mapping, key_scale, value_scale);
}

}  // namespace ops
}  // namespace xllm_kernel
