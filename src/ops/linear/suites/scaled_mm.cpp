// Suites of scaled_mm (the GEMM of quantized activations over a w8a8-int8, w8a8-fp8 or w4a8 weight)
// and linear_dynamic_quant (per-token quantization of float rows, then scaled_mm).
//
// Options: --tokens (M), --shape (NxK), --scheme (w8a8-int8, w8a8-fp8/tensor|channel|block,
// w4a8/g<G>[/zeros], w4a8/gK[/zeros]), --activation (scaled_mm: token, tensor, token-azp: per-token
// scales, one scale, per-token scales with zero points), --dtype (scaled_mm: out_dtype;
// linear_dynamic_quant: the input's), --bias (none, out: the output's dtype, float32), --layout
// (contiguous, strided rows).
//
// The reference is computed here from the canonical weight (the stand-in of packed.h): acc per K
// group in float64 (exact for the int8 schemes: every partial sum is an integer below 2^53), then
//   int8 schemes: the contract's float32 epilogue, one IEEE operation per step in its order, so the
//                 tolerance is 0: every implementation must give these bits;
//   w8a8-fp8:     the epilogue in float64; tolerance (K + 4) 2^-24 (sum_g |acc|_g |scale_a s_g| +
//                 |bias|) + 2 u |want| + the dtype's smallest subnormal (float32 sums in an order of
//                 the implementation's, then one rounding).
// linear_dynamic_quant's reference first quantizes the rows with the quantization family's scalar
// arithmetic (csrc/common/quantization.h, the per_token_quant contract), then the same.
#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "csrc/common/linear.h"
#include "csrc/common/quantization.h"
#include "src/numerics/options.h"
#include "src/numerics/tensor_case.h"
#include "src/numerics/verify.h"
#include "src/ops/linear/suites/packed.h"
#include "xllm_kernel/ops/linear.h"

namespace xllm_kernel::numerics {
namespace {

using namespace linear_suite;

std::pair<int64_t, int64_t> parse_shape(const std::string& s) {
  const size_t x = s.find('x');
  TORCH_CHECK(x != std::string::npos, "scaled_mm suite: --shape takes NxK, got ", s);
  return {std::stoll(s.substr(0, x)), std::stoll(s.substr(x + 1))};
}

bool is_fp8(const PackArgs& w) { return w.scheme == "w8a8-fp8"; }

// q - z as float64 [N, K] (w4a8 with zeros: z per group), and s float64 [N, groups], the group size.
struct Weight64 {
  at::Tensor centered, scales;
  int64_t group = 0, groups = 0;
};

Weight64 weight64(const PackArgs& w) {
  Weight64 r;
  const int64_t n = w.weight.size(0), k = w.weight.size(1);
  r.centered = w.weight.to(at::kDouble);
  if (w.scheme == "w4a8") {
    r.group = w.group_size == -1 ? k : w.group_size;
    r.groups = k / r.group;
    r.scales = w.scales.to(at::kDouble);
    if (w.zeros.defined()) r.centered = r.centered - w.zeros.to(at::kDouble).repeat_interleave(r.group, 1);
  } else if (is_fp8(w) && w.scales.dim() == 2) {  // 128 x 128 blocks: one group of 128 per block column
    r.group = std::min<int64_t>(k, kernels::kFp8Block);
    r.groups = kernels::ceil_div(k, r.group);
    r.scales = w.scales.to(at::kDouble).repeat_interleave(kernels::kFp8Block, 0).narrow(0, 0, n);
  } else {
    r.group = k;
    r.groups = 1;
    r.scales = w.scales.to(at::kDouble).reshape({-1, 1}).expand({n, 1});
  }
  return r;
}

// The contract's output in float64 for quantized rows a [M, K] (int8 or e4m3), scale_a [M, 1] or
// one element, azp like scale_a or undefined, bias [N] or undefined; and the fp8 tolerance's
// magnitude when `magnitude` is given.
at::Tensor reference_out(const Weight64& w, bool fp8, const at::Tensor& a_in, const at::Tensor& scale_a_in,
                         const at::Tensor& azp_in, const at::Tensor& bias_in, at::ScalarType out_dtype,
                         at::Tensor* magnitude) {
  const at::Tensor a = a_in.to(at::kCPU).reshape({-1, a_in.size(-1)}).to(at::kDouble);
  const int64_t m = a.size(0), n = w.centered.size(0), k = w.centered.size(1);
  const at::Tensor sa = scale_a_in.to(at::kCPU).reshape({-1, 1});  // [M, 1] or [1, 1], float32
  at::Tensor centered_a = a;
  if (azp_in.defined()) centered_a = a - azp_in.to(at::kCPU).reshape({-1, 1}).to(at::kDouble);
  const at::Tensor bias = bias_in.defined() ? bias_in.to(at::kCPU).to(at::kFloat) : at::Tensor();
  at::Tensor out;
  if (!fp8) {
    at::Tensor t;
    for (int64_t g = 0; g < w.groups; ++g) {
      const at::Tensor acc = centered_a.narrow(1, g * w.group, w.group).matmul(w.centered.narrow(1, g * w.group, w.group).t());
      // float32, each step rounded: (float(acc) * scale_a) * s, summed over groups in order.
      const at::Tensor term = acc.to(at::kFloat).mul(sa).mul(w.scales.narrow(1, g, 1).t().to(at::kFloat));
      t = g == 0 ? term : t.add(term);
    }
    if (m == 0) t = at::zeros({0, n}, at::kFloat);
    if (bias.defined()) t = t.add(bias);
    out = t.to(out_dtype).to(at::kDouble);
  } else {
    at::Tensor t = at::zeros({m, n}, at::kDouble);
    at::Tensor mag = at::zeros({m, n}, at::kDouble);
    for (int64_t g = 0; g < w.groups; ++g) {
      const int64_t len = std::min(w.group, k - g * w.group);
      const at::Tensor ag = a.narrow(1, g * w.group, len), qg = w.centered.narrow(1, g * w.group, len);
      const at::Tensor factor = sa.to(at::kDouble) * w.scales.narrow(1, g, 1).t();  // [M or 1, N]
      t = t + ag.matmul(qg.t()) * factor;
      mag = mag + ag.abs().matmul(qg.abs().t()) * factor.abs();
    }
    if (bias.defined()) {
      t = t + bias.to(at::kDouble);
      mag = mag + bias.to(at::kDouble).abs();
    }
    if (magnitude != nullptr) *magnitude = mag;
    out = t;
  }
  std::vector<int64_t> shape(a_in.sizes().begin(), a_in.sizes().end());
  shape.back() = n;
  return out.reshape(shape);
}

Tolerance fp8_tolerance(const at::Tensor& magnitude, int64_t k, at::ScalarType out_dtype) {
  const double tiny = out_dtype == at::kHalf       ? std::ldexp(1.0, -24)
                      : out_dtype == at::kBFloat16 ? std::ldexp(1.0, -133)
                                                   : std::ldexp(1.0, -149);
  Tolerance t{tiny, 2 * unit_roundoff(out_dtype)};
  t.elementwise_atol = magnitude * ((k + 4) * std::ldexp(1.0, -24));
  return t;
}

// per_token_quant of float rows [M, K] with the contract's scalar arithmetic: (q, scale [M, 1]).
std::pair<at::Tensor, at::Tensor> quantize_rows(const at::Tensor& x_in, bool fp8) {
  const at::Tensor x = x_in.to(at::kCPU).reshape({-1, x_in.size(-1)}).to(at::kFloat).contiguous();
  const int64_t m = x.size(0), k = x.size(1);
  at::Tensor q = at::empty({m, k}, fp8 ? at::kFloat8_e4m3fn : at::kChar);
  at::Tensor scale = at::empty({m, 1}, at::kFloat);
  const float* px = x.const_data_ptr<float>();
  auto* pq = static_cast<uint8_t*>(q.mutable_data_ptr());
  float* ps = scale.mutable_data_ptr<float>();
  for (int64_t r = 0; r < m; ++r) {
    const float* row = px + r * k;
    float amax = 0.0f;
    for (int64_t i = 0; i < k; ++i) amax = kernels::quant_max(amax, std::fabs(row[i]));
    if (fp8) {
      const float s = kernels::fp8_per_token_scale(amax, nullptr);
      ps[r] = s;
      for (int64_t i = 0; i < k; ++i) pq[r * k + i] = kernels::quantize_fp8_per_token(row[i], s);
    } else {
      ps[r] = kernels::int8_per_token_scale(amax);
      const float mult = kernels::int8_per_token_multiplier(amax);
      for (int64_t i = 0; i < k; ++i) {
        pq[r * k + i] = static_cast<uint8_t>(kernels::quantize_int8_per_token(row[i], mult));
      }
    }
  }
  return {q, scale};
}

CaseMetadata metadata(const PackArgs& w, int64_t m, int64_t a_bytes, at::ScalarType out_dtype, const at::Tensor& bias) {
  const int64_t n = w.weight.size(0), k = w.weight.size(1);
  int64_t weight_bytes = w.scheme == "w4a8" ? n * k / 2 : n * k;
  weight_bytes += w.scales.numel() * 4 + (w.zeros.defined() ? w.zeros.numel() * 4 : 0);
  const int64_t read = weight_bytes + a_bytes + (bias.defined() ? bias.nbytes() : 0);
  const double flops = 2.0 * m * n * k;
  // The roofline's instruction classes: int8 dot products (VNNI, AVX2 vpmaddubsw, AMX-INT8) for the
  // int8 schemes; e4m3 is exact in bf16, so bf16 dot products, float32 FMA or AMX-BF16 for fp8.
  std::map<std::string, double> work =
      is_fp8(w) ? std::map<std::string, double>{{"bf16_dot", flops}, {"f32_fma", flops}, {"amx_bf16", flops}}
                : std::map<std::string, double>{{"int8_dot", flops}, {"amx_int8", flops}};
  return {read, m * n * static_cast<int64_t>(c10::elementSize(out_dtype)), flops, work};
}

// The weight packed by `kernel`'s own linear_pack, once per case, keyed by the stand-in the call
// gets (anything else, a bad argument, is passed as it is).
struct PackCache {
  std::vector<std::pair<at::Tensor, at::Tensor>> entries;
  at::Tensor get(const PreparedKernel& kernel, const at::Tensor& stand_in, const at::Device& device) {
    for (const auto& [key, value] : entries) {
      if (key.is_same(stand_in)) return value;
    }
    const std::optional<PackArgs> args = read_stand_in(stand_in);
    std::optional<at::Tensor> own = args ? pack_for(kernel.spec(), *args, device) : std::nullopt;
    at::Tensor packed = own ? *own : stand_in;
    entries.emplace_back(stand_in, packed);
    return packed;
  }
};

struct Point {
  int64_t m, n, k;
  SchemeSpec scheme;
  at::ScalarType dtype;
  std::string bias, layout, activation;
};

Point point(const json& p) {
  Point r;
  r.m = p.at("tokens");
  std::tie(r.n, r.k) = parse_shape(p.at("shape"));
  r.scheme = parse_scheme(p.at("scheme"));
  r.dtype = options::parse_dtype(p.at("dtype"));
  r.bias = p.at("bias");
  r.layout = p.at("layout");
  r.activation = p.value("activation", "token");
  return r;
}

at::Tensor make_bias(const Point& p, at::Generator& g) {
  if (p.bias == "none") return {};
  return at::randn({p.n}, g, at::kDouble).to(p.bias == "out" ? p.dtype : at::kFloat);
}

Example build_scaled_mm(const json& j, at::Generator& g) {
  const Point p = point(j);
  const PackArgs w = make_pack_args(p.scheme, p.n, p.k, g);
  const bool fp8 = is_fp8(w);
  const int64_t pad = p.layout == "strided" ? 8 : 0;
  at::Tensor a = fp8 ? at::randn({p.m, p.k + pad}, g, at::kDouble).mul_(4).to(at::kFloat8_e4m3fn)
                     : at::randint(-128, 128, {p.m, p.k + pad}, g, at::kLong).to(at::kChar);
  a = a.narrow(1, 0, p.k);
  const bool per_tensor = p.activation == "tensor";
  const at::Tensor scale_a =
      at::rand(per_tensor ? std::vector<int64_t>{1} : std::vector<int64_t>{p.m, 1}, g, at::kDouble)
          .mul_(0.05)
          .add_(0.001)
          .to(at::kFloat);
  const at::Tensor azp = p.activation == "token-azp"
                             ? at::randint(-128, 128, {p.m, 1}, g, at::kLong).to(at::kInt)
                             : at::Tensor();
  const at::Tensor bias = make_bias(p, g);
  Example ex;
  ex.names = {"a", "packed", "scale_a", "azp", "bias"};
  ex.tensors = {a, make_stand_in(w), scale_a, azp, bias};
  const at::ScalarType out_dtype = p.dtype;
  auto cache = std::make_shared<PackCache>();
  ex.call = [cache, out_dtype](const PreparedKernel& kernel, std::vector<at::Tensor>& t) {
    const at::Tensor packed = cache->get(kernel, t[1], t[0].device());
    return std::vector<at::Tensor>{
        kernel.function<ScaledMmFn>()(t[0], packed, t[2], optional(t[3]), optional(t[4]), out_dtype)};
  };
  const auto w64 = std::make_shared<const Weight64>(weight64(w));
  ex.reference = [w64, fp8, out_dtype](const std::vector<at::Tensor>& t) {
    return Expected{{reference_out(*w64, fp8, t[0], t[2], t[3], t[4], out_dtype, nullptr)}, {}};
  };
  if (fp8) {
    at::Tensor mag;
    reference_out(*w64, fp8, a, scale_a, azp, bias, out_dtype, &mag);
    ex.tolerance = fp8_tolerance(mag, p.k, out_dtype);
  }
  ex.metadata = metadata(w, p.m, p.m * p.k, out_dtype, bias);
  return ex;
}

Example build_dynamic(const json& j, at::Generator& g) {
  const Point p = point(j);
  const PackArgs w = make_pack_args(p.scheme, p.n, p.k, g);
  const bool fp8 = is_fp8(w);
  const int64_t pad = p.layout == "strided" ? 8 : 0;
  const at::Tensor x = at::randn({p.m, p.k + pad}, g, at::kDouble).to(p.dtype).narrow(1, 0, p.k);
  const at::Tensor bias = make_bias(p, g);
  Example ex;
  ex.names = {"input", "packed", "bias"};
  ex.tensors = {x, make_stand_in(w), bias};
  auto cache = std::make_shared<PackCache>();
  ex.call = [cache](const PreparedKernel& kernel, std::vector<at::Tensor>& t) {
    const at::Tensor packed = cache->get(kernel, t[1], t[0].device());
    return std::vector<at::Tensor>{kernel.function<LinearDynamicQuantFn>()(t[0], packed, optional(t[2]))};
  };
  const auto w64 = std::make_shared<const Weight64>(weight64(w));
  ex.reference = [w64, fp8](const std::vector<at::Tensor>& t) {
    const auto [q, scale] = quantize_rows(t[0], fp8);
    at::Tensor out = reference_out(*w64, fp8, q, scale, at::Tensor(), t[2], t[0].scalar_type(), nullptr);
    std::vector<int64_t> shape(t[0].sizes().begin(), t[0].sizes().end());
    shape.back() = w64->centered.size(0);
    return Expected{{out.reshape(shape)}, {}};
  };
  if (fp8) {
    const auto [q, scale] = quantize_rows(x, fp8);
    at::Tensor mag;
    reference_out(*w64, fp8, q, scale, at::Tensor(), bias, p.dtype, &mag);
    ex.tolerance = fp8_tolerance(mag, p.k, p.dtype);
  }
  ex.metadata = metadata(w, p.m, x.numel() * x.element_size(), p.dtype, bias);
  return ex;
}

const std::vector<std::string> kSchemes = {"w8a8-int8",  "w4a8/g32",         "w8a8-fp8/channel", "w8a8-fp8/tensor",
                                           "w8a8-fp8/block", "w4a8/g32/zeros", "w4a8/gK",          "w4a8/g128/zeros"};

std::function<void(CLI::App&, SuiteOptions&)> arguments(bool activation) {
  return [activation](CLI::App& app, SuiteOptions& o) {
    app.add_option("--tokens", o["tokens"], "Rows M (comma list; 0 allowed) [default: 3,1,16,129 and 0]")
        ->delimiter(',');
    app.add_option("--shape", o["shape"], "Weights NxK (comma list) [default: 37x64,130x512,33x68]")->delimiter(',');
    app.add_option("--scheme", o["scheme"],
                   "Schemes: w8a8-int8,w8a8-fp8/tensor,w8a8-fp8/channel,w8a8-fp8/block,w4a8/g<G>[/zeros],"
                   "w4a8/gK[/zeros] [default: all of these with G 32 and 128]")
        ->delimiter(',');
    if (activation) {
      app.add_option("--activation", o["activation"],
                     "Activation scales: token,tensor,token-azp (w8a8-int8) [default: all that fit]")
          ->delimiter(',');
    }
    app.add_option("--dtype", o["dtype"],
                   std::string(activation ? "out_dtype" : "Input dtypes") + ": float32,bfloat16,float16 [default: all]")
        ->delimiter(',');
    app.add_option("--bias", o["bias"], "Bias: none,out,float32 [default: none,float32]")->delimiter(',');
    app.add_option("--layout", o["layout"], "Rows of a: contiguous,strided [default: contiguous]")->delimiter(',');
  };
}

// Whether the scheme takes this shape: w4a8's group (K with gK) must divide K and be a multiple of 8.
bool fits(const SchemeSpec& s, int64_t k) {
  if (s.scheme != "w4a8") return true;
  const int64_t group = s.group > 0 ? s.group : k;
  return k % group == 0 && group % 8 == 0;
}

std::vector<std::shared_ptr<const KernelCase>> cases(const std::string& operation, const SuiteOptions& o,
                                                     ExampleBuilder builder, bool activation) {
  const std::vector<std::string> schemes = options::given(o, "scheme") ? o.at("scheme") : kSchemes;
  const std::vector<std::string> shapes =
      options::given(o, "shape") ? o.at("shape") : std::vector<std::string>{"37x64", "130x512", "33x68"};
  const auto tokens = options::integers(o, "tokens", {3, 1, 16, 129}, 0);
  const auto dtypes =
      options::choices(o, "dtype", {"float32", "bfloat16", "float16"}, {"float32", "bfloat16", "float16"});
  const auto biases = options::choices(o, "bias", {"none", "out", "float32"}, {"none", "float32"});
  const auto layouts = options::choices(o, "layout", {"contiguous", "strided"}, {"contiguous"});
  const auto activations = activation ? options::choices(o, "activation", {"token", "tensor", "token-azp"},
                                                         {"token", "tensor", "token-azp"})
                                      : std::vector<json>{"token"};
  std::vector<json> grid;
  for (const std::string& shape : shapes) {
    const auto [n, k] = parse_shape(shape);
    TORCH_CHECK(n >= 1 && k >= 1, operation, " suite: --shape needs N >= 1 and K >= 1, got ", shape);
    for (const std::string& scheme : schemes) {
      const SchemeSpec s = parse_scheme(scheme);
      if (!fits(s, k)) continue;
      for (const json& act : activations) {
        if (act == "token-azp" && s.scheme != "w8a8-int8") continue;
        if (act == "tensor" && s.scheme == "w4a8" && !options::given(o, "activation")) continue;
        for (const json& m : tokens) {
          for (const json& dtype : dtypes) {
            for (const json& bias : biases) {
              for (const json& layout : layouts) {
                json c = {{"shape", shape}, {"scheme", scheme}, {"tokens", m},
                          {"dtype", dtype}, {"bias", bias},     {"layout", layout}};
                if (activation) c["activation"] = act;
                grid.push_back(c);
              }
            }
          }
        }
      }
    }
  }
  if (!options::given(o, "tokens") && !options::given(o, "layout") && !options::given(o, "bias") &&
      !options::given(o, "shape")) {
    // Zero rows; strided rows with a bias of the output's dtype on a few schemes.
    for (const std::string& scheme : {std::string("w8a8-int8"), std::string("w4a8/g32/zeros"), std::string("w8a8-fp8/block")}) {
      for (const json& dtype : dtypes) {
        json zero = {{"shape", "37x64"}, {"scheme", scheme}, {"tokens", 0},
                     {"dtype", dtype},   {"bias", "none"},   {"layout", "contiguous"}};
        json strided = {{"shape", "37x64"}, {"scheme", scheme}, {"tokens", 5},
                        {"dtype", dtype},   {"bias", "out"},    {"layout", "strided"}};
        if (activation) zero["activation"] = strided["activation"] = "token";
        grid.push_back(zero);
        grid.push_back(strided);
      }
    }
  }
  std::vector<std::shared_ptr<const KernelCase>> out;
  for (const json& p : grid) out.push_back(std::make_shared<TensorCase>(operation, p, builder));
  return out;
}

SuiteOptions benchmark_defaults(bool activation) {
  // The Llama-3-8B linears: qkv, o, gate_up, down.
  SuiteOptions o{{"tokens", {"1", "16", "64", "512"}},
                 {"shape", {"6144x4096", "4096x4096", "28672x4096", "4096x14336"}},
                 {"scheme", {"w8a8-int8", "w8a8-fp8/channel", "w4a8/g128"}},
                 {"dtype", {"bfloat16"}},
                 {"bias", {"none"}},
                 {"layout", {"contiguous"}}};
  if (activation) o["activation"] = {"token"};
  return o;
}

// The headline cases: a decode batch of 16 and a 128-row chunk through a 4096 x 4096 projection,
// int8 and w4a8 weights.
SuiteOptions headline(bool activation) {
  SuiteOptions o{{"tokens", {"16", "128"}}, {"shape", {"4096x4096"}}, {"scheme", {"w8a8-int8", "w4a8/g128"}},
                 {"dtype", {"bfloat16"}},     {"bias", {"none"}},       {"layout", {"contiguous"}}};
  if (activation) o["activation"] = {"token"};
  return o;
}

RowShape row_shape(const json& p) { return {p.at("tokens"), parse_shape(p.at("shape")).first}; }

const OperationSuite& scaled_mm_suite() {
  static const OperationSuite suite{
      .operation = "scaled_mm",
      .description = "the GEMM of int8 / e4m3 activations over w8a8-int8, w8a8-fp8 and w4a8 weights: the int8 "
                     "schemes bit for bit against the contract's epilogue, fp8 against float64",
      .add_arguments = arguments(true),
      .cases = [](const SuiteOptions& o) { return cases("scaled_mm", o, &build_scaled_mm, true); },
      .has_reference = true,
      .benchmark_defaults = benchmark_defaults(true),
      .headline = headline(true),
      .row_shape = row_shape,
      .accepted_bad_inputs = {{"a", "empty", AcceptedAs::kEmptyResults, "zero rows allowed"},
                              {"a", "dim 0 + 1", AcceptedAs::kValidPrefixClose,
                               "a one-row case's scale_a [1, 1] holds one element: a per-tensor scale, which scales the "
                               "added row too; rows are independent"},
                              {"scale_a", "non-contiguous last dimension", AcceptedAs::kSameResults,
                               "the values are what is read"},
                              {"scale_a", "0-dim", AcceptedAs::kSameResults,
                               "one element: a per-tensor scale (the case's one row has the same)"}},
      .bind_arguments = &bind_packed};
  return suite;
}

const OperationSuite& linear_dynamic_quant_suite() {
  static const OperationSuite suite{
      .operation = "linear_dynamic_quant",
      .description = "per-token quantization then scaled_mm, against the composition's arithmetic (int8 schemes "
                     "bit for bit, fp8 against float64)",
      .add_arguments = arguments(false),
      .cases = [](const SuiteOptions& o) { return cases("linear_dynamic_quant", o, &build_dynamic, false); },
      .has_reference = true,
      .benchmark_defaults = benchmark_defaults(false),
      .headline = headline(false),
      .row_shape = row_shape,
      .accepted_bad_inputs = {{"input", "empty", AcceptedAs::kEmptyResults, "zero rows allowed"},
                              {"input", "dim 0 + 1", AcceptedAs::kValidPrefixClose,
                               "one more row; rows are independent (torch's GEMM may add them in another order)"}},
      .bind_arguments = &bind_packed};
  return suite;
}

XLLM_REGISTER_SUITE(scaled_mm_suite);
XLLM_REGISTER_SUITE(linear_dynamic_quant_suite);

}  // namespace
}  // namespace xllm_kernel::numerics
