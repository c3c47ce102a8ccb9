// rms_norm: out = input * rsqrt(mean(input^2) + eps) * weight.
#include "src/ops/normalization/suites/normalization_common.h"
#include "xllm_kernel/ops/normalization.h"

namespace xllm_kernel::numerics {
namespace {

constexpr double kEps = 1e-6;

Example build(const json& p, at::Generator& g) {
  using namespace normalization;
  Example ex;
  // Offset 4: sums of squares of thousands of values near 16 are far beyond half-precision
  // accumulation, so a kernel without float32 accumulation fails.
  at::Tensor input = make_input(p, g, /*offset=*/4);
  add_nonfinite(p, input, /*residual=*/false);
  at::Tensor weight = make_weight(p, g);
  ex.names = {"input", "weight"};
  ex.tensors = {input, weight};
  ex.call = [](const PreparedKernel& k, std::vector<at::Tensor>& t) {
    return std::vector<at::Tensor>{k.function<RmsNormFn>()(t[0], t[1], kEps)};
  };
  ex.reference = [](const std::vector<at::Tensor>& t) {
    return Expected{{reference_rms_norm(t[0], t[1], kEps)}, {}};
  };
  ex.tolerance = accumulate_tolerance(input.scalar_type(), input.size(-1));
  const int64_t n = input.numel();
  ex.metadata = {n * input.element_size() + weight.numel() * weight.element_size(), n * input.element_size(), 4.0 * n,
                 {}};
  return ex;
}

}  // namespace

const OperationSuite& rms_norm_suite() {
  static const OperationSuite suite{
      .operation = rms_norm_contract().operation,
      .description = "RMSNorm over the last dimension",
      .add_arguments = [](CLI::App& app, SuiteOptions& o) { normalization::add_arguments(app, o, /*with_bias=*/false); },
      .cases =
          [](const SuiteOptions& o) {
            auto g = normalization::grid(o, /*with_bias=*/false);
            return tensor_cases(rms_norm_contract().operation, g.dimensions, g.extra, build);
          },
      .has_reference = true,
      .benchmark_defaults = normalization::benchmark_defaults(),
      .headline = normalization::headline(),
      .row_shape = normalization::row_shape,
      .accepted_bad_inputs = normalization::accepted_row_variants()};
  return suite;
}

XLLM_REGISTER_SUITE(rms_norm_suite);

}  // namespace xllm_kernel::numerics
