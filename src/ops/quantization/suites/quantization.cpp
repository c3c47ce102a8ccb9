// Suites of the quantization family, one per operation: per_token_quant, per_token_quant_int8_azp,
// static_quant, rms_norm_per_token_quant, fused_add_rms_norm_per_token_quant,
// rms_norm_static_quant, fused_add_rms_norm_static_quant, silu_and_mul_per_token_quant.
//
// Options: --preset benchmark (the benchmark's default: 1, 128, 8192 tokens x 4096, 8192 hidden,
// bfloat16, int8 and fp8 without a bound, fused operations fused and unfused; any axis given
// replaces its values) --tokens --hidden --dtype --qdtype (int8, float8_e4m3fn) --bound (none; scale_ub for
// per-token fp8; azp for static int8) --layout (contiguous, strided, 3d) --values (normal, zeros,
// ties, nonfinite, large) and, for the normalizations, --weight-dtype (input, float32); the fused
// operations also --composition (fused; unfused: the same operation run as its composition, the
// producer then the quantization, each through the implementation of the same device and solution,
// so that one benchmark run gives the fused / unfused ratio).
//
// The default grid (vLLM's test grid and more): hidden {17, 1024, 1025, 1026, 5137, 8193} x tokens
// {1, 7, 4096} (the 4096-token rows with hidden 17 and 1025 only) x dtype {float32, bfloat16,
// float16} x every quantized type and bound (int8, fp8,
// fp8 with scale_ub; static: int8, int8 with azp, fp8), contiguous normal values; then on small
// shapes every layout (strided and 3d rows, which must give the contiguous rows' bits) and every
// value kind: rows of zeros, rows whose values sit exactly on rounding ties (unfused operations:
// the scale a power of two, every x / scale a tie of the quantized type), rows with NaN, +inf,
// -inf, large values (saturation); float32 weights; and rows of zero tokens.
//
// Reference: reference.h (float64, tolerance 0 on q, scale and azp where the contract's rounding
// leaves no choice, the round-trip bound on every element). The producer's rounding (rms_norm's,
// silu_and_mul's fp32 accumulation) is given as an interval of the input dtype's values; the
// residual written by the fused_add operations is compared exactly.
//
// Bytes: input read, q written, scales (and azp) written; residual read and written, weight read.
// The unfused composition reports the fused operation's bytes, so that the two rows compare times.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "csrc/common/quantization.h"
#include "src/numerics/options.h"
#include "src/numerics/tensor_case.h"
#include "src/numerics/verify.h"
#include "src/ops/quantization/suites/reference.h"
#include "xllm_kernel/ops/activation.h"
#include "xllm_kernel/ops/normalization.h"
#include "xllm_kernel/ops/quantization.h"

namespace xllm_kernel::numerics {
namespace {

using quantization::Scheme;
using quantization::SchemeArgs;

constexpr double kEps = 1e-6;

using kernels::QuantProducer;

struct Spec {
  const OpContract* contract;
  QuantProducer producer;
  Scheme scheme;
  bool fused() const { return producer != QuantProducer::kInput; }
  bool norm() const { return producer == QuantProducer::kRmsNorm || producer == QuantProducer::kFusedAddRmsNorm; }
  const std::string& name() const { return contract->operation; }
};

// ---------------------------------------------------------------- options and grid

void add_arguments(const Spec& s, CLI::App& app, SuiteOptions& o) {
  app.add_option("--tokens", o["tokens"], "Rows (comma list; 0 allowed) [default: 1,7,4096 and 0]")->delimiter(',');
  app.add_option("--hidden", o["hidden"], "Out row widths (comma list, >= 1) [default: 17,1024,1025,1026,5137,8193]")
      ->delimiter(',');
  app.add_option("--dtype", o["dtype"], "Input dtypes: float32,bfloat16,float16 [default: all]")->delimiter(',');
  if (s.scheme != Scheme::kPerTokenAzp) {
    app.add_option("--qdtype", o["qdtype"], "Quantized types: int8,float8_e4m3fn [default: both]")->delimiter(',');
    app.add_option("--bound", o["bound"],
                   s.scheme == Scheme::kStatic ? "Zero point: none,azp (int8 only) [default: both]"
                                               : "Upper bound on amax: none,scale_ub (fp8 only) [default: both]")
        ->delimiter(',');
  }
  app.add_option("--layout", o["layout"], "Input layouts: contiguous,strided,3d [default: contiguous; all on small shapes]")
      ->delimiter(',');
  app.add_option("--values", o["values"],
                 "Values: normal,zeros,ties,nonfinite,large [default: normal; all on small shapes]")
      ->delimiter(',');
  if (s.norm()) {
    app.add_option("--weight-dtype", o["weight-dtype"], "Weight dtype: input,float32 [default: input; both on small shapes]")
        ->delimiter(',');
  }
  app.add_option("--preset", o["preset"],
                 "benchmark: the timing cases (1, 128, 8192 tokens x 4096, 8192 hidden, bfloat16, every quantized "
                 "type without a bound; fused operations fused and unfused); other options given replace its axes "
                 "[the benchmark's default]")
      ->check(CLI::IsMember({"benchmark"}));
  if (s.fused()) {
    app.add_option("--composition", o["composition"],
                   "fused, or unfused (the producer, then the quantization, of the same implementation) [default: "
                   "fused; the benchmark's: both]")
        ->delimiter(',');
  }
}

// The (qdtype, bound) pairs a scheme has.
std::vector<std::pair<std::string, std::string>> schemes_of(const Spec& s, const SuiteOptions& o) {
  if (s.scheme == Scheme::kPerTokenAzp) return {{"int8", "none"}};
  const auto qdtypes = options::choices(o, "qdtype", {"int8", "float8_e4m3fn"}, {"int8", "float8_e4m3fn"});
  const bool statics = s.scheme == Scheme::kStatic;
  const auto bounds = options::choices(o, "bound", {"none", statics ? "azp" : "scale_ub"}, {"none", statics ? "azp" : "scale_ub"});
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& q : qdtypes) {
    for (const auto& b : bounds) {
      const bool fp8 = q == "float8_e4m3fn";
      if (b == "azp" && fp8) continue;
      if (b == "scale_ub" && !fp8) continue;
      out.push_back({q, b});
    }
  }
  return out;
}

// A case's values on the suite's axes: the keys of its json point (weight_dtype for the
// normalizations only, composition for the fused operations only).
//   point(s, {.tokens = 7, .hidden = 37, .dtype = "bfloat16", .qdtype = q, .bound = b, .layout = "contiguous",
//             .values = "normal"})
struct Axes {
  int64_t tokens = 0;
  int64_t hidden = 0;
  std::string dtype;
  std::string qdtype;  // int8 or float8_e4m3fn
  std::string bound;   // none, scale_ub or azp
  std::string layout;  // contiguous, strided or 3d
  std::string values;  // normal, zeros, ties, nonfinite or large
  std::string weight_dtype = "input";
  std::string composition = "fused";
};

json point(const Spec& s, const Axes& a) {
  json p{{"tokens", a.tokens}, {"hidden", a.hidden}, {"dtype", a.dtype},   {"qdtype", a.qdtype},
         {"bound", a.bound},   {"layout", a.layout}, {"values", a.values}};
  if (s.norm()) p["weight_dtype"] = a.weight_dtype;
  if (s.fused()) p["composition"] = a.composition;
  return p;
}

SuiteOptions benchmark_options(const Spec& s);

std::vector<json> grid(const Spec& s, const SuiteOptions& o) {
  if (options::given(o, "preset")) {
    SuiteOptions b = benchmark_options(s);
    for (const auto& [key, values] : o) {
      if (key != "preset" && !values.empty()) b[key] = values;
    }
    return grid(s, b);
  }
  const auto tokens = options::integers(o, "tokens", {1, 7, 4096}, 0);
  const auto hiddens = options::integers(o, "hidden", {17, 1024, 1025, 1026, 5137, 8193}, 1);
  const auto dtypes = options::choices(o, "dtype", {"float32", "bfloat16", "float16"}, {"float32", "bfloat16", "float16"});
  for (const auto& d : dtypes) options::parse_dtype(d.get<std::string>());
  const auto layouts = options::choices(o, "layout", {"contiguous", "strided", "3d"}, {"contiguous"});
  std::vector<std::string> value_kinds{"normal", "zeros", "nonfinite", "large"};
  if (!s.fused()) value_kinds.push_back("ties");
  const auto values = options::choices(o, "values", value_kinds, {"normal"});
  const auto weights = s.norm() ? options::choices(o, "weight-dtype", {"input", "float32"}, {"input"})
                                : std::vector<json>{json("input")};
  const auto compositions = s.fused() ? options::choices(o, "composition", {"fused", "unfused"}, {"fused"})
                                      : std::vector<json>{json("fused")};
  const auto pairs = schemes_of(s, o);
  const bool custom = options::given(o, "tokens") || options::given(o, "hidden") || options::given(o, "layout") ||
                      options::given(o, "values") || options::given(o, "weight-dtype");
  std::vector<json> points;
  // The first case is small and general (the bad-input test starts from it): a bound or zero point
  // where the scheme has one, so that every argument is a tensor to vary.
  if (!custom) {
    const std::string q = s.scheme == Scheme::kStatic ? "int8" : s.scheme == Scheme::kPerTokenAzp ? "int8" : "float8_e4m3fn";
    const std::string b = s.scheme == Scheme::kStatic ? "azp" : s.scheme == Scheme::kPerTokenAzp ? "none" : "scale_ub";
    points.push_back(point(s, {.tokens = 7, .hidden = 37, .dtype = "bfloat16", .qdtype = q, .bound = b,
                               .layout = "contiguous", .values = "normal"}));
  }
  for (const auto& c : compositions) {
    for (const auto& t : tokens) {
      for (const auto& h : hiddens) {
        // Without a user's shapes, the many-row cases keep the narrow rows (17, 1025: every thread
        // gets rows, with a tail): 4096 x 5137 and x 8193 would add 55M float64 reference elements
        // per dtype and scheme (minutes of CI per implementation) and cover no path that 7 x 8193
        // and 4096 x 1025 do not.
        const int64_t width = h.get<int64_t>();
        if (!custom && t.get<int64_t>() > 7 && width != 17 && width != 1025) continue;
        for (const auto& d : dtypes) {
          for (const auto& [q, b] : pairs) {
            for (const auto& l : layouts) {
              for (const auto& v : values) {
                for (const auto& w : weights) {
                  points.push_back(point(s, {.tokens = t, .hidden = h, .dtype = d, .qdtype = q, .bound = b, .layout = l,
                                             .values = v, .weight_dtype = w, .composition = c}));
                }
              }
            }
          }
        }
      }
    }
  }
  if (custom) return points;
  // Small shapes: every layout, value kind and weight dtype, for every dtype and scheme.
  std::vector<std::string> all_values = value_kinds;
  for (const auto& d : dtypes) {
    for (const auto& [q, b] : pairs) {
      for (const std::string l : {"strided", "3d"}) {
        points.push_back(point(s, {.tokens = 7, .hidden = 1025, .dtype = d, .qdtype = q, .bound = b, .layout = l,
                                   .values = "normal"}));
      }
      for (const auto& v : all_values) {
        if (v != "normal") {
          points.push_back(point(s, {.tokens = 9, .hidden = 1026, .dtype = d, .qdtype = q, .bound = b,
                                     .layout = "contiguous", .values = v}));
        }
      }
      if (s.norm()) {
        points.push_back(point(s, {.tokens = 7, .hidden = 1025, .dtype = d, .qdtype = q, .bound = b,
                                   .layout = "strided", .values = "normal", .weight_dtype = "float32"}));
      }
      points.push_back(point(s, {.tokens = 0, .hidden = 64, .dtype = d, .qdtype = q, .bound = b, .layout = "contiguous",
                                 .values = "normal"}));
    }
  }
  return points;
}

// The timing cases of --preset benchmark.
SuiteOptions benchmark_options(const Spec& s) {
  SuiteOptions o{{"tokens", {"1", "128", "8192"}}, {"hidden", {"4096", "8192"}}, {"dtype", {"bfloat16"}},
                 {"layout", {"contiguous"}},       {"values", {"normal"}}};
  if (s.scheme != Scheme::kPerTokenAzp) {
    o["qdtype"] = {"int8", "float8_e4m3fn"};
    o["bound"] = {"none"};
  }
  if (s.norm()) o["weight-dtype"] = {"input"};
  if (s.fused()) o["composition"] = {"fused", "unfused"};
  return o;
}

SuiteOptions benchmark_defaults() { return {{"preset", {"benchmark"}}}; }

// The headline cases: the timing cases' kinds (int8 and fp8 where the scheme has both) on a decode
// batch of 16 and a 512-token prefill chunk of 4096, the fused composition only.
SuiteOptions headline(const Spec& s) {
  SuiteOptions o = benchmark_options(s);
  o["tokens"] = {"16", "512"};
  o["hidden"] = {"4096"};
  if (s.fused()) o["composition"] = {"fused"};
  return o;
}

RowShape row_shape(const json& p) {
  const int64_t tokens = p.at("tokens"), hidden = p.at("hidden");
  return {p.at("layout") == "3d" ? 2 * tokens : tokens, hidden};
}

// ---------------------------------------------------------------- inputs

// A [tokens, width] tensor of dtype in the case's layout holding `values` (float64, [tokens, width]):
// contiguous, rows width + 8 apart, or [tokens, 2, width] views whose leading dimensions do not merge.
at::Tensor laid_out(const at::Tensor& values, const std::string& layout, at::ScalarType dtype) {
  const int64_t tokens = values.size(0), width = values.size(1);
  if (layout == "contiguous") return values.to(dtype);
  if (layout == "strided") {
    at::Tensor base = at::zeros({tokens, width + 8}, at::TensorOptions().dtype(dtype));
    at::Tensor view = base.narrow(1, 0, width);
    view.copy_(values);
    return view;
  }
  // 3d: the rows of `values` twice over ([tokens, 2, width]: the second copy negated).
  at::Tensor base = at::zeros({tokens, 3, width + 8}, at::TensorOptions().dtype(dtype));
  at::Tensor view = base.narrow(1, 0, 2).narrow(2, 0, width);
  view.select(1, 0).copy_(values);
  view.select(1, 1).copy_(values.neg());
  return view;
}

// The e4m3 value halfway between consecutive e4m3 values j and j + 1 (j in [0, 125]) of magnitude.
double e4m3_tie(int64_t j) {
  const double a = quantization::q_value(true, static_cast<uint8_t>(j));
  const double b = quantization::q_value(true, static_cast<uint8_t>(j + 1));
  return (a + b) / 2;
}

// Values for `values` kind, float64 [tokens, width], before the dtype's rounding.
at::Tensor make_values(const Spec& s, const json& p, int64_t tokens, int64_t width, at::Generator& g,
                       double& tie_scale) {
  const std::string kind = p.at("values");
  const bool fp8 = p.at("qdtype") == "float8_e4m3fn";
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  at::Tensor x = at::randn({tokens, width}, g, f64).mul_(2);
  tie_scale = 0;
  if (tokens == 0) return x;
  if (kind == "zeros") {
    for (int64_t r = 0; r < tokens; r += 3) x[r].zero_();
  } else if (kind == "large") {
    x.mul_(3000);
  } else if (kind == "nonfinite") {
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    const at::Tensor cols = at::randint(width, {8}, g, at::TensorOptions().dtype(at::kLong));
    auto col = [&](int i) { return cols[i].item<int64_t>(); };
    x[0][col(0)] = nan;
    if (tokens > 1) x[1][col(1)] = inf;
    if (tokens > 2) x[2][col(2)] = -inf;
    if (tokens > 3) {
      x[3][col(3)] = inf;
      x[3][(col(3) + 1) % width] = -inf;
    }
    if (tokens > 4) {
      x[4][col(4)] = nan;
      x[4][(col(4) + 1) % width] = inf;
    }
    if (tokens > 5) x[5][col(5)] = -nan;  // a negative NaN
  } else if (kind == "ties") {
    // Each row: a power-of-two scale 2^k, amax making the scale exactly 2^k, every other element
    // x / scale on a tie of the quantized type (fp8: halfway between e4m3 values; int8: j + 1/2).
    const int k = static_cast<int>(at::randint(-3, 4, {1}, g, at::TensorOptions().dtype(at::kLong)).item<int64_t>());
    const double scale = std::ldexp(1.0, k);
    tie_scale = scale;
    const at::Tensor js = at::randint(0, fp8 ? 126 : 127, {tokens, width}, g, at::TensorOptions().dtype(at::kLong));
    const at::Tensor signs = at::randint(0, 2, {tokens, width}, g, at::TensorOptions().dtype(at::kLong));
    auto jd = js.accessor<int64_t, 2>();
    auto sd = signs.accessor<int64_t, 2>();
    auto xd = x.accessor<double, 2>();
    for (int64_t r = 0; r < tokens; ++r) {
      for (int64_t i = 0; i < width; ++i) {
        const double t = fp8 ? e4m3_tie(jd[r][i]) : jd[r][i] + 0.5;
        xd[r][i] = (sd[r][i] ? -t : t) * scale;
      }
      if (s.scheme == Scheme::kPerTokenAzp) {
        xd[r][0] = -128 * scale;  // min and max: scale (max - min) / 255 = 2^k, azp 0
        xd[r][width > 1 ? 1 : 0] = 127 * scale;
      } else if (s.scheme == Scheme::kPerToken) {
        xd[r][0] = (fp8 ? 448 : 127) * scale;  // amax: the scale is 2^k
      }
    }
  }
  return x;
}

// ---------------------------------------------------------------- the example

// Where the producer's float32 evaluation may differ from float64's (reference.h).
double producer_delta(const Spec& s, int64_t hidden, at::ScalarType dtype) {
  if (s.norm()) return quantization::rms_norm_delta(hidden);
  if (s.producer == QuantProducer::kSiluAndMul) return quantization::silu_and_mul_delta(dtype);
  return 0;
}

std::optional<at::Tensor> maybe(const at::Tensor& t) { return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt; }

// The implementation of `operation` with the same device, solution and variant as `kernel`, or null.
std::shared_ptr<const RegisteredKernel> sibling(const PreparedKernel& kernel, const std::string& operation) {
  const KernelSpec& spec = kernel.spec();
  std::string name = std::string(to_string(spec.device)) + "." + spec.solution + "." + operation;
  if (!spec.variant.empty()) name += "." + spec.variant;
  return registry().find(name);
}

template <class Sig>
KernelFunction<Sig> sibling_function(const PreparedKernel& kernel, const std::string& operation) {
  const auto k = sibling(kernel, operation);
  TORCH_CHECK(k != nullptr, kernel.spec().name, ": no implementation of ", operation,
              " of the same device and solution to compose with");
  return PreparedKernel(k->spec, k->function, "").function<Sig>();
}

// The operations an unfused composition calls: the producer and the quantization.
std::vector<std::string> composition_of(const Spec& s) {
  const std::string quant = s.scheme == Scheme::kStatic ? static_quant_contract().operation : per_token_quant_contract().operation;
  switch (s.producer) {
    case QuantProducer::kRmsNorm: return {rms_norm_contract().operation, quant};
    case QuantProducer::kFusedAddRmsNorm: return {fused_add_rms_norm_contract().operation, quant};
    case QuantProducer::kSiluAndMul: return {silu_and_mul_contract().operation, quant};
    case QuantProducer::kInput: break;
  }
  return {};
}

// The call of the operation (or its composition) on the tensors in `names` order.
std::function<std::vector<at::Tensor>(const PreparedKernel&, std::vector<at::Tensor>&)> make_call(
    const Spec& s, at::ScalarType qdtype, bool unfused) {
  using V = std::vector<at::Tensor>;
  auto pair = [](const std::tuple<at::Tensor, at::Tensor>& r) { return V{std::get<0>(r), std::get<1>(r)}; };
  if (unfused) {
    return [s, qdtype, pair](const PreparedKernel& k, V& t) -> V {
      const auto ops = composition_of(s);
      at::Tensor produced;
      size_t next = 1;  // the first argument after the producer's
      if (s.producer == QuantProducer::kRmsNorm) {
        produced = sibling_function<RmsNormFn>(k, ops[0])(t[0], t[1], kEps);
        next = 2;
      } else if (s.producer == QuantProducer::kFusedAddRmsNorm) {
        sibling_function<FusedAddRmsNormFn>(k, ops[0])(t[0], t[1], t[2], kEps);  // input <- normalized
        produced = t[0];
        next = 3;
      } else {
        produced = sibling_function<SiluAndMulFn>(k, ops[0])(t[0]);
      }
      if (s.scheme == Scheme::kStatic) {
        return V{sibling_function<StaticQuantFn>(k, ops[1])(produced, t[next], qdtype, maybe(t[next + 1]))};
      }
      return pair(sibling_function<PerTokenQuantFn>(k, ops[1])(produced, qdtype, maybe(t[next])));
    };
  }
  const std::string& n = s.name();
  if (n == per_token_quant_contract().operation) {
    return [qdtype, pair](const PreparedKernel& k, V& t) { return pair(k.function<PerTokenQuantFn>()(t[0], qdtype, maybe(t[1]))); };
  }
  if (n == per_token_quant_int8_azp_contract().operation) {
    return [](const PreparedKernel& k, V& t) {
      auto [q, scale, azp] = k.function<PerTokenQuantInt8AzpFn>()(t[0]);
      return V{q, scale, azp};
    };
  }
  if (n == static_quant_contract().operation) {
    return [qdtype](const PreparedKernel& k, V& t) { return V{k.function<StaticQuantFn>()(t[0], t[1], qdtype, maybe(t[2]))}; };
  }
  if (n == rms_norm_per_token_quant_contract().operation) {
    return [qdtype, pair](const PreparedKernel& k, V& t) {
      return pair(k.function<RmsNormPerTokenQuantFn>()(t[0], t[1], kEps, qdtype, maybe(t[2])));
    };
  }
  if (n == fused_add_rms_norm_per_token_quant_contract().operation) {
    return [qdtype, pair](const PreparedKernel& k, V& t) {
      return pair(k.function<FusedAddRmsNormPerTokenQuantFn>()(t[0], t[1], t[2], kEps, qdtype, maybe(t[3])));
    };
  }
  if (n == rms_norm_static_quant_contract().operation) {
    return [qdtype](const PreparedKernel& k, V& t) {
      return V{k.function<RmsNormStaticQuantFn>()(t[0], t[1], kEps, t[2], qdtype, maybe(t[3]))};
    };
  }
  if (n == fused_add_rms_norm_static_quant_contract().operation) {
    return [qdtype](const PreparedKernel& k, V& t) {
      return V{k.function<FusedAddRmsNormStaticQuantFn>()(t[0], t[1], t[2], kEps, t[3], qdtype, maybe(t[4]))};
    };
  }
  return [qdtype, pair](const PreparedKernel& k, V& t) {
    return pair(k.function<SiluAndMulPerTokenQuantFn>()(t[0], qdtype, maybe(t[1])));
  };
}

// A case's parameters, as build reads them.
struct Point {
  int64_t tokens = 0, hidden = 0;
  int64_t width = 0;  // of the input rows: 2 * hidden for silu_and_mul, else hidden
  at::ScalarType dtype = at::kFloat;
  bool fp8 = false;
  at::ScalarType qdtype = at::kChar;
  std::string bound, layout;
  bool unfused = false;
};

Point point_of(const Spec& s, const json& p) {
  Point pt;
  pt.tokens = p.at("tokens");
  pt.hidden = p.at("hidden");
  pt.dtype = options::parse_dtype(p.at("dtype").get<std::string>());
  pt.fp8 = p.at("qdtype") == "float8_e4m3fn";
  pt.qdtype = pt.fp8 ? at::kFloat8_e4m3fn : at::kChar;
  pt.bound = p.at("bound");
  pt.layout = p.at("layout");
  pt.unfused = s.fused() && p.at("composition") == "unfused";
  pt.width = s.producer == QuantProducer::kSiluAndMul ? 2 * pt.hidden : pt.hidden;
  return pt;
}

// The tensors of a call (undefined: None, or an argument the operation does not take).
struct Inputs {
  at::Tensor input, residual, weight;
  at::Tensor scale_ub, scale, azp;
};

// Draws the inputs from `g`, in this order: the values, the residual, the weight, the zero point.
Inputs make_inputs(const Spec& s, const Point& pt, const json& p, at::Generator& g) {
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  Inputs in;
  double tie_scale = 0;
  const at::Tensor values = make_values(s, p, pt.tokens, pt.width, g, tie_scale);
  in.input = laid_out(values, pt.layout, pt.dtype);
  if (s.producer == QuantProducer::kFusedAddRmsNorm) {
    in.residual = laid_out(at::randn({pt.tokens, pt.width}, g, at::kDouble), pt.layout, pt.dtype);
  }
  if (s.norm()) {
    const at::ScalarType wt = p.at("weight_dtype") == "float32" ? at::kFloat : pt.dtype;
    in.weight = (at::randn({pt.hidden}, g, at::kDouble) * 0.5 + 1).to(wt);
  }
  // Magnitudes of the rows quantized: the input's, or about 3 for normalized and activated rows.
  double magnitude = 3;
  if (!s.fused()) {
    const at::Tensor finite = values.nan_to_num(0, 0, 0).abs();
    magnitude = finite.numel() ? std::max(1e-3, finite.max().item<double>()) : 1.0;
  }
  if (pt.bound == "scale_ub") in.scale_ub = at::full({1}, 0.7 * magnitude, f32);
  if (s.scheme == Scheme::kStatic) {
    const double sv = tie_scale > 0 ? tie_scale : 0.9 * magnitude / (pt.fp8 ? 448 : 127);
    in.scale = at::full({1}, sv, f32);
    if (pt.bound == "azp") in.azp = at::randint(-10, 11, {1}, g, at::TensorOptions().dtype(at::kInt));
  }
  return in;
}

// The arguments in schema order: the producer's, then the scheme's.
void set_arguments(const Spec& s, const Inputs& in, Example& ex) {
  switch (s.producer) {
    case QuantProducer::kInput:
    case QuantProducer::kSiluAndMul:
      ex.names = {"input"};
      ex.tensors = {in.input};
      break;
    case QuantProducer::kRmsNorm:
      ex.names = {"input", "weight"};
      ex.tensors = {in.input, in.weight};
      break;
    case QuantProducer::kFusedAddRmsNorm:
      ex.names = {"input", "residual", "weight"};
      ex.tensors = {in.input, in.residual, in.weight};
      break;
  }
  if (s.scheme == Scheme::kStatic) {
    ex.names.insert(ex.names.end(), {"scale", "azp"});
    ex.tensors.insert(ex.tensors.end(), {in.scale, in.azp});
  } else if (s.scheme == Scheme::kPerToken) {
    ex.names.push_back("scale_ub");
    ex.tensors.push_back(in.scale_ub);
  }
}

SchemeArgs scheme_args(const Spec& s, const Point& pt, const Inputs& in) {
  SchemeArgs args;
  args.scheme = s.scheme;
  args.fp8 = pt.fp8;
  if (in.scale_ub.defined()) args.scale_ub = in.scale_ub.item<float>();
  if (in.scale.defined()) args.scale = in.scale.item<float>();
  if (in.azp.defined()) args.azp = in.azp.item<int32_t>();
  args.zero_sign_free = s.producer == QuantProducer::kSiluAndMul;
  return args;
}

// What a call must return: the outputs of `s` with `args`, q of `qdtype` and `out_sizes` (scale and
// azp [..., 1]), every row's values within the reference rows' interval [lo, hi].
//   check_quantized({.s = s, .args = args, .lo = lo, .hi = hi, .qdtype = qdtype, .out_sizes = out_sizes}, v,
//                   returned);
struct Quantized {
  const Spec& s;
  const SchemeArgs& args;
  const at::Tensor& lo;
  const at::Tensor& hi;
  at::ScalarType qdtype = at::kChar;
  const std::vector<int64_t>& out_sizes;
};

// Checks the returned outputs (q; scale; azp) against `want`: their dtypes, shapes and layout, then
// every row (quantization::check_rows).
void check_quantized(const Quantized& want, Validation& v, const std::vector<at::Tensor>& returned) {
  const Spec& s = want.s;
  const at::ScalarType qdtype = want.qdtype;
  const std::vector<int64_t>& out_sizes = want.out_sizes;
  const size_t want_n = s.scheme == Scheme::kStatic ? 1 : s.scheme == Scheme::kPerTokenAzp ? 3 : 2;
  auto fail = [&](const std::string& what) {
    v.passed = false;
    v.failures.push_back(what);
  };
  if (returned.size() != want_n) return fail("returned " + std::to_string(returned.size()) + " outputs, expected " + std::to_string(want_n));
  std::vector<int64_t> one_sizes = out_sizes;
  one_sizes.back() = 1;
  const at::Tensor& q = returned[0];
  if (q.scalar_type() != qdtype || q.sizes() != at::IntArrayRef(out_sizes) || !q.is_contiguous()) {
    return fail("out: expected a contiguous " + std::string(c10::toString(qdtype)) + " tensor of the input's shape");
  }
  at::Tensor scale, azp;
  if (want_n >= 2) {
    scale = returned[1];
    if (scale.scalar_type() != at::kFloat || scale.sizes() != at::IntArrayRef(one_sizes) || !scale.is_contiguous()) {
      return fail("scale: expected a contiguous float32 [..., 1] tensor");
    }
    scale = scale.to(at::kCPU).reshape({-1}).contiguous();
  }
  if (want_n == 3) {
    azp = returned[2];
    if (azp.scalar_type() != at::kInt || azp.sizes() != at::IntArrayRef(one_sizes) || !azp.is_contiguous()) {
      return fail("azp: expected a contiguous int32 [..., 1] tensor");
    }
    azp = azp.to(at::kCPU).reshape({-1}).contiguous();
  }
  const at::Tensor bits = q.to(at::kCPU).view(at::kByte).reshape({-1, out_sizes.back()}).contiguous();
  const quantization::RowCheck r = quantization::check_rows(want.args, want.lo, want.hi, bits, scale, azp);
  v.mismatches += r.mismatches + r.round_trip_failures;
  for (const auto& f : r.failures) v.failures.push_back(f);
  if (r.mismatches + r.round_trip_failures > 0) v.passed = false;
  v.checks.push_back({{"name", "out"},
                      {"kind", "quantized"},
                      {"passed", r.mismatches + r.round_trip_failures == 0},
                      {"mismatches", r.mismatches},
                      {"ambiguous_elements", r.ambiguous},
                      {"round_trips", r.round_trips},
                      {"round_trip_failures", r.round_trip_failures}});
}

// The float64 reference: the producer's rows (and the residual the fused_add operations write),
// their rounding interval in the input dtype, and the check of the quantized outputs.
std::function<Expected(const std::vector<at::Tensor>&)> make_reference(const Spec& s, const Point& pt,
                                                                       const SchemeArgs& args) {
  const double delta = producer_delta(s, pt.hidden, pt.dtype);
  const at::ScalarType dtype = pt.dtype, qdtype = pt.qdtype;
  const int64_t hidden = pt.hidden;
  const bool unfused = pt.unfused;
  return [s, args, delta, dtype, qdtype, hidden, unfused](const std::vector<at::Tensor>& t) {
    Expected e;
    at::Tensor rows;
    if (s.producer == QuantProducer::kFusedAddRmsNorm) {
      // One float32 addition rounded to the dtype (exact for two values of the dtype).
      const at::Tensor sum = (t[0].to(at::kCPU).to(at::kFloat) + t[1].to(at::kCPU).to(at::kFloat)).to(dtype);
      e.mutated["residual"] = sum.to(at::kDouble);
      rows = quantization::reference_rms_norm(quantization::rows_f64(sum), t[2], kEps);
      if (unfused) e.mutated["input"] = rows.reshape(sum.sizes());
    } else if (s.producer == QuantProducer::kRmsNorm) {
      rows = quantization::reference_rms_norm(quantization::rows_f64(t[0]), t[1], kEps);
    } else if (s.producer == QuantProducer::kSiluAndMul) {
      rows = quantization::reference_silu_and_mul(quantization::rows_f64(t[0]));
    } else {
      rows = quantization::rows_f64(t[0]);
    }
    at::Tensor lo = rows, hi = rows;
    if (s.fused()) std::tie(lo, hi) = quantization::rounding_interval(rows, dtype, delta);
    lo = lo.contiguous();
    hi = hi.contiguous();
    std::vector<int64_t> out_sizes(t[0].sizes().begin(), t[0].sizes().end());
    out_sizes.back() = hidden;
    e.check_outputs = [s, args, lo, hi, qdtype, out_sizes](Validation& v, const std::vector<at::Tensor>& returned) {
      check_quantized({.s = s, .args = args, .lo = lo, .hi = hi, .qdtype = qdtype, .out_sizes = out_sizes}, v,
                      returned);
    };
    return e;
  };
}

// Bytes: input read, q written, scales (and azp) written; residual read and written, weight read.
CaseMetadata case_metadata(const Spec& s, const Point& pt, const Inputs& in) {
  const int64_t rows = pt.tokens * (pt.layout == "3d" ? 2 : 1), es = at::elementSize(pt.dtype);
  int64_t read = rows * pt.width * es, written = rows * pt.hidden + (s.scheme == Scheme::kStatic ? 0 : rows * 4);
  if (s.scheme == Scheme::kPerTokenAzp) written += rows * 4;
  if (in.weight.defined()) read += in.weight.numel() * in.weight.element_size();
  if (in.residual.defined()) {
    read += rows * pt.hidden * es;
    written += rows * pt.hidden * es;
  }
  return {read, written, 4.0 * rows * pt.width, {}};
}

Example build(const Spec& s, const json& p, at::Generator& g) {
  const Point pt = point_of(s, p);
  const Inputs in = make_inputs(s, pt, p, g);
  Example ex;
  set_arguments(s, in, ex);
  ex.mutates = s.contract->mutates;
  if (pt.unfused && s.producer == QuantProducer::kFusedAddRmsNorm) ex.mutates = {"input", "residual"};
  ex.call = make_call(s, pt.qdtype, pt.unfused);
  ex.reference = make_reference(s, pt, scheme_args(s, pt, in));
  ex.tolerance = Tolerance{0, 0};  // the residual: one correctly rounded addition
  if (pt.unfused && s.producer == QuantProducer::kFusedAddRmsNorm) {
    ex.tolerance_overrides["input"] = accumulate_tolerance(pt.dtype, pt.hidden);  // rms_norm's, in place
  }
  ex.metadata = case_metadata(s, pt, in);
  return ex;
}

// A case that needs the composition's implementations to exist (unfused), else as TensorCase.
class QuantCase final : public KernelCase {
 public:
  QuantCase(Spec spec, json parameters)
      : spec_(spec),
        inner_(spec.name(), parameters, [spec](const json& p, at::Generator& g) { return build(spec, p, g); }) {}
  std::string case_id() const override { return inner_.case_id(); }
  json parameters() const override { return inner_.parameters(); }
  std::optional<std::string> unsupported_reason(const Plan& plan) const override {
    if (auto r = inner_.unsupported_reason(plan)) return r;
    if (spec_.fused() && parameters().at("composition") == "unfused" && plan.kernel) {
      for (const auto& op : composition_of(spec_)) {
        if (sibling(*plan.kernel, op) == nullptr) {
          return "no " + op + " of the same device and solution as " + plan.kernel->spec().name + " to compose with";
        }
      }
    }
    return std::nullopt;
  }
  PreparedCase prepare(const Plan& plan) const override { return inner_.prepare(plan); }

 private:
  Spec spec_;
  TensorCase inner_;
};

// The bad inputs the contracts accept.
std::vector<AcceptedBadInput> accepted(const Spec& s) {
  std::vector<AcceptedBadInput> out;
  if (s.producer != QuantProducer::kFusedAddRmsNorm) {
    out.push_back({"input", "dim 0 + 1", AcceptedAs::kValidPrefix, "one more row; rows are independent"});
    out.push_back({"input", "empty", AcceptedAs::kEmptyResults, "zero rows allowed"});
  }
  if (s.producer == QuantProducer::kInput) {
    out.push_back({"input", "dim 1 + 1", AcceptedAs::kValidPrefix,
                   "one more column (a copy of the first): any hidden size, and the row's amax, min and max are the same"});
  }
  std::vector<std::string> scalars;
  if (s.scheme == Scheme::kPerToken) scalars = {"scale_ub"};
  if (s.scheme == Scheme::kStatic) scalars = {"scale", "azp"};
  for (const auto& a : scalars) {
    out.push_back({a, "non-contiguous last dimension", AcceptedAs::kSameResults, "one element, whatever its strides"});
    out.push_back({a, "0-dim", AcceptedAs::kSameResults, "one element, whatever its shape"});
  }
  return out;
}

OperationSuite make_suite(const Spec& s, const std::string& description) {
  return OperationSuite{
      .operation = s.name(),
      .description = description,
      .add_arguments = [s](CLI::App& app, SuiteOptions& o) { add_arguments(s, app, o); },
      .cases =
          [s](const SuiteOptions& o) {
            std::vector<std::shared_ptr<const KernelCase>> out;
            for (const json& p : grid(s, o)) out.push_back(std::make_shared<QuantCase>(s, p));
            return out;
          },
      .has_reference = true,
      .benchmark_defaults = benchmark_defaults(),
      .headline = headline(s),
      .row_shape = row_shape,
      .accepted_bad_inputs = accepted(s)};
}

// The reference's scheme of the kernels' (the suites below come from the family's operation table,
// csrc/common/quantization.h: each operation's producer and scheme).
Scheme reference_scheme(kernels::QuantScheme s) {
  return s == kernels::QuantScheme::kPerToken ? Scheme::kPerToken
         : s == kernels::QuantScheme::kPerTokenAzp ? Scheme::kPerTokenAzp
                                                   : Scheme::kStatic;
}

}  // namespace

#define XLLM_QUANT_SUITE(NAME, DESCRIPTION)                                                             \
  const OperationSuite& NAME##_suite() {                                                                \
    static constexpr kernels::QuantOperation kOp = kernels::kQuantOperations[kernels::quant_operation_index(#NAME)]; \
    static const OperationSuite suite =                                                                 \
        make_suite({&NAME##_contract(), kOp.producer, reference_scheme(kOp.scheme)}, DESCRIPTION);       \
    return suite;                                                                                       \
  }                                                                                                     \
  XLLM_REGISTER_SUITE(NAME##_suite)

XLLM_QUANT_SUITE(per_token_quant, "Per-token int8 / fp8 quantization");
XLLM_QUANT_SUITE(per_token_quant_int8_azp, "Per-token asymmetric int8 quantization (scale and zero point)");
XLLM_QUANT_SUITE(static_quant, "Static-scale int8 / fp8 quantization");
XLLM_QUANT_SUITE(rms_norm_per_token_quant, "RMSNorm fused with per-token quantization");
XLLM_QUANT_SUITE(fused_add_rms_norm_per_token_quant, "Residual add and RMSNorm fused with per-token quantization");
XLLM_QUANT_SUITE(rms_norm_static_quant, "RMSNorm fused with static quantization");
XLLM_QUANT_SUITE(fused_add_rms_norm_static_quant, "Residual add and RMSNorm fused with static quantization");
XLLM_QUANT_SUITE(silu_and_mul_per_token_quant, "SiLU-and-mul fused with per-token quantization");
#undef XLLM_QUANT_SUITE

}  // namespace xllm_kernel::numerics
