// The attention group: the paged_attention contract, the declared operation (with its fake kernel),
// the module table and the public API. torch.ops.xllm_kernel.paged_attention reaches the prepared
// bindings through the declared operation (src/ops/common/family.h); the argument checks are in
// checks.cpp.
#include "xllm_kernel/ops/attention.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <vector>

#include "src/ops/attention/internal.h"
#include "src/ops/common/dependencies.h"
#include "src/ops/common/family.h"

namespace xllm_kernel {

const OpContract& paged_attention_contract() {
  static const OpContract contract{
      .operation = "paged_attention",
      .version = 1,
      .schema = "paged_attention(Tensor query, Tensor key_cache, Tensor value_cache, Tensor block_tables, "
                "Tensor query_start_loc, Tensor seq_lens, float scale, float soft_cap, int sliding_window) -> Tensor",
      .mutates = {},
      .numerical_mode = NumericalMode::kFp32Accumulate,
      .semantics =
          "Attention of every query row over its sequence's paged KV cache (decode, prefill, chunked prefill and "
          "mixed batches in one call). Sequence s owns query rows [query_start_loc[s], query_start_loc[s + 1]) "
          "(q_len rows); its row i sits at position p = seq_lens[s] - q_len + i and attends to positions [lo, p], lo "
          "= max(0, p - sliding_window + 1) when sliding_window > 0, else 0. Position j is row j % block_size of "
          "block block_tables[s, j / block_size] of key_cache and value_cache [num_blocks, block_size, kv_heads, "
          "head_size] (what reshape_and_cache writes). Query head h reads KV head h / (q_heads / kv_heads). logit = "
          "scale * q.k, replaced by soft_cap * tanh(logit / soft_cap) when soft_cap > 0; out = softmax(logits) @ V "
          "with float32 accumulation, the running-maximum softmax and one rounding, a new [tokens, q_heads, "
          "head_size] tensor of query's dtype. Cache rows past a sequence's length and blocks outside its table "
          "never affect the output. Non-finite values follow IEEE arithmetic over what a row reads: a NaN in its query head or in a "
          "key it attends to makes that head's row NaN; a key element of +-inf gives a logit of +-inf by the query "
          "element's sign (+-soft_cap with a soft cap, tanh's limit); a logit of -inf gets weight 0, one of +inf makes the "
          "row NaN (inf - inf in the softmax; torch's bfloat16 and float16 SDPA, and so the torch implementations in "
          "those dtypes, give 0 instead); a NaN or infinity in a value it attends to reaches that column of the row "
          "(NaN where +inf and -inf meet). A row of one query (decode) reads nothing else. In a chunk of several rows, a "
          "non-finite key or value at a position one row attends to and another does not (a later position, or before "
          "that row's window) may make the other row NaN: implementations that mask a tile of logits multiply its zero "
          "weights by the values (0 * inf), as torch's SDPA does. A sequence with seq_lens 0 and no rows, and the query rows from query_start_loc[seqs] on, are padding (their output rows are zero). query: any token and head strides, contiguous last dimension, 1 <= head_size "
          "<= 512; caches of query's dtype, one shape, any block/row/head strides; block_tables, query_start_loc, "
          "seq_lens int32; scale > 0, soft_cap >= 0 (0: off), sliding_window <= 0: off. On the CPU "
          "query_start_loc must start at 0, never decrease and end at most at query's rows, 0 <= q_len <= seq_lens[s] <= "
          "max_blocks * block_size, and every block read must be in [0, num_blocks): errors before any compute. On "
          "CUDA (no synchronization) nothing outside the arguments is accessed: a query row that would read an "
          "out-of-range block is NaN, and so are the rows of a sequence whose lengths contradict each other.",
      .dtypes = "float32, bfloat16, float16 (caches in query's dtype); block_tables, query_start_loc, seq_lens int32"};
  return contract;
}

const OpContract& paged_attention_quant_contract() {
  static const OpContract contract{
      .operation = "paged_attention_quant",
      .version = 1,
      .schema = "paged_attention_quant(Tensor query, Tensor key_cache, Tensor value_cache, Tensor key_scale, "
                "Tensor value_scale, Tensor block_tables, Tensor query_start_loc, Tensor seq_lens, float scale, "
                "float soft_cap, int sliding_window) -> Tensor",
      .mutates = {},
      .numerical_mode = NumericalMode::kFp32Accumulate,
      .semantics =
          "paged_attention over the quantized caches reshape_and_cache_quant writes: every key and value element a "
          "query row reads is dequantized first, x = float(q) * scale in float32 (float8_e4m3fn caches: key_scale "
          "and value_scale hold one float32 each, the per-tensor scales; int8 caches: key_scale and value_scale are "
          "float32 [num_blocks, block_size, kv_heads], the scale of each (slot, KV head) row), and the call is then "
          "paged_attention's over those values: the same sequences, positions, masks, soft cap, window, GQA, "
          "padding rows, float32 accumulation and one rounding to query's dtype, and the same rules for values "
          "(an fp8 NaN 0x7F, or an int8 row whose scale is NaN, reads as NaN; rows past a sequence's length and "
          "blocks outside its table, their scales included, never affect the output). query float32, bfloat16 or "
          "float16; caches float8_e4m3fn or int8 (both the same), any block/row/head strides; scales on query's "
          "device, int8 ones with any non-negative strides. Value checks as paged_attention's.",
      .dtypes = "query float32, bfloat16, float16; caches float8_e4m3fn or int8; scales float32; block_tables, "
                "query_start_loc, seq_lens int32"};
  return contract;
}

namespace attention {
namespace {

// The fake checks what metadata can tell (shapes and dtypes) and gives the output's metadata.
at::Tensor paged_attention_fake(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache,
                                const at::Tensor& block_tables, const at::Tensor& query_start_loc,
                                const at::Tensor& seq_lens, double /*scale*/, double /*soft_cap*/,
                                int64_t /*sliding_window*/) {
  TORCH_CHECK(query.dim() == 3, op_name(), ": query must be [tokens, q_heads, head_size], got shape ", query.sizes());
  TORCH_CHECK(key_cache.dim() == 4 && value_cache.sizes() == key_cache.sizes(), op_name(),
              ": key_cache and value_cache must be [num_blocks, block_size, kv_heads, head_size] of one shape, got ",
              key_cache.sizes(), " and ", value_cache.sizes());
  TORCH_CHECK(key_cache.size(3) == query.size(2), op_name(), ": key_cache's head_size must be query's ",
              query.size(2), ", got shape ", key_cache.sizes());
  TORCH_CHECK(block_tables.dim() == 2 && seq_lens.dim() == 1 && block_tables.size(0) == seq_lens.size(0), op_name(),
              ": block_tables must be [seqs, max_blocks] and seq_lens [seqs], got shapes ", block_tables.sizes(),
              " and ", seq_lens.sizes());
  TORCH_CHECK(query_start_loc.dim() == 1 && query_start_loc.size(0) == seq_lens.size(0) + 1, op_name(),
              ": query_start_loc must be [seqs + 1] with seq_lens' seqs = ", seq_lens.size(0), ", got shape ",
              query_start_loc.sizes());
  return new_output(query);
}

at::Tensor paged_attention_quant_fake(const at::Tensor& query, const at::Tensor& key_cache,
                                      const at::Tensor& value_cache, const at::Tensor& key_scale,
                                      const at::Tensor& value_scale, const at::Tensor& block_tables,
                                      const at::Tensor& query_start_loc, const at::Tensor& seq_lens, double scale,
                                      double soft_cap, int64_t sliding_window) {
  const char* name = paged_attention_quant_contract().operation.c_str();
  TORCH_CHECK(key_cache.scalar_type() == at::kFloat8_e4m3fn || key_cache.scalar_type() == at::kChar, name,
              ": key_cache must be float8_e4m3fn or int8, got ", key_cache.scalar_type());
  TORCH_CHECK(key_scale.scalar_type() == at::kFloat && value_scale.scalar_type() == at::kFloat, name,
              ": key_scale and value_scale must be float32, got ", key_scale.scalar_type(), " and ",
              value_scale.scalar_type());
  return paged_attention_fake(query, key_cache, value_cache, block_tables, query_start_loc, seq_lens, scale, soft_cap,
                              sliding_window);
}

const family::DeclaredOperation<PagedAttentionQuantFn>& quant_declared() {
  static const family::DeclaredOperation<PagedAttentionQuantFn> operation(paged_attention_quant_contract(),
                                                                           &paged_attention_quant_fake);
  return operation;
}

// The tensor whose device picks the binding: query (argument 0).
const family::DeclaredOperation<PagedAttentionFn>& declared() {
  static const family::DeclaredOperation<PagedAttentionFn> operation(paged_attention_contract(),
                                                                     &paged_attention_fake);
  return operation;
}

}  // namespace

const family::StandardModules& modules() {
  static const family::StandardModules modules = [] {
    family::StandardModules m = family::standard_modules(
        {.family = "attention",
         .operations = {&paged_attention_operation(), &paged_attention_quant_operation()},
         .domain = "float32/bfloat16/float16 query [tokens, q_heads, head_size] (any token/head strides, head_size <= "
                   "512), caches [num_blocks, block_size, kv_heads, head_size] (any block/row/head strides) of "
                   "query's dtype, or float8_e4m3fn / int8 with their float32 scales (quant), int32 block_tables, "
                   "query_start_loc, seq_lens; decode, prefill, chunked prefill and mixed batches",
         .torch_cuda_modes = {ExecutionMode::kEager},
         .torch_cuda_note = "eager: copies the lengths to the host (one synchronization)"});
    // The default plans size their tiles and key splits from the whole call and the threads (SMs);
    // the batch-invariant variants plan each sequence (row) alone (native_cpu.cpp, cuda/native_cuda.cpp).
    for (BackendModule* module : {&m.native_cpu, &m.native_cuda}) {
      const std::vector<Implementation> defaults = module->implementations;  // one per operation
      for (Implementation invariant : defaults) {
        invariant.variant = "batch_invariant";
        invariant.priority = family::kNativePriority - 5;  // above torch's, below the default's
        invariant.batch_invariant = true;
        module->implementations.push_back(invariant);
      }
    }
    return m;
  }();
  return modules;
}

}  // namespace attention

const TypedOperation<PagedAttentionFn>& paged_attention_operation() { return attention::declared(); }
const TypedOperation<PagedAttentionQuantFn>& paged_attention_quant_operation() { return attention::quant_declared(); }

const Group& attention_group() {
  static const Group group = attention::modules().group();
  return group;
}
XLLM_REGISTER_GROUP(attention_group);
// The caches are what the kv_cache family writes (its layout and quantized formats, csrc/common/kv_cache.h),
// dequantized with the quantization family's e4m3 arithmetic (csrc/common/quantization.h).
XLLM_FAMILY_BUILDS_ON(attention, "kv_cache", "quantization");

namespace ops {

at::Tensor paged_attention(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache,
                           const at::Tensor& block_tables, const at::Tensor& query_start_loc,
                           const at::Tensor& seq_lens, double scale, double soft_cap, int64_t sliding_window) {
  return attention::declared()(query, key_cache, value_cache, block_tables, query_start_loc, seq_lens, scale,
                               soft_cap, sliding_window);
}

at::Tensor paged_attention_quant(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache,
                                 const at::Tensor& key_scale, const at::Tensor& value_scale,
                                 const at::Tensor& block_tables, const at::Tensor& query_start_loc,
                                 const at::Tensor& seq_lens, double scale, double soft_cap, int64_t sliding_window) {
  return attention::quant_declared()(query, key_cache, value_cache, key_scale, value_scale, block_tables,
                                     query_start_loc, seq_lens, scale, soft_cap, sliding_window);
}

}  // namespace ops
}  // namespace xllm_kernel
