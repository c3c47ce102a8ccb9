// Suite of paged_attention, attention over the paged KV cache.
//
// Options: --batch, --seqs, --context, --heads, --head-size, --block-size, --soft-cap, --window,
// --dtype, --layout, --lengths, --chunk, --preset. With none given, the validation grid (below);
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
// every batch kind x context x window, and head sizes 33 and 67 (rows no SIMD width divides), and an empty
// batch. A point whose reference would cost more than kBudget multiply-adds falls back to one
// sequence, then to a shorter context.
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
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "src/numerics/options.h"
#include "src/numerics/tensor_case.h"
#include "src/numerics/verify.h"
#include "src/ops/attention/suites/batches.h"
#include "src/ops/attention/suites/reference.h"
#include "xllm_kernel/ops/attention.h"

namespace xllm_kernel::numerics {
namespace {

using namespace paged_batches;  // NOLINT: the attention suites' batches

// The most multiply-adds a validation case's reference may cost.
constexpr double kBudget = double{1} * (1 << 27);
// The benchmark keeps its caches under this many bytes.
constexpr int64_t kMaxCacheBytes = int64_t{2} << 30;

void add_arguments(CLI::App& app, SuiteOptions& o) {
  app.add_option("--batch", o["batch"], "Batch kinds: decode,prefill,chunked,mixed [default: all]")->delimiter(',');
  app.add_option("--seqs", o["seqs"], "Sequences a batch (comma list, >= 1) [default: 1,7,33]")->delimiter(',');
  app.add_option("--context", o["context"], "Context lengths (comma list, >= 1) [default: 1,15,16,17,97,512,2048]")
      ->delimiter(',');
  app.add_option("--heads", o["heads"], "Query and KV heads, QxKV (comma list) [default: 32x8,8x8,16x1,40x40,9x3]")
      ->delimiter(',');
  app.add_option("--head-size", o["head_size"], "Head sizes (comma list, 1..512) [default: 64,80,96,128,256]")
      ->delimiter(',');
  app.add_option("--block-size", o["block_size"], "Rows a cache block (comma list, >= 1) [default: 16,32]")
      ->delimiter(',');
  app.add_option("--soft-cap", o["soft_cap"], "Soft caps (comma list, >= 0; 0: off) [default: 0,30]")->delimiter(',');
  app.add_option("--window", o["window"], "Sliding windows (comma list, >= 0; 0: off) [default: 0,256]")
      ->delimiter(',');
  app.add_option("--dtype", o["dtype"], "Dtypes: float32,bfloat16,float16 [default: all]")->delimiter(',');
  app.add_option("--layout", o["layout"], "Layouts: contiguous,strided [default: both]")->delimiter(',');
  app.add_option("--lengths", o["lengths"], "Sequence lengths: equal,varied [default: both]")->delimiter(',');
  app.add_option("--chunk", o["chunk"], "Query rows of a chunk (chunked, mixed) [default: half the context]")
      ->delimiter(',');
  app.add_option("--preset", o["preset"],
                 "benchmark: the timing cases (decode 1/16/64 seqs x context 1024/4096/16384 under 2 GiB "
                 "of cache, prefill 1 x 2048, mixed 512-row chunk + 15 decodes at 4096; 32x8 heads, head 128, "
                 "bfloat16, or --dtype's); ignored when a shape option is given [default: none; the benchmark's default]")
      ->check(CLI::IsMember({"benchmark"}));
}

std::vector<json> heads_values(const SuiteOptions& o) {
  return paged_batches::heads_values(o, {"32x8", "8x8", "16x1", "40x40", "9x3"});
}

int64_t cache_bytes(const json& p) {
  const Heads h = parse_heads(p.at("heads"));
  const int64_t blocks = cache_blocks(batch_of(p), p.at("block_size"));
  const int64_t es = at::elementSize(options::parse_dtype(p.at("dtype")));
  return 2 * blocks * p.at("block_size").get<int64_t>() * h.kv * p.at("head_size").get<int64_t>() * es;
}

// What plant_nonfinite writes into and where its sequences lie: the batch, its block table
// (`width` columns a row, blocks of `block` positions), its query_start_loc, and build's float32
// query and caches (written in place).
//   plant_nonfinite({.batch = batch, .table = pg.table, .width = pg.width, .qsl = pg.qsl, .block = block, .h = h,
//                    .full_precision = dtype == at::kFloat, .q = q32, .k = k32, .v = v32});
struct Plants {
  const Batch& batch;
  const std::vector<int32_t>& table;
  int64_t width = 0;
  const std::vector<int32_t>& qsl;
  int64_t block = 0;
  const Heads& h;
  bool full_precision = false;  // float32: kind 6 too
  const at::Tensor& q;
  const at::Tensor& k;
  const at::Tensor& v;
};

// The "nonfinite" cases (decode batches of 7 sequences, so that every query row reads every
// position of its sequence): NaN and +-inf planted at positions the rows read, one kind a
// sequence, with the rows each must reach by the contract's IEEE rules (checked against the
// float64 reference: NaN as NaN, an infinity as the same infinity):
//   0: a NaN in query head 0 -> that head's row NaN;
//   1: +inf in a value (position 0, KV head 0, channel 3) -> channel 3 +inf in that group's heads;
//   2: a NaN in a key (position 1, the last KV head) -> that group's rows NaN;
//   3: +inf in a key element (position 2, KV head 0) against negative query elements -> logits of
//      -inf (weight 0: finite rows without that key); with a soft cap -soft_cap;
//   4: +inf and -inf in one value channel at two positions -> that channel NaN;
//   5: a NaN in a value (position 0, the last KV head, channel 0) -> channel 0 NaN in that group;
//   6: float32 only, +inf in a key element (position 2, KV head 1) against positive query elements
//      -> logits of +inf: that group's rows NaN (+-soft_cap with a cap: finite). torch's bfloat16
//      and float16 SDPA give 0 there instead, the deviation the contract states.
void plant_nonfinite(const Plants& in) {
  const std::vector<int32_t>& table = in.table;
  const std::vector<int32_t>& qsl = in.qsl;
  const int64_t width = in.width, block = in.block;
  const Heads& h = in.h;
  const at::Tensor &q = in.q, &k = in.k, &v = in.v;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // The cache row of position pos of sequence s, KV head kv.
  auto row = [&](const at::Tensor& cache, int64_t s, int64_t pos, int64_t kv) {
    return cache[table[s * width + pos / block]][pos % block][kv];
  };
  // Element 5 of the query heads of KV head kv, in sequence s's (only) row: made |x| or -|x|.
  auto sign_query = [&](int64_t s, int64_t kv, double sign) {
    const int64_t group = h.q / h.kv;
    at::Tensor e = q[qsl[s]].narrow(0, kv * group, group).select(1, 5);
    e.copy_(e.abs().mul_(sign).clamp_(sign > 0 ? 0.5 : -1e30, sign > 0 ? 1e30 : -0.5));
  };
  // A case whose shape cannot hold the plants is a suite error, never a case that checks nothing.
  bool fits = static_cast<int64_t>(in.batch.seqs.size()) >= 7 && h.kv >= 2;
  for (const Sequence& sq : in.batch.seqs) fits = fits && sq.q_len == 1 && sq.len >= 5;
  TORCH_CHECK(fits, "paged_attention suite: a nonfinite case needs a decode batch of >= 7 sequences of >= 5 "
              "positions and >= 2 KV heads");
  q[qsl[0]][0][0] = nan;
  row(v, 1, 0, 0)[3] = inf;
  row(k, 2, 1, h.kv - 1)[0] = nan;
  row(k, 3, 2, 0)[5] = inf;
  sign_query(3, 0, -1);
  row(v, 4, 3, 0)[7] = inf;
  row(v, 4, 4, 0)[7] = -inf;
  row(v, 5, 0, h.kv - 1)[0] = nan;
  if (in.full_precision) {
    row(k, 6, 2, 1)[5] = inf;
    sign_query(6, 1, 1);
  }
}

Example build(const json& p, at::Generator& g) {
  const Heads h = parse_heads(p.at("heads"));
  const int64_t head_size = p.at("head_size"), block = p.at("block_size"), window = p.at("window");
  const double soft_cap = p.at("soft_cap").get<int64_t>();
  const at::ScalarType dtype = options::parse_dtype(p.at("dtype"));
  const bool strided = p.at("layout").get<std::string>() == "strided";
  const Batch batch = batch_of(p);
  // Blocks: each sequence's from a shuffled list; three spares (NaN) for the extra table column.
  const Pages pg = lay_out(batch, block, g);
  const int64_t num_blocks = pg.num_blocks, tokens = pg.tokens;

  // Caches: randn in every row a sequence owns, NaN in the spare blocks and past each length.
  const at::Tensor& unowned = pg.unowned;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const at::Tensor k32 = at::randn({num_blocks, block, h.kv, head_size}, g, at::kFloat).masked_fill_(unowned, nan);
  const at::Tensor v32 = at::randn({num_blocks, block, h.kv, head_size}, g, at::kFloat).masked_fill_(unowned, nan);
  at::Tensor q32 = at::randn({tokens, h.q, head_size}, g, at::kFloat);
  if (soft_cap > 0) q32.mul_(8);
  if (p.value("values", "finite") == "nonfinite") {
    plant_nonfinite({.batch = batch, .table = pg.table, .width = pg.width, .qsl = pg.qsl, .block = block, .h = h,
                     .full_precision = dtype == at::kFloat, .q = q32, .k = k32, .v = v32});
  }

  at::Tensor query, key_cache, value_cache;
  if (strided) {
    const at::Tensor qkv = at::zeros({tokens, h.q + 2 * h.kv, head_size}, dtype);
    query = qkv.narrow(1, 0, h.q);
    query.copy_(q32);
    const at::Tensor kv = at::empty({num_blocks, 2, block, h.kv, head_size}, dtype);
    key_cache = kv.select(1, 0);
    value_cache = kv.select(1, 1);
    key_cache.copy_(k32);
    value_cache.copy_(v32);
  } else {
    query = q32.to(dtype);
    key_cache = k32.to(dtype);
    value_cache = v32.to(dtype);
  }
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

// A case's values on the suite's axes: the keys of its json point.
//   point({.batch = "decode", .seqs = 7, .context = 97, .heads = "32x8", .head_size = 128, .block_size = 16,
//          .dtype = "bfloat16", .layout = "contiguous", .lengths = "equal"})
struct Axes {
  std::string batch;  // decode, prefill, chunked or mixed
  int64_t seqs = 0;
  int64_t context = 0;
  std::string heads;  // QxKV
  int64_t head_size = 0;
  int64_t block_size = 0;
  int64_t soft_cap = 0;  // 0: off
  int64_t window = 0;    // 0: off
  std::string dtype;
  std::string layout;   // contiguous or strided
  std::string lengths;  // equal or varied
  int64_t chunk = 0;    // 0: half the context
};

json point(const Axes& a) {
  return {{"batch", a.batch},         {"seqs", a.seqs},             {"context", a.context},   {"heads", a.heads},
          {"head_size", a.head_size}, {"block_size", a.block_size}, {"soft_cap", a.soft_cap}, {"window", a.window},
          {"dtype", a.dtype},         {"layout", a.layout},         {"lengths", a.lengths},   {"chunk", a.chunk}};
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

// A validation point within the budget: one sequence, then shorter contexts.
void fit(json& p) {
  if (work_of(p) <= kBudget) return;
  p["seqs"] = 1;
  while (work_of(p) > kBudget && p.at("context").get<int64_t>() > 1) p["context"] = p.at("context").get<int64_t>() / 2;
}

std::vector<std::shared_ptr<const KernelCase>> cases(const SuiteOptions& o) {
  std::vector<json> points;
  // The preset is the benchmark's default: any shape axis the user gives replaces it; --dtype
  // applies to its points.
  bool axis_given = false;
  for (const char* axis : {"batch", "seqs", "context", "heads", "head_size", "block_size", "soft_cap", "window",
                           "layout", "lengths", "chunk"}) {
    axis_given |= options::given(o, axis);
  }
  if (options::given(o, "preset") && !axis_given) {
    const auto dtypes = options::choices(o, "dtype", {"float32", "bfloat16", "float16"}, {"bfloat16"});
    for (const json& dtype : dtypes) {
      for (json p : benchmark_points()) {
        p["dtype"] = dtype;
        if (cache_bytes(p) <= kMaxCacheBytes) points.push_back(p);
      }
    }
  } else {
    const std::vector<Dimension> dims = {
        {"batch", options::choices(o, "batch", {"decode", "prefill", "chunked", "mixed"},
                                  {"decode", "prefill", "chunked", "mixed"})},
        {"dtype", options::choices(o, "dtype", {"float32", "bfloat16", "float16"}, {"float32", "bfloat16", "float16"})},
        {"heads", heads_values(o)},
        {"head_size", options::integers(o, "head_size", {64, 80, 96, 128, 256}, 1)},
    };
    const auto seqs = options::integers(o, "seqs", {1, 7, 33}, 1);
    const auto contexts = options::integers(o, "context", {1, 15, 16, 17, 97, 512, 2048}, 1);
    const auto blocks = options::integers(o, "block_size", {16, 32}, 1);
    const auto caps = options::integers(o, "soft_cap", {0, 30}, 0);
    const auto windows = options::integers(o, "window", {0, 256}, 0);
    const auto layouts = options::choices(o, "layout", {"contiguous", "strided"}, {"contiguous", "strided"});
    const auto lengths = options::choices(o, "lengths", {"equal", "varied"}, {"equal", "varied"});
    const auto chunks = options::integers(o, "chunk", {0}, 0);
    // Every option given: the full cartesian product of the given axes.
    const bool explicit_grid = options::given(o, "seqs") || options::given(o, "context") ||
                               options::given(o, "block_size") || options::given(o, "soft_cap") ||
                               options::given(o, "window") || options::given(o, "layout") ||
                               options::given(o, "lengths") || options::given(o, "chunk");
    if (explicit_grid) {
      std::vector<Dimension> all = dims;
      all.push_back({"seqs", seqs});
      all.push_back({"context", contexts});
      all.push_back({"block_size", blocks});
      all.push_back({"soft_cap", caps});
      all.push_back({"window", windows});
      all.push_back({"layout", layouts});
      all.push_back({"lengths", lengths});
      all.push_back({"chunk", chunks});
      points = cartesian(all);
    } else {
      // The first case is small and general (the bad-input test starts from it): a mixed batch of
      // three sequences.
      if (!options::given(o, "batch") && !options::given(o, "dtype") && !options::given(o, "heads") &&
          !options::given(o, "head_size")) {
        points.push_back(point({.batch = "mixed", .seqs = 3, .context = 17, .heads = "9x3", .head_size = 64,
                                .block_size = 16, .dtype = "float32", .layout = "contiguous", .lengths = "varied"}));
      }
      std::mt19937 rng(20261201);
      auto pick = [&](const std::vector<json>& values) { return values[rng() % values.size()]; };
      for (json p : cartesian(dims)) {
        p["seqs"] = pick(seqs);
        p["context"] = pick(contexts);
        p["block_size"] = pick(blocks);
        p["soft_cap"] = pick(caps);
        p["window"] = pick(windows);
        p["layout"] = pick(layouts);
        p["lengths"] = pick(lengths);
        p["chunk"] = chunks.front();
        fit(p);
        points.push_back(p);
      }
      // Every mode x context x window on a small head configuration, the two dtypes in turn.
      int64_t i = 0;
      for (const auto& mode : dims[0].values) {
        for (const auto& context : contexts) {
          for (const auto& window : windows) {
            json p = point({.batch = mode, .seqs = 7, .context = context, .heads = "8x8", .head_size = 64,
                            .block_size = blocks[i % blocks.size()].get<int64_t>(),
                            .soft_cap = caps[i % caps.size()].get<int64_t>(), .window = window,
                            .dtype = dims[1].values[i % dims[1].values.size()], .layout = layouts[i % layouts.size()],
                            .lengths = "varied"});
            ++i;
            fit(p);
            points.push_back(p);
          }
        }
      }
      if (!options::given(o, "head_size")) {
        for (const auto& dtype : dims[1].values) {
          for (const int64_t head_size : {33, 67}) {
            points.push_back(point({.batch = "mixed", .seqs = 7, .context = 97, .heads = "9x3", .head_size = head_size,
                                    .block_size = 16, .soft_cap = 30, .dtype = dtype, .layout = "strided",
                                    .lengths = "varied"}));
          }
        }
      }
      // NaN and +-inf at positions the rows read (plant_nonfinite), with and without a soft cap.
      if (!options::given(o, "batch") && !options::given(o, "heads") && !options::given(o, "head_size")) {
        for (const auto& dtype : dims[1].values) {
          for (const int64_t cap : {0, 30}) {
            json p = point({.batch = "decode", .seqs = 7, .context = 97, .heads = "32x8", .head_size = 128,
                            .block_size = 16, .soft_cap = cap, .dtype = dtype, .layout = "contiguous",
                            .lengths = "equal"});
            p["values"] = "nonfinite";
            points.push_back(p);
          }
        }
      }
      // An empty batch: one padding sequence, no query rows.
      for (const auto& dtype : dims[1].values) {
        json p = point({.batch = "decode", .seqs = 1, .context = 16, .heads = "8x8", .head_size = 64,
                        .block_size = 16, .dtype = dtype, .layout = "contiguous", .lengths = "equal"});
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
      .accepted_bad_inputs = {
          {.argument = "query",
           .variant = "dim 0 + 1",
           .as = AcceptedAs::kValidPrefix,
           .why = "query rows from query_start_loc[seqs] on are padding: their output rows are zero"},
          {.argument = "block_tables",
           .variant = "dim 1 + 1",
           .as = AcceptedAs::kSameResults,
           .why = "block table columns past a sequence's blocks are never read"},
          {.argument = "sliding_window",
           .variant = "negative",
           .as = AcceptedAs::kSameResults,
           .why = "sliding_window <= 0 turns the window off (the valid call has none)"},
          {.argument = "sliding_window",
           .variant = "0",
           .as = AcceptedAs::kSameResults,
           .why = "sliding_window <= 0 turns the window off (the valid call has none)"},
          {.argument = "query",
           .variant = "empty",
           .as = AcceptedAs::kEmptyResults,
           .why = "on CUDA the values of query_start_loc are not checked (a synchronization): its rows past "
                  "query's are never written",
           .devices = {Device::kCuda}},
      },
      .batch_rows = BatchRows::kFamilyTest,
      .batch_invariance_test = "test/ops/attention/attention_test.cpp: CpuAttention.BatchInvariantRowsAreTheSameAloneAndInAnyBatch"};
  return suite;
}

XLLM_REGISTER_SUITE(paged_attention_suite);

}  // namespace xllm_kernel::numerics
