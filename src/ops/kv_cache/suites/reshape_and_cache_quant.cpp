// Suite of reshape_and_cache_quant, the quantized paged KV-cache write.
//
// Options: --tokens, --head-size, --kv-heads, --block-size, --num-blocks, --dtype, --cache-dtype,
// --layout, --slots. The axes of reshape_and_cache's suite (slots "random" and "prefill", layouts
// "contiguous" and "fused": there the int8 scales are also the two halves of one [num_blocks, 2,
// block_size, kv_heads] tensor, a block stride of two blocks, and the fp8 scales 0-dim tensors; the
// runner copies each argument into a storage of its own, so that the halves sharing one is
// test/ops/kv_cache/kv_cache_quant_test.cpp's to check),
// with the caches float8_e4m3fn or int8. Validation grid: first a small int8 case (where the
// bad-input test starts); every cache dtype x input dtype x tokens {1, 37, 160} x layout x slots,
// each point's head size {64, 80, 96, 128, 256}, KV heads {8, 1} and block size {16, 32} drawn
// from a fixed seed (the full product when one of them is given); then per cache and input dtype
// zero tokens, head_size 67 (rows no SIMD width divides), and the value cases:
//   "nonfinite"  NaN, +-inf, a row of zeros and a row of -0 in key and value: fp8 NaN to 0x7F and
//                inf to +-448; int8 a row with a NaN gets scale NaN and q 0, with an inf scale inf
//                and q 0, a zero row scale 0 and q 0;
//   "extreme"    key 1000 times its fp8 scale's range (most of it saturates to +-448), values that
//                round one way divided by the fp8 scale and the other multiplied by its reciprocal
//                (division_sensitive_values, float32 keys only: the contract's division, not
//                static_quant's), and value rows of tiny magnitude (float32 and bfloat16
//                subnormals: int8's 127 / amax overflows to inf) and of huge magnitude.
// fp8 scales: key_scale = amax |key| / 448 over the finite values (a calibrated scale, never a
// power of two in practice), value_scale 0.0137 (a fixed scale whose reciprocal is inexact).
//
// Reference and tolerance: quant_reference.h, element by element with the scalar host functions of
// csrc/common/quantization.h (never an implementation); the expected caches are the old ones with
// each addressed slot's row replaced, the int8 scales likewise, the fp8 scales unchanged. Tolerance
// zero (the contract is exact): q and the scales are compared as float64 values, a NaN matching a
// NaN; the bytes themselves (0x7F for NaN, the sign of a zero) are compared by
// test/ops/kv_cache/kv_cache_quant_test.cpp. The runner compares the rest of each mutated argument's
// storage bitwise (layout fused: the other half of the KV tensor and of the scales).
//
// Bytes, as the performance targets count them: the key and value rows of the tokens with a slot
// read (in their dtype, and an fp8 cache's two scales), and written into the caches (one byte an
// element) with an int8 cache's scales (4 bytes a row); slot_mapping is not counted.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "src/numerics/options.h"
#include "src/numerics/tensor_case.h"
#include "src/numerics/verify.h"
#include "src/ops/kv_cache/suites/quant_reference.h"
#include "src/ops/kv_cache/suites/grid.h"
#include "xllm_kernel/ops/kv_cache.h"

namespace xllm_kernel::numerics {
namespace {

// The fixed fp8 value scale (see the file comment).
constexpr float kValueScale = 0.0137f;

void add_arguments(CLI::App& app, SuiteOptions& o) { kv_cache::add_arguments(app, o, /*quantized=*/true); }

at::ScalarType cache_dtype_of(const json& p) {
  return p.at("cache_dtype").get<std::string>() == "int8" ? at::kChar : at::kFloat8_e4m3fn;
}

// Old cache contents, distinct from anything the write produces where it matters: fp8 values of
// randn + 4, int8 random bytes; old int8 scales in [0.5, 1.5).
at::Tensor old_cache(at::IntArrayRef shape, at::ScalarType cache_dtype, at::Generator& g) {
  if (cache_dtype == at::kChar) return at::randint(-128, 128, shape, g, at::TensorOptions().dtype(at::kChar));
  return (at::randn(shape, g, at::kFloat) + 4).to(at::kFloat8_e4m3fn);
}

// The per-tensor fp8 scale of a calibrated cache (1 / 64 for no or only zero values).
float calibrated_scale(const at::Tensor& x) { return kv_cache::calibrated_fp8_scale(x, 1.0f / 64); }

// The "nonfinite" plants (tokens > 2): NaN and +-inf elements, a row of zeros and one of -0.
void plant_nonfinite(at::Tensor& key, at::Tensor& value) {
  const int64_t heads = key.size(1), head_size = key.size(2);
  key[0][0][0].fill_(std::nan(""));
  key[1][heads - 1][head_size - 1].fill_(INFINITY);
  key[2][0].zero_();
  value[2][0][1].fill_(-INFINITY);
  value[0][heads - 1][head_size / 2].fill_(std::nan(""));
  value[1][0].fill_(-0.0);
}

// The "extreme" plants (tokens > 2): key far past its fp8 scale's range, row 1's first elements
// division-sensitive values, value row 0 tiny and row 1 huge.
void plant_extreme(at::Tensor& key, at::Tensor& value, float key_scale, at::ScalarType dtype) {
  const int64_t head_size = key.size(2);
  at::Tensor rest = key.narrow(0, 2, key.size(0) - 2);
  rest.copy_(rest.to(at::kFloat).mul_(1000));  // float16 may overflow to inf: a value like any other
  const std::vector<float> sensitive =
      kv_cache::division_sensitive_values(key_scale, dtype, static_cast<size_t>(head_size));
  if (!sensitive.empty()) {
    key[1][0].narrow(0, 0, static_cast<int64_t>(sensitive.size()))
        .copy_(at::tensor(std::vector<float>(sensitive.begin(), sensitive.end()), at::kFloat));
  }
  // 2^-130 * x: float32 and bfloat16 subnormals (float16 flushes them to zero: a zero row).
  value[0].copy_(value[0].to(at::kFloat).mul_(std::ldexp(1.0f, -130)));
  const double huge = dtype == at::kHalf ? 3e4 : 1e37;
  value[1].copy_(value[1].to(at::kFloat).clamp_(-1, 1).mul_(huge));
}

Example build(const json& p, at::Generator& g) {
  const int64_t tokens = p.at("tokens"), head_size = p.at("head_size"), kv_heads = p.at("kv_heads");
  const int64_t block_size = p.at("block_size"), num_blocks = p.at("num_blocks");
  const at::ScalarType dtype = options::parse_dtype(p.at("dtype"));
  const at::ScalarType cache_dtype = cache_dtype_of(p);
  const bool int8 = cache_dtype == at::kChar;
  const bool fused = p.at("layout").get<std::string>() == "fused";
  const std::string values = p.value("values", "finite");
  auto [key, value, key_cache, value_cache] =
      kv_cache::tensors_of(p, dtype, g, [&](at::IntArrayRef shape) { return old_cache(shape, cache_dtype, g); });
  at::Tensor key_scale, value_scale;
  float fp8_key_scale = calibrated_scale(key);  // before the plants: "extreme" saturates
  if (values == "nonfinite" && tokens > 2) plant_nonfinite(key, value);
  if (values == "extreme" && tokens > 2) plant_extreme(key, value, fp8_key_scale, dtype);
  if (int8) {
    if (fused) {
      const at::Tensor s = at::rand({num_blocks, 2, block_size, kv_heads}, g, at::kFloat).add_(0.5);
      key_scale = s.select(1, 0);
      value_scale = s.select(1, 1);
    } else {
      key_scale = at::rand({num_blocks, block_size, kv_heads}, g, at::kFloat).add_(0.5);
      value_scale = at::rand({num_blocks, block_size, kv_heads}, g, at::kFloat).add_(0.5);
    }
  } else {
    // One element each, whatever the shape: [1], and 0-dim in the fused layout.
    key_scale = fused ? at::scalar_tensor(fp8_key_scale, at::kFloat) : at::full({1}, fp8_key_scale, at::kFloat);
    value_scale = fused ? at::scalar_tensor(kValueScale, at::kFloat) : at::full({1}, kValueScale, at::kFloat);
  }
  const at::Tensor slots = kv_cache::slots_of(p, g);

  Example ex;
  ex.names = {"key", "value", "key_cache", "value_cache", "slot_mapping", "key_scale", "value_scale"};
  ex.tensors = {key, value, key_cache, value_cache, slots, key_scale, value_scale};
  ex.mutates = reshape_and_cache_quant_contract().mutates;
  ex.call = [](const PreparedKernel& k, std::vector<at::Tensor>& t) {
    k.function<ReshapeAndCacheQuantFn>()(t[0], t[1], t[2], t[3], t[4], t[5], t[6]);
    return std::vector<at::Tensor>{};
  };
  ex.reference = [](const std::vector<at::Tensor>& t) {
    // Copies of the caches and scales (their views' elements), written by the reference.
    at::Tensor kc = t[2].clone(), vc = t[3].clone(), ks = t[5].clone(), vs = t[6].clone();
    kv_cache::reference_reshape_and_cache_quant(kc, ks, t[0], t[4]);
    kv_cache::reference_reshape_and_cache_quant(vc, vs, t[1], t[4]);
    return Expected{{},
                    {{"key_cache", kc.to(at::kDouble)},
                     {"value_cache", vc.to(at::kDouble)},
                     {"key_scale", ks.to(at::kDouble)},
                     {"value_scale", vs.to(at::kDouble)}}};
  };
  ex.tolerance = Tolerance{0, 0};  // exact (see the file comment)
  const int64_t written = slots.ge(0).sum().item<int64_t>();
  const int64_t row = kv_heads * head_size;
  ex.metadata = {2 * written * row * key.element_size() + (int8 ? 0 : 8),
                 2 * written * row + (int8 ? 2 * written * kv_heads * 4 : 0), 0.0, {}};
  return ex;
}

// Enough blocks for the tokens, and a few more so that the untouched slots are checked too.
std::vector<std::shared_ptr<const KernelCase>> cases(const SuiteOptions& o) {
  std::vector<json> points;
  // The first case is small and general (the bad-input test starts from it): int8 caches, whose
  // scales have a shape and a layout to get wrong (two KV heads: a scale's head stride matters).
  bool any_given = false;
  for (const char* axis : {"tokens", "head_size", "kv_heads", "block_size", "num_blocks", "dtype", "cache_dtype",
                           "layout", "slots"}) {
    any_given |= options::given(o, axis);
  }
  if (!any_given) {
    points.push_back(kv_cache::targeted({.cache_dtype = "int8", .dtype = "float32", .tokens = 37, .head_size = 64,
                                         .kv_heads = 2, .layout = "contiguous", .slots = "random"}));
  }
  for (json& p : kv_cache::grid_points(o, /*quantized=*/true, /*seed=*/20261202)) points.push_back(std::move(p));
  // Zero tokens, rows no SIMD width divides (head_size 67), and the value cases, unless the user
  // chose the tokens or head sizes.
  const std::vector<json> layouts = kv_cache::layouts(o), slots = kv_cache::slot_kinds(o);
  for (const auto& cache_dtype : kv_cache::cache_dtypes(o)) {
    for (const auto& dtype : kv_cache::dtypes(o)) {
      const kv_cache::Targeted t{.cache_dtype = cache_dtype, .dtype = dtype, .tokens = 37, .head_size = 128,
                                 .kv_heads = 2, .layout = layouts.front(), .slots = slots.front()};
      if (!options::given(o, "tokens")) {
        kv_cache::Targeted zero = t;
        zero.tokens = 0;
        points.push_back(kv_cache::targeted(zero));
      }
      if (!options::given(o, "head_size")) {
        kv_cache::Targeted tails = t;
        tails.head_size = 67;
        tails.layout = layouts.back();
        tails.slots = slots.back();
        points.push_back(kv_cache::targeted(tails));
      }
      if (!options::given(o, "tokens") && !options::given(o, "head_size")) {
        kv_cache::Targeted nonfinite = t, extreme = t;
        nonfinite.values = "nonfinite";
        extreme.layout = layouts.back();
        extreme.values = "extreme";
        points.push_back(kv_cache::targeted(nonfinite));
        points.push_back(kv_cache::targeted(extreme));
      }
    }
  }
  std::vector<std::shared_ptr<const KernelCase>> out;
  for (const json& point : points) {
    out.push_back(std::make_shared<TensorCase>(reshape_and_cache_quant_contract().operation, point, build));
  }
  return out;
}

SuiteOptions headline() {
  return {{"tokens", {"16", "512"}}, {"head_size", {"128"}},   {"kv_heads", {"8"}},
          {"block_size", {"16"}},       {"num_blocks", {"256"}}, {"dtype", {"bfloat16"}},
          {"cache_dtype", {"float8_e4m3fn", "int8"}}, {"layout", {"contiguous"}}, {"slots", {"random"}}};
}

SuiteOptions benchmark_defaults() {
  return {{"tokens", {"1", "128", "8192"}}, {"head_size", {"128"}},   {"kv_heads", {"8"}},
          {"block_size", {"16"}},           {"num_blocks", {"4096"}}, {"dtype", {"bfloat16"}},
          {"cache_dtype", {"float8_e4m3fn", "int8"}}, {"layout", {"contiguous"}}, {"slots", {"prefill", "random"}}};
}

// The rows the kernels quantize (each head of each token) and their width (head_size).
}  // namespace

const OperationSuite& reshape_and_cache_quant_suite() {
  static const OperationSuite suite{
      .operation = reshape_and_cache_quant_contract().operation,
      .description = "Quantized paged KV-cache write (NHD): key/value rows into float8_e4m3fn or int8 caches",
      .add_arguments = add_arguments,
      .cases = cases,
      .has_reference = true,
      .benchmark_defaults = benchmark_defaults(),
      .headline = headline(),
      .row_shape = kv_cache::row_shape,
      // slot_mapping is read through its stride. (The first case's caches are int8: a scale of
      // another shape or layout is an error.)
      .accepted_bad_inputs = {{"slot_mapping", "non-contiguous last dimension", AcceptedAs::kSameResults,
                               "slot_mapping is read through its stride"}}};
  return suite;
}

XLLM_REGISTER_SUITE(reshape_and_cache_quant_suite);

}  // namespace xllm_kernel::numerics
