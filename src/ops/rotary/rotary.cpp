// The rotary group: the contract, the declared operation (with its fake kernel), the module table
// and the public API. torch.ops.xllm_kernel.rotary_embedding reaches the prepared bindings through
// the declared operation (src/ops/common/family.h); the argument checks are in checks.cpp.
#include "xllm_kernel/ops/rotary.h"

#include <c10/util/Exception.h>

#include "src/ops/rotary/internal.h"
#include "src/ops/common/family.h"

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
          "unchanged. Non-finite values follow IEEE arithmetic: a pair holding a NaN gives NaN in both of its elements, "
          "an infinity gives +-inf or NaN (inf * 0 where the sine or cosine is 0) by the formulas above; elements past "
          "rot_dim stay as they are, NaN included. Returns nothing.",
      .dtypes = "query and key float32, bfloat16 or float16 (the same); cos_sin_cache float32 or the query's dtype; "
                "positions int64"};
  return contract;
}

namespace rotary {
namespace {

// Metadata only: the op returns nothing and mutates its arguments in place.
void rotary_embedding_fake(const at::Tensor& positions, at::Tensor& query, const std::optional<at::Tensor>& key,
                           int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox) {
  TORCH_CHECK(head_size >= 1, op_name(), ": head_size must be >= 1, got ", head_size);
  TORCH_CHECK(positions.dim() == 1, op_name(), ": positions must be 1-D [tokens], got shape ", positions.sizes());
}

// query (argument 1) picks the binding's device.
const family::DeclaredOperation<RotaryEmbeddingFn>& declared() {
  static const family::DeclaredOperation<RotaryEmbeddingFn> operation(rotary_embedding_contract(),
                                                                       &rotary_embedding_fake, /*device_argument=*/1);
  return operation;
}

}  // namespace

const family::StandardModules& modules() {
  static const family::StandardModules modules = family::standard_modules(
      {.family = "rotary",
       .operations = {&rotary_embedding_operation()},
       .domain = "query/key float32/bfloat16/float16 [tokens, heads(*)head_size], cache float32 or query's dtype, "
                 "contiguous last dim, any token and head strides, NeoX and GPT-J, partial rotary",
       .batch_invariant = {.native_cpu = true}});
  return modules;
}

}  // namespace rotary

const TypedOperation<RotaryEmbeddingFn>& rotary_embedding_operation() { return rotary::declared(); }

const Group& rotary_group() {
  static const Group group = rotary::modules().group();
  return group;
}
XLLM_REGISTER_GROUP(rotary_group);

namespace ops {

void rotary_embedding(const at::Tensor& positions, at::Tensor& query, const std::optional<at::Tensor>& key,
                      int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox) {
  rotary::declared()(positions, query, key, head_size, cos_sin_cache, is_neox);
}

}  // namespace ops
}  // namespace xllm_kernel
