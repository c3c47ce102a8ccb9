// Suites of the linear family: linear (y = x W^T + b over a packed weight) and linear_pack (checked
// through the linear of its own solution: what it packs must compute the same y).
//
// Options: --tokens (M), --shape (NxK), --scheme (f32, bf16, f16, int8, int8/g<G>, fp8/tensor,
// fp8/channel, fp8/block, int4/g<G> with G a group size or K, /zeros for zero points), --dtype, --bias
// (none, input: the input's dtype, float32), --layout (contiguous, strided rows).
// Weights are generated in their canonical form; the float64 reference uses the contract's W (formed
// in float32 with ATen's IEEE arithmetic, independent of every implementation): the suite measures
// the kernels, not the quantization.
// Tolerance: a float32 sum of K products with fma, then + bias, then one rounding: |got - want| <=
// (K + 2) 2^-24 (sum_k |x W| + |b|) + 2 u |want| + the dtype's smallest subnormal, u the output's
// unit roundoff (2 u: a torch implementation may add the bias after rounding the product).
//
// A packed weight belongs to the implementation that packed it. The linear suite's cases hold a
// stand-in instead: a uint8 tensor that carries the canonical weight (a marker, the scheme, the
// shapes, the values). Each implementation's call packs it with the linear_pack of its own device
// and solution, once per case, outside the timed call (bind_arguments does the same for the generic
// tests).
#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "csrc/common/linear.h"
#include "src/numerics/options.h"
#include "src/ops/linear/suites/packed.h"
#include "src/numerics/tensor_case.h"
#include "src/numerics/verify.h"
#include "xllm_kernel/ops/linear.h"

namespace xllm_kernel::numerics {
namespace {

using kernels::LinearScheme;
using namespace linear_suite;

// The contract's W in float32 [n, k], from the canonical arguments, with ATen's IEEE arithmetic.
at::Tensor contract_weight(const PackArgs& a) {
  const int64_t n = a.weight.size(0), k = a.weight.size(1);
  const at::Tensor q = a.weight.to(at::kFloat);
  if (a.scheme == "f32" || a.scheme == "bf16" || a.scheme == "f16") return q;
  at::Tensor s;
  if (a.scales.dim() <= 1) {  // per tensor or per channel
    s = a.scales.reshape({-1, 1}).expand({n, k});
  } else if (a.scheme == "fp8") {
    s = a.scales.repeat_interleave(kernels::kFp8Block, 0).repeat_interleave(kernels::kFp8Block, 1).narrow(0, 0, n).narrow(
        1, 0, k);
  } else {
    s = a.scales.repeat_interleave(k / a.scales.size(1), 1);
  }
  at::Tensor centered = q;
  if (a.scheme == "int4" && a.zeros.defined()) {
    centered = q - a.zeros.to(at::kFloat).repeat_interleave(k / a.zeros.size(1), 1);
  }
  return centered * s;  // (q - z) exact in float32, one rounding
}

// ---------------------------------------------------------------- cases

std::function<void(CLI::App&, SuiteOptions&)> arguments() {
  return [](CLI::App& app, SuiteOptions& o) {
    app.add_option("--tokens", o["tokens"], "Rows M (comma list; 0 allowed) [default: 3,1,16,64,513 and 0]")
        ->delimiter(',');
    app.add_option("--shape", o["shape"], "Weights NxK (comma list) [default: 37x64,130x512]")->delimiter(',');
    app.add_option("--scheme", o["scheme"],
                   "Schemes: f32,bf16,f16,int8,int8/g<G>,fp8/tensor,fp8/channel,fp8/block,int4/g<G>[/zeros],"
                   "int4/gK[/zeros] "
                   "[default: all of these with G 32 and 128 (int8: 32)]")
        ->delimiter(',');
    app.add_option("--dtype", o["dtype"], "Input dtypes: float32,bfloat16,float16 [default: all]")->delimiter(',');
    app.add_option("--bias", o["bias"], "Bias: none,input,float32 [default: none,float32]")->delimiter(',');
    app.add_option("--layout", o["layout"], "Input rows: contiguous,strided [default: contiguous]")->delimiter(',');
  };
}

const std::vector<std::string> kSchemes = {"int4/g32/zeros", "int8",        "f32",       "bf16",     "f16",
                                           "fp8/tensor",     "fp8/channel", "fp8/block", "int4/g32", "int4/g128/zeros",
                                           "int4/gK",        "int4/gK/zeros", "int8/g32"};

std::pair<int64_t, int64_t> parse_shape(const std::string& s) {
  const size_t x = s.find('x');
  TORCH_CHECK(x != std::string::npos, "linear suite: --shape takes NxK, got ", s);
  return {std::stoll(s.substr(0, x)), std::stoll(s.substr(x + 1))};
}

struct Built {
  PackArgs args;
  at::Tensor input, bias, w64;
};

Built build_common(const json& p, at::Generator& g) {
  Built b;
  const int64_t m = p.at("tokens");
  const auto [n, k] = parse_shape(p.at("shape"));
  const SchemeSpec s = parse_scheme(p.at("scheme"));
  const at::ScalarType dtype = options::parse_dtype(p.at("dtype"));
  b.args = make_pack_args(s, n, k, g);
  b.w64 = contract_weight(b.args).to(at::kDouble);
  const int64_t pad = p.at("layout") == "strided" ? 8 : 0;
  b.input = at::randn({m, k + pad}, g, at::kDouble).to(dtype).narrow(1, 0, k);
  const std::string bias = p.at("bias");
  if (bias != "none") b.bias = at::randn({n}, g, at::kDouble).to(bias == "input" ? dtype : at::kFloat);
  return b;
}

Expected reference(const at::Tensor& input, const at::Tensor& w64, const at::Tensor& bias) {
  at::Tensor y = input.to(at::kCPU).to(at::kDouble).matmul(w64.t());
  if (bias.defined()) y = y + bias.to(at::kCPU).to(at::kDouble);
  return Expected{{y}, {}};
}

Tolerance tolerance(const at::Tensor& input, const at::Tensor& w64, const at::Tensor& bias) {
  const at::ScalarType dtype = input.scalar_type();
  const int64_t k = w64.size(1);
  const double tiny = dtype == at::kHalf ? std::ldexp(1.0, -24) : dtype == at::kBFloat16 ? std::ldexp(1.0, -133)
                                                                                          : std::ldexp(1.0, -149);
  Tolerance t{tiny, 2 * unit_roundoff(dtype)};
  at::Tensor mag = input.to(at::kDouble).abs().matmul(w64.abs().t());
  if (bias.defined()) mag = mag + bias.to(at::kDouble).abs();
  t.elementwise_atol = mag.mul_((k + 2) * std::ldexp(1.0, -24));
  return t;
}

CaseMetadata metadata(const PackArgs& a, const at::Tensor& input, const at::Tensor& bias) {
  const int64_t m = input.size(0), n = a.weight.size(0), k = a.weight.size(1);
  int64_t weight_bytes = a.scheme == "int4" ? n * k / 2 : n * k * a.weight.element_size();
  if (a.scales.defined()) weight_bytes += a.scales.numel() * 4;
  if (a.zeros.defined()) weight_bytes += a.zeros.numel() * 4;
  const int64_t read = weight_bytes + input.numel() * input.element_size() + (bias.defined() ? bias.nbytes() : 0);
  const double flops = 2.0 * m * n * k;
  // bf16 input with bf16 weights may run on bf16 dot products (AVX512_BF16) or AMX-BF16: the
  // products are exact in float32 either way. Every other case forms W or x in float32: FMA.
  std::map<std::string, double> work;
  if (a.scheme == "bf16" && input.scalar_type() == at::kBFloat16) {
    work = {{"f32_fma", flops}, {"bf16_dot", flops}, {"amx_bf16", flops}};
  }
  return {read, m * n * input.element_size(), flops, work};
}

Example build_linear(const json& p, at::Generator& g) {
  Built b = build_common(p, g);
  Example ex;
  ex.names = {"input", "packed", "bias"};
  ex.tensors = {b.input, make_stand_in(b.args), b.bias};
  // The stand-in packed by the kernel's own linear_pack once per case (the first call: validation),
  // keyed by the tensor the call gets; anything else (a bad argument) is passed as it is.
  auto cache = std::make_shared<std::vector<std::pair<at::Tensor, at::Tensor>>>();
  ex.call = [cache](const PreparedKernel& kernel, std::vector<at::Tensor>& t) {
    at::Tensor packed;
    for (const auto& [key, value] : *cache) {
      if (key.is_same(t[1])) packed = value;
    }
    if (!packed.defined()) {
      const std::optional<PackArgs> args = read_stand_in(t[1]);
      std::optional<at::Tensor> own = args ? pack_for(kernel.spec(), *args, t[0].device()) : std::nullopt;
      packed = own ? *own : t[1];
      cache->emplace_back(t[1], packed);
    }
    return std::vector<at::Tensor>{kernel.function<LinearFn>()(t[0], packed, optional(t[2]))};
  };
  const at::Tensor w64 = b.w64;
  ex.reference = [w64](const std::vector<at::Tensor>& t) { return reference(t[0], w64, t[2]); };
  ex.tolerance = tolerance(b.input, b.w64, b.bias);
  ex.metadata = metadata(b.args, b.input, b.bias);
  return ex;
}

Example build_pack(const json& p, at::Generator& g) {
  Built b = build_common(p, g);
  Example ex;
  ex.names = {"weight", "scales", "zeros"};
  ex.tensors = {b.args.weight, b.args.scales, b.args.zeros};
  const std::string scheme = b.args.scheme;
  const int64_t group_size = b.args.group_size;
  const at::Tensor input = b.input, bias = b.bias;
  ex.call = [scheme, group_size, input, bias](const PreparedKernel& kernel, std::vector<at::Tensor>& t) {
    const at::Tensor packed = kernel.function<LinearPackFn>()(t[0], optional(t[1]), optional(t[2]), scheme, group_size);
    const auto linear = sibling(kernel.spec(), "linear").function<LinearFn>();
    const at::Device d = t[0].device();
    return std::vector<at::Tensor>{linear(input.to(d), packed, optional(bias.defined() ? bias.to(d) : at::Tensor()))};
  };
  const at::Tensor w64 = b.w64;
  ex.reference = [w64, input, bias](const std::vector<at::Tensor>&) { return reference(input, w64, bias); };
  ex.tolerance = tolerance(b.input, b.w64, b.bias);
  ex.metadata = metadata(b.args, b.input, b.bias);
  return ex;
}

// The dimension matrix; schemes whose group does not divide K are left out.
std::vector<std::shared_ptr<const KernelCase>> cases(const std::string& operation, const SuiteOptions& o,
                                                     ExampleBuilder builder) {
  const std::vector<std::string> schemes = options::given(o, "scheme") ? o.at("scheme") : kSchemes;
  std::vector<std::string> shapes = options::given(o, "shape") ? o.at("shape") : std::vector<std::string>{"37x64", "130x512"};
  std::vector<json> points;
  for (const std::string& shape : shapes) {
    const auto [n, k] = parse_shape(shape);
    TORCH_CHECK(n >= 1 && k >= 1, "linear suite: --shape needs N >= 1 and K >= 1, got ", shape);
    for (const std::string& scheme : schemes) {
      const SchemeSpec s = parse_scheme(scheme);
      if ((s.scheme == "int4" || s.scheme == "int8") && s.group > 0 && k % s.group != 0) continue;
      points.push_back({{"shape", shape}, {"scheme", scheme}});
    }
  }
  std::vector<Dimension> dims = {
      // 3 first: the generic tests start from the first case, and grow it by a row.
      {"tokens", options::integers(o, "tokens", {3, 1, 16, 64, 513}, 0)},
      {"dtype", options::choices(o, "dtype", {"float32", "bfloat16", "float16"}, {"float32", "bfloat16", "float16"})},
      {"bias", options::choices(o, "bias", {"none", "input", "float32"}, {"none", "float32"})},
      {"layout", options::choices(o, "layout", {"contiguous", "strided"}, {"contiguous"})},
  };
  std::vector<json> grid;
  for (const json& point : points) {
    for (const auto& tokens : dims[0].values) {
      for (const auto& dtype : dims[1].values) {
        for (const auto& bias : dims[2].values) {
          for (const auto& layout : dims[3].values) {
            json c = point;
            c["tokens"] = tokens;
            c["dtype"] = dtype;
            c["bias"] = bias;
            c["layout"] = layout;
            grid.push_back(c);
          }
        }
      }
    }
  }
  if (!options::given(o, "tokens") && !options::given(o, "layout") && !options::given(o, "bias")) {
    // Zero rows; strided rows and a bias of the input's dtype on a few schemes.
    for (const std::string& scheme : {std::string("bf16"), std::string("int8"), std::string("int4/g32/zeros")}) {
      for (const auto& dtype : dims[1].values) {
        grid.push_back({{"shape", "37x64"}, {"scheme", scheme}, {"tokens", 0}, {"dtype", dtype}, {"bias", "none"},
                        {"layout", "contiguous"}});
        grid.push_back({{"shape", "37x64"}, {"scheme", scheme}, {"tokens", 5}, {"dtype", dtype}, {"bias", "input"},
                        {"layout", "strided"}});
      }
    }
  }
  std::vector<std::shared_ptr<const KernelCase>> out;
  for (const json& point : grid) out.push_back(std::make_shared<TensorCase>(operation, point, builder));
  return out;
}

SuiteOptions benchmark_defaults() {
  // The Llama-3-8B linears: qkv, o, gate_up, down, LM head.
  return {{"tokens", {"1", "4", "16", "64", "512"}},
          {"shape", {"6144x4096", "4096x4096", "28672x4096", "4096x14336", "128256x4096"}},
          {"scheme", {"bf16", "int8", "fp8/block", "int4/g128", "int4/g128/zeros"}},
          {"dtype", {"bfloat16"}},
          {"bias", {"none"}},
          {"layout", {"contiguous"}}};
}

// The headline cases: a decode batch of 16 and a 128-row chunk through Llama-3-8B's o projection
// (4096 x 4096), in bf16 and int4 (group 128) weights (scaled_mm's headline has int8).
SuiteOptions headline() {
  return {{"tokens", {"16", "128"}}, {"shape", {"4096x4096"}}, {"scheme", {"bf16", "int4/g128"}},
          {"dtype", {"bfloat16"}},     {"bias", {"none"}},       {"layout", {"contiguous"}}};
}

// Rows of the input; the width the kernels tile is N (panels of output channels).
RowShape row_shape(const json& p) { return {p.at("tokens"), parse_shape(p.at("shape")).first}; }

const OperationSuite& linear_suite() {
  static const OperationSuite suite{
      .operation = "linear",
      .description = "y = x W^T + b over a packed weight (every scheme), against float64 with the contract's W",
      .add_arguments = arguments(),
      .cases = [](const SuiteOptions& o) { return cases("linear", o, &build_linear); },
      .has_reference = true,
      .benchmark_defaults = benchmark_defaults(),
      .headline = headline(),
      .row_shape = row_shape,
      .accepted_bad_inputs = {{"input", "empty", AcceptedAs::kEmptyResults, "zero rows allowed"},
                              {"input", "dim 0 + 1", AcceptedAs::kValidPrefixClose,
                               "one more row; rows are independent (torch's GEMM may add them in another order)"}},
      .bind_arguments = &bind_packed};
  return suite;
}

const OperationSuite& linear_pack_suite() {
  static const OperationSuite suite{
      .operation = "linear_pack",
      .description = "packs every scheme; checked by the same solution's linear against float64",
      .add_arguments = arguments(),
      .cases = [](const SuiteOptions& o) { return cases("linear_pack", o, &build_pack); },
      .has_reference = true,
      .benchmark_defaults = {{"tokens", {"1"}}, {"shape", {"4096x4096"}}, {"scheme", {"bf16", "int4/g128"}},
                             {"dtype", {"bfloat16"}}, {"bias", {"none"}}, {"layout", {"contiguous"}}},
      .headline = {{"tokens", {"1"}}, {"shape", {"4096x4096"}}, {"scheme", {"bf16", "int4/g128"}},
                   {"dtype", {"bfloat16"}}, {"bias", {"none"}}, {"layout", {"contiguous"}}},
      .row_shape = row_shape,
      .accepted_bad_inputs = {
          {"weight", "non-contiguous last dimension", AcceptedAs::kSameResults, "the values are what is packed"},
          {"scales", "non-contiguous last dimension", AcceptedAs::kSameResults, "the values are what is packed"},
          {"zeros", "non-contiguous last dimension", AcceptedAs::kSameResults, "the values are what is packed"},
          {"zeros", "dtype float64", AcceptedAs::kSameResults, "zeros of any dtype holding integers in [0, 15]"},
      },
      .batch_rows = BatchRows::kNone};
  return suite;
}

XLLM_REGISTER_SUITE(linear_suite);
XLLM_REGISTER_SUITE(linear_pack_suite);

}  // namespace
}  // namespace xllm_kernel::numerics
