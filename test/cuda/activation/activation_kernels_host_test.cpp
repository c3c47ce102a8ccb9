// Torch-free host tests of csrc/cuda/activation: every block and thread of the launch plans that
// plan_activation picks runs on the CPU (kernels::run_block, the same code the device runs), in
// the same kernel variant the launcher would pick, against a float64 reference written here.
// They check the values (within the documented float32 bound plus one rounding to the dtype),
// that every output element is written exactly once and nothing else is (the host build's store
// observer counts every byte stored), that 16-byte accesses happen exactly on the vector path and
// only at aligned addresses (the host load16/store16 throw otherwise), row offsets over
// multi-dimensional and > 2^31 strides, the plan's rules, and the launchers' argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "csrc/cuda/activation/activation.cuh"
#include "csrc/cuda/activation/activation.h"
#include "csrc/cuda/common/device.h"
#include "test/cuda/common/host_buffers.h"
#include "test/cuda/element_codec.h"
#include "test/cuda/launcher_status.h"

namespace xllm_kernel::cuda {
namespace {

using ::xllm_kernel::cuda::name_of;  // the dtype's (test/cuda/element_codec.h), beside this file's own

using kernels::Act;
using kernels::ActivationArgs;

constexpr Act kActs[] = {Act::kSilu,      Act::kGelu,          Act::kGeluTanh,
                         Act::kPlainGelu, Act::kPlainGeluTanh, Act::kQuickGelu};
constexpr DType kDTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

const char* name_of(Act a) {
  switch (a) {
    case Act::kSilu: return "silu_and_mul";
    case Act::kGelu: return "gelu_and_mul";
    case Act::kGeluTanh: return "gelu_tanh_and_mul";
    case Act::kPlainGelu: return "gelu";
    case Act::kPlainGeluTanh: return "gelu_tanh";
    case Act::kQuickGelu: return "quick_gelu";
  }
  return "?";
}
size_t size_of(DType t) { return static_cast<size_t>(::xllm_kernel::kernels::element_size(t)); }
int64_t vec_of(DType t) { return static_cast<int64_t>(16 / size_of(t)); }

// Runs every block and thread of args.plan on the host (grid = plan.blocks unless `grid` > 0),
// in the variant the launcher would pick; false when no variant matches the plan.
bool run_plan(Act act, const ActivationArgs& args, int64_t grid = 0) {
  if (grid <= 0) grid = args.plan.blocks;
  auto run = [&](auto variant) {
    using V = decltype(variant);
    for (int64_t block = 0; block < grid; ++block)
      for (int t = 0; t < args.plan.threads; ++t)
        kernels::run_block<V::act, typename V::type, V::piece, V::per_thread>(args, block, grid, t);
    return true;
  };
  switch (act) {
    case Act::kSilu: return kernels::dispatch_variant<Act::kSilu>(args, false, run);
    case Act::kGelu: return kernels::dispatch_variant<Act::kGelu>(args, false, run);
    case Act::kGeluTanh: return kernels::dispatch_variant<Act::kGeluTanh>(args, false, run);
    case Act::kPlainGelu: return kernels::dispatch_variant<Act::kPlainGelu>(args, false, run);
    case Act::kPlainGeluTanh: return kernels::dispatch_variant<Act::kPlainGeluTanh>(args, false, run);
    case Act::kQuickGelu: return kernels::dispatch_variant<Act::kQuickGelu>(args, false, run);
  }
  return false;
}

// ---- the float64 reference and the error bound ----

// act(a) * b in float64 (b = 1 without the gate), written without the cancellations of 1 + erf
// and 1 + tanh for a << 0.
double reference(Act act, double a, double b) {
  switch (act) {
    case Act::kSilu: return a / (1.0 + std::exp(-a)) * b;
    case Act::kQuickGelu: return a / (1.0 + std::exp(-1.702 * a)) * b;
    case Act::kPlainGelu:
    case Act::kGelu: return 0.5 * a * std::erfc(-a / std::sqrt(2.0)) * b;
    case Act::kPlainGeluTanh:
    case Act::kGeluTanh: {
      const double z = std::sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a);
      return a / (1.0 + std::exp(-2.0 * z)) * b;  // 0.5 a (1 + tanh z) = a * sigmoid(2z)
    }
  }
  return NAN;
}

// The bound documented in activation.h: the float32 computation is within 8 * 2^-24 * |a * b| of
// the exact value (expf, erff, tanhf at most 2 ulp; the rest 0.5 ulp per operation; the error of
// 1 + erf and 1 + tanh is absolute), then one rounding to the dtype adds 2^-p of the float32
// value (p = 8 bf16, 11 f16; none for f32, whose rounding is the last multiply, counted above),
// or half the smallest subnormal where the result is subnormal.
double bound(DType t, double a, double b, double want) {
  const double u = std::ldexp(1.0, -24);
  const double f32 = 8 * u * std::fabs(a * b);
  switch (t) {
    case DType::kFloat32: return f32 + std::ldexp(1.0, -150);
    case DType::kBFloat16: return std::ldexp(1.0, -8) * (std::fabs(want) + f32) + f32 + std::ldexp(1.0, -134);
    case DType::kFloat16: return std::ldexp(1.0, -11) * (std::fabs(want) + f32) + f32 + std::ldexp(1.0, -25);
  }
  return 0;
}

// ---- layouts ----

enum class Layout {
  kContiguous,      // [tokens, 2d] -> [tokens, d]
  kAlignedPadding,  // row strides 2d + 16 and d + 16 (16-byte multiples for every dtype)
  kOddPadding,      // row strides 2d + 5 and d + 3
  kMisalignedInput, // input starts at element 1
  kMisalignedOut,   // out starts at element 1
  kUnmergeable3d,   // [tokens, 2] with padding between and within, in both tensors
  kSizeOneOddStride // [tokens, 1, 2]: the size-1 dimension's odd strides must not matter
};
const char* name_of(Layout l) {
  switch (l) {
    case Layout::kContiguous: return "contiguous";
    case Layout::kAlignedPadding: return "row stride +16";
    case Layout::kOddPadding: return "row stride +5/+3";
    case Layout::kMisalignedInput: return "input at element 1";
    case Layout::kMisalignedOut: return "out at element 1";
    case Layout::kUnmergeable3d: return "3-D unmergeable";
    case Layout::kSizeOneOddStride: return "size-1 dim with odd strides";
  }
  return "?";
}
constexpr Layout kLayouts[] = {Layout::kContiguous,       Layout::kAlignedPadding, Layout::kOddPadding,
                               Layout::kMisalignedInput, Layout::kMisalignedOut,  Layout::kUnmergeable3d,
                               Layout::kSizeOneOddStride};

// Whether the layout keeps every row of gate, up and out 16-byte aligned when d * size is.
bool aligned_layout(Layout l) {
  return l == Layout::kContiguous || l == Layout::kAlignedPadding || l == Layout::kUnmergeable3d ||
         l == Layout::kSizeOneOddStride;
}

// Input rows of 2d elements (gated) or d.
void make_views(Layout l, int64_t tokens, int64_t d, View* in, View* out, bool gated = true) {
  const int64_t w = gated ? 2 * d : d;
  switch (l) {
    case Layout::kContiguous: *in = {0, {tokens}, {w}}, *out = {0, {tokens}, {d}}; break;
    case Layout::kAlignedPadding: *in = {0, {tokens}, {w + 16}}, *out = {0, {tokens}, {d + 16}}; break;
    case Layout::kOddPadding: *in = {0, {tokens}, {w + 5}}, *out = {0, {tokens}, {d + 3}}; break;
    case Layout::kMisalignedInput: *in = {1, {tokens}, {w}}, *out = {0, {tokens}, {d}}; break;
    case Layout::kMisalignedOut: *in = {0, {tokens}, {w}}, *out = {1, {tokens}, {d}}; break;
    case Layout::kUnmergeable3d:
      *in = {0, {tokens, 2}, {3 * (w + 8), w + 8}}, *out = {0, {tokens, 2}, {5 * (d + 8), 2 * (d + 8)}};
      break;
    case Layout::kSizeOneOddStride:
      *in = {0, {tokens, 1, 2}, {2 * w, 7, w}}, *out = {0, {tokens, 1, 2}, {2 * d, 3, d}};
      break;
  }
}

ActivationParams params_for(DType t, int64_t d, const View& in, const Buffer& input, const View& out,
                            const Buffer& output) {
  ActivationParams p;
  p.dtype = t;
  p.d = d;
  p.shape.ndim = static_cast<int>(in.sizes.size());
  p.shape.rows = in.rows();
  for (int i = 0; i < p.shape.ndim; ++i) {
    p.shape.sizes[i] = in.sizes[i];
    p.input_strides.s[i] = in.strides[i];
    p.out_strides.s[i] = out.strides[i];
  }
  p.input = input.at(in.offset);
  p.out = output.at(out.offset);
  return p;
}

// Gate values: mostly normal(0, 3), some special ones (zeros, tiny, large of both signs, beyond
// expf's overflow at -88.7).
// Without the gate (gated = false) only the d input elements of a row are written.
void fill_gate_and_up(const Buffer& b, const View& v, int64_t d, std::mt19937& rng, bool gated = true) {
  static const double kSpecial[] = {0.0, -0.0, 1e-3, -1e-3, 8, -8, 20, -20, 60, -60, 100, -100, 0.5, -0.5};
  std::normal_distribution<double> gate(0.0, 3.0), up(0.0, 2.0);
  std::uniform_int_distribution<int> pick(0, 15), special(0, std::size(kSpecial) - 1);
  for (int64_t row = 0; row < v.rows(); ++row) {
    const int64_t o = v.row_offset(row);
    for (int64_t i = 0; i < d; ++i) {
      b.set(o + i, pick(rng) == 0 ? kSpecial[special(rng)] : gate(rng));
      if (gated) b.set(o + d + i, up(rng));
    }
  }
}

struct Case {
  Act act;
  DType dtype;
  int64_t tokens, d;
  Layout layout;
  int sm_count;
  int64_t grid = 0;  // > 0: run with this grid instead of the plan's (any grid must cover all)

  std::string describe() const {
    return std::string(name_of(act)) + " " + name_of(dtype) + " tokens=" + std::to_string(tokens) +
           " d=" + std::to_string(d) + " " + name_of(layout) + " sm=" + std::to_string(sm_count) +
           (grid > 0 ? " grid=" + std::to_string(grid) : "");
  }
};

// Checks that out's rows were written exactly once and nothing else was, and that the stores
// had the plan's access size.
testing::AssertionResult coverage(const StoreLog& log, const View& out, int64_t d, DType t, bool vector) {
  const size_t e = size_of(t);
  std::vector<char> in_row(log.bytes, 0);
  for (int64_t row = 0; row < out.rows(); ++row)
    for (size_t b = 0; b < d * e; ++b) in_row[out.row_offset(row) * e + b] = 1;
  for (size_t b = 0; b < log.bytes; ++b) {
    const int want = in_row[b] ? 1 : 0;
    if (log.count[b] != want) {
      return testing::AssertionFailure() << "out element " << b / e << " (byte " << b % e << ") stored "
                                         << log.count[b] << " times, want " << want;
    }
  }
  if (log.elsewhere != 0) {
    return testing::AssertionFailure() << log.elsewhere << " stores outside the output buffer";
  }
  const size_t size = vector ? 16 : e;
  for (size_t s = 1; s <= 16; ++s) {
    if (s != size && log.by_size[s] != 0) {
      return testing::AssertionFailure() << log.by_size[s] << " stores of " << s << " bytes; the "
                                         << (vector ? "vector" : "scalar") << " path stores " << size;
    }
  }
  return testing::AssertionSuccess();
}

// Runs one case on the host and compares it with float64.
void check_case(const Case& c, std::mt19937& rng) {
  SCOPED_TRACE(c.describe());
  View in_view, out_view;
  const bool is_gated = kernels::gated(c.act);
  make_views(c.layout, c.tokens, c.d, &in_view, &out_view, is_gated);
  Buffer input(c.dtype, in_view.extent(is_gated ? 2 * c.d : c.d)), output(c.dtype, out_view.extent(c.d));
  fill_gate_and_up(input, in_view, c.d, rng, is_gated);
  std::vector<unsigned char> input_before(input.bytes.get(), input.bytes.get() + input.size_bytes());
  const ActivationParams p = params_for(c.dtype, c.d, in_view, input, out_view, output);

  ActivationArgs args;
  args.p = p;
  args.plan = plan_activation(p, c.sm_count);
  // One token: the row strides are never used, so padding does not break alignment.
  const bool aligned = aligned_layout(c.layout) || (c.layout == Layout::kOddPadding && c.tokens == 1);
  const bool want_vector = aligned && c.d % vec_of(c.dtype) == 0;
  ASSERT_EQ(args.plan.vector, want_vector);
  ASSERT_EQ(vector_access(p), want_vector);

  StoreLog log(output.bytes.get(), output.size_bytes());
  bool ran = false;
  {
    StoreObserverScope observe(log);
    EXPECT_NO_THROW(ran = run_plan(c.act, args, c.grid));
  }
  ASSERT_TRUE(ran) << "no kernel variant for the plan";
  ASSERT_TRUE(coverage(log, out_view, c.d, c.dtype, args.plan.vector));
  ASSERT_TRUE(input.size_bytes() == 0 || std::memcmp(input_before.data(), input.bytes.get(), input.size_bytes()) == 0)
      << "input was written";

  for (int64_t row = 0; row < in_view.rows(); ++row) {
    const int64_t io = in_view.row_offset(row), oo = out_view.row_offset(row);
    for (int64_t i = 0; i < c.d; ++i) {
      const double a = input.get(io + i), b = is_gated ? input.get(io + c.d + i) : 1.0;
      const double want = reference(c.act, a, b), got = output.get(oo + i);
      if (!(std::fabs(got - want) <= bound(c.dtype, a, b, want))) {
        FAIL() << "row " << row << " element " << i << ": act(" << a << ") * " << b << " = " << got << ", want "
               << want << " (bound " << bound(c.dtype, a, b, want) << ")";
      }
    }
  }
}

// ---- value and coverage tests over the grid ----

class HostPlans : public ::testing::TestWithParam<Act> {};

TEST_P(HostPlans, MatchFloat64ReferenceAndWriteEachElementOnce) {
  std::mt19937 rng(7);
  for (DType t : kDTypes)
    for (int64_t d : {1, 7, 8, 9, 16, 100, 4099, 14336})
      for (Layout layout : kLayouts) {
        check_case({GetParam(), t, d >= 4099 ? 2 : 3, d, layout, 132}, rng);
        if (HasFailure()) return;
      }
}

// Plans for other GPU sizes and row counts: a single SM (per_thread 2 and 4, grid-stride loops
// over items), many short rows (several rows per block), one long row (chunks over SMs).
TEST_P(HostPlans, OtherPlanShapes) {
  std::mt19937 rng(11);
  for (DType t : kDTypes) {
    for (const auto& [tokens, d] : {std::pair<int64_t, int64_t>{1, 14336}, {300, 16}, {600, 9}, {40, 4099},
                                    {200, 128}, {5, 1}}) {
      for (int sm : {1, 4, 132}) {
        for (Layout layout : {Layout::kContiguous, Layout::kOddPadding}) {
          check_case({GetParam(), t, tokens, d, layout, sm}, rng);
          if (HasFailure()) return;
        }
      }
    }
  }
}

// Any grid size covers every item exactly once (the grid-stride loop of run_block).
TEST_P(HostPlans, AnyGridCoversEveryItem) {
  std::mt19937 rng(13);
  for (int64_t grid : {1, 2, 3, 7})
    for (Layout layout : {Layout::kContiguous, Layout::kMisalignedInput}) {
      check_case({GetParam(), DType::kBFloat16, 9, 1000, layout, 132, grid}, rng);
      if (HasFailure()) return;
    }
}

INSTANTIATE_TEST_SUITE_P(AllActivations, HostPlans, ::testing::ValuesIn(kActs),
                         [](const ::testing::TestParamInfo<Act>& info) { return std::string(name_of(info.param)); });

// ---- the checks themselves can fail ----

// A plan that skips a chunk, or one that does the same items twice, fails the coverage check; a
// vector plan for misaligned rows throws in the host load16/store16.
TEST(HostChecks, DetectMissingDoubleAndMisalignedWrites) {
  const int64_t d = 64, tokens = 3;
  View in_view, out_view;
  make_views(Layout::kContiguous, tokens, d, &in_view, &out_view);
  Buffer input(DType::kBFloat16, in_view.extent(2 * d)), output(DType::kBFloat16, out_view.extent(d));
  const ActivationParams p = params_for(DType::kBFloat16, d, in_view, input, out_view, output);
  auto run_logged = [&](const ActivationArgs& args, int64_t grid) {
    StoreLog log(output.bytes.get(), output.size_bytes());
    {
      StoreObserverScope observe(log);
      EXPECT_TRUE(run_plan(Act::kSilu, args, grid));
    }
    return coverage(log, out_view, d, DType::kBFloat16, args.plan.vector);
  };
  ActivationArgs args{p, plan_activation(p, 132)};
  ASSERT_EQ(args.plan.chunks, 1);  // 8 lanes x 8 elements cover a row
  ASSERT_EQ(args.plan.chunk, d);
  EXPECT_TRUE(run_logged(args, 0));
  ActivationArgs short_plan = args;
  short_plan.plan.threads_per_row /= 2;  // lanes cover half of each row
  short_plan.plan.rows_per_block *= 2;
  EXPECT_FALSE(run_logged(short_plan, 0));
  ActivationArgs overlap = args;
  overlap.plan.chunk = d / 2;  // chunk 1 starts where chunk 0's lanes still write
  overlap.plan.chunks = 2;
  overlap.plan.items = overlap.plan.blocks = 2;
  EXPECT_FALSE(run_logged(overlap, 0));
  ActivationArgs last_item_lost = args;
  last_item_lost.plan.rows_per_block = 1;  // 3 items of one row each, but only 1 is listed
  last_item_lost.plan.threads = last_item_lost.plan.threads_per_row;
  EXPECT_FALSE(run_logged(last_item_lost, 0));

  ActivationArgs misaligned = args;
  misaligned.p.input = input.at(1);
  EXPECT_THROW(run_plan(Act::kSilu, misaligned), std::logic_error);
  // A plan whose piece does not match a compiled variant is refused, not run.
  ActivationArgs odd = args;
  odd.plan.piece = 3;
  EXPECT_FALSE(run_plan(Act::kSilu, odd));
}

// The reference and bound reject a wrong activation at float32: silu where gelu was asked (all
// but a = 0 of 49 points), and gelu_tanh with 0.0447 instead of 0.044715 (every point where the
// cubic term matters, 0.5 <= |a| <= 3; beyond, tanh saturates and the two agree).
TEST(HostChecks, BoundSeparatesNearbyFunctions) {
  const double b = 1.5;
  int silu_vs_gelu = 0;
  for (double a = -6; a <= 6; a += 0.25) {
    const float gelu = kernels::activate<Act::kGelu>(static_cast<float>(a)) * static_cast<float>(b);
    silu_vs_gelu += std::fabs(reference(Act::kSilu, a, b) - gelu) > bound(DType::kFloat32, a, b, gelu);
  }
  EXPECT_EQ(silu_vs_gelu, 48);
  for (double a : {-3.0, -2.0, -1.5, -1.0, -0.75, -0.5, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0}) {
    const double z = std::sqrt(2.0 / M_PI) * (a + 0.0447 * a * a * a);
    const double wrong = 0.5 * a * (1 + std::tanh(z)) * b;
    EXPECT_GT(std::fabs(reference(Act::kGeluTanh, a, b) - wrong), bound(DType::kFloat32, a, b, wrong)) << a;
  }
}

// For a < 0 the GELUs keep their relative accuracy (no cancellation in 1 + erf or 1 + tanh):
// within 8 float32 ulps of the float64 value (plus the argument's rounding times the function's
// condition) wherever the factor of a is a normal float32, and never -0 there. The textbook forms 0.5 a (1 + erff(a / sqrt 2)) and 0.5 a (1 + tanhf(v)) fail this
// (checked below, so the bound can tell them apart).
TEST(HostChecks, GelusDoNotCancelForNegativeInputs) {
  const double u = std::ldexp(1.0, -24);
  int textbook_failures = 0, points = 0;
  for (const Act act : {Act::kPlainGelu, Act::kPlainGeluTanh, Act::kGelu, Act::kGeluTanh}) {
    SCOPED_TRACE(name_of(act));
    for (double a = -13.0; a <= -2.0; a += 1.0 / 16) {
      const double want = reference(act, a, 1.0);
      // The factor of a (Phi(a), sigmoid(2 v)) must be a normal float32 with some margin: below
      // a = -12.8 erfcf's own result is subnormal and loses bits, as any float32 form would.
      if (std::fabs(want / a) < 0x1p-122) continue;
      const float af = static_cast<float>(a);
      float got = 0;
      switch (act) {
        case Act::kPlainGelu: got = kernels::activate<Act::kPlainGelu>(af); break;
        case Act::kPlainGeluTanh: got = kernels::activate<Act::kPlainGeluTanh>(af); break;
        case Act::kGelu: got = kernels::activate<Act::kGelu>(af); break;
        default: got = kernels::activate<Act::kGeluTanh>(af); break;
      }
      // The float32 argument's own rounding (a few u) is amplified by the function's condition:
      // erfc(z) ~ e^(-z^2) turns a relative error d of z (two roundings: the constant and the
      // product) into 2 z^2 d = a^2 d, sigmoid(2 v)
      // for v << 0 turns it into 2 |v| d (v has four roundings).
      const bool erf_form = act == Act::kPlainGelu || act == Act::kGelu;
      const double v = std::sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a);
      const double bound = (8 + (erf_form ? 2 * a * a : 16 * std::fabs(v))) * u * std::fabs(want);
      EXPECT_LE(std::fabs(got - want), bound) << a << ": " << got << " vs " << want;
      EXPECT_NE(got, 0.0f) << a;
      const float vf = 0.79788456f * (af + 0.044715f * af * af * af);
      const float textbook = erf_form ? 0.5f * af * (1.0f + std::erf(af * 0.70710678f)) : 0.5f * af * (1.0f + std::tanh(vf));
      textbook_failures += std::fabs(textbook - want) > bound;
      ++points;
    }
  }
  EXPECT_GT(points, 400);
  EXPECT_GT(textbook_failures, points / 2);
}

// Every activation keeps the contracts' limits, where the formulas give NaN: act(-inf) = 0,
// act(+inf) = +inf, NaN stays NaN; finite inputs are activate's.
TEST(HostChecks, ActivationsKeepTheLimits) {
  const float inf = std::numeric_limits<float>::infinity();
  auto check = [&](auto act, const char* name) {
    SCOPED_TRACE(name);
    EXPECT_EQ(act.first(-inf), 0.0f);
    EXPECT_EQ(act.first(inf), inf);
    EXPECT_TRUE(std::isnan(act.first(std::numeric_limits<float>::quiet_NaN())));
    for (const float a : {-30.0f, -2.5f, 0.0f, 0.75f, 12.0f}) EXPECT_EQ(act.first(a), act.second(a)) << a;
  };
  check(std::make_pair(&kernels::activate_limited<Act::kPlainGelu>, &kernels::activate<Act::kPlainGelu>), "gelu");
  check(std::make_pair(&kernels::activate_limited<Act::kPlainGeluTanh>, &kernels::activate<Act::kPlainGeluTanh>),
        "gelu_tanh");
  check(std::make_pair(&kernels::activate_limited<Act::kQuickGelu>, &kernels::activate<Act::kQuickGelu>), "quick_gelu");
  check(std::make_pair(&kernels::activate_limited<Act::kSilu>, &kernels::activate<Act::kSilu>), "silu");
  check(std::make_pair(&kernels::activate_limited<Act::kGelu>, &kernels::activate<Act::kGelu>), "gelu (gated)");
  check(std::make_pair(&kernels::activate_limited<Act::kGeluTanh>, &kernels::activate<Act::kGeluTanh>),
        "gelu_tanh (gated)");
  // Without the guard the formulas are NaN at -inf: the guard is what the check above sees.
  EXPECT_TRUE(std::isnan(kernels::activate<Act::kPlainGelu>(-inf)));
}

// ---- the plan ----

ActivationParams shape_only(DType t, int64_t rows, int64_t d, bool aligned) {
  ActivationParams p;
  p.dtype = t;
  p.d = d;
  p.shape.rows = rows;
  p.shape.ndim = 1;
  p.shape.sizes[0] = rows;
  p.input_strides.s[0] = 2 * d;
  p.out_strides.s[0] = d;
  // Pointer values only: planning dereferences nothing.
  p.input = reinterpret_cast<const void*>(uintptr_t{1} << 32);
  p.out = reinterpret_cast<void*>((uintptr_t{1} << 33) + (aligned ? 0 : 2));
  return p;
}

TEST(PlanActivation, ObeysKernelContracts) {
  for (int sm : {1, 16, 132})
    for (DType t : kDTypes)
      for (bool aligned : {true, false})
        for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{257}, int64_t{8192}, int64_t{1} << 33})
          for (int64_t d : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{100}, int64_t{4099}, int64_t{14336},
                            int64_t{1} << 22}) {
            SCOPED_TRACE("sm=" + std::to_string(sm) + " " + name_of(t) + (aligned ? " aligned" : " misaligned") +
                         " rows=" + std::to_string(rows) + " d=" + std::to_string(d));
            const ActivationPlan p = plan_activation(shape_only(t, rows, d, aligned), sm);
            EXPECT_EQ(p.vector, aligned && d % vec_of(t) == 0);
            EXPECT_EQ(p.piece, p.vector ? vec_of(t) : 1);
            EXPECT_TRUE(p.per_thread == 1 || p.per_thread == 2 || (p.per_thread == 4 && !p.vector));
            EXPECT_GE(p.threads, 1);
            EXPECT_LE(p.threads, 256);
            EXPECT_EQ(p.threads, p.threads_per_row * p.rows_per_block);
            const bool pow2_row = p.threads_per_row <= 32 && (p.threads_per_row & (p.threads_per_row - 1)) == 0;
            EXPECT_TRUE(pow2_row || (p.threads_per_row % 32 == 0 && p.rows_per_block == 1)) << p.threads_per_row;
            EXPECT_EQ(p.rows_per_block & (p.rows_per_block - 1), 0);
            EXPECT_LE(p.rows_per_block, std::max<int64_t>(1, 2 * rows - 1));
            EXPECT_EQ(p.chunk, int64_t{p.piece} * p.per_thread * p.threads_per_row);
            EXPECT_GE(p.chunks * p.chunk, d);
            EXPECT_LT((p.chunks - 1) * p.chunk, d);
            EXPECT_EQ(p.items, ceil_div(rows, p.rows_per_block) * p.chunks);
            EXPECT_GE(p.blocks, 1);
            EXPECT_LE(p.blocks, p.items);
            EXPECT_LE(p.blocks, int64_t{sm} * 32 * 16);  // at most 16 waves of 32 blocks per SM
            // Work that fits in the grid spreads over at least min(work / 32, 2 per SM) blocks.
            const int64_t warps_of_work = ceil_div(rows * ceil_div(d, p.piece), 32 * p.per_thread);
            EXPECT_GE(p.blocks, std::min<int64_t>(warps_of_work, 2 * sm)) << "underfilled";
          }
}

TEST(PlanActivation, ChoicesForTypicalShapes) {
  // One row x 14336 bf16 (decode of a 14336-wide MLP): 1792 16-byte pieces, a warp per chunk of
  // 256 elements, 56 blocks, instead of 7 blocks of 256 threads.
  ActivationPlan p = plan_activation(shape_only(DType::kBFloat16, 1, 14336, true), 132);
  EXPECT_TRUE(p.vector);
  EXPECT_EQ(p.per_thread, 1);
  EXPECT_EQ(p.threads, 32);
  EXPECT_EQ(p.chunks, 56);
  EXPECT_EQ(p.blocks, 56);
  // 8192 x 14336 bf16 (prefill): two pieces per thread, 4 equal chunks of 224 threads, the grid
  // capped at 16 waves; blocks loop over the remaining items.
  p = plan_activation(shape_only(DType::kBFloat16, 8192, 14336, true), 132);
  EXPECT_TRUE(p.vector);
  EXPECT_EQ(p.per_thread, 2);
  EXPECT_EQ(p.threads_per_row, 224);
  EXPECT_EQ(p.chunks, 4);
  EXPECT_EQ(p.items, 8192 * 4);
  EXPECT_EQ(p.blocks, 132 * (2048 / 224) * 16);
  // Short rows: several rows per block.
  p = plan_activation(shape_only(DType::kBFloat16, 8192, 128, true), 132);
  EXPECT_EQ(p.threads_per_row, 16);
  EXPECT_EQ(p.rows_per_block, 16);
  EXPECT_EQ(p.blocks, 512);
  // Odd d: scalar pieces, four per thread once the work fills four waves.
  p = plan_activation(shape_only(DType::kBFloat16, 8192, 14335, true), 132);
  EXPECT_FALSE(p.vector);
  EXPECT_EQ(p.piece, 1);
  EXPECT_EQ(p.per_thread, 4);
  // Zero rows plan nothing.
  ActivationParams zero = shape_only(DType::kFloat16, 0, 64, true);
  zero.shape.sizes[0] = 0;
  p = plan_activation(zero, 132);
  EXPECT_EQ(p.blocks, 0);
  EXPECT_EQ(p.threads, 0);
}

TEST(VectorAccess, NeedsAlignedBasesStridesAndWidth) {
  alignas(16) static __nv_bfloat16 data[1024];
  ActivationParams p;
  p.dtype = DType::kBFloat16;
  p.d = 64;
  p.shape.rows = 4;
  p.shape.ndim = 2;
  p.shape.sizes[0] = 4;
  p.shape.sizes[1] = 1;
  p.input = data;
  p.input_strides.s[0] = 128;
  p.input_strides.s[1] = 3;  // size 1: ignored
  p.out = data + 512;
  p.out_strides.s[0] = 64;
  p.out_strides.s[1] = 5;
  EXPECT_TRUE(vector_access(p));
  auto with = [&](auto change) {
    ActivationParams q = p;
    change(q);
    return vector_access(q);
  };
  EXPECT_FALSE(with([](ActivationParams& q) { q.d = 60; }));  // the up half starts 120 bytes in
  EXPECT_FALSE(with([](ActivationParams& q) { q.input_strides.s[0] = 132; }));
  EXPECT_FALSE(with([](ActivationParams& q) { q.out_strides.s[0] = 68; }));
  EXPECT_FALSE(with([&](ActivationParams& q) { q.input = data + 4; }));
  EXPECT_FALSE(with([&](ActivationParams& q) { q.out = data + 516; }));
  EXPECT_FALSE(with([](ActivationParams& q) { q.shape.sizes[0] = 2; q.shape.sizes[1] = 2; }));  // stride 3 used
  EXPECT_TRUE(with([](ActivationParams& q) { q.dtype = DType::kFloat32; q.d = 4; }));  // 16 bytes
  EXPECT_FALSE(with([](ActivationParams& q) { q.dtype = DType::kFloat32; q.d = 6; }));
}

// Offsets are int64 throughout: strides beyond 2^31 elements and eight leading dimensions.
TEST(RowIndex, OffsetsBeyond2To31AndEightDimensions) {
  int64_t sizes[kMaxRowDims], strides[kMaxRowDims];
  int64_t rows = 1;
  for (int d = 0; d < kMaxRowDims; ++d) {
    sizes[d] = 2 + d % 3;
    rows *= sizes[d];
    strides[d] = (int64_t{1} << 31) + (int64_t{1} << d);  // each > 2^31
  }
  for (int64_t row : {int64_t{0}, int64_t{1}, int64_t{37}, rows / 2 + 3, rows - 1}) {
    int64_t want = 0, rest = row;
    for (int d = kMaxRowDims - 1; d >= 0; --d) {
      want += rest % sizes[d] * strides[d];
      rest /= sizes[d];
    }
    int64_t got = 0;
    kernels::for_each_row_index(row, kMaxRowDims, sizes, [&](int d, int64_t i) { got += i * strides[d]; });
    EXPECT_EQ(got, want) << "row " << row;
  }
  // Fewer dimensions than kMaxRowDims: the first takes the quotient.
  int64_t got = 0;
  kernels::for_each_row_index(7, 2, sizes, [&](int d, int64_t i) { got += i * (d == 0 ? 1000 : 1); });
  EXPECT_EQ(got, 7 / sizes[1] * 1000 + 7 % sizes[1]);
}

// ---- the launchers' argument checks (all answered before the device is touched) ----

TEST(ActivationLaunchers, RejectInvalidParams) {
  alignas(16) static float x[128], y[64];
  ActivationParams p;
  p.d = 64;
  p.shape.rows = 1;
  p.shape.ndim = 1;
  p.shape.sizes[0] = 1;
  p.input = x;
  p.input_strides.s[0] = 128;
  p.out = y;
  p.out_strides.s[0] = 64;
  auto with = [&](auto change) {
    ActivationParams q = p;
    change(q);
    return q;
  };
  for (auto launcher : {silu_and_mul, gelu_and_mul, gelu_tanh_and_mul, gelu, gelu_tanh, quick_gelu}) {
    EXPECT_TRUE(rejected(launcher(with([](ActivationParams& q) { q.d = 0; }), nullptr), "d must be >= 1"));
    EXPECT_TRUE(rejected(launcher(with([](ActivationParams& q) { q.d = -3; }), nullptr), "d must be >= 1"));
    EXPECT_TRUE(rejected(launcher(with([](ActivationParams& q) { q.dtype = static_cast<DType>(7); }), nullptr),
                         "unknown dtype"));
    EXPECT_TRUE(rejected(launcher(with([](ActivationParams& q) { q.shape.ndim = 0; }), nullptr), "ndim"));
    EXPECT_TRUE(rejected(launcher(with([](ActivationParams& q) { q.shape.ndim = kMaxRowDims + 1; }), nullptr),
                         "ndim"));
    EXPECT_TRUE(rejected(launcher(with([](ActivationParams& q) { q.shape.sizes[0] = 2; }), nullptr),
                         "product of the sizes"));
    EXPECT_TRUE(rejected(launcher(with([](ActivationParams& q) { q.shape.sizes[0] = -1; q.shape.rows = -1; }), nullptr),
                         "negative size"));
    EXPECT_TRUE(rejected(launcher(with([](ActivationParams& q) { q.input = nullptr; }), nullptr), "null input or out"));
    EXPECT_TRUE(rejected(launcher(with([](ActivationParams& q) { q.out = nullptr; }), nullptr), "null input or out"));
    EXPECT_TRUE(rejected(launcher(with([](ActivationParams& q) { q.d = int64_t{1} << 62; }), nullptr),
                         "beyond int64"));
    EXPECT_TRUE(rejected(launcher(with([](ActivationParams& q) {
                           q.shape.ndim = 2;
                           q.shape.sizes[0] = q.shape.sizes[1] = int64_t{1} << 32;  // product overflows
                           q.shape.rows = 0;
                         }),
                                  nullptr),
                         "overflows"));
    // Zero rows launch nothing and succeed, whatever the pointers.
    EXPECT_TRUE(accepted(launcher(with([](ActivationParams& q) {
                           q.shape.rows = 0;
                           q.shape.sizes[0] = 0;
                           q.input = nullptr;
                           q.out = nullptr;
                         }),
                                  nullptr)));
    // Valid parameters without a usable device: the runtime's error, nothing launched.
    if (!cuda_device_present()) EXPECT_TRUE(device_failure(launcher(p, nullptr)));
  }
  // Rejected parameters plan nothing.
  EXPECT_EQ(plan_activation(with([](ActivationParams& q) { q.d = 0; }), 132).blocks, 0);
}

}  // namespace
}  // namespace xllm_kernel::cuda
