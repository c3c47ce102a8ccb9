// fused_add_rms_norm: residual <- round(input + residual); input <- rms_norm(residual).
#include "src/ops/normalization/suites/normalization_common.h"
#include "xllm_kernel/ops/normalization.h"

namespace xllm_kernel::numerics {
namespace {

constexpr double kEps = 1e-6;

Example build(const json& p, at::Generator& g) {
  using namespace normalization;
  Example ex;
  at::Tensor input = make_input(p, g, /*offset=*/2);
  add_nonfinite(p, input, /*residual=*/false);
  at::Tensor residual = make_input(p, g, /*offset=*/2);
  add_nonfinite(p, residual, /*residual=*/true);
  at::Tensor weight = make_weight(p, g);
  ex.names = {"input", "residual", "weight"};
  ex.tensors = {input, residual, weight};
  ex.mutates = fused_add_rms_norm_contract().mutates;
  ex.call = [](const PreparedKernel& k, std::vector<at::Tensor>& t) {
    k.function<FusedAddRmsNormFn>()(t[0], t[1], t[2], kEps);
    return std::vector<at::Tensor>{};
  };
  ex.reference = [](const std::vector<at::Tensor>& t) {
    const FusedAddRmsNormReference want = reference_fused_add_rms_norm(t[0], t[1], t[2], kEps);
    return Expected{{}, {{"residual", want.residual.to(at::kDouble)}, {"input", want.input}}};
  };
  ex.tolerance = accumulate_tolerance(input.scalar_type(), input.size(-1));
  ex.tolerance_overrides["residual"] = Tolerance{0, 0};  // one correctly rounded addition: exact
  const int64_t n = input.numel(), es = input.element_size();
  ex.metadata = {2 * n * es + weight.numel() * weight.element_size(), 2 * n * es, 5.0 * n, {}};
  return ex;
}

}  // namespace

const OperationSuite& fused_add_rms_norm_suite() {
  static const OperationSuite suite{
      .operation = fused_add_rms_norm_contract().operation,
      .description = "Residual add, then RMSNorm of the rounded sum, both in place",
      .add_arguments = [](CLI::App& app, SuiteOptions& o) { normalization::add_arguments(app, o, /*with_bias=*/false); },
      .cases =
          [](const SuiteOptions& o) {
            auto g = normalization::grid(o, /*with_bias=*/false);
            return tensor_cases(fused_add_rms_norm_contract().operation, g.dimensions, g.extra, build);
          },
      .has_reference = true,
      .benchmark_defaults = normalization::benchmark_defaults(),
      .headline = normalization::headline(),
      .row_shape = normalization::row_shape};  // accepts no bad input: residual must match input
  return suite;
}

XLLM_REGISTER_SUITE(fused_add_rms_norm_suite);

}  // namespace xllm_kernel::numerics
