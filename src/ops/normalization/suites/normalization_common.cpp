#include "src/ops/normalization/suites/normalization_common.h"

#include "src/numerics/options.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <tuple>
#include <vector>
#include <utility>

namespace xllm_kernel::numerics::normalization {

void add_arguments(CLI::App& app, SuiteOptions& options, bool with_bias) {
  app.add_option("--tokens", options["tokens"],
                 "Rows (comma list; 0 allowed) [default: 1,7,257 and 0; on cuda also the kernels' launch-path shapes]")
      ->delimiter(',');
  app.add_option("--hidden", options["hidden"], "Hidden sizes (comma list, >= 1) [default: 1,64,4109]")->delimiter(',');
  app.add_option("--dtype", options["dtype"], "Input dtypes: float32,bfloat16,float16 [default: all]")->delimiter(',');
  app.add_option("--weight-dtype", options["weight-dtype"], "Weight dtype: input,float32 [default: both]")->delimiter(',');
  app.add_option("--layout", options["layout"], "Input layout: contiguous,strided,3d [default: contiguous,strided]")
      ->delimiter(',');
  if (with_bias) app.add_option("--bias", options["bias"], "With bias: true,false [default: both]")->delimiter(',');
  // The default grid depends on the device (--device, an option of the tool): keep its value.
  app.parse_complete_callback([&app, &options] {
    const CLI::Option* device = app.get_option_no_throw("--device");
    if (device != nullptr && device->count() > 0) options["device"] = device->results();
  });
}

SuiteOptions headline() {
  return {{"tokens", {"16", "512"}}, {"hidden", {"4096"}},     {"dtype", {"bfloat16"}},
          {"weight-dtype", {"input"}},  {"layout", {"contiguous"}}, {"bias", {"true"}}};
}

SuiteOptions benchmark_defaults() {
  return {{"tokens", {"1", "128", "2048"}}, {"hidden", {"4096"}},     {"dtype", {"bfloat16", "float32"}},
          {"weight-dtype", {"input"}},      {"layout", {"contiguous"}}, {"bias", {"true"}}};
}

using options::choices;
using options::integers;
using options::parse_dtype;

namespace {

// Shapes that reach the CUDA kernels' other launch paths (plan_launch in
// csrc/cuda/normalization/normalization.cu, for GPUs of 108-132 SMs), in bfloat16: more rows than
// one grid holds (blocks loop over rows) in the warp-per-row and the block-per-row kernel; several
// rows per block, a warp each; rows not 16-byte aligned with several accesses per thread. The GPU
// tests use the same (test/ops/normalization/grid.h).
const std::pair<int64_t, int64_t> kCudaKernelPathShapes[] = {{200000, 64}, {40000, 4096}, {8192, 1024}, {2048, 4109}};

bool on_cuda(const SuiteOptions& o) {
  auto it = o.find("device");
  return it != o.end() && !it->second.empty() && it->second.front().rfind("cuda", 0) == 0;
}

}  // namespace

Grid grid(const SuiteOptions& o, bool with_bias) {
  const bool default_tokens = !o.count("tokens") || o.at("tokens").empty();
  const bool default_hidden = !o.count("hidden") || o.at("hidden").empty();
  Grid g;
  g.dimensions = {
      {"tokens", integers(o, "tokens", {1, 7, 257}, 0)},
      {"hidden", integers(o, "hidden", {1, 64, 4109}, 1)},
      {"dtype", choices(o, "dtype", {"float32", "bfloat16", "float16"}, {"float32", "bfloat16", "float16"})},
      {"weight_dtype", choices(o, "weight-dtype", {"input", "float32"}, {"input", "float32"})},
      {"layout", choices(o, "layout", {"contiguous", "strided", "3d"}, {"contiguous", "strided"})},
  };
  for (auto& v : g.dimensions[2].values) parse_dtype(v.get<std::string>());
  if (with_bias) g.dimensions.push_back({"bias", choices(o, "bias", {"true", "false"}, {"true", "false"})});
  if (default_tokens) {
    // Empty dimension: zero tokens, for each dtype (custom points outside the matrix).
    for (const auto& dtype : g.dimensions[2].values) {
      json p{{"tokens", 0}, {"hidden", 64}, {"dtype", dtype}, {"weight_dtype", "input"}, {"layout", "contiguous"}};
      if (with_bias) p["bias"] = "true";
      g.extra.push_back(p);
    }
  }
  // Non-finite values (NaN, +-inf) in some rows of the input (and the residual): each dtype,
  // strided rows (custom points), unless the user chose the shapes.
  for (const auto& dtype : default_tokens && default_hidden ? g.dimensions[2].values : std::vector<json>{}) {
    json p{{"tokens", 7}, {"hidden", 64}, {"dtype", dtype}, {"weight_dtype", "input"}, {"layout", "strided"},
           {"values", "nonfinite"}};
    if (with_bias) p["bias"] = "true";
    g.extra.push_back(p);
  }
  const auto& dtypes = g.dimensions[2].values;
  if (default_tokens && default_hidden && on_cuda(o) && std::find(dtypes.begin(), dtypes.end(), "bfloat16") != dtypes.end()) {
    for (const auto& [tokens, hidden] : kCudaKernelPathShapes) {
      json p{{"tokens", tokens}, {"hidden", hidden}, {"dtype", "bfloat16"}, {"weight_dtype", "input"}, {"layout", "contiguous"}};
      if (with_bias) p["bias"] = "true";
      g.extra.push_back(p);
    }
  }
  return g;
}

at::Tensor make_input(const json& p, at::Generator& g, double offset) {
  const int64_t tokens = p.at("tokens"), hidden = p.at("hidden");
  const std::string layout = p.at("layout");
  const at::ScalarType dtype = parse_dtype(p.at("dtype"));
  at::Tensor base;
  if (layout == "contiguous") {
    base = at::randn({tokens, hidden}, g, at::kDouble);
  } else if (layout == "strided") {
    base = at::randn({tokens, hidden + 8}, g, at::kDouble);
  } else {
    base = at::randn({tokens, 3, hidden + 8}, g, at::kDouble);
  }
  base = base.add_(offset).to(dtype);
  if (layout == "contiguous") return base;
  if (layout == "strided") return base.narrow(1, 0, hidden);
  return base.narrow(1, 0, 2).narrow(2, 0, hidden);
}

void add_nonfinite(const json& p, at::Tensor& t, bool residual) {
  if (p.value("values", "finite") != "nonfinite") return;
  const double nan = std::nan(""), inf = INFINITY;
  // input: row 0 a NaN, row 1 +inf, row 2 -inf and +inf, row 3 -inf; residual: row 1 -inf where
  // the input has +inf (the sum is NaN), row 4 +inf, row 5 a NaN. Rows 6 and on stay finite.
  const std::vector<std::tuple<int64_t, int64_t, double>> input_values = {
      {0, 3, nan}, {1, 5, inf}, {2, 1, -inf}, {2, 7, inf}, {3, 0, -inf}};
  const std::vector<std::tuple<int64_t, int64_t, double>> residual_values = {{1, 5, -inf}, {4, 2, inf}, {5, 9, nan}};
  for (const auto& [row, col, value] : residual ? residual_values : input_values) {
    if (row < t.size(0) && col < t.size(-1)) t.select(0, row).select(-1, col).fill_(value);
  }
}

at::Tensor make_weight(const json& p, at::Generator& g) {
  const int64_t hidden = p.at("hidden");
  const std::string w = p.at("weight_dtype");
  const at::ScalarType dtype = w == "float32" ? at::kFloat : parse_dtype(p.at("dtype"));
  return (at::randn({hidden}, g, at::kDouble) * 0.5 + 1).to(dtype);
}

RowShape row_shape(const json& p) {
  const int64_t tokens = p.at("tokens"), hidden = p.at("hidden");
  return {p.at("layout") == "3d" ? 2 * tokens : tokens, hidden};
}

std::vector<AcceptedBadInput> accepted_row_variants() {
  return {{"input", "dim 0 + 1", AcceptedAs::kValidPrefix, "one more row; rows are independent"},
          {"input", "empty", AcceptedAs::kEmptyResults, "zero rows allowed"}};
}

}  // namespace xllm_kernel::numerics::normalization
