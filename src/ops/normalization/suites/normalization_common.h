// What the three normalization suites share: options, input layouts, the shape of a case, the
// bad inputs they accept; the float64 references are in reference.h.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "src/numerics/tensor_case.h"
#include "src/ops/normalization/suites/reference.h"

namespace xllm_kernel::numerics::normalization {

// --tokens --hidden --dtype --weight-dtype --layout (+ --bias for layer_norm).
void add_arguments(CLI::App& app, SuiteOptions& options, bool with_bias);

// Dimension matrix from the options (defaults cover tails, row strides, all dtypes and float32
// weights) plus zero-token cases, non-finite rows for each dtype, and on --device cuda the shapes of the CUDA kernels' other
// launch paths (many rows, rows per block, misaligned rows; bfloat16) when tokens and hidden are
// the defaults.
struct Grid {
  std::vector<Dimension> dimensions;
  std::vector<json> extra;
};
Grid grid(const SuiteOptions& options, bool with_bias);

// The benchmark's default grid: 1, 128 and 2048 tokens of 4096 in bfloat16 and float32 (the
// default CPU run of every operation stays within two minutes on two cores; pass --tokens 8192
// for the large shape).
SuiteOptions benchmark_defaults();

// The headline cases (--grid headline): a decode batch of 16 and a 512-token prefill chunk of 4096
// (Llama-3-8B's hidden size) in bfloat16.
SuiteOptions headline();

// [tokens, hidden] input in the case's layout, randn * scale + offset, from the generator.
//   contiguous: [tokens, hidden]; strided: rows hidden + 8 apart; 3d: [tokens, 2, hidden] whose
//   leading dimensions cannot merge into one stride.
at::Tensor make_input(const json& p, at::Generator& g, double offset);
at::Tensor make_weight(const json& p, at::Generator& g);
// Cases with "values": "nonfinite" get NaN and +-inf in a few rows of t (the input, or with
// `residual` the residual, whose infinities meet the input's); others are left as they are.
void add_nonfinite(const json& p, at::Tensor& t, bool residual);

// The rows the kernels walk (tokens, twice as many in the 3d layout) and their width (hidden).
RowShape row_shape(const json& parameters);

// "any strides for the leading dimensions", "zero rows allowed": one more row, or none, of an
// input whose rows are independent (rms_norm, layer_norm; fused_add_rms_norm's residual must have
// the input's shape, so it accepts neither).
std::vector<AcceptedBadInput> accepted_row_variants();

}  // namespace xllm_kernel::numerics::normalization
