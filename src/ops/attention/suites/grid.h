// The options, points and float pages of the attention suites: paged_attention_quant's suite is
// paged_attention's with a cache dtype. Both declare their options with add_grid_arguments (the
// quantized one adds --cache-dtype), draw their validation grid with grid_points and build a case's
// query and float32 caches with float_pages, so a plain and a quantized case of one point have the
// same sequences, tables, values and non-finite plants; each suite keeps its own defaults (Defaults),
// targeted points, timing preset, kernel call and reference.
#pragma once

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "src/core/strings.h"
#include "src/numerics/options.h"
#include "src/numerics/suite.h"
#include "src/numerics/tensor_case.h"
#include "src/ops/attention/suites/batches.h"

namespace xllm_kernel::numerics::paged_batches {

// What one suite's grid draws from when the user gives no value (its --help shows them).
//   Defaults{.heads = {"32x8", "8x8"}, .head_sizes = {64, 128}, .contexts = {1, 97}, .windows = {0, 32},
//            .seed = 20261201, .budget = 1 << 24, .preset = "benchmark: ..."}
struct Defaults {
  std::vector<std::string> heads;  // QxKV
  std::vector<int64_t> head_sizes;
  std::vector<int64_t> contexts;
  std::vector<int64_t> windows;
  uint32_t seed = 0;              // of the axes drawn per point
  double budget = 0;              // the most multiply-adds a validation case's reference may cost
  std::string preset;             // --preset's help
  bool quantized = false;         // a cache_dtype axis first (--cache-dtype), heads and head size drawn
};

// The axes every point has, in the order the grid multiplies or draws them (after cache_dtype and
// batch and dtype, which are always multiplied).
inline const std::vector<const char*>& shape_axes() {
  static const std::vector<const char*> axes = {"heads",  "head_size", "seqs",   "context", "block_size",
                                                "soft_cap", "window",  "layout", "lengths", "chunk"};
  return axes;
}

// A comma list of `values`, for --help.
inline std::string joined(const std::vector<int64_t>& values) {
  std::vector<std::string> texts;
  for (const int64_t v : values) texts.push_back(std::to_string(v));
  return detail::join(texts, ",");
}

inline void add_grid_arguments(CLI::App& app, SuiteOptions& o, const Defaults& d) {
  const std::string drawn = d.quantized ? "drawn from " : "";
  app.add_option("--batch", o["batch"], "Batch kinds: decode,prefill,chunked,mixed [default: all]")->delimiter(',');
  app.add_option("--seqs", o["seqs"], "Sequences a batch (comma list, >= 1) [default: drawn from 1,7,33]")
      ->delimiter(',');
  app.add_option("--context", o["context"],
                 "Context lengths (comma list, >= 1) [default: drawn from " + joined(d.contexts) + "]")
      ->delimiter(',');
  app.add_option("--heads", o["heads"],
                 "Query and KV heads, QxKV (comma list) [default: " + drawn + detail::join(d.heads, ",") + "]")
      ->delimiter(',');
  app.add_option("--head-size", o["head_size"],
                 "Head sizes (comma list, 1..512) [default: " + drawn + joined(d.head_sizes) + ", and 67, 33]")
      ->delimiter(',');
  app.add_option("--block-size", o["block_size"], "Rows a cache block (comma list, >= 1) [default: drawn from 16,32]")
      ->delimiter(',');
  app.add_option("--soft-cap", o["soft_cap"], "Soft caps (comma list, >= 0; 0: off) [default: drawn from 0,30]")
      ->delimiter(',');
  app.add_option("--window", o["window"],
                 "Sliding windows (comma list, >= 0; 0: off) [default: drawn from " + joined(d.windows) + "]")
      ->delimiter(',');
  app.add_option("--dtype", o["dtype"], "Query dtypes: float32,bfloat16,float16 [default: all]")->delimiter(',');
  if (d.quantized) {
    app.add_option("--cache-dtype", o["cache_dtype"], "Cache dtypes: int8,float8_e4m3fn [default: both]")
        ->delimiter(',');
  }
  app.add_option("--layout", o["layout"], "Layouts: contiguous,strided [default: drawn from both]")->delimiter(',');
  app.add_option("--lengths", o["lengths"], "Sequence lengths: equal,varied [default: drawn from both]")
      ->delimiter(',');
  app.add_option("--chunk", o["chunk"], "Query rows of a chunk (chunked, mixed) [default: half the context]")
      ->delimiter(',');
  app.add_option("--preset", o["preset"], d.preset)->check(CLI::IsMember({"benchmark"}));
}

// Whether the user gave a shape axis (batch kind or any of shape_axes()): the preset, the
// benchmark's default, is then replaced by the grid.
inline bool shape_given(const SuiteOptions& o) {
  bool given = options::given(o, "batch");
  for (const char* axis : shape_axes()) given |= options::given(o, axis);
  return given;
}

// A case's values on the suites' axes: the keys of its json point (cache_dtype only when set).
//   point({.batch = "decode", .seqs = 7, .context = 97, .heads = "32x8", .head_size = 128, .dtype = "bfloat16"})
struct Axes {
  std::string cache_dtype = {};  // int8 or float8_e4m3fn; empty: paged_attention's point
  std::string batch = {};        // decode, prefill, chunked or mixed
  int64_t seqs = 0;
  int64_t context = 0;
  std::string heads = {};  // QxKV
  int64_t head_size = 0;
  int64_t block_size = 16;
  int64_t soft_cap = 0;  // 0: off
  int64_t window = 0;    // 0: off
  std::string dtype = {};
  std::string layout = "contiguous";  // or strided
  std::string lengths = "equal";      // or varied
  int64_t chunk = 0;                  // 0: half the context
};

inline json point(const Axes& a) {
  json p = {{"batch", a.batch},         {"seqs", a.seqs},             {"context", a.context},   {"heads", a.heads},
            {"head_size", a.head_size}, {"block_size", a.block_size}, {"soft_cap", a.soft_cap}, {"window", a.window},
            {"dtype", a.dtype},         {"layout", a.layout},         {"lengths", a.lengths},   {"chunk", a.chunk}};
  if (!a.cache_dtype.empty()) p["cache_dtype"] = a.cache_dtype;
  return p;
}

// A validation point within `budget` multiply-adds: one sequence, then shorter contexts.
inline void fit(json& p, double budget) {
  if (work_of(p) <= budget) return;
  p["seqs"] = 1;
  while (work_of(p) > budget && p.at("context").get<int64_t>() > 1) p["context"] = p.at("context").get<int64_t>() / 2;
}

inline std::vector<json> dtypes(const SuiteOptions& o) {
  return options::choices(o, "dtype", {"float32", "bfloat16", "float16"}, {"float32", "bfloat16", "float16"});
}

inline std::vector<json> cache_dtypes(const SuiteOptions& o) {
  return options::choices(o, "cache_dtype", {"int8", "float8_e4m3fn"}, {"int8", "float8_e4m3fn"});
}

inline std::vector<json> batch_kinds(const SuiteOptions& o) {
  return options::choices(o, "batch", {"decode", "prefill", "chunked", "mixed"},
                          {"decode", "prefill", "chunked", "mixed"});
}

// Every axis of shape_axes() and its values: the given ones, else the suite's defaults.
using Values = std::map<std::string, std::vector<json>>;

inline Values values(const SuiteOptions& o, const Defaults& d) {
  return {{"heads", heads_values(o, d.heads)},
          {"head_size", options::integers(o, "head_size", d.head_sizes, 1)},
          {"seqs", options::integers(o, "seqs", {1, 7, 33}, 1)},
          {"context", options::integers(o, "context", d.contexts, 1)},
          {"block_size", options::integers(o, "block_size", {16, 32}, 1)},
          {"soft_cap", options::integers(o, "soft_cap", {0, 30}, 0)},
          {"window", options::integers(o, "window", d.windows, 0)},
          {"layout", options::choices(o, "layout", {"contiguous", "strided"}, {"contiguous", "strided"})},
          {"lengths", options::choices(o, "lengths", {"equal", "varied"}, {"equal", "varied"})},
          {"chunk", options::integers(o, "chunk", {0}, 0)}};
}

// The axes a grid draws per point (shape_axes() but, in paged_attention's, heads and head size,
// which it multiplies).
inline std::vector<std::string> drawn_axes(const Defaults& d) {
  std::vector<std::string> out;
  for (const char* axis : shape_axes()) {
    if (d.quantized || (std::string(axis) != "heads" && std::string(axis) != "head_size")) out.emplace_back(axis);
  }
  return out;
}

// Whether the user gave one of the drawn axes: the grid is then the full product, without a
// suite's first or targeted points.
inline bool drawn_given(const SuiteOptions& o, const Defaults& d) {
  bool given = false;
  for (const std::string& axis : drawn_axes(d)) given |= options::given(o, axis);
  return given;
}

// The validation grid before a suite's targeted points. Multiplied: cache_dtype (quantized), batch
// kind, dtype, and (paged_attention) heads and head size; the other axes of shape_axes() are drawn
// per point from d.seed, in that order (chunk: its first value), and the point fitted to d.budget.
// Once the user gives a drawn axis (drawn_given), the full product of every axis instead (the given
// values and the defaults).
inline std::vector<json> grid_points(const SuiteOptions& o, const Defaults& d) {
  const Values v = values(o, d);
  const std::vector<std::string> drawn = drawn_axes(d);
  std::vector<Dimension> dims;
  if (d.quantized) dims.push_back({"cache_dtype", cache_dtypes(o)});
  dims.push_back({"batch", batch_kinds(o)});
  dims.push_back({"dtype", dtypes(o)});
  if (!d.quantized) {
    dims.push_back({"heads", v.at("heads")});
    dims.push_back({"head_size", v.at("head_size")});
  }
  if (drawn_given(o, d)) {
    for (const std::string& axis : drawn) dims.push_back({axis, v.at(axis)});
    return cartesian(dims);
  }
  std::mt19937 rng(d.seed);
  std::vector<json> out;
  for (json p : cartesian(dims)) {
    for (const std::string& axis : drawn) {
      const std::vector<json>& choices = v.at(axis);
      p[axis] = axis == "chunk" ? choices.front() : choices[rng() % choices.size()];
    }
    fit(p, d.budget);
    out.push_back(std::move(p));
  }
  return out;
}

// A case's sequences, pages and float32 values before they take the implementation's dtypes: the
// caches randn in every row a sequence owns and NaN in the spare blocks and past each length (they
// must not reach the output), the query randn (times 8 with a soft cap, so that the cap bites).
struct FloatPages {
  Batch batch;
  Pages pg;
  at::Tensor q32, k32, v32;  // [tokens, q_heads, head_size], [num_blocks, block, kv_heads, head_size] twice
};

inline FloatPages float_pages(const json& p, at::Generator& g) {
  const Heads h = parse_heads(p.at("heads"));
  const int64_t head_size = p.at("head_size"), block = p.at("block_size");
  FloatPages f;
  f.batch = batch_of(p);
  f.pg = lay_out(f.batch, block, g);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const int64_t n = f.pg.num_blocks;
  f.k32 = at::randn({n, block, h.kv, head_size}, g, at::kFloat).masked_fill_(f.pg.unowned, nan);
  f.v32 = at::randn({n, block, h.kv, head_size}, g, at::kFloat).masked_fill_(f.pg.unowned, nan);
  f.q32 = at::randn({f.pg.tokens, h.q, head_size}, g, at::kFloat);
  if (p.at("soft_cap").get<int64_t>() > 0) f.q32.mul_(8);
  return f;
}

// The query in `dtype` from f.q32: its own [tokens, q_heads, head_size] tensor, or (layout
// strided) a slice of a [tokens, q_heads + 2 * kv_heads, head_size] qkv tensor.
inline at::Tensor query_of(const FloatPages& f, const Heads& h, at::ScalarType dtype, bool strided) {
  if (!strided) return f.q32.to(dtype);
  const at::Tensor qkv = at::zeros({f.q32.size(0), h.q + 2 * h.kv, f.q32.size(2)}, dtype);
  at::Tensor query = qkv.narrow(1, 0, h.q);
  query.copy_(f.q32);
  return query;
}

// Empty key and value caches of f.k32's shape in `dtype`: their own tensors, or (layout strided)
// the halves of one [num_blocks, 2, block_size, kv_heads, head_size] KV tensor.
inline std::pair<at::Tensor, at::Tensor> empty_caches(const FloatPages& f, at::ScalarType dtype, bool strided) {
  const at::IntArrayRef s = f.k32.sizes();
  if (!strided) return {at::empty(s, dtype), at::empty(s, dtype)};
  const at::Tensor kv = at::empty({s[0], 2, s[1], s[2], s[3]}, dtype);
  return {kv.select(1, 0), kv.select(1, 1)};
}

// The "nonfinite" plants, into f's float32 query and caches (before they take their dtypes), one
// kind a sequence (sequence s gets kind s); each suite says which kinds its cases carry and what
// each row must be (the float64 reference decides, over what the query's and caches' dtypes make
// of the plants):
//   0: a NaN in query head 0;
//   1: +inf in a value (position 0, KV head 0, channel 3);
//   2: a NaN in a key (position 1, the last KV head);
//   3: +inf in a key element (position 2, KV head 0, channel 5) against negative query elements;
//   4: +inf and -inf in one value channel (7) at positions 3 and 4 (KV head 0);
//   5: a NaN in a value (position 0, the last KV head, channel 0);
//   6: +inf in a key element (position 2, KV head 1, channel 5) against positive query elements.
// A batch that cannot hold them (a decode batch with a sequence for each kind, long enough for its
// positions, and two KV heads) is a suite error, never a case that checks nothing.
inline void plant_nonfinite(const FloatPages& f, const Heads& h, const std::vector<int>& kinds, const char* suite) {
  static constexpr int64_t kLastPosition[] = {0, 0, 1, 2, 4, 0, 2};
  const std::vector<int32_t>& table = f.pg.table;
  const int64_t width = f.pg.width, block = f.k32.size(1);
  int64_t seqs = 0, len = 1;
  for (const int kind : kinds) {
    seqs = std::max<int64_t>(seqs, kind + 1);
    len = std::max(len, kLastPosition[kind] + 1);
  }
  bool fits = static_cast<int64_t>(f.batch.seqs.size()) >= seqs && h.kv >= 2;
  for (const Sequence& sq : f.batch.seqs) fits = fits && sq.q_len == 1 && sq.len >= len;
  TORCH_CHECK(fits, suite, " suite: a nonfinite case needs a decode batch of >= ", seqs, " sequences of >= ", len,
              " positions and >= 2 KV heads");
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const at::Tensor &q = f.q32, &k = f.k32, &v = f.v32;
  // The cache row of position pos of sequence s, KV head kv.
  auto row = [&](const at::Tensor& cache, int64_t s, int64_t pos, int64_t kv) {
    return cache[table[s * width + pos / block]][pos % block][kv];
  };
  // Element 5 of the query heads of KV head kv, in sequence s's (only) row: made |x| or -|x|.
  auto sign_query = [&](int64_t s, int64_t kv, double sign) {
    const int64_t group = h.q / h.kv;
    at::Tensor e = q[f.pg.qsl[s]].narrow(0, kv * group, group).select(1, 5);
    e.copy_(e.abs().mul_(sign).clamp_(sign > 0 ? 0.5 : -1e30, sign > 0 ? 1e30 : -0.5));
  };
  for (const int kind : kinds) {
    switch (kind) {
      case 0: q[f.pg.qsl[0]][0][0] = nan; break;
      case 1: row(v, 1, 0, 0)[3] = inf; break;
      case 2: row(k, 2, 1, h.kv - 1)[0] = nan; break;
      case 3:
        row(k, 3, 2, 0)[5] = inf;
        sign_query(3, 0, -1);
        break;
      case 4:
        row(v, 4, 3, 0)[7] = inf;
        row(v, 4, 4, 0)[7] = -inf;
        break;
      case 5: row(v, 5, 0, h.kv - 1)[0] = nan; break;
      case 6:
        row(k, 6, 2, 1)[5] = inf;
        sign_query(6, 1, 1);
        break;
      default: TORCH_CHECK(false, suite, " suite: no nonfinite plant of kind ", kind);
    }
  }
}

// The bad-input variants both suites' contracts accept (AcceptedBadInput), `own` (a suite's
// further ones) before the last: padding query rows, block table columns never read, a window
// turned off, and on CUDA query_start_loc's values unchecked.
inline std::vector<AcceptedBadInput> accepted_bad_inputs(std::vector<AcceptedBadInput> own) {
  std::vector<AcceptedBadInput> out = {
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
  };
  for (AcceptedBadInput& a : own) out.push_back(std::move(a));
  out.push_back({.argument = "query",
                 .variant = "empty",
                 .as = AcceptedAs::kEmptyResults,
                 .why = "on CUDA the values of query_start_loc are not checked (a synchronization): its rows past "
                        "query's are never written",
                 .devices = {Device::kCuda}});
  return out;
}

}  // namespace xllm_kernel::numerics::paged_batches
