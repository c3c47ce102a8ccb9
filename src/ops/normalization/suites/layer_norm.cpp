// layer_norm: (input - mean) * rsqrt(biased var + eps) * weight + bias.
#include "src/ops/normalization/suites/normalization_common.h"
#include "xllm_kernel/ops/normalization.h"

#include <cmath>

namespace xllm_kernel::numerics {
namespace {

constexpr double kEps = 1e-5;

Example build(const json& p, at::Generator& g) {
  using namespace normalization;
  Example ex;
  // Offset 50 with unit spread: E[x^2] - E[x]^2 or half-precision sums fail here.
  at::Tensor input = make_input(p, g, /*offset=*/50);
  add_nonfinite(p, input, /*residual=*/false);
  at::Tensor weight = make_weight(p, g);
  at::Tensor bias;
  if (p.at("bias") == "true") bias = at::randn({input.size(-1)}, g, at::kDouble).to(weight.scalar_type());
  ex.names = {"input", "weight", "bias"};
  ex.tensors = {input, weight, bias};
  ex.call = [](const PreparedKernel& k, std::vector<at::Tensor>& t) {
    std::optional<at::Tensor> b;
    if (t[2].defined()) b = t[2];
    return std::vector<at::Tensor>{k.function<LayerNormFn>()(t[0], t[1], b, kEps)};
  };
  ex.reference = [](const std::vector<at::Tensor>& t) {
    return Expected{{reference_layer_norm(t[0], t[1], t[2], kEps)}, {}};
  };
  ex.tolerance = accumulate_tolerance(input.scalar_type(), input.size(-1));
  // Centering loses accuracy in proportion to the rows' condition |mean| / std: a float32 mean off
  // by its rounding error shifts every output by (error / std). Widen the absolute tolerance by
  // that amount (about 50 here, so ~2^-24 * 50 * 4 sqrt(hidden)).
  if (input.numel() > 0) {
    at::Tensor rows = input.to(at::kDouble).reshape({-1, input.size(-1)});
    const double condition =
        (rows.mean(-1).abs() / (rows.std(-1, /*unbiased=*/false) + 1e-30)).max().item<double>();
    ex.tolerance.atol += condition * 4 * std::sqrt(static_cast<double>(input.size(-1))) * std::ldexp(1.0, -24);
  }
  const int64_t n = input.numel(), ws = weight.element_size();
  ex.metadata = {n * input.element_size() + (bias.defined() ? 2 : 1) * weight.numel() * ws, n * input.element_size(),
                 7.0 * n, {}};
  return ex;
}

}  // namespace

const OperationSuite& layer_norm_suite() {
  static const OperationSuite suite{
      .operation = layer_norm_contract().operation,
      .description = "LayerNorm over the last dimension (biased variance, optional bias)",
      .add_arguments = [](CLI::App& app, SuiteOptions& o) { normalization::add_arguments(app, o, /*with_bias=*/true); },
      .cases =
          [](const SuiteOptions& o) {
            auto g = normalization::grid(o, /*with_bias=*/true);
            return tensor_cases(layer_norm_contract().operation, g.dimensions, g.extra, build);
          },
      .has_reference = true,
      .benchmark_defaults = normalization::benchmark_defaults(),
      .headline = normalization::headline(),
      .row_shape = normalization::row_shape,
      .accepted_bad_inputs = normalization::accepted_row_variants()};
  return suite;
}

XLLM_REGISTER_SUITE(layer_norm_suite);

}  // namespace xllm_kernel::numerics
