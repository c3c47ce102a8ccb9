// The options, points and tensors of the KV-cache write suites: reshape_and_cache_quant's suite is
// reshape_and_cache's with a cache dtype. Both declare their options with add_arguments (the
// quantized one adds --cache-dtype), take their grid from grid_points and build a case's key, value
// and caches with tensors_of (the same draws from the same generator), so a plain and a quantized
// case of one point write the same rows into the same slots; each suite keeps its own targeted
// points (targeted), old cache contents, reference and tolerance.
#pragma once

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "src/numerics/options.h"
#include "src/numerics/tensor_case.h"
#include "src/ops/kv_cache/suites/slots.h"

namespace xllm_kernel::numerics::kv_cache {

// The shape axes: multiplied in reshape_and_cache's grid; drawn per point from a fixed seed in the
// quantized one (whose reference runs element by element) unless one of them is given.
inline const std::vector<const char*>& shape_axes() {
  static const std::vector<const char*> axes = {"head_size", "kv_heads", "block_size"};
  return axes;
}

inline void add_arguments(CLI::App& app, SuiteOptions& o, bool quantized) {
  const std::string drawn = quantized ? "drawn from " : "";
  app.add_option("--tokens", o["tokens"], "Tokens (comma list; 0 allowed) [default: 1,37,160 and 0]")->delimiter(',');
  app.add_option("--head-size", o["head_size"],
                 "Head sizes (comma list, >= 1) [default: " + drawn + "64,80,96,128,256, and 67 for tails]")
      ->delimiter(',');
  app.add_option("--kv-heads", o["kv_heads"], "KV heads (comma list, >= 1) [default: " + drawn + "8,1]")
      ->delimiter(',');
  app.add_option("--block-size", o["block_size"],
                 "Slots per cache block (comma list, >= 1) [default: " + drawn + "16,32]")
      ->delimiter(',');
  app.add_option("--num-blocks", o["num_blocks"],
                 "Cache blocks (comma list, >= 1) [default: enough for the tokens and a few more]")
      ->delimiter(',');
  app.add_option("--dtype", o["dtype"], "Key and value dtypes: float32,bfloat16,float16 [default: all]")
      ->delimiter(',');
  if (quantized) {
    app.add_option("--cache-dtype", o["cache_dtype"], "Cache dtypes: int8,float8_e4m3fn [default: both]")
        ->delimiter(',');
  }
  app.add_option("--layout", o["layout"], "Layouts: contiguous,fused [default: both]")->delimiter(',');
  app.add_option("--slots", o["slots"], "Slot patterns: random,prefill [default: both]")->delimiter(',');
}

// The blocks a case's cache holds unless --num-blocks is given: enough for its tokens, and three more.
inline int64_t default_blocks(int64_t tokens, int64_t block_size) { return (tokens + block_size - 1) / block_size + 3; }

inline std::vector<json> dtypes(const SuiteOptions& o) {
  return options::choices(o, "dtype", {"float32", "bfloat16", "float16"}, {"float32", "bfloat16", "float16"});
}
inline std::vector<json> cache_dtypes(const SuiteOptions& o) {
  return options::choices(o, "cache_dtype", {"int8", "float8_e4m3fn"}, {"int8", "float8_e4m3fn"});
}
inline std::vector<json> layouts(const SuiteOptions& o) {
  return options::choices(o, "layout", {"contiguous", "fused"}, {"contiguous", "fused"});
}
inline std::vector<json> slot_kinds(const SuiteOptions& o) {
  return options::choices(o, "slots", {"random", "prefill"}, {"random", "prefill"});
}

// The grid before a suite's targeted points: every point of cache_dtype (quantized) x dtype x
// tokens {1, 37, 160} x the shape axes x layout x slots, the shape axes drawn per point from
// `seed` instead when quantized and none of them is given; each point with every --num-blocks
// value, or default_blocks.
inline std::vector<json> grid_points(const SuiteOptions& o, bool quantized, uint32_t seed = 0) {
  bool shapes_given = false;
  for (const char* axis : shape_axes()) shapes_given |= options::given(o, axis);
  const bool draw = quantized && !shapes_given;
  const std::vector<json> shapes[] = {options::integers(o, "head_size", {64, 80, 96, 128, 256}, 1),
                                      options::integers(o, "kv_heads", {8, 1}, 1),
                                      options::integers(o, "block_size", {16, 32}, 1)};
  std::vector<Dimension> dims;
  if (quantized) dims.push_back({"cache_dtype", cache_dtypes(o)});
  dims.push_back({"dtype", dtypes(o)});
  dims.push_back({"tokens", options::integers(o, "tokens", {1, 37, 160}, 0)});
  for (size_t a = 0; a < shape_axes().size() && !draw; ++a) dims.push_back({shape_axes()[a], shapes[a]});
  dims.push_back({"layout", layouts(o)});
  dims.push_back({"slots", slot_kinds(o)});
  std::mt19937 rng(seed);
  const bool blocks_given = options::given(o, "num_blocks");
  const std::vector<json> blocks = options::integers(o, "num_blocks", {1}, 1);
  std::vector<json> points;
  for (json point : cartesian(dims)) {
    for (size_t a = 0; a < shape_axes().size() && draw; ++a) {
      point[shape_axes()[a]] = shapes[a][rng() % shapes[a].size()];
    }
    if (!blocks_given) {
      point["num_blocks"] = default_blocks(point.at("tokens").get<int64_t>(), point.at("block_size").get<int64_t>());
      points.push_back(point);
      continue;
    }
    for (const json& n : blocks) {
      point["num_blocks"] = n;
      points.push_back(point);
    }
  }
  return points;
}

// A targeted point (zero tokens, rows no SIMD width divides, the value cases): blocks of 16,
// default_blocks of them unless num_blocks is set.
//   targeted({.cache_dtype = "int8", .dtype = "float32", .tokens = 37, .head_size = 67, .kv_heads = 2,
//             .layout = "fused", .slots = "prefill"})
struct Targeted {
  json cache_dtype = nullptr;  // null: reshape_and_cache's point
  json dtype;
  int64_t tokens = 0;
  int64_t head_size = 0;
  int64_t kv_heads = 0;
  int64_t num_blocks = 0;  // 0: default_blocks
  json layout;
  json slots;
  const char* values = nullptr;  // "nonfinite", "extreme"; null: finite
};

inline json targeted(const Targeted& t) {
  json p = {{"dtype", t.dtype},         {"tokens", t.tokens}, {"head_size", t.head_size},
            {"kv_heads", t.kv_heads},   {"block_size", 16},   {"layout", t.layout},
            {"slots", t.slots},
            {"num_blocks", t.num_blocks > 0 ? t.num_blocks : default_blocks(t.tokens, 16)}};
  if (!t.cache_dtype.is_null()) p["cache_dtype"] = t.cache_dtype;
  if (t.values != nullptr) p["values"] = t.values;
  return p;
}

// A case's key and value rows (float64 randn in `dtype`) and the caches they are written into,
// whose old contents `cache(shape)` draws; layout fused: key and value slices of a
// [tokens, 3, kv_heads, head_size] qkv tensor, the caches the halves of one
// [num_blocks, 2, block_size, kv_heads, head_size] KV tensor. Drawn in one order from g.
struct Tensors {
  at::Tensor key, value, key_cache, value_cache;
};

template <class OldCache>
Tensors tensors_of(const json& p, at::ScalarType dtype, at::Generator& g, OldCache cache) {
  const int64_t tokens = p.at("tokens"), head_size = p.at("head_size"), kv_heads = p.at("kv_heads");
  const int64_t block_size = p.at("block_size"), num_blocks = p.at("num_blocks");
  Tensors t;
  if (p.at("layout").get<std::string>() == "fused") {
    const at::Tensor qkv = at::randn({tokens, 3, kv_heads, head_size}, g, at::kDouble).to(dtype);
    t.key = qkv.select(1, 1);
    t.value = qkv.select(1, 2);
    const at::Tensor kv = cache(at::IntArrayRef{num_blocks, 2, block_size, kv_heads, head_size});
    t.key_cache = kv.select(1, 0);
    t.value_cache = kv.select(1, 1);
  } else {
    t.key = at::randn({tokens, kv_heads, head_size}, g, at::kDouble).to(dtype);
    t.value = at::randn({tokens, kv_heads, head_size}, g, at::kDouble).to(dtype);
    t.key_cache = cache(at::IntArrayRef{num_blocks, block_size, kv_heads, head_size});
    t.value_cache = cache(at::IntArrayRef{num_blocks, block_size, kv_heads, head_size});
  }
  return t;
}

// The point's slot mapping ("prefill" or "random", slots.h), drawn from g.
inline at::Tensor slots_of(const json& p, at::Generator& g) {
  const int64_t tokens = p.at("tokens"), block_size = p.at("block_size"), num_blocks = p.at("num_blocks");
  return p.at("slots").get<std::string>() == "prefill" ? prefill_slots(tokens, num_blocks, block_size, g)
                                                       : random_slots(tokens, num_blocks * block_size, g);
}

// The rows the kernels write (each KV head of each token) and their width (head_size).
inline RowShape row_shape(const json& p) {
  return {p.at("tokens").get<int64_t>() * p.at("kv_heads").get<int64_t>(), p.at("head_size").get<int64_t>()};
}

}  // namespace xllm_kernel::numerics::kv_cache
