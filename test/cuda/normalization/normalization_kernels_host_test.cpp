// Torch-free host tests of csrc/cuda/normalization: the kernels' per-thread passes run lane by lane
// on the CPU (a group's sum is a plain sum over its lanes), with the launch shapes plan_launch
// picks, against a float64 reference written here. They check element ownership (vector pieces,
// scalar tails, lanes beyond the row), 16-byte accesses only at aligned addresses (the host build
// of load16/store16 throws otherwise), row offsets over unmergeable and > 2^31 strides, the
// rounded residual, and that nothing outside the rows is written. The device-only parts (warp
// and block sums, the grid loop) are covered by test/cuda/normalization_cuda_test.cpp on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "csrc/cuda/normalization/normalization.cuh"
#include "csrc/cuda/normalization/normalization.h"
#include "test/cuda/common/group_sum.h"
#include "test/cuda/common/host_buffers.h"
#include "test/cuda/element_codec.h"
#include "test/cuda/launcher_status.h"

namespace xllm_kernel::cuda {
namespace {

using ::xllm_kernel::cuda::name_of;  // the dtype's (test/cuda/element_codec.h), beside this file's own

using kernels::KernelArgs;
using kernels::Op;

const char* name_of(Op op) {
  return op == Op::kRmsNorm ? "rms_norm" : op == Op::kFusedAddRmsNorm ? "fused_add_rms_norm" : "layer_norm";
}
size_t size_of(DType t) { return t == DType::kFloat32 ? 4 : 2; }

enum class Layout { kContiguous, kAlignedPadding, kOddPadding, kMisaligned, kUnmergeable3d };
const char* name_of(Layout l) {
  switch (l) {
    case Layout::kContiguous: return "contiguous";
    case Layout::kAlignedPadding: return "row stride +8";
    case Layout::kOddPadding: return "row stride +5";
    case Layout::kMisaligned: return "starts at element 1";
    case Layout::kUnmergeable3d: return "3-D unmergeable";
  }
  return "?";
}

// The view for `tokens` rows (3-D: tokens x 2) and the elements its buffer needs.
View make_view(Layout l, int64_t tokens, int64_t hidden, int64_t* buffer_elements) {
  View v;
  switch (l) {
    case Layout::kContiguous: v = {0, {tokens}, {hidden}}; break;
    case Layout::kAlignedPadding: v = {0, {tokens}, {hidden + 8}}; break;
    case Layout::kOddPadding: v = {0, {tokens}, {hidden + 5}}; break;
    case Layout::kMisaligned: v = {1, {tokens}, {hidden}}; break;
    case Layout::kUnmergeable3d: v = {0, {tokens, 2}, {3 * (hidden + 3), hidden + 3}}; break;
  }
  *buffer_elements = v.extent(hidden, 7);  // slack after the last row, to catch overruns
  return v;
}

void fill(const Buffer& b, std::mt19937& rng, double offset) {
  std::normal_distribution<double> normal(offset, 1.0);
  for (size_t i = 0; i < b.elements; ++i) b.set(i, normal(rng));
}

// ---- the host "launch": every group's lanes in turn, group sums (group_sum.h) between stages ----

template <Op kOp, class T, class W>
void run_rows(const KernelArgs& a, int width) {
  using P = kernels::Program<kOp>;
  std::vector<float> partials(width);
  for (int64_t row = 0; row < a.p.rows; ++row) {
    const kernels::Row<T, W> r = kernels::make_row<kOp, T, W>(a, row);
    float totals[2] = {0.0f, 0.0f};
    for (int s = 0; s < P::kReductions; ++s) {
      for (int lane = 0; lane < width; ++lane) partials[lane] = P::partial(s, r, lane, width, totals);
      totals[s] = group_sum(partials);
    }
    for (int lane = 0; lane < width; ++lane) P::finish(r, lane, width, totals, a.eps);
  }
}

template <Op kOp>
void run_host(const NormParams& p, int width) {
  KernelArgs a;
  a.p = p;
  a.eps = static_cast<float>(p.eps);
  a.weights_aligned = kernels::aligned16(p.weight) && kernels::aligned16(p.bias);
  const bool f32w = p.weight_dtype == DType::kFloat32;
  switch (p.dtype) {
    case DType::kFloat32: return run_rows<kOp, float, float>(a, width);
    case DType::kBFloat16:
      return f32w ? run_rows<kOp, __nv_bfloat16, float>(a, width) : run_rows<kOp, __nv_bfloat16, __nv_bfloat16>(a, width);
    case DType::kFloat16:
      return f32w ? run_rows<kOp, __half, float>(a, width) : run_rows<kOp, __half, __half>(a, width);
  }
}

void run_host(Op op, const NormParams& p, int width) {
  switch (op) {
    case Op::kRmsNorm: return run_host<Op::kRmsNorm>(p, width);
    case Op::kFusedAddRmsNorm: return run_host<Op::kFusedAddRmsNorm>(p, width);
    case Op::kLayerNorm: return run_host<Op::kLayerNorm>(p, width);
  }
}

// Same budget as test/ops/normalization/reference.h: one rounding to the dtype plus float32
// accumulation over the row.
struct Tolerance {
  double atol, rtol;
};
Tolerance tolerance_for(DType t) {
  switch (t) {
    case DType::kBFloat16: return {1.0 / 128, 1.0 / 128};
    case DType::kFloat16: return {1.0 / 1024, 1.0 / 1024};
    case DType::kFloat32: return {1e-4, 1e-4};
  }
  return {0, 0};
}

struct Case {
  Op op;
  DType dtype, weight_dtype;
  int64_t tokens, hidden;
  Layout layout;
  bool bias;
  int width;  // threads per row group

  std::string describe() const {
    return std::string(name_of(op)) + " " + name_of(dtype) + " weight " + name_of(weight_dtype) + " tokens=" +
           std::to_string(tokens) + " hidden=" + std::to_string(hidden) + " " + name_of(layout) +
           (bias ? " bias" : "") + " width=" + std::to_string(width);
  }
};

// Runs one case on the host and compares it with float64.
void check_case(const Case& c, std::mt19937& rng) {
  SCOPED_TRACE(c.describe());
  const double eps = c.op == Op::kLayerNorm ? 1e-5 : 1e-6;
  int64_t in_elements = 0, res_elements = 0;
  const View in_view = make_view(c.layout, c.tokens, c.hidden, &in_elements);
  // The residual gets other strides than the input (contiguous unless the input is).
  const Layout res_layout = c.layout == Layout::kContiguous ? Layout::kOddPadding : Layout::kContiguous;
  View res_view = make_view(c.layout == Layout::kUnmergeable3d ? Layout::kUnmergeable3d : res_layout, c.tokens,
                            c.hidden, &res_elements);
  Buffer input(c.dtype, in_elements), residual(c.dtype, res_elements);
  fill(input, rng, c.op == Op::kLayerNorm ? 50.0 : 2.0);  // a large mean: catches E[x^2] - E[x]^2
  fill(residual, rng, 3.0);
  Buffer weight(c.weight_dtype, c.hidden), bias(c.weight_dtype, c.hidden);
  fill(weight, rng, 1.0);
  fill(bias, rng, 0.0);
  const int64_t rows = in_view.rows();
  Buffer out(c.dtype, rows * c.hidden + 7);
  fill(out, rng, 0.0);  // garbage that must be overwritten
  const Buffer input_before = input.clone(), residual_before = residual.clone(), out_before = out.clone();

  NormParams p;
  p.dtype = c.dtype;
  p.weight_dtype = c.weight_dtype;
  p.rows = rows;
  p.hidden = c.hidden;
  p.row_ndim = static_cast<int>(in_view.sizes.size());
  for (int d = 0; d < p.row_ndim; ++d) {
    p.row_sizes[d] = in_view.sizes[d];
    p.input_strides[d] = in_view.strides[d];
    p.residual_strides[d] = res_view.strides[d];
    p.out_strides[d] = d + 1 == p.row_ndim ? c.hidden : c.hidden * in_view.sizes.back();
  }
  p.input = input.at(in_view.offset);
  p.weight = weight.at(0);
  p.bias = c.bias ? bias.at(0) : nullptr;
  p.eps = eps;
  if (c.op == Op::kFusedAddRmsNorm) {
    p.residual = residual.at(res_view.offset);
  } else {
    p.out = out.at(0);
  }
  ASSERT_NO_THROW(run_host(c.op, p, c.width));

  const Tolerance tol = tolerance_for(c.dtype);
  std::vector<double> x(c.hidden), want(c.hidden);
  double worst = 0;
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t io = in_view.row_offset(row), ro = res_view.row_offset(row);
    for (int64_t i = 0; i < c.hidden; ++i) x[i] = input_before.get(io + i);
    if (c.op == Op::kFusedAddRmsNorm) {
      for (int64_t i = 0; i < c.hidden; ++i) {
        Buffer sum(c.dtype, 1);
        sum.set(0, x[i] + residual_before.get(ro + i));  // exact in float64, rounded once
        ASSERT_EQ(std::memcmp(sum.at(0), residual.at(ro + i), size_of(c.dtype)), 0)
            << "residual row " << row << " element " << i << " is not round(input + residual)";
        x[i] = sum.get(0);
      }
    }
    double mean = 0, var = 0, ss = 0;
    for (double v : x) mean += v, ss += v * v;
    mean /= c.hidden;
    for (double v : x) var += (v - mean) * (v - mean);
    var /= c.hidden;
    for (int64_t i = 0; i < c.hidden; ++i) {
      const double w = weight.get(i);
      want[i] = c.op == Op::kLayerNorm ? (x[i] - mean) / std::sqrt(var + eps) * w + (c.bias ? bias.get(i) : 0.0)
                                       : x[i] / std::sqrt(ss / c.hidden + eps) * w;
      const double got = c.op == Op::kFusedAddRmsNorm ? input.get(io + i) : out.get(row * c.hidden + i);
      const double h = std::fabs(got - want[i]) / (tol.atol + tol.rtol * std::fabs(want[i]));
      if (!(h <= 1.0)) {
        FAIL() << "row " << row << " element " << i << ": got " << got << ", want " << want[i];
      }
      worst = std::max(worst, h);
    }
  }
  // Nothing outside the rows changed: the inputs (unless written in place) and the padding.
  auto outside_rows_unchanged = [&](const Buffer& now, const Buffer& before, const View& v, bool rows_written) {
    std::vector<char> in_row(now.elements, 0);
    for (int64_t row = 0; row < v.rows(); ++row)
      for (int64_t i = 0; i < c.hidden; ++i) in_row[v.row_offset(row) + i] = 1;
    for (size_t e = 0; e < now.elements; ++e) {
      if (in_row[e] && rows_written) continue;
      if (!now.same_bits(before, e)) return testing::AssertionFailure() << "element " << e << " was written";
    }
    return testing::AssertionSuccess();
  };
  const bool fused = c.op == Op::kFusedAddRmsNorm;
  EXPECT_TRUE(outside_rows_unchanged(input, input_before, in_view, fused)) << "input";
  if (fused) {
    EXPECT_TRUE(outside_rows_unchanged(residual, residual_before, res_view, true)) << "residual";
    EXPECT_TRUE(outside_rows_unchanged(out, out_before, View{0, {1}, {0}}, false)) << "out (unused)";
  } else {
    const View out_view{0, {rows}, {c.hidden}};
    EXPECT_TRUE(outside_rows_unchanged(out, out_before, out_view, true)) << "out";
  }
}

struct Combo {
  DType dtype, weight_dtype;
};
const Combo kCombos[] = {{DType::kFloat32, DType::kFloat32},
                         {DType::kBFloat16, DType::kBFloat16},
                         {DType::kBFloat16, DType::kFloat32},
                         {DType::kFloat16, DType::kFloat16},
                         {DType::kFloat16, DType::kFloat32}};

class HostPasses : public ::testing::TestWithParam<Op> {};

// Every dtype pair, hidden sizes around the vector width and a long odd one, every layout, and
// the group widths the launch plan uses (a warp; blocks of 64 and 1024; a block wider than the
// row, so that lanes own nothing).
TEST_P(HostPasses, MatchFloat64ReferenceOverGrid) {
  const Op op = GetParam();
  std::mt19937 rng(7);
  for (const Combo& combo : kCombos)
    for (int64_t hidden : {1, 7, 8, 64, 4096, 4109})
      for (Layout layout : {Layout::kContiguous, Layout::kAlignedPadding, Layout::kOddPadding, Layout::kMisaligned,
                            Layout::kUnmergeable3d})
        for (int width : {32, 64, 1024})
          for (bool bias : {false, true}) {
            if (bias && op != Op::kLayerNorm) continue;
            const int64_t tokens = hidden >= 4096 ? 2 : 5;
            check_case({op, combo.dtype, combo.weight_dtype, tokens, hidden, layout, bias, width}, rng);
            if (HasFatalFailure() || HasFailure()) return;
          }
}

INSTANTIATE_TEST_SUITE_P(AllOps, HostPasses,
                         ::testing::Values(Op::kRmsNorm, Op::kFusedAddRmsNorm, Op::kLayerNorm),
                         [](const ::testing::TestParamInfo<Op>& info) { return std::string(name_of(info.param)); });

// The shapes plan_launch picks are the ones the host passes were run with above, and obey the
// kernels' contracts.
TEST(PlannedShapes, MatchFloat64Reference) {
  std::mt19937 rng(11);
  for (Op op : {Op::kRmsNorm, Op::kFusedAddRmsNorm, Op::kLayerNorm})
    for (int64_t tokens : {1, 7, 257})
      for (int64_t hidden : {1, 7, 64, 4109}) {
        const LaunchPlan plan = plan_launch(tokens, hidden, 2, 132);
        check_case({op, DType::kBFloat16, DType::kFloat32, tokens, hidden, Layout::kContiguous, false,
                    plan.warp_per_row ? 32 : plan.threads},
                   rng);
        if (HasFailure()) return;
      }
}

TEST(LaunchPlan, ObeysKernelContracts) {
  for (int sm : {1, 16, 132})
    for (size_t bytes : {size_t{2}, size_t{4}})
      for (int64_t rows : {int64_t{1}, int64_t{7}, int64_t{257}, int64_t{5000}, int64_t{1} << 33})
        for (int64_t hidden : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{512}, int64_t{4109}, int64_t{1} << 20}) {
          SCOPED_TRACE("sm=" + std::to_string(sm) + " bytes=" + std::to_string(bytes) + " rows=" +
                       std::to_string(rows) + " hidden=" + std::to_string(hidden));
          const LaunchPlan p = plan_launch(rows, hidden, bytes, sm);
          EXPECT_GE(p.threads, 32);
          EXPECT_LE(p.threads, 1024);
          EXPECT_EQ(p.threads % 32, 0);
          EXPECT_GE(p.blocks, 1);
          EXPECT_LE(p.blocks, int64_t{1} << 31);
          if (p.warp_per_row) {
            EXPECT_EQ(p.shared_bytes, 0u);
            EXPECT_LE(p.blocks * (p.threads / 32), rows + p.threads / 32);
          } else {
            EXPECT_EQ(p.shared_bytes, 2 * (p.threads / 32) * sizeof(float));
            EXPECT_LE(p.blocks, rows);
          }
        }
  EXPECT_EQ(plan_launch(0, 64, 2, 132).blocks, 0);
}

TEST(LaunchPlan, AdaptsToRowsAndHidden) {
  // Small rows: a warp each, eight rows per block.
  LaunchPlan p = plan_launch(8192, 128, 2, 132);
  EXPECT_TRUE(p.warp_per_row);
  EXPECT_EQ(p.threads, 256);
  EXPECT_EQ(p.blocks, 1024);
  // One long row: a block, one 16-byte access per thread.
  p = plan_launch(1, 4096, 2, 132);
  EXPECT_FALSE(p.warp_per_row);
  EXPECT_EQ(p.threads, 512);
  EXPECT_EQ(p.blocks, 1);
  // Many long rows: a block each, four accesses per thread.
  p = plan_launch(8192, 4096, 2, 132);
  EXPECT_FALSE(p.warp_per_row);
  EXPECT_EQ(p.threads, 128);
  EXPECT_EQ(p.blocks, 8192);
  // Very long rows cap at 1024 threads; huge row counts cap the grid and loop.
  EXPECT_EQ(plan_launch(1, 1 << 20, 4, 132).threads, 1024);
  EXPECT_LT(plan_launch(int64_t{1} << 33, 64, 4, 132).blocks, int64_t{1} << 31);
}

// Rows whose pointers are all 16-byte aligned take the vector path; others do not.
TEST(MakeRow, VectorOnlyWhenEveryPointerIsAligned) {
  alignas(16) static __nv_bfloat16 data[4096];
  alignas(16) static float weight[64];
  KernelArgs a;
  a.p.rows = 4;
  a.p.hidden = 64;
  a.p.row_ndim = 1;
  a.p.row_sizes[0] = 4;
  a.p.input = data;
  a.p.input_strides[0] = 64;
  a.p.out = data + 1024;
  a.p.out_strides[0] = 64;
  a.p.weight = weight;
  a.weights_aligned = true;
  EXPECT_TRUE((kernels::make_row<Op::kRmsNorm, __nv_bfloat16, float>(a, 3).vector));
  a.p.input_strides[0] = 65;  // rows 1..3 misaligned
  EXPECT_TRUE((kernels::make_row<Op::kRmsNorm, __nv_bfloat16, float>(a, 0).vector));
  EXPECT_FALSE((kernels::make_row<Op::kRmsNorm, __nv_bfloat16, float>(a, 1).vector));
  EXPECT_TRUE((kernels::make_row<Op::kRmsNorm, __nv_bfloat16, float>(a, 8).vector));  // offset 520 = 65 * 8
  a.p.input_strides[0] = 64;
  a.p.out = data + 1025;  // out misaligned
  EXPECT_FALSE((kernels::make_row<Op::kRmsNorm, __nv_bfloat16, float>(a, 0).vector));
  a.p.out = data + 1024;
  a.weights_aligned = false;
  EXPECT_FALSE((kernels::make_row<Op::kRmsNorm, __nv_bfloat16, float>(a, 0).vector));
}

// Offsets are int64 throughout: strides beyond 2^31 elements and many leading dimensions.
TEST(MakeRow, OffsetsBeyond2To31AndEightDimensions) {
  KernelArgs a;
  a.p.hidden = 16;
  a.p.row_ndim = 8;
  int64_t rows = 1;
  for (int d = 0; d < 8; ++d) {
    a.p.row_sizes[d] = 2;
    rows *= 2;
    a.p.input_strides[d] = (int64_t{1} << 31) + (int64_t{1} << d);  // each > 2^31
    a.p.out_strides[d] = int64_t{16} << (7 - d);                     // contiguous
  }
  a.p.rows = rows;
  // Pointer values only: nothing is dereferenced.
  const auto base = reinterpret_cast<const float*>(uintptr_t{1} << 40);
  a.p.input = base;
  a.p.out = const_cast<float*>(base);
  for (int64_t row : {int64_t{0}, int64_t{1}, int64_t{37}, rows - 1}) {
    int64_t want_in = 0;
    for (int d = 0; d < 8; ++d) want_in += (row >> (7 - d) & 1) * a.p.input_strides[d];
    const auto r = kernels::make_row<Op::kLayerNorm, float, float>(a, row);
    EXPECT_EQ(r.input - base, want_in) << "row " << row;
    EXPECT_EQ(r.out - base, row * 16) << "row " << row;
  }
}

// The launchers reject what the kernels cannot take, before touching the device.
TEST(Launchers, RejectInvalidParams) {
  alignas(16) static float x[64], w[64], y[64];
  NormParams p;
  p.rows = 1;
  p.hidden = 64;
  p.row_ndim = 1;
  p.row_sizes[0] = 1;
  p.input = x;
  p.out = y;
  p.weight = w;
  p.eps = 1e-6;
  auto with = [&](auto change) {
    NormParams q = p;
    change(q);
    return q;
  };
  EXPECT_TRUE(rejected(rms_norm(with([](NormParams& q) { q.hidden = 0; }), nullptr), "hidden must be >= 1"));
  EXPECT_TRUE(rejected(rms_norm(with([](NormParams& q) { q.row_ndim = 9; }), nullptr), "ndim"));
  EXPECT_TRUE(rejected(rms_norm(with([](NormParams& q) { q.row_sizes[0] = 2; }), nullptr), "product of the sizes"));
  EXPECT_TRUE(rejected(rms_norm(with([](NormParams& q) { q.eps = -1; }), nullptr), "eps"));
  EXPECT_TRUE(rejected(rms_norm(with([](NormParams& q) { q.eps = NAN; }), nullptr), "eps"));
  EXPECT_TRUE(rejected(rms_norm(with([](NormParams& q) { q.weight = nullptr; }), nullptr), "null input or weight"));
  EXPECT_TRUE(rejected(rms_norm(with([](NormParams& q) { q.input = nullptr; }), nullptr), "null input or weight"));
  EXPECT_TRUE(rejected(rms_norm(with([](NormParams& q) { q.out = nullptr; }), nullptr), "rms_norm: null out"));
  EXPECT_TRUE(rejected(layer_norm(with([](NormParams& q) { q.out = nullptr; }), nullptr), "layer_norm: null out"));
  EXPECT_TRUE(rejected(
      rms_norm(with([](NormParams& q) { q.dtype = DType::kBFloat16; q.weight_dtype = DType::kFloat16; }), nullptr),
      "weight_dtype"));
  EXPECT_TRUE(rejected(rms_norm(with([](NormParams& q) { q.dtype = static_cast<DType>(7); }), nullptr),
                       "unknown dtype"));
  EXPECT_TRUE(rejected(fused_add_rms_norm(p, nullptr), "null residual"));
  EXPECT_TRUE(rejected(rms_norm(with([](NormParams& q) { q.bias = q.weight; }), nullptr), "bias"));
  // Zero rows launch nothing and succeed, whatever the pointers.
  EXPECT_TRUE(accepted(
      layer_norm(with([](NormParams& q) { q.rows = 0; q.row_sizes[0] = 0; q.input = q.out = nullptr; }), nullptr)));
}

// Valid parameters on a machine without a usable device: the SM-count query fails, and the
// launchers report the runtime's error (what a failed launch reports too) instead of launching.
TEST(Launchers, ReportTheRuntimesErrorWithoutADevice) {
  if (cuda_device_present()) GTEST_SKIP() << "a CUDA device is present (these parameters are host memory)";
  alignas(16) static float x[64], w[64], y[64], r[64];
  NormParams p;
  p.rows = 1;
  p.hidden = 64;
  p.row_ndim = 1;
  p.row_sizes[0] = 1;
  p.input = x;
  p.out = y;
  p.weight = w;
  p.eps = 1e-6;
  EXPECT_TRUE(device_failure(rms_norm(p, nullptr)));
  EXPECT_TRUE(device_failure(layer_norm(p, nullptr)));
  p.out = nullptr;
  p.residual = r;
  EXPECT_TRUE(device_failure(fused_add_rms_norm(p, nullptr)));
}

}  // namespace
}  // namespace xllm_kernel::cuda
