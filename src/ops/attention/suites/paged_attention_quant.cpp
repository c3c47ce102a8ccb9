// Suite of paged_attention_quant, attention over the quantized paged KV cache.
//
// Options: those of paged_attention's suite (grid.h: --batch, --seqs, --context, --heads,
// --head-size, --block-size, --soft-cap, --window, --dtype for the query, --layout, --lengths,
// --chunk, --preset) and --cache-dtype (int8, float8_e4m3fn). A case is built as paged_attention's
// (grid.h's float_pages: the same batches, shuffled block tables with a spare column, float32 caches
// of randn in every row a sequence owns and NaN everywhere else), then its caches are quantized as reshape_and_cache_quant writes them
// (src/ops/kv_cache/suites/quant_reference.h, the host functions of csrc/common/quantization.h):
// float8_e4m3fn with one per-tensor scale each, amax / 448 over the finite owned values; int8 per
// (slot, KV head) row. The NaN rows become what a quantized cache holds where nothing was
// written: fp8 0x7F bytes, int8 rows of NaN scale. They must not reach the output. Layouts:
// "contiguous", and "strided" (query a slice of a qkv tensor, the caches the halves of one
// [num_blocks, 2, block_size, kv_heads, head_size] tensor; the int8 key scales the halves of one
// [num_blocks, 2, block_size, kv_heads] tensor and the value scales a transposed
// [num_blocks, kv_heads, block_size] tensor: any scale strides).
//
// The validation grid, small (the reference runs on two CI cores; under 60 cases): a mixed batch
// of three sequences first (the bad-input test starts there); every cache dtype x batch kind x
// query dtype once, heads {32x8, 8x8, 16x1, 9x3} and head size {64, 128} and the other axes drawn
// from a fixed seed; per cache dtype a context sweep ({1, 15, 16, 17, 512} over the batch kinds),
// GQA with a soft cap, windows that bite in prefill and chunked batches, head sizes 67 and 33 (rows
// no SIMD width divides), a long decode batch, "nonfinite" plants (a NaN query element; a NaN key
// element, read as fp8 0x7F or as its int8 row's NaN scale; +inf and NaN in values, which fp8
// saturates to +-448 and int8 turns into a row of scale inf or NaN) and an empty batch. A point
// whose reference would cost more than the budget (defaults()) in multiply-adds falls back to one
// sequence, then to a shorter context.
//
// Reference and tolerance: reference_paged_attention (reference.h) in float64 over the dequantized
// caches, float(q) * scale in float32 as the contract dequantizes, so quantization itself costs no
// tolerance: the rules are paged_attention's for the query's dtype (accumulate_tolerance over
// keys + head_size, at least 4 unit roundoffs for the half types).
//
// Bytes, as the performance targets count them: the KV rows each sequence reads (one byte an
// element, plus an int8 row's scale, or the two fp8 scales), the query rows and the output rows.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>
#include <vector>

#include "src/numerics/options.h"
#include "src/numerics/tensor_case.h"
#include "src/numerics/verify.h"
#include "src/ops/attention/suites/batches.h"
#include "src/ops/attention/suites/grid.h"
#include "src/ops/attention/suites/reference.h"
#include "src/ops/kv_cache/suites/quant_reference.h"
#include "xllm_kernel/ops/attention.h"

namespace xllm_kernel::numerics {
namespace {

using namespace paged_batches;  // NOLINT: the attention suites' batches (paged_attention's)

// The benchmark keeps its caches under this many bytes.
constexpr int64_t kMaxCacheBytes = int64_t{2} << 30;

// paged_attention's axes with smaller defaults (the reference runs on two CI cores), the cache dtype
// first and heads and head size drawn per point; a reference budget an eighth of paged_attention's.
const Defaults& defaults() {
  static const Defaults d{
      .heads = {"32x8", "8x8", "16x1", "9x3"},
      .head_sizes = {64, 128},
      .contexts = {1, 15, 16, 17, 97, 512},
      .windows = {0, 32},
      .seed = 20261203,
      .budget = double{1} * (1 << 24),
      .preset = "benchmark: the timing cases (decode 16 seqs x context 4096, 32x8 heads, head 128, bfloat16 "
                "query or --dtype's, each cache dtype or --cache-dtype's); ignored when a shape option is given "
                "[default: none; the benchmark's default]",
      .quantized = true};
  return d;
}

void add_arguments(CLI::App& app, SuiteOptions& o) { add_grid_arguments(app, o, defaults()); }

at::ScalarType cache_dtype_of(const json& p) {
  return p.at("cache_dtype").get<std::string>() == "int8" ? at::kChar : at::kFloat8_e4m3fn;
}

// Bytes of both caches and their scales (one byte an element).
int64_t cache_bytes(const json& p) {
  const Heads h = parse_heads(p.at("heads"));
  const int64_t block = p.at("block_size");
  return 2 * cache_blocks(batch_of(p), block) * block * h.kv * (p.at("head_size").get<int64_t>() + 4);
}

Example build(const json& p, at::Generator& g) {
  const Heads h = parse_heads(p.at("heads"));
  const int64_t head_size = p.at("head_size"), block = p.at("block_size"), window = p.at("window");
  const double soft_cap = p.at("soft_cap").get<int64_t>();
  const at::ScalarType dtype = options::parse_dtype(p.at("dtype"));
  const at::ScalarType cache_dtype = cache_dtype_of(p);
  const bool int8 = cache_dtype == at::kChar;
  const bool strided = p.at("layout").get<std::string>() == "strided";
  // paged_attention's float pages (NaN in the rows no sequence owns: quantized below into fp8 0x7F
  // and int8 rows of NaN scale).
  FloatPages f = float_pages(p, g);
  // The plants whose quantized form the file comment gives (fp8 saturates an infinite key or a
  // value pair of +-inf to finite values: paged_attention's kinds 3, 4 and 6 would check nothing).
  if (p.value("values", "finite") == "nonfinite") plant_nonfinite(f, h, {0, 1, 2, 5}, "paged_attention_quant");
  const Batch& batch = f.batch;
  const Pages& pg = f.pg;
  const int64_t num_blocks = pg.num_blocks, tokens = pg.tokens;
  const at::Tensor &k32 = f.k32, &v32 = f.v32;
  const at::Tensor query = query_of(f, h, dtype, strided);
  auto [key_cache, value_cache] = empty_caches(f, cache_dtype, strided);
  at::Tensor key_scale, value_scale;
  if (int8) {
    if (strided) {
      key_scale = at::empty({num_blocks, 2, block, h.kv}, at::kFloat).select(1, 0);
      value_scale = at::empty({num_blocks, h.kv, block}, at::kFloat).transpose(1, 2);
    } else {
      key_scale = at::empty({num_blocks, block, h.kv}, at::kFloat);
      value_scale = at::empty({num_blocks, block, h.kv}, at::kFloat);
    }
  } else {
    key_scale = at::full({1}, kv_cache::calibrated_fp8_scale(k32, 1.0f), at::kFloat);
    value_scale = at::full({1}, kv_cache::calibrated_fp8_scale(v32, 1.0f), at::kFloat);
  }
  kv_cache::quantize_cache(key_cache, key_scale, k32);
  kv_cache::quantize_cache(value_cache, value_scale, v32);
  const double scale = 1 / std::sqrt(static_cast<double>(head_size));

  Example ex;
  ex.names = {"query",        "key_cache",       "value_cache", "key_scale", "value_scale",
              "block_tables", "query_start_loc", "seq_lens"};
  ex.tensors = {query, key_cache, value_cache, key_scale, value_scale, pg.block_tables, pg.query_start_loc, pg.seq_lens};
  ex.mutates = paged_attention_quant_contract().mutates;
  ex.call = [scale, soft_cap, window](const PreparedKernel& k, std::vector<at::Tensor>& t) {
    return std::vector<at::Tensor>{k.function<PagedAttentionQuantFn>()(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7],
                                                                       scale, soft_cap, window)};
  };
  ex.reference = [scale, soft_cap, window](const std::vector<at::Tensor>& t) {
    const at::Tensor k = kv_cache::dequantized_cache(t[1], t[3]), v = kv_cache::dequantized_cache(t[2], t[4]);
    return Expected{
        {attention::reference_paged_attention(t[0], k, v, t[5], t[6], t[7], scale, soft_cap, window)}, {}};
  };
  const Reads reads = reads_of(batch, window);
  ex.tolerance = attention_tolerance(dtype, reads.keys, head_size);
  const int64_t es = at::elementSize(dtype);
  const int64_t query_bytes = tokens * h.q * head_size * es;
  const int64_t scale_bytes = int8 ? 2 * reads.kv_rows * h.kv * 4 : 2 * 4;
  ex.metadata = {2 * reads.kv_rows * h.kv * head_size + scale_bytes + query_bytes, query_bytes, 2 * work_of(p), {}};
  // The roofline's compute classes: float32 FMA always (the Highway kernel dequantizes to float32);
  // with a bf16 query also bf16 dot products and AMX tiles (the CPU's decode and prefill kernels
  // convert the rows to bf16 exactly) or a matrix unit, as paged_attention's bf16 cases.
  const double flops = ex.metadata.flops;
  ex.metadata.work = {{"f32_fma", flops}};
  if (dtype == at::kBFloat16) ex.metadata.work.insert({{"bf16_dot", flops}, {"amx_bf16", flops}, {"matrix_bf16", flops}});
  return ex;
}

// The targeted points of one cache dtype (the file comment), for the query dtypes in turn.
std::vector<json> targeted_points(const json& cache_dtype, const std::vector<json>& dtypes, bool nonfinite) {
  std::vector<json> out;
  size_t i = 0;
  auto dtype = [&] { return dtypes[i++ % dtypes.size()].get<std::string>(); };
  const std::string c = cache_dtype;
  // The context sweep: the batch kinds in turn, the layouts alternating.
  const char* kinds[] = {"decode", "prefill", "chunked", "mixed", "decode"};
  const int64_t contexts[] = {1, 15, 16, 17, 512};
  for (size_t k = 0; k < std::size(contexts); ++k) {
    out.push_back(point({.cache_dtype = c, .batch = kinds[k], .seqs = 7, .context = contexts[k], .heads = "8x8",
                         .head_size = 64, .block_size = contexts[k] == 512 ? 32 : 16, .dtype = dtype(),
                         .layout = k % 2 == 0 ? "strided" : "contiguous", .lengths = "varied"}));
  }
  out.push_back(point({.cache_dtype = c, .batch = "decode", .seqs = 7, .context = 97, .heads = "32x8", .head_size = 128,
                       .soft_cap = 30, .dtype = dtype(), .lengths = "varied"}));
  out.push_back(point({.cache_dtype = c, .batch = "prefill", .seqs = 2, .context = 97, .heads = "8x8", .head_size = 64,
                       .window = 32, .dtype = dtype(), .layout = "strided"}));
  out.push_back(point({.cache_dtype = c, .batch = "chunked", .seqs = 7, .context = 97, .heads = "16x1",
                       .head_size = 128, .block_size = 32, .soft_cap = 30, .window = 32, .dtype = dtype(),
                       .layout = "strided", .lengths = "varied"}));
  out.push_back(point({.cache_dtype = c, .batch = "mixed", .seqs = 7, .context = 97, .heads = "9x3", .head_size = 67,
                       .soft_cap = 30, .dtype = dtype(), .layout = "strided", .lengths = "varied"}));
  out.push_back(point({.cache_dtype = c, .batch = "mixed", .seqs = 7, .context = 97, .heads = "9x3", .head_size = 33,
                       .window = 32, .dtype = dtype(), .lengths = "varied"}));
  out.push_back(point({.cache_dtype = c, .batch = "decode", .seqs = 7, .context = 512, .heads = "32x8",
                       .head_size = 128, .window = 256, .dtype = dtype(), .lengths = "varied"}));
  if (nonfinite) {
    for (const int64_t cap : {0, 30}) {
      json p = point({.cache_dtype = c, .batch = "decode", .seqs = 7, .context = 97, .heads = "32x8", .head_size = 128,
                      .soft_cap = cap, .dtype = dtype()});
      p["values"] = "nonfinite";
      out.push_back(p);
    }
  }
  json empty = point({.cache_dtype = c, .batch = "decode", .seqs = 1, .context = 16, .heads = "8x8", .head_size = 64,
                      .dtype = dtype()});
  empty["empty"] = true;
  out.push_back(empty);
  for (json& p : out) fit(p, defaults().budget);
  return out;
}

std::vector<std::shared_ptr<const KernelCase>> cases(const SuiteOptions& o) {
  std::vector<json> points;
  if (options::given(o, "preset") && !shape_given(o)) {
    // The timing cases: decode of 16 sequences at context 4096, 32x8 heads of 128.
    for (const json& cache_dtype : cache_dtypes(o)) {
      for (const json& dtype : options::choices(o, "dtype", {"float32", "bfloat16", "float16"}, {"bfloat16"})) {
        json p = point({.cache_dtype = cache_dtype, .batch = "decode", .seqs = 16, .context = 4096, .heads = "32x8",
                        .head_size = 128, .dtype = dtype});
        if (cache_bytes(p) <= kMaxCacheBytes) points.push_back(p);
      }
    }
  } else {
    const bool explicit_grid = drawn_given(o, defaults());
    // The first case is small and general (the bad-input test starts from it): a mixed batch of
    // three sequences over int8 caches, whose scales have a shape to get wrong.
    if (!explicit_grid && !options::given(o, "batch") && !options::given(o, "dtype") &&
        !options::given(o, "cache_dtype")) {
      points.push_back(point({.cache_dtype = "int8", .batch = "mixed", .seqs = 3, .context = 17, .heads = "9x3",
                              .head_size = 64, .dtype = "float32", .lengths = "varied"}));
    }
    for (json& p : grid_points(o, defaults())) points.push_back(std::move(p));
    if (!explicit_grid && !options::given(o, "batch")) {
      for (const json& cache_dtype : cache_dtypes(o)) {
        for (json& p : targeted_points(cache_dtype, dtypes(o), true)) points.push_back(std::move(p));
      }
    }
  }
  std::vector<std::shared_ptr<const KernelCase>> out;
  for (const json& p : points) {
    out.push_back(std::make_shared<TensorCase>(paged_attention_quant_contract().operation, p, build));
  }
  return out;
}

SuiteOptions benchmark_defaults() { return {{"preset", {"benchmark"}}}; }

// The headline cases: paged_attention's decode step (16 x 1024, 32/8 heads of 128) over fp8 and
// int8 pages.
SuiteOptions headline() {
  return {{"batch", {"decode"}},   {"seqs", {"16"}},       {"context", {"1024"}}, {"heads", {"32x8"}},
          {"head_size", {"128"}},  {"block_size", {"16"}}, {"soft_cap", {"0"}},   {"window", {"0"}},
          {"dtype", {"bfloat16"}}, {"cache_dtype", {"float8_e4m3fn", "int8"}},
          {"layout", {"contiguous"}}, {"lengths", {"equal"}}};
}

}  // namespace

const OperationSuite& paged_attention_quant_suite() {
  static const OperationSuite suite{
      .operation = paged_attention_quant_contract().operation,
      .description = "Attention over the quantized (float8_e4m3fn or int8) paged KV cache: decode, prefill, chunked "
                     "prefill and mixed batches",
      .add_arguments = add_arguments,
      .cases = cases,
      .has_reference = true,
      .benchmark_defaults = benchmark_defaults(),
      .headline = headline(),
      .row_shape = row_shape,
      .accepted_bad_inputs = accepted_bad_inputs({
          {.argument = "key_scale",
           .variant = "non-contiguous last dimension",
           .as = AcceptedAs::kSameResults,
           .why = "int8 scales are read through their strides (any non-negative strides)"},
          {.argument = "value_scale",
           .variant = "non-contiguous last dimension",
           .as = AcceptedAs::kSameResults,
           .why = "int8 scales are read through their strides (any non-negative strides)"},
      }),
      .batch_rows = BatchRows::kFamilyTest,
      .batch_invariance_test =
          "test/ops/attention/attention_quant_test.cpp: CpuAttentionQuant.BatchInvariantRowsAreTheSameAloneAndInAnyBatch"};
  return suite;
}

XLLM_REGISTER_SUITE(paged_attention_quant_suite);

}  // namespace xllm_kernel::numerics
