// Suite of paged_attention, attention over the paged KV cache.
//
// Options (grid.h, which paged_attention_quant's suite shares): --batch, --seqs, --context, --heads,
// --head-size, --block-size, --soft-cap, --window, --dtype, --layout, --lengths, --chunk, --preset.
// With none given, the validation grid (below);
// the benchmark's default is --preset benchmark, which any shape option replaces (--dtype applies to
// its cases).
//
// A case is a batch: `seqs` sequences of context `context` ("equal" lengths) or of lengths from
// context down to about half of it ("varied": sequence s has context - (s * 7919) % ceil(context /
// 2); with 7 or more sequences, sequence 3 is padding, seq_lens 0 and no query rows, and two
// padding query rows follow the last sequence's). Batch kinds: "decode" (one query row a sequence),
// "prefill" (every position a query row), "chunked" (each sequence's last `chunk` positions),
// "mixed" (sequence 0 a chunk, the others decodes). Blocks are taken from a shuffled list, each
// table has one column more than its longest sequence needs (pointing at a spare block), and the
// spare blocks and every cache row past a sequence's length hold NaN: they must not reach the
// output. Layouts: "contiguous" (query [tokens, q_heads, head_size] and the caches their own
// tensors) and "strided" (query a slice of a [tokens, q_heads + 2 * kv_heads, head_size] qkv
// tensor, the caches the halves of one [num_blocks, 2, block_size, kv_heads, head_size] KV tensor).
// scale = 1 / sqrt(head_size); with a soft cap the query is multiplied by 8 so that the cap bites
// (logits of standard deviation 8 against a cap of 30).
//
// The validation grid covers the peers' test grids (vLLM, FlashInfer, SGLang) axis by axis: every
// batch kind x dtype x heads {32x8, 8x8, 16x1, 40x40, 9x3} x head size {64, 80, 96, 128, 256} once, the
// other axes (seqs {1, 7, 33}, context {1, 15, 16, 17, 97, 512, 2048}, block size {16, 32}, soft
// cap {0, 30}, window {off, 256}, layout, lengths) drawn for each point from a fixed seed; then
// every batch kind x context x window, and head sizes 33 and 67 (rows no SIMD width divides), and
// an empty batch. A point whose reference would cost more than the budget (defaults()) in
// multiply-adds falls back to one sequence, then to a shorter context.
//
// Reference and tolerance: reference.h, in float64 from the pages. The implementations accumulate
// in float32 and round once, so the tolerance is accumulate_tolerance(dtype, keys + head_size)
// (twice the unit roundoff plus a sqrt(n) float32 term) with atol and rtol raised to at least 4
// unit roundoffs of the dtype for the half types: torch's SDPA, the peer, rounds the softmax
// weights to the dtype before multiplying by V.
//
// Bytes, as the performance targets count them: the KV rows each sequence reads (once, whatever
// its query rows), the query rows and the output rows.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "src/numerics/options.h"
#include "src/numerics/tensor_case.h"
#include "src/numerics/verify.h"
#include "src/ops/attention/suites/batches.h"
#include "src/ops/attention/suites/grid.h"
#include "src/ops/attention/suites/reference.h"
#include "xllm_kernel/ops/attention.h"

namespace xllm_kernel::numerics {
namespace {

using namespace paged_batches;  // NOLINT: the attention suites' batches

// The benchmark keeps its caches under this many bytes.
constexpr int64_t kMaxCacheBytes = int64_t{2} << 30;

const Defaults& defaults() {
  static const Defaults d{
      .heads = {"32x8", "8x8", "16x1", "40x40", "9x3"},
      .head_sizes = {64, 80, 96, 128, 256},
      .contexts = {1, 15, 16, 17, 97, 512, 2048},
      .windows = {0, 256},
      .seed = 20261201,
      .budget = double{1} * (1 << 27),
      .preset = "benchmark: the timing cases (decode 1/16/64 seqs x context 1024/4096/16384 under 2 GiB "
                "of cache, prefill 1 x 2048, mixed 512-row chunk + 15 decodes at 4096; 32x8 heads, head 128, "
                "bfloat16, or --dtype's); ignored when a shape option is given [default: none; the benchmark's "
                "default]"};
  return d;
}

void add_arguments(CLI::App& app, SuiteOptions& o) { add_grid_arguments(app, o, defaults()); }

int64_t cache_bytes(const json& p) {
  const Heads h = parse_heads(p.at("heads"));
  const int64_t blocks = cache_blocks(batch_of(p), p.at("block_size"));
  const int64_t es = at::elementSize(options::parse_dtype(p.at("dtype")));
  return 2 * blocks * p.at("block_size").get<int64_t>() * h.kv * p.at("head_size").get<int64_t>() * es;
}

Example build(const json& p, at::Generator& g) {
  const Heads h = parse_heads(p.at("heads"));
  const int64_t head_size = p.at("head_size"), window = p.at("window");
  const double soft_cap = p.at("soft_cap").get<int64_t>();
  const at::ScalarType dtype = options::parse_dtype(p.at("dtype"));
  const bool strided = p.at("layout").get<std::string>() == "strided";
  FloatPages f = float_pages(p, g);
  if (p.value("values", "finite") == "nonfinite") {
    // Kind 6 (logits of +inf) in float32 only: torch's bfloat16 and float16 SDPA give 0 there
    // instead, the deviation the contract states.
    std::vector<int> kinds = {0, 1, 2, 3, 4, 5};
    if (dtype == at::kFloat) kinds.push_back(6);
    plant_nonfinite(f, h, kinds, "paged_attention");
  }
  const Batch& batch = f.batch;
  const Pages& pg = f.pg;
  const int64_t tokens = pg.tokens;
  const at::Tensor query = query_of(f, h, dtype, strided);
  auto [key_cache, value_cache] = empty_caches(f, dtype, strided);
  key_cache.copy_(f.k32);
  value_cache.copy_(f.v32);
  const double scale = 1 / std::sqrt(static_cast<double>(head_size));

  Example ex;
  ex.names = {"query", "key_cache", "value_cache", "block_tables", "query_start_loc", "seq_lens"};
  ex.tensors = {query, key_cache, value_cache, pg.block_tables, pg.query_start_loc, pg.seq_lens};
  ex.mutates = paged_attention_contract().mutates;
  ex.call = [scale, soft_cap, window](const PreparedKernel& k, std::vector<at::Tensor>& t) {
    return std::vector<at::Tensor>{
        k.function<PagedAttentionFn>()(t[0], t[1], t[2], t[3], t[4], t[5], scale, soft_cap, window)};
  };
  ex.reference = [scale, soft_cap, window](const std::vector<at::Tensor>& t) {
    return Expected{{attention::reference_paged_attention(t[0], t[1], t[2], t[3], t[4], t[5], scale, soft_cap, window)},
                    {}};
  };
  const Reads reads = reads_of(batch, window);
  ex.tolerance = attention_tolerance(dtype, reads.keys, head_size);
  const int64_t es = at::elementSize(dtype);
  const int64_t query_bytes = tokens * h.q * head_size * es;
  ex.metadata = {2 * reads.kv_rows * h.kv * head_size * es + query_bytes, query_bytes, 2 * work_of(p), {}};
  // The roofline's compute classes (numerics::CaseMetadata::work): float32 FMA always; bf16 caches
  // also as bf16 dot products and AMX tiles (the CPU kernels' decode and prefill forms) or a
  // matrix unit; half caches a matrix unit.
  const double flops = ex.metadata.flops;
  ex.metadata.work = {{"f32_fma", flops}};
  if (dtype == at::kBFloat16) {
    ex.metadata.work.insert({{"bf16_dot", flops}, {"amx_bf16", flops}, {"matrix_bf16", flops}});
  } else if (dtype == at::kHalf) {
    ex.metadata.work["matrix_f16"] = flops;
  }
  return ex;
}

// The timing cases: decode, prefill and a mixed batch at the sizes engines see.
std::vector<json> benchmark_points() {
  std::vector<json> out;
  for (const int64_t seqs : {1, 16, 64}) {
    for (const int64_t context : {1024, 4096, 16384}) {
      json p = point({.batch = "decode", .seqs = seqs, .context = context, .heads = "32x8", .head_size = 128,
                      .block_size = 16, .dtype = "bfloat16", .layout = "contiguous", .lengths = "equal"});
      if (cache_bytes(p) <= kMaxCacheBytes) out.push_back(p);
    }
  }
  out.push_back(point({.batch = "prefill", .seqs = 1, .context = 2048, .heads = "32x8", .head_size = 128,
                       .block_size = 16, .dtype = "bfloat16", .layout = "contiguous", .lengths = "equal"}));
  out.push_back(point({.batch = "mixed", .seqs = 16, .context = 4096, .heads = "32x8", .head_size = 128,
                       .block_size = 16, .dtype = "bfloat16", .layout = "contiguous", .lengths = "equal",
                       .chunk = 512}));
  return out;
}

std::vector<std::shared_ptr<const KernelCase>> cases(const SuiteOptions& o) {
  std::vector<json> points;
  if (options::given(o, "preset") && !shape_given(o)) {
    // The preset is the benchmark's default: any shape axis the user gives replaces it; --dtype
    // applies to its points.
    for (const json& dtype : options::choices(o, "dtype", {"float32", "bfloat16", "float16"}, {"bfloat16"})) {
      for (json p : benchmark_points()) {
        p["dtype"] = dtype;
        if (cache_bytes(p) <= kMaxCacheBytes) points.push_back(p);
      }
    }
  } else {
    const Defaults& d = defaults();
    const Values v = values(o, d);
    const bool explicit_grid = drawn_given(o, d);
    // The first case is small and general (the bad-input test starts from it): a mixed batch of
    // three sequences.
    if (!explicit_grid && !options::given(o, "batch") && !options::given(o, "dtype") && !options::given(o, "heads") &&
        !options::given(o, "head_size")) {
      points.push_back(point({.batch = "mixed", .seqs = 3, .context = 17, .heads = "9x3", .head_size = 64,
                              .dtype = "float32", .lengths = "varied"}));
    }
    for (json& p : grid_points(o, d)) points.push_back(std::move(p));
    if (!explicit_grid) {
      const std::vector<json> kinds = batch_kinds(o), types = dtypes(o);
      const std::vector<json> &blocks = v.at("block_size"), &caps = v.at("soft_cap"), &layouts = v.at("layout");
      // Every mode x context x window on a small head configuration, the dtypes in turn.
      size_t i = 0;
      for (const auto& mode : kinds) {
        for (const auto& context : v.at("context")) {
          for (const auto& window : v.at("window")) {
            json p = point({.batch = mode, .seqs = 7, .context = context, .heads = "8x8", .head_size = 64,
                            .block_size = blocks[i % blocks.size()].get<int64_t>(),
                            .soft_cap = caps[i % caps.size()].get<int64_t>(), .window = window,
                            .dtype = types[i % types.size()], .layout = layouts[i % layouts.size()],
                            .lengths = "varied"});
            ++i;
            fit(p, d.budget);
            points.push_back(p);
          }
        }
      }
      if (!options::given(o, "head_size")) {
        for (const auto& dtype : types) {
          for (const int64_t head_size : {33, 67}) {
            points.push_back(point({.batch = "mixed", .seqs = 7, .context = 97, .heads = "9x3", .head_size = head_size,
                                    .soft_cap = 30, .dtype = dtype, .layout = "strided", .lengths = "varied"}));
          }
        }
      }
      // NaN and +-inf at positions the rows read (plant_nonfinite), with and without a soft cap.
      if (!options::given(o, "batch") && !options::given(o, "heads") && !options::given(o, "head_size")) {
        for (const auto& dtype : types) {
          for (const int64_t cap : {0, 30}) {
            json p = point({.batch = "decode", .seqs = 7, .context = 97, .heads = "32x8", .head_size = 128,
                            .soft_cap = cap, .dtype = dtype});
            p["values"] = "nonfinite";
            points.push_back(p);
          }
        }
      }
      // An empty batch: one padding sequence, no query rows.
      for (const auto& dtype : types) {
        json p = point({.batch = "decode", .seqs = 1, .context = 16, .heads = "8x8", .head_size = 64, .dtype = dtype});
        p["empty"] = true;
        points.push_back(p);
      }
    }
  }
  std::vector<std::shared_ptr<const KernelCase>> out;
  for (const json& p : points) {
    out.push_back(std::make_shared<TensorCase>(paged_attention_contract().operation, p, build));
  }
  return out;
}

SuiteOptions benchmark_defaults() { return {{"preset", {"benchmark"}}}; }

// The headline case: a decode step of 16 sequences of 1024 tokens, 32 query and 8 KV heads of 128,
// blocks of 16, bfloat16 (its validation copies the whole cache: 4096 tokens would take seconds).
SuiteOptions headline() {
  return {{"batch", {"decode"}},     {"seqs", {"16"}},       {"context", {"1024"}}, {"heads", {"32x8"}},
          {"head_size", {"128"}},    {"block_size", {"16"}}, {"soft_cap", {"0"}},   {"window", {"0"}},
          {"dtype", {"bfloat16"}},   {"layout", {"contiguous"}}, {"lengths", {"equal"}}};
}

}  // namespace

const OperationSuite& paged_attention_suite() {
  static const OperationSuite suite{
      .operation = paged_attention_contract().operation,
      .description = "Attention over the paged KV cache: decode, prefill, chunked prefill and mixed batches",
      .add_arguments = add_arguments,
      .cases = cases,
      .has_reference = true,
      .benchmark_defaults = benchmark_defaults(),
      .headline = headline(),
      .row_shape = row_shape,
      .accepted_bad_inputs = accepted_bad_inputs({}),
      .batch_rows = BatchRows::kFamilyTest,
      .batch_invariance_test = "test/ops/attention/attention_test.cpp: CpuAttention.BatchInvariantRowsAreTheSameAloneAndInAnyBatch"};
  return suite;
}

XLLM_REGISTER_SUITE(paged_attention_suite);

}  // namespace xllm_kernel::numerics
