// Suite of reshape_and_cache, the paged KV-cache write.
//
// Options: --tokens, --head-size, --kv-heads, --block-size, --num-blocks, --dtype, --layout, --slots.
// Cases from vLLM's and FlashInfer's test grids: head_size 64, 80, 96, 128, 256; kv_heads 8 and 1;
// blocks of 16 and 32 (plus head_size 67, rows no SIMD width divides, and zero tokens).
// Slots: "random" (vLLM's tests and benchmark: distinct slots in random order, about one token in
// eight padding, -1) and "prefill" (what a prefill batch writes: sequences of 1 to 1024 tokens,
// each filling fresh blocks in order, the blocks taken from a shuffled free list).
// Layouts: "contiguous" (key, value and caches each their own tensor) and "fused" (key and value
// slices of a [tokens, 3, kv_heads, head_size] qkv tensor, the caches the two halves of one
// [num_blocks, 2, block_size, kv_heads, head_size] KV tensor: strided rows, interleaved blocks).
//
// Reference and tolerance: the operator copies, so the expected caches are their old values with
// each addressed slot replaced by its token's row, built in float64 row by row (reference.h: no
// kernel, no index op). Tolerance is zero: every value is finite and non-zero (inputs and old
// caches from randn, caches offset away from 0), and for such values equality in float64 is
// equality of the bits; the "nonfinite" cases plant NaN and +-inf in key and value, which must
// arrive as NaN and the same infinity (their exact bits, NaN payloads included, are checked by
// test/ops/kv_cache/bridge_checks.h on random bit patterns). The whole storage of both caches is checked: the addressed rows, every
// other slot unchanged, and (layout fused) the other half of the KV tensor unchanged (the runner
// compares the rest of a mutated argument's storage bitwise).
//
// Bytes, as the performance targets count them: the key and value rows of the tokens with a
// slot, read and written into the caches; slot_mapping (8 bytes a token) is not counted.
#include <algorithm>
#include <cmath>

#include "src/numerics/options.h"
#include "src/numerics/tensor_case.h"
#include "src/numerics/verify.h"
#include "src/ops/kv_cache/suites/reference.h"
#include "src/ops/kv_cache/suites/grid.h"
#include "xllm_kernel/ops/kv_cache.h"

namespace xllm_kernel::numerics {
namespace {

void add_arguments(CLI::App& app, SuiteOptions& o) { kv_cache::add_arguments(app, o, /*quantized=*/false); }

at::Tensor cache_values(at::IntArrayRef shape, at::ScalarType dtype, at::Generator& g) {
  return (at::randn(shape, g, at::kDouble) + 4).to(dtype);
}

// The expected cache in float64: the old values with each addressed slot's row replaced.
at::Tensor expected_cache(const at::Tensor& cache, const at::Tensor& rows, const at::Tensor& slots) {
  at::Tensor want = cache.to(at::kCPU, at::kDouble, /*non_blocking=*/false, /*copy=*/true);
  kv_cache::reference_reshape_and_cache(want, rows, slots);
  return want;
}

Example build(const json& p, at::Generator& g) {
  const int64_t tokens = p.at("tokens"), head_size = p.at("head_size"), kv_heads = p.at("kv_heads");
  const at::ScalarType dtype = options::parse_dtype(p.at("dtype"));
  auto [key, value, key_cache, value_cache] =
      kv_cache::tensors_of(p, dtype, g, [&](at::IntArrayRef shape) { return cache_values(shape, dtype, g); });
  if (p.value("values", "finite") == "nonfinite" && tokens > 2) {
    // NaN and +-inf are copied like any value (compared as NaN and the same infinity).
    key[0][0][0].fill_(std::nan(""));
    key[1][kv_heads - 1][head_size - 1].fill_(INFINITY);
    value[2][0][1].fill_(-INFINITY);
    value[0][kv_heads - 1][head_size / 2].fill_(std::nan(""));
  }
  const at::Tensor slots = kv_cache::slots_of(p, g);

  Example ex;
  ex.names = {"key", "value", "key_cache", "value_cache", "slot_mapping"};
  ex.tensors = {key, value, key_cache, value_cache, slots};
  ex.mutates = reshape_and_cache_contract().mutates;
  ex.call = [](const PreparedKernel& k, std::vector<at::Tensor>& t) {
    k.function<ReshapeAndCacheFn>()(t[0], t[1], t[2], t[3], t[4]);
    return std::vector<at::Tensor>{};
  };
  ex.reference = [](const std::vector<at::Tensor>& t) {
    return Expected{{},
                    {{"key_cache", expected_cache(t[2], t[0], t[4])},
                     {"value_cache", expected_cache(t[3], t[1], t[4])}}};
  };
  ex.tolerance = Tolerance{0, 0};  // a copy: bit for bit (see the file comment)
  const int64_t written = slots.ge(0).sum().item<int64_t>();
  const int64_t row_bytes = kv_heads * head_size * key.element_size();
  ex.metadata = {2 * written * row_bytes, 2 * written * row_bytes, 0.0, {}};
  return ex;
}

// Enough blocks for the tokens, and a few more so that the untouched slots are checked too.
std::vector<std::shared_ptr<const KernelCase>> cases(const SuiteOptions& o) {
  std::vector<json> points = kv_cache::grid_points(o, /*quantized=*/false);
  const std::vector<json> layouts = kv_cache::layouts(o), slots = kv_cache::slot_kinds(o);
  // Zero tokens, and rows no SIMD width divides (head_size 67: the copies' tails), unless the
  // user chose the tokens or head sizes.
  for (const auto& dtype : kv_cache::dtypes(o)) {
    if (!options::given(o, "tokens")) {
      points.push_back(kv_cache::targeted({.dtype = dtype, .tokens = 0, .head_size = 128, .kv_heads = 8,
                                           .num_blocks = 2, .layout = "contiguous", .slots = slots.front()}));
    }
    if (!options::given(o, "tokens") && !options::given(o, "head_size")) {  // non-finite key and value values
      for (const auto& layout : layouts) {
        points.push_back(kv_cache::targeted({.dtype = dtype, .tokens = 37, .head_size = 128, .kv_heads = 2,
                                             .layout = layout, .slots = slots.front(), .values = "nonfinite"}));
      }
    }
    if (!options::given(o, "head_size")) {
      for (const auto& layout : layouts) {
        for (const auto& slot : slots) {
          points.push_back(kv_cache::targeted(
              {.dtype = dtype, .tokens = 37, .head_size = 67, .kv_heads = 2, .layout = layout, .slots = slot}));
        }
      }
    }
  }
  std::vector<std::shared_ptr<const KernelCase>> out;
  for (const json& point : points) {
    out.push_back(std::make_shared<TensorCase>(reshape_and_cache_contract().operation, point, build));
  }
  return out;
}

SuiteOptions headline() {
  return {{"tokens", {"16", "512"}}, {"head_size", {"128"}}, {"kv_heads", {"8"}}, {"block_size", {"16"}},
          {"num_blocks", {"256"}},     {"dtype", {"bfloat16"}},  {"layout", {"contiguous"}}, {"slots", {"random"}}};
}

SuiteOptions benchmark_defaults() {
  return {{"tokens", {"1", "128", "8192"}}, {"head_size", {"128"}}, {"kv_heads", {"8"}}, {"block_size", {"16"}},
          {"num_blocks", {"4096"}},         {"dtype", {"bfloat16"}},  {"layout", {"contiguous"}},
          {"slots", {"prefill", "random"}}};
}

// The rows the kernels copy (each head of each token) and their width (head_size).
}  // namespace

const OperationSuite& reshape_and_cache_suite() {
  static const OperationSuite suite{
      .operation = reshape_and_cache_contract().operation,
      .description = "Paged KV-cache write (NHD): key/value rows into their slots, -1 skipped",
      .add_arguments = add_arguments,
      .cases = cases,
      .has_reference = true,
      .benchmark_defaults = benchmark_defaults(),
      .headline = headline(),
      .row_shape = kv_cache::row_shape,
      // slot_mapping is read through its stride. (A cache one block larger is rejected: value_cache
      // must have key_cache's shape.)
      .accepted_bad_inputs = {{"slot_mapping", "non-contiguous last dimension", AcceptedAs::kSameResults,
                               "slot_mapping is read through its stride"}}};
  return suite;
}

XLLM_REGISTER_SUITE(reshape_and_cache_suite);

}  // namespace xllm_kernel::numerics
