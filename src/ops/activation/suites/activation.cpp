// Suites of the activations, one per entry of kGatedActivations (reference.h: silu_and_mul,
// gelu_and_mul, gelu_tanh_and_mul) and of kPlainActivations (gelu, gelu_tanh, quick_gelu: out =
// act(x), the same with b = 1 below).
//
// Options: --tokens, --hidden (d, the output width: the input is [tokens, 2d], or [tokens, d]
// without the gate), --dtype, --layout. With the default shapes, cases with NaN and +-inf in the
// gate, the up half and (without the gate) values beyond the dtype's range, checked against the
// contracts' rules (reference.h: limited) as NaN and the same infinity.
// Tolerance: out = act(a) * b is computed in float32 and rounded once to the dtype. The final
// rounding adds at most one ulp of the dtype (2 u relative: a rounding boundary may sit between the
// exact and the float32 value). An implementation's float32 evaluation of act may err by a few
// float32 ulps of a * b, element by element: relative where the formula does not cancel, absolute
// in |a b| where 1 + erf or 1 + tanh cancels (a < 0; ATen's at::gelu does, and its erf is off by
// up to ~5 ulps of 1 near -1: cpu.torch.gelu float32 measured at 0.69 of this bound). So
// |got - want| <= 2 u |want| + kComputeUlps * 2^-24 * |a b| for each element (kComputeUlps = 8),
// plus the dtype's smallest subnormal (a result in the subnormal range). The native CPU and CUDA
// kernels use forms that do not cancel (erfc, sigmoid); their relative accuracy for a < 0 is
// asserted by the CPU kernel tests and the CUDA host test (HostChecks.GelusDoNotCancelForNegativeInputs),
// which this shared bound is too wide to see.
// bfloat16 results may come from cheaper float32 forms (cpu.native: relative error below 2^-10 =
// u / 4, csrc/cpu/activation/activation.h): u for the rounding plus u / 4 stays within 2 u.
#include <cmath>
#include <functional>
#include <iterator>
#include <utility>

#include "src/numerics/options.h"
#include "src/numerics/tensor_case.h"
#include "src/numerics/verify.h"
#include "src/ops/activation/suites/reference.h"
#include "xllm_kernel/ops/activation.h"

namespace xllm_kernel::numerics {
namespace {

constexpr double kComputeUlps = 8;

// The exponent of the smallest subnormal of dtype.
int subnormal_exponent(at::ScalarType dtype) {
  switch (dtype) {
    case at::kHalf: return -24;
    case at::kBFloat16: return -133;
    default: return -149;
  }
}

// The suite's options; the input is [tokens, 2d] (gated) or [tokens, d].
std::function<void(CLI::App&, SuiteOptions&)> arguments(bool gated) {
  return [gated](CLI::App& app, SuiteOptions& o) {
    app.add_option("--tokens", o["tokens"], "Rows (comma list; 0 allowed) [default: 1,7,257 and 0]")->delimiter(',');
    app.add_option("--hidden", o["hidden"],
                   gated ? "Output widths d (comma list, >= 1; the input is [..., 2d]) [default: 1,7,64,4099]"
                         : "Widths d (comma list, >= 1; input and output are [..., d]) [default: 1,7,64,4099]")
        ->delimiter(',');
    app.add_option("--dtype", o["dtype"], "Input dtypes: float32,bfloat16,float16 [default: all]")->delimiter(',');
    app.add_option("--layout", o["layout"], "Input layout: contiguous,strided,3d [default: contiguous,strided]")
        ->delimiter(',');
  };
}

// [tokens, 2d] (gated) or [tokens, d] in the case's layout: gate values randn * 3 (silu and gelu
// bend over [-6, 6]), up values randn.
at::Tensor make_input(const json& p, at::Generator& g, bool gated) {
  const int64_t tokens = p.at("tokens"), d = p.at("hidden");
  const std::string layout = p.at("layout");
  const at::ScalarType dtype = options::parse_dtype(p.at("dtype"));
  const int64_t pad = layout == "contiguous" ? 0 : 8, width = gated ? 2 * d : d;
  at::Tensor base = layout == "3d" ? at::randn({tokens, 3, width + pad}, g, at::kDouble)
                                   : at::randn({tokens, width + pad}, g, at::kDouble);
  base.narrow(-1, 0, d).mul_(3);
  if (p.value("values", "normal") == "nonfinite") {
    TORCH_CHECK(tokens > 0 && d >= 8, "activation suite: a nonfinite case needs >= 1 row of >= 8 columns, got ",
                tokens, " x ", d);
    // The contracts' non-finite rules (act(+inf) = +inf, act(-inf) = 0, NaN stays NaN, an IEEE
    // product with the up half), in the first columns (the vector path) and the last (the tail).
    const double inf = INFINITY, nan = std::nan("");
    at::Tensor row = base.select(0, 0);
    if (layout == "3d") row = row.select(0, 0);
    const int64_t up = gated ? d : 0;
    row[0] = inf;
    row[1] = -inf;
    row[2] = nan;
    row[d - 1] = -inf;
    row[d - 2] = inf;
    row[d - 3] = nan;
    if (gated) {
      row[up + 3] = inf;       // act(finite) * inf
      row[4] = inf;            // act(+inf) * 0: NaN
      row[up + 4] = 0;
      row[5] = -inf;           // act(-inf) * inf: 0 * inf, NaN
      row[up + 5] = -inf;
      row[up + d - 4] = nan;   // act(finite) * NaN
    } else {
      row[3] = 1e300;          // beyond every dtype: +inf after the rounding
      row[4] = -1e300;         // -inf after the rounding
    }
  }
  base = base.to(dtype);
  if (layout == "contiguous") return base;
  if (layout == "strided") return base.narrow(1, 0, width);
  return base.narrow(1, 0, 2).narrow(2, 0, width);
}

Example build(activation::ActivationFunction act, bool gated, const json& p, at::Generator& g) {
  Example ex;
  at::Tensor input = make_input(p, g, gated);
  ex.names = {"input"};
  ex.tensors = {input};
  ex.call = [](const PreparedKernel& k, std::vector<at::Tensor>& t) {
    return std::vector<at::Tensor>{k.function<ActivationFn>()(t[0])};
  };
  ex.reference = [act, gated](const std::vector<at::Tensor>& t) {
    return Expected{{gated ? activation::reference_gated(act, t[0]) : activation::reference_plain(act, t[0])}, {}};
  };
  // The float32 evaluation's absolute error, element by element: kComputeUlps float32 ulps of that
  // element's |a b| (b = 1 without the gate); a non-finite result is compared as itself. Plus the
  // dtype's smallest subnormal: one ulp in the subnormal range, which 2 u does not reach.
  const double u = unit_roundoff(input.scalar_type());
  Tolerance tolerance{std::ldexp(1.0, subnormal_exponent(input.scalar_type())), 2 * u};
  if (input.numel() > 0) {
    at::Tensor x = input.to(at::kCPU).to(at::kDouble);
    const int64_t d = gated ? input.size(-1) / 2 : input.size(-1);
    const at::Tensor products = (gated ? x.narrow(-1, 0, d) * x.narrow(-1, d, d) : x).abs();
    tolerance.elementwise_atol =
        at::where(products.isfinite(), products, at::zeros_like(products)).mul_(kComputeUlps * std::ldexp(1.0, -24));
  }
  ex.tolerance = tolerance;
  const int64_t n = gated ? input.numel() / 2 : input.numel();  // output elements
  ex.metadata = {(gated ? 2 : 1) * n * input.element_size(), n * input.element_size(), 10.0 * n, {}};
  return ex;
}

// The headline cases: a decode batch of 16 and a 512-token prefill chunk, d = 4096, bfloat16.
SuiteOptions headline() {
  return {{"tokens", {"16", "512"}}, {"hidden", {"4096"}}, {"dtype", {"bfloat16"}}, {"layout", {"contiguous"}}};
}

SuiteOptions benchmark_defaults() {
  return {{"tokens", {"1", "128", "2048"}}, {"hidden", {"4096"}}, {"dtype", {"bfloat16", "float32"}},
          {"layout", {"contiguous"}}};
}

// The rows the kernel walks (tokens, twice as many in the 3d layout) and their width: d, the
// output's (the gate and the up halves are walked side by side).
RowShape row_shape(const json& p) {
  const int64_t tokens = p.at("tokens"), d = p.at("hidden");
  return {p.at("layout") == "3d" ? 2 * tokens : tokens, d};
}

// "any strides for the leading dimensions"; "zero rows allowed"; without the gate, any width.
std::vector<AcceptedBadInput> accepted_bad_inputs(bool gated) {
  std::vector<AcceptedBadInput> out = {
      {"input", "dim 0 + 1", AcceptedAs::kValidPrefix, "one more row; rows are independent"},
      {"input", "empty", AcceptedAs::kEmptyResults, "zero rows allowed"}};
  if (!gated) out.push_back({"input", "dim 1 + 1", AcceptedAs::kValidPrefix, "one more column; any d >= 1, elementwise"});
  return out;
}

OperationSuite make_suite(const activation::GatedActivation& entry, bool gated) {
  const std::string operation = entry.contract().operation;
  const activation::ActivationFunction act = entry.act;
  return OperationSuite{
      .operation = operation,
      .description = entry.description,
      .add_arguments = arguments(gated),
      .cases =
          [operation, act, gated](const SuiteOptions& o) {
            std::vector<Dimension> dims = {
                {"tokens", options::integers(o, "tokens", {1, 7, 257}, 0)},
                {"hidden", options::integers(o, "hidden", {1, 7, 64, 4099}, 1)},
                {"dtype", options::choices(o, "dtype", {"float32", "bfloat16", "float16"},
                                           {"float32", "bfloat16", "float16"})},
                {"layout", options::choices(o, "layout", {"contiguous", "strided", "3d"}, {"contiguous", "strided"})},
            };
            std::vector<json> extra;
            if (!options::given(o, "tokens")) {
              for (const auto& dtype : dims[2].values) {
                extra.push_back({{"tokens", 0}, {"hidden", 64}, {"dtype", dtype}, {"layout", "contiguous"}});
              }
            }
            if (!options::given(o, "tokens") && !options::given(o, "hidden")) {
              // NaN and +-inf in the first and the last columns (hidden 37: a vector and a tail).
              for (const auto& dtype : dims[2].values) {
                for (const auto& layout : dims[3].values) {
                  extra.push_back(
                      {{"tokens", 3}, {"hidden", 37}, {"dtype", dtype}, {"layout", layout}, {"values", "nonfinite"}});
                }
              }
            }
            return tensor_cases(operation, dims, extra,
                                [act, gated](const json& p, at::Generator& g) { return build(act, gated, p, g); });
          },
      .has_reference = true,
      .benchmark_defaults = benchmark_defaults(),
      .headline = headline(),
      .row_shape = row_shape,
      // "any strides for the leading dimensions"; "zero rows allowed".
      .accepted_bad_inputs = accepted_bad_inputs(gated)};
}

// The suite of kGatedActivations[I], or of kPlainActivations[I] without the gate.
template <bool kGated, size_t I>
const OperationSuite& activation_suite() {
  static const OperationSuite suite =
      make_suite(kGated ? activation::kGatedActivations[I] : activation::kPlainActivations[I], kGated);
  return suite;
}

// Registers one suite per entry (XLLM_REGISTER_SUITE, for each index).
template <bool kGated, size_t... I>
bool register_suites(std::index_sequence<I...>) {
  (registration::SuiteRegistrar(&activation_suite<kGated, I>), ...);
  return true;
}

[[maybe_unused]] const bool registered_gated =
    register_suites<true>(std::make_index_sequence<std::size(activation::kGatedActivations)>());
[[maybe_unused]] const bool registered_plain =
    register_suites<false>(std::make_index_sequence<std::size(activation::kPlainActivations)>());

}  // namespace
}  // namespace xllm_kernel::numerics
