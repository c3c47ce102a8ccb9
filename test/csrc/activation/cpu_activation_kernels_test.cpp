// Torch-free tests of csrc/cpu/activation: the float32 functions against float64 references over
// dense sweeps (the error bounds documented in activation.h and math-inl.h), every kernel and
// dtype against a float64 reference on every Highway target this CPU can run, exact rounding,
// NaN and infinity, layouts (strided, 3-D, zero rows, split row ranges, strides beyond 2^31),
// no reads past a row end and no writes outside the rows.
#include "csrc/cpu/activation/activation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "test/csrc/common/cpu_test_support.h"

namespace xllm_kernel::cpu {
namespace {

using namespace test;  // NOLINT: the test helpers
using Math = detail::ActivationMath;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kU32 = 0x1p-24;  // float32 unit roundoff
constexpr double kMinNormal = 0x1p-126;

// The gated operations, then those without the gate (out = f(a), b = 1).
enum class Op { kSilu, kGelu, kGeluTanh, kPlainGelu, kPlainGeluTanh, kQuickGelu };

bool Gated(Op op) { return op == Op::kSilu || op == Op::kGelu || op == Op::kGeluTanh; }

const char* Name(Op op) {
  switch (op) {
    case Op::kSilu: return "silu_and_mul";
    case Op::kGelu: return "gelu_and_mul";
    case Op::kGeluTanh: return "gelu_tanh_and_mul";
    case Op::kPlainGelu: return "gelu";
    case Op::kPlainGeluTanh: return "gelu_tanh";
    case Op::kQuickGelu: return "quick_gelu";
  }
  return "?";
}

Status RunOp(Op op, const ActivationParams& p, int64_t b, int64_t e) {
  switch (op) {
    case Op::kSilu: return silu_and_mul(p, b, e);
    case Op::kGelu: return gelu_and_mul(p, b, e);
    case Op::kGeluTanh: return gelu_tanh_and_mul(p, b, e);
    case Op::kPlainGelu: return gelu(p, b, e);
    case Op::kPlainGeluTanh: return gelu_tanh(p, b, e);
    case Op::kQuickGelu: return quick_gelu(p, b, e);
  }
  return Status::invalid("unknown op");
}

// bf16_precision: the cheaper forms of the bfloat16 kernels.
Math MathOf(Op op, bool bf16_precision = false) {
  if (op == Op::kPlainGelu) op = Op::kGelu;
  if (op == Op::kPlainGeluTanh) op = Op::kGeluTanh;
  if (op == Op::kQuickGelu) return bf16_precision ? Math::kQuickGeluBf16 : Math::kQuickGelu;
  if (bf16_precision) return op == Op::kSilu ? Math::kSiluBf16 : op == Op::kGelu ? Math::kGeluBf16 : Math::kGeluTanhBf16;
  return op == Op::kSilu ? Math::kSilu : op == Op::kGelu ? Math::kGelu : Math::kGeluTanh;
}

// The kernels of this dtype use the cheaper forms.
bool Bf16PrecisionFor(DType t) { return t == DType::kBFloat16; }

// ---------------------------------------------------------------- float64 references

// 2 sqrt(2 / pi) (a + 0.044715 a^3): gelu_tanh(a) = a * sigmoid(u).
double GeluTanhArg(double a) { return 2.0 * std::sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a); }

double Phi(double a) { return 0.5 * std::erfc(-a / std::sqrt(2.0)); }

// The limits at -inf are 0 (-0: the values approach 0 from below).
double RefAct(Op op, double a) {
  if (std::isnan(a)) return a;
  if (a == -kInf) return -0.0;
  if (a == kInf) return kInf;
  switch (op) {
    case Op::kSilu: return a / (1.0 + std::exp(-a));
    case Op::kQuickGelu: return a / (1.0 + std::exp(-1.702 * a));
    case Op::kPlainGelu:
    case Op::kGelu: return a * Phi(a);  // 0.5 (1 + erf(x)) = 0.5 erfc(-x), without cancellation
    case Op::kPlainGeluTanh:
    case Op::kGeluTanh: {
      // 0.5 (1 + tanh(z)) with z = u / 2; for z < -1, 1 + tanh(z) cancels in double too, and
      // the same value is e^u / (1 + e^u).
      const double u = GeluTanhArg(a);
      if (u >= -2.0) return 0.5 * a * (1.0 + std::tanh(0.5 * u));
      const double e = std::exp(u);
      return a * e / (1.0 + e);
    }
  }
  return 0.0;
}

// ---------------------------------------------------------------- documented error bounds
// The float32 activation f(a) is within Rel(op, a) |f(a)| of the exact value wherever
// |f(a)| >= Floor(a) = 2^-126 max(1, |a|), and within Floor(a) absolute below that (where the
// kernels return 0 for large negative a). Same numbers as activation.h; the sweeps below measure
// them, and the kernel tests derive their tolerances from them.

constexpr double kExpRel = 4.5e-7;
constexpr double kNormalCdfRel = 2.0e-6;
constexpr double kNormalCdfAbs = 4.0e-7;
constexpr double kSiluRel = 5.0e-7;
constexpr double kGeluRel = 2.0e-6;
// gelu_tanh is a / (1 + e^-u): u's own rounding (a few ulps) is scaled by |u| in e^-u.
double GeluTanhRel(double a) { return (8.0 + 4.0 * std::fabs(GeluTanhArg(a))) * kU32; }
// The bfloat16 kernels' cheaper forms (below 2^-10, a quarter of bf16's unit roundoff).
constexpr double kExpBf16Rel = 1.3e-4;
constexpr double kNormalCdfBf16Rel = 2.5e-4;
constexpr double kSiluBf16Rel = 1.5e-4;
constexpr double kGeluBf16Rel = 2.5e-4;

// quick_gelu is a / (1 + e^-u) with u = 1.702 a: as gelu_tanh.
double QuickGeluRel(double a) { return (8.0 + 4.0 * std::fabs(1.702 * a)) * kU32; }

double Rel(Op op, double a, bool bf16_precision = false) {
  switch (op) {
    case Op::kSilu: return bf16_precision ? kSiluBf16Rel : kSiluRel;
    case Op::kPlainGelu:
    case Op::kGelu: return bf16_precision ? kGeluBf16Rel : kGeluRel;
    case Op::kPlainGeluTanh:
    case Op::kGeluTanh: return (bf16_precision ? kSiluBf16Rel : 0.0) + GeluTanhRel(a);
    case Op::kQuickGelu: return (bf16_precision ? kSiluBf16Rel : 0.0) + QuickGeluRel(a);
  }
  return 0.0;
}

double Floor(double a) { return kMinNormal * std::max(1.0, std::fabs(a)); }

// ---------------------------------------------------------------- function sweeps

// f over `count` evenly spaced float32 points in [lo, hi] plus `extra`.
struct Sweep {
  std::vector<float> in, out;
};

Sweep RunMath(Math f, double lo, double hi, int64_t count, std::vector<float> extra = {}) {
  Sweep s;
  for (int64_t i = 0; i < count; ++i) s.in.push_back(static_cast<float>(lo + (hi - lo) * i / (count - 1)));
  s.in.insert(s.in.end(), extra.begin(), extra.end());
  s.out.resize(s.in.size());
  detail::activation_math(f, s.in.data(), s.out.data(), s.in.size());
  return s;
}

// Every float32 value in [2^k, 2^(k+1)) for k in the given range, both signs, thinned to `step`.
std::vector<float> Binades(int k_lo, int k_hi, uint32_t step) {
  std::vector<float> v;
  for (uint32_t bits = F32Bits(std::ldexp(1.0f, k_lo)); bits < F32Bits(std::ldexp(1.0f, k_hi)); bits += step) {
    v.push_back(F32FromBits(bits));
    v.push_back(-F32FromBits(bits));
  }
  return v;
}

class MathBounds : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { scope_ = std::make_unique<TargetScope>(GetParam()); }
  void TearDown() override { scope_.reset(); }
  std::unique_ptr<TargetScope> scope_;
};

// An exponential (kExp or kExpBf16) over [-87.5, 88] plus a few exact points (e^0 at index
// 2000001): its worst relative error against std::exp and where.
struct ExpSweep {
  Sweep s;
  double worst = 0.0;
  float at = 0.0f;
};
ExpSweep SweepExp(Math f) {
  ExpSweep e{RunMath(f, -87.5, 88.0, 2000001, {0.0f, -0.0f, 1.0f, -1.0f, 0.34657359f, -0.34657359f})};
  for (size_t i = 0; i < e.s.in.size(); ++i) {
    const double want = std::exp(static_cast<double>(e.s.in[i]));
    const double rel = std::fabs(e.s.out[i] - want) / want;
    if (!(rel <= e.worst)) e.worst = rel, e.at = e.s.in[i];
  }
  return e;
}

TEST_P(MathBounds, ExpInRange) {
  const auto [s, worst, at] = SweepExp(Math::kExp);
  EXPECT_LE(worst, kExpRel) << "at " << at;
  EXPECT_EQ(s.out[2000001], 1.0f);  // e^0
  RecordProperty("max_rel", std::to_string(worst));
  std::printf("[%s] exp: max relative error %.3g (%.2f ulp) at %.9g\n", hwy::TargetName(GetParam()), worst,
              worst / kU32, at);
}

TEST_P(MathBounds, NormalCdfAgainstErfAndErfc) {
  // Dense sweep plus every 64th float in the binades near 0 (erf's linear region).
  const Sweep s = RunMath(Math::kNormalCdf, -13.5, 13.5, 2700001, Binades(-30, 0, 64));
  double worst_rel = 0.0, worst_abs = 0.0;
  float at_rel = 0.0f, at_abs = 0.0f;
  for (size_t i = 0; i < s.in.size(); ++i) {
    const double a = s.in[i];
    const double want = Phi(a);
    // Absolute, against the definition with std::erf.
    const double abs_err = std::fabs(s.out[i] - 0.5 * (1.0 + std::erf(a / std::sqrt(2.0))));
    if (!(abs_err <= worst_abs)) worst_abs = abs_err, at_abs = s.in[i];
    if (want >= kMinNormal) {
      const double rel = std::fabs(s.out[i] - want) / want;
      if (!(rel <= worst_rel)) worst_rel = rel, at_rel = s.in[i];
    } else {
      EXPECT_LE(std::fabs(s.out[i] - want), kMinNormal) << "at " << a;
    }
  }
  EXPECT_LE(worst_rel, kNormalCdfRel) << "at " << at_rel;
  EXPECT_LE(worst_abs, kNormalCdfAbs) << "at " << at_abs;
  std::printf("[%s] normal cdf: max relative error %.3g at %.9g, max absolute error (vs std::erf) %.3g at %.9g\n",
              hwy::TargetName(GetParam()), worst_rel, at_rel, worst_abs, at_abs);

  const float special[] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1e30f, -1e30f};
  float out[7];
  detail::activation_math(Math::kNormalCdf, special, out, 7);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_TRUE(std::isnan(out[2]));
  EXPECT_EQ(out[3], 0.5f);
  EXPECT_EQ(out[4], 0.5f);
  EXPECT_EQ(out[5], 1.0f);
  EXPECT_EQ(out[6], 0.0f);
}

void CheckActivationSweep(Op op, double lo, double hi, int64_t target, bool bf16_precision = false) {
  const Sweep s = RunMath(MathOf(op, bf16_precision), lo, hi, 2000001, Binades(-40, 7, 4096));
  double worst = 0.0;  // error / bound
  float at = 0.0f;
  int64_t bad = 0;
  for (size_t i = 0; i < s.in.size(); ++i) {
    const double a = s.in[i];
    const double want = RefAct(op, a);
    const double err = std::fabs(s.out[i] - want);
    const double bound = std::fabs(want) >= Floor(a) ? Rel(op, a, bf16_precision) * std::fabs(want) : Floor(a);
    if (!(err <= worst * bound)) worst = err / bound, at = s.in[i];
    if (!(err <= bound) && bad++ < 5) {
      ADD_FAILURE() << Name(op) << "(" << a << "): got " << s.out[i] << " want " << want << " bound " << bound;
    }
  }
  EXPECT_EQ(bad, 0);
  std::printf("[%s] %s%s: max error / bound %.3f at %.9g\n", hwy::TargetName(target), Name(op),
              bf16_precision ? " (bf16 form)" : "", worst, at);
}

TEST_P(MathBounds, Silu) { CheckActivationSweep(Op::kSilu, -110.0, 110.0, GetParam()); }
TEST_P(MathBounds, Gelu) { CheckActivationSweep(Op::kGelu, -15.0, 15.0, GetParam()); }
TEST_P(MathBounds, GeluTanh) { CheckActivationSweep(Op::kGeluTanh, -15.0, 15.0, GetParam()); }
TEST_P(MathBounds, SiluBf16Precision) { CheckActivationSweep(Op::kSilu, -110.0, 110.0, GetParam(), true); }
TEST_P(MathBounds, GeluBf16Precision) { CheckActivationSweep(Op::kGelu, -15.0, 15.0, GetParam(), true); }
TEST_P(MathBounds, GeluTanhBf16Precision) { CheckActivationSweep(Op::kGeluTanh, -15.0, 15.0, GetParam(), true); }
TEST_P(MathBounds, QuickGelu) { CheckActivationSweep(Op::kQuickGelu, -70.0, 70.0, GetParam()); }
TEST_P(MathBounds, QuickGeluBf16Precision) { CheckActivationSweep(Op::kQuickGelu, -70.0, 70.0, GetParam(), true); }

TEST_P(MathBounds, ExpBf16Precision) {
  const auto [s, worst, at] = SweepExp(Math::kExpBf16);
  EXPECT_LE(worst, kExpBf16Rel) << "at " << at;
  EXPECT_GT(worst, kExpRel) << "the bf16 form is expected to be the cheaper, coarser one";
  std::printf("[%s] exp (bf16 form): max relative error %.3g at %.9g\n", hwy::TargetName(GetParam()), worst, at);
}

TEST_P(MathBounds, NormalCdfBf16Precision) {
  const Sweep s = RunMath(Math::kNormalCdfBf16, -13.5, 13.5, 2700001, Binades(-30, 0, 64));
  double worst = 0.0;
  float at = 0.0f;
  for (size_t i = 0; i < s.in.size(); ++i) {
    const double a = s.in[i];
    const double want = Phi(a);
    if (want >= kMinNormal) {
      const double rel = std::fabs(s.out[i] - want) / want;
      if (!(rel <= worst)) worst = rel, at = s.in[i];
    } else {
      EXPECT_LE(std::fabs(s.out[i] - want), kMinNormal) << "at " << a;
    }
  }
  EXPECT_LE(worst, kNormalCdfBf16Rel) << "at " << at;
  const float special[] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1e30f, -1e30f};
  float out[7];
  detail::activation_math(Math::kNormalCdfBf16, special, out, 7);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_TRUE(std::isnan(out[2]));
  EXPECT_NEAR(out[3], 0.5f, 0.5 * kNormalCdfBf16Rel);
  EXPECT_NEAR(out[4], 0.5f, 0.5 * kNormalCdfBf16Rel);
  EXPECT_EQ(out[5], 1.0f);
  EXPECT_EQ(out[6], 0.0f);
  std::printf("[%s] normal cdf (bf16 form): max relative error %.3g at %.9g\n", hwy::TargetName(GetParam()), worst, at);
}

TEST_P(MathBounds, SpecialValues) {
  const float in[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e30f, -1e30f, 3e38f, -3e38f, 1e-40f, -1e-40f};
  constexpr size_t n = sizeof(in) / sizeof(in[0]);
  for (Op op : {Op::kSilu, Op::kGelu, Op::kGeluTanh}) for (bool bf16_precision : {false, true}) {
    SCOPED_TRACE(std::string(Name(op)) + (bf16_precision ? " (bf16 form)" : ""));
    float out[n];
    detail::activation_math(MathOf(op, bf16_precision), in, out, n);
    EXPECT_TRUE(std::isnan(out[0]));
    EXPECT_TRUE(std::isnan(out[1]));
    EXPECT_EQ(out[2], INFINITY);
    EXPECT_EQ(F32Bits(out[3]), F32Bits(-0.0f));  // the limit, approached from below
    EXPECT_EQ(F32Bits(out[4]), F32Bits(0.0f));
    EXPECT_EQ(out[5], 0.0f);
    EXPECT_EQ(out[6], 1e30f);
    EXPECT_EQ(F32Bits(out[7]), F32Bits(-0.0f));
    EXPECT_EQ(out[8], 3e38f);
    EXPECT_EQ(F32Bits(out[9]), F32Bits(-0.0f));
    // Subnormal a: f(a) = a / 2 (silu, gelu) or a * sigmoid(~0) = a / 2 (gelu_tanh), within the
    // floor.
    EXPECT_NEAR(out[10], 0.5e-40f, kMinNormal);
    EXPECT_NEAR(out[11], -0.5e-40f, kMinNormal);
  }
}

std::string TargetParamName(const ::testing::TestParamInfo<int64_t>& info) { return hwy::TargetName(info.param); }

INSTANTIATE_TEST_SUITE_P(EveryTarget, MathBounds, ::testing::ValuesIn(KernelTargets()), TargetParamName);

// ---------------------------------------------------------------- tensors

// Shapes of the leading dims: 3-D shapes are {outer, inner} with strides that cannot be merged.
RowShape MakeShape(RowLayout l, int64_t rows) {
  RowShape s;
  if (l != RowLayout::k3D) {
    s.ndim = 1;
    s.sizes[0] = rows;
  } else {
    s.ndim = 2;
    s.sizes[0] = rows == 0 ? 3 : rows == 1 ? 1 : rows == 2 ? 2 : 3;
    s.sizes[1] = rows == 0 ? 0 : rows <= 2 ? 1 : (rows + 2) / 3;
  }
  s.rows = 1;
  for (int d = 0; d < s.ndim; ++d) s.rows *= s.sizes[d];
  return s;
}

// Rows of `width` elements with their own padding: `pad` elements between rows (but for the
// contiguous layout), `gap` more between outer rows; sentinels around them (sentinel_rows.h).
using Tensor = SentinelRows;

Tensor MakeTensor(DType t, RowLayout l, const RowShape& s, int64_t width, int64_t pad, int64_t gap) {
  return MakeSentinelRows(ElemSize(t), l, s.ndim, s.sizes, width, pad, gap);
}

ActivationParams MakeParams(DType t, int64_t d, const RowShape& shape, const Tensor& in, Tensor& out) {
  ActivationParams p;
  p.dtype = t;
  p.d = d;
  p.shape = shape;
  p.input = in.data();
  p.input_strides = in.row_strides();
  p.out = out.data();
  p.out_strides = out.row_strides();
  return p;
}

// Tolerance of one output: the float32 activation's bound, the float32 product with b, and the
// one rounding to the dtype (with its subnormal spacing).
double Tolerance(Op op, DType t, double a, double b, double want) {
  const double f32 = std::fabs(RefAct(op, a)) >= Floor(a) ? (Rel(op, a, Bf16PrecisionFor(t)) + kU32) * std::fabs(want)
                                                          : Floor(a) * std::fabs(b) + kU32 * std::fabs(want);
  return f32 + Roundoff(t) * (std::fabs(want) + f32) + SubnormalHalfSpacing(t);
}

// Inputs typical of a gated MLP (a ~ N(0, 3), b ~ N(0, 1)) with some far into the tails of
// every activation; |a b| stays well inside float16's range.
// Without the gate (gated = false) b is 1 and only a is stored.
void FillInputs(std::mt19937& rng, DType t, Tensor& in, int64_t d, std::vector<double>& a, std::vector<double>& b,
                bool gated = true) {
  std::normal_distribution<float> gate(0.0f, 3.0f), up(0.0f, 1.0f);
  std::uniform_real_distribution<float> tail(-120.0f, 40.0f);
  std::uniform_int_distribution<int> pick(0, 15);
  const int64_t rows = static_cast<int64_t>(in.row_offsets.size());
  a.resize(rows * d);
  b.resize(rows * d);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < d; ++j) {
      const float av = pick(rng) == 0 ? tail(rng) : gate(rng);
      a[r * d + j] = Store(t, in.data(), in.row_offsets[r] + j, av);
      b[r * d + j] = gated ? Store(t, in.data(), in.row_offsets[r] + d + j, std::clamp(up(rng), -4.0f, 4.0f)) : 1.0;
    }
  }
}

struct CaseOptions {
  bool stream_out = false;
  bool split_in_three = false;
};

// One op on one shape against the float64 reference; reports the first few mismatches.
void CheckCase(Op op, DType t, RowLayout layout, int64_t rows, int64_t d, uint32_t seed, CaseOptions opt = {}) {
  SCOPED_TRACE(std::string(Name(op)) + " " + ShortName(t) + " " + Name(layout) + " rows=" + std::to_string(rows) +
               " d=" + std::to_string(d) + (opt.stream_out ? " streamed" : ""));
  const RowShape shape = MakeShape(layout, rows);
  // Different padding per tensor, so a kernel using the wrong strides fails.
  const Tensor in_init = MakeTensor(t, layout, shape, Gated(op) ? 2 * d : d, 3, 7);
  Tensor in = in_init;
  Tensor out = MakeTensor(t, layout, shape, d, 5, 11);
  std::mt19937 rng(seed);
  std::vector<double> a, b;
  FillInputs(rng, t, in, d, a, b, Gated(op));
  const auto in_before = in.bytes;

  ActivationParams p = MakeParams(t, d, shape, in, out);
  p.stream_out = opt.stream_out;
  const int64_t n = shape.rows;
  if (opt.split_in_three) {
    ASSERT_TRUE(RunOp(op, p, 0, n / 3).is_ok());
    ASSERT_TRUE(RunOp(op, p, n / 3, 2 * n / 3).is_ok());
    ASSERT_TRUE(RunOp(op, p, 2 * n / 3, n).is_ok());
  } else {
    // Two ranges: the row cursor must start correctly mid-tensor.
    ASSERT_TRUE(RunOp(op, p, 0, n / 2).is_ok());
    ASSERT_TRUE(RunOp(op, p, n / 2, n).is_ok());
  }

  int64_t bad = 0;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < d; ++j) {
      const double av = a[r * d + j], bv = b[r * d + j];
      const double want = RefAct(op, av) * bv;
      const double got = Load(t, out.data(), out.row_offsets[r] + j);
      const double tol = Tolerance(op, t, av, bv, want);
      if (!(std::fabs(got - want) <= tol) && bad++ < 5) {
        ADD_FAILURE() << "row " << r << " col " << j << ": a=" << av << " b=" << bv << " got " << got << " want "
                      << want << " tol " << tol;
      }
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_TRUE(in.bytes == in_before) << "input was modified";
  ExpectGuardsIntact(out, "out");
}

const int64_t kWidths[] = {1, 2, 7, 8, 15, 16, 17, 31, 64, 100, 1000, 4099, 14336};
const DType kDTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
const Op kOps[] = {Op::kSilu, Op::kGelu, Op::kGeluTanh};
const Op kPlainOps[] = {Op::kPlainGelu, Op::kPlainGeluTanh, Op::kQuickGelu};

// About 60k output elements per case at most.
int64_t RowsFor(int64_t d) { return std::clamp<int64_t>(60000 / d, 1, 9); }

class ActivationReference : public ::testing::TestWithParam<std::tuple<Op, DType>> {};

TEST_P(ActivationReference, MatchesFloat64Reference) {
  const Op op = std::get<0>(GetParam());
  const DType t = std::get<1>(GetParam());
  uint32_t seed = 1;
  ForEachKernelTarget([&](int64_t) {
    for (RowLayout layout : {RowLayout::kContiguous, RowLayout::kStrided, RowLayout::k3D}) {
      for (int64_t d : kWidths) {
        for (int64_t rows : {int64_t{0}, int64_t{1}, RowsFor(d)}) {
          CheckCase(op, t, layout, rows, d, seed++, {.split_in_three = rows > 2});
          if (HasFatalFailure()) return;
        }
      }
    }
  });
}

TEST_P(ActivationReference, NonTemporalOutputsMatchReference) {
  // Even widths keep every row of a contiguous output on a vector boundary for some widths (the
  // kernel streams them); odd widths misalign every other row (the kernel must notice).
  const Op op = std::get<0>(GetParam());
  const DType t = std::get<1>(GetParam());
  uint32_t seed = 5000;
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    SCOPED_TRACE(std::string("target ") + hwy::TargetName(target));
    for (RowLayout layout : {RowLayout::kContiguous, RowLayout::k3D}) {
      for (int64_t d : {int64_t{1}, int64_t{17}, int64_t{64}, int64_t{100}, int64_t{4099}, int64_t{14336}}) {
        CheckCase(op, t, layout, std::min<int64_t>(5, RowsFor(d)), d, seed++, {.stream_out = true});
        if (HasFatalFailure()) return;
      }
    }
  }
}

std::string ParamName(const ::testing::TestParamInfo<ActivationReference::ParamType>& info) {
  return std::string(Name(std::get<0>(info.param))) + "_" + ShortName(std::get<1>(info.param));
}
INSTANTIATE_TEST_SUITE_P(AllOps, ActivationReference,
                         ::testing::Combine(::testing::ValuesIn(kOps), ::testing::ValuesIn(kDTypes)), ParamName);
INSTANTIATE_TEST_SUITE_P(PlainOps, ActivationReference,
                         ::testing::Combine(::testing::ValuesIn(kPlainOps), ::testing::ValuesIn(kDTypes)), ParamName);

// ---------------------------------------------------------------- exact rounding

// Contiguous params over `rows` rows (pointers set by the caller).
ActivationParams ContiguousParams(DType t, int64_t rows, int64_t d, bool gated = true) {
  ActivationParams p;
  p.dtype = t;
  p.d = d;
  p.shape.ndim = 1;
  p.shape.rows = p.shape.sizes[0] = rows;
  p.input_strides.s[0] = gated ? 2 * d : d;
  p.out_strides.s[0] = d;
  return p;
}

// Runs op on one row [a..., b...] and returns the output bits.
std::vector<uint32_t> RunRow(Op op, DType t, const std::vector<uint32_t>& a, const std::vector<uint32_t>& b,
                             bool stream_out = false) {
  const int64_t d = static_cast<int64_t>(a.size());
  const bool gated = Gated(op);  // without the gate, b is not read
  std::vector<unsigned char, LineAligned<unsigned char>> in((gated ? 2 : 1) * d * ElemSize(t)),
      out(d * ElemSize(t), kSentinel);
  for (int64_t j = 0; j < d; ++j) {
    StoreBits(t, in.data(), j, a[j]);
    if (gated) StoreBits(t, in.data(), d + j, b[j]);
  }
  ActivationParams p = ContiguousParams(t, 1, d, gated);
  p.input = in.data();
  p.out = out.data();
  p.stream_out = stream_out;
  EXPECT_TRUE(RunOp(op, p, 0, 1).is_ok());
  std::vector<uint32_t> got(d);
  for (int64_t j = 0; j < d; ++j) got[j] = LoadBits(t, out.data(), j);
  return got;
}

TEST(ActivationRounding, LargeGateGivesTheProductRoundedOnce) {
  // For a >= 18 every activation is exactly a (silu: 1 + e^-a rounds to 1 from a = 17.33 on;
  // gelu: the tail is 0 from 13.25 on; gelu_tanh: u > 17), so out = round(a * b). With bf16 or f16 inputs the
  // product is exact in float32, so this probes the kernel's final rounding bit for bit: every
  // bf16 mantissa of b (many products are ties), and f16 products that tie or overflow to inf.
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (Op op : kOps) {
      SCOPED_TRACE(Name(op));
      for (DType t : kDTypes) {
        SCOPED_TRACE(ShortName(t));
        std::vector<uint32_t> a, b;
        std::vector<float> want;
        const float gates[] = {18.0f, 19.0f, 24.5f, 100.0f, 129.0f, 255.0f};
        for (float g : gates) {
          for (uint32_t m = 0; m < 128; ++m) {
            // b = +-(1 + m / 128) * 2^e, bf16 and f16 exact.
            const float bv = std::ldexp(1.0f + m / 128.0f, static_cast<int>(m % 7) - 3) * (m % 2 ? -1.0f : 1.0f);
            a.push_back(EncodeBits(t, g));
            b.push_back(EncodeBits(t, bv));
            want.push_back(DecodeBits(t, a.back()) * DecodeBits(t, b.back()));  // exact in f32 for 16-bit types
          }
        }
        if (t == DType::kFloat16) {
          // 32 * 2047 = 65504 (the largest f16); 32.03125 * 2047 = 65568 rounds to inf; the
          // midpoint 65520 = 20 * 3276 = 24 * 2730 rounds to inf (even); 22 * 2976 = 65472 is exact.
          const float pairs[][2] = {{32.0f, 2047.0f},  {32.03125f, 2047.0f}, {20.0f, 3276.0f}, {24.0f, 2730.0f},
                                    {32.0f, -2047.0f}, {20.0f, -3276.0f},    {22.0f, 2976.0f}};
          for (const auto& pr : pairs) {
            a.push_back(EncodeBits(t, pr[0]));
            b.push_back(EncodeBits(t, pr[1]));
            want.push_back(DecodeBits(t, a.back()) * DecodeBits(t, b.back()));
          }
        }
        for (bool stream : {false, true}) {
          const std::vector<uint32_t> got = RunRow(op, t, a, b, stream);
          int64_t bad = 0;
          for (size_t j = 0; j < got.size(); ++j) {
            const uint32_t w = EncodeBits(t, want[j]);
            if (got[j] != w && bad++ < 5) {
              ADD_FAILURE() << "a=" << DecodeBits(t, a[j]) << " b=" << DecodeBits(t, b[j]) << ": got bits 0x"
                            << std::hex << got[j] << " want 0x" << w << std::dec << " (" << want[j] << ")";
            }
          }
          EXPECT_EQ(bad, 0);
        }
      }
    }
  }
}

TEST(ActivationRounding, HalfDTypesRoundTheFloat32Result) {
  // The bf16 and f16 kernels compute in float32 and round once: their output is f(a) * b in
  // float32 (f: the form of that dtype, from activation_math) rounded to nearest even, except
  // where the float32 results' last bits differ between loops (fused or not), which moves a value
  // across a rounding midpoint only when it was within a few f32 ulps of it.
  std::mt19937 rng(7);
  std::normal_distribution<float> gate(0.0f, 3.0f), up(0.0f, 1.0f);
  const int64_t d = 4099;
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (Op op : kOps) {
      for (DType t : {DType::kBFloat16, DType::kFloat16}) {
        SCOPED_TRACE(std::string(Name(op)) + " " + ShortName(t));
        std::vector<uint32_t> a(d), b(d), a32(d), b32(d);
        for (int64_t j = 0; j < d; ++j) {
          a[j] = EncodeBits(t, gate(rng));
          b[j] = EncodeBits(t, up(rng));
          a32[j] = F32Bits(DecodeBits(t, a[j]));
          b32[j] = F32Bits(DecodeBits(t, b[j]));
        }
        const std::vector<uint32_t> got = RunRow(op, t, a, b);
        std::vector<float> fa(d), f(d);
        for (int64_t j = 0; j < d; ++j) fa[j] = F32FromBits(a32[j]);
        detail::activation_math(MathOf(op, Bf16PrecisionFor(t)), fa.data(), f.data(), d);
        int64_t differ = 0, bad = 0;
        for (int64_t j = 0; j < d; ++j) {
          const float v = f[j] * F32FromBits(b32[j]);
          if (got[j] == EncodeBits(t, v)) continue;
          ++differ;
          // Allowed only next to a midpoint: rounding v nudged by 4 ulps either way gives got.
          const float lo = v - 4 * std::fabs(v) * static_cast<float>(kU32), hi = v + 4 * std::fabs(v) * static_cast<float>(kU32);
          if (got[j] != EncodeBits(t, lo) && got[j] != EncodeBits(t, hi) && bad++ < 5) {
            ADD_FAILURE() << "col " << j << ": f32 result " << v << " rounds to 0x" << std::hex << EncodeBits(t, v)
                          << ", kernel gave 0x" << got[j] << std::dec;
          }
        }
        EXPECT_EQ(bad, 0);
        EXPECT_LE(differ, d / 100) << "too many results off the f32 kernel's rounding";
      }
    }
  }
}

// ---------------------------------------------------------------- NaN and infinity

TEST(ActivationSpecialValues, NaNAndInfinity) {
  struct Case {
    float a, b;
  };
  // Results as activation.h documents them (limits at +-inf; NaN propagates).
  const Case cases[] = {
      {NAN, 1.0f},       {1.0f, NAN},        {NAN, 0.0f},        {-NAN, 2.0f},      {INFINITY, 2.0f},
      {INFINITY, -3.0f}, {INFINITY, 0.0f},   {-INFINITY, 2.0f},  {-INFINITY, -2.0f}, {-INFINITY, INFINITY},
      {-INFINITY, 0.0f}, {-1000.0f, 2.0f},   {-1000.0f, -2.0f},  {1000.0f, 0.5f},   {2.0f, INFINITY},
      {-2.0f, INFINITY}, {0.0f, INFINITY},   {-0.0f, 1.0f},      {0.0f, -1.0f},
  };
  constexpr int64_t n = sizeof(cases) / sizeof(cases[0]);
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (Op op : kOps) {
      for (DType t : kDTypes) {
        SCOPED_TRACE(std::string(hwy::TargetName(target)) + " " + Name(op) + " " + ShortName(t));
        // Each case at every lane position and in the tail: repeat the list over 37 elements.
        for (int64_t shift = 0; shift < 3; ++shift) {
          const int64_t d = 37 + shift;
          std::vector<uint32_t> a(d), b(d);
          for (int64_t j = 0; j < d; ++j) {
            const Case& c = cases[(j + shift) % n];
            a[j] = EncodeBits(t, c.a);
            b[j] = EncodeBits(t, c.b);
          }
          const std::vector<uint32_t> got = RunRow(op, t, a, b);
          for (int64_t j = 0; j < d; ++j) {
            const double av = DecodeBits(t, a[j]), bv = DecodeBits(t, b[j]);
            const double want = RefAct(op, av) * bv;
            const double g = DecodeBits(t, got[j]);
            if (std::isnan(want)) {
              EXPECT_TRUE(std::isnan(g)) << "a=" << av << " b=" << bv << " got " << g;
            } else {
              // Exact for these cases (limits, zeros, infinities, f(1000) = 1000), sign included.
              EXPECT_EQ(got[j], EncodeBits(t, static_cast<float>(want))) << "a=" << av << " b=" << bv << " got " << g
                                                                         << " want " << want;
            }
          }
        }
      }
    }
  }
}

// Without the gate: NaN gives NaN, +inf gives +inf, -inf and large negative a give -0, large a
// gives a, zeros keep their sign; every lane position and the tail.
TEST(ActivationSpecialValues, NaNAndInfinityWithoutTheGate) {
  const float cases[] = {NAN, -NAN, INFINITY, -INFINITY, -1000.0f, 1000.0f, 0.0f, -0.0f, -200.0f, 50.0f};
  constexpr int64_t n = sizeof(cases) / sizeof(cases[0]);
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (Op op : kPlainOps) {
      for (DType t : kDTypes) {
        SCOPED_TRACE(std::string(hwy::TargetName(target)) + " " + Name(op) + " " + ShortName(t));
        for (int64_t shift = 0; shift < 3; ++shift) {
          const int64_t d = 37 + shift;
          std::vector<uint32_t> a(d), b(d, EncodeBits(t, 1.0f));
          for (int64_t j = 0; j < d; ++j) a[j] = EncodeBits(t, cases[(j + shift) % n]);
          const std::vector<uint32_t> got = RunRow(op, t, a, b);
          for (int64_t j = 0; j < d; ++j) {
            const double av = DecodeBits(t, a[j]);
            const double want = RefAct(op, av);
            if (std::isnan(want)) {
              EXPECT_TRUE(std::isnan(DecodeBits(t, got[j]))) << "a=" << av;
            } else {
              EXPECT_EQ(got[j], EncodeBits(t, static_cast<float>(want))) << "a=" << av << " got "
                                                                         << DecodeBits(t, got[j]) << " want " << want;
            }
          }
        }
      }
    }
  }
}

TEST(ActivationSpecialValues, FiniteInputsNeverGiveNaN) {
  // Random bit patterns (every exponent, subnormals included) that are finite.
  std::mt19937 rng(11);
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (Op op : kOps) {
      for (DType t : kDTypes) {
        SCOPED_TRACE(std::string(hwy::TargetName(target)) + " " + Name(op) + " " + ShortName(t));
        const int64_t d = 4099;
        std::vector<uint32_t> a(d), b(d);
        const uint32_t mask = t == DType::kFloat32 ? 0xFFFFFFFFu : 0xFFFFu;
        for (int64_t j = 0; j < d; ++j) {
          do a[j] = rng() & mask; while (!std::isfinite(DecodeBits(t, a[j])));
          do b[j] = rng() & mask; while (!std::isfinite(DecodeBits(t, b[j])));
        }
        const std::vector<uint32_t> got = RunRow(op, t, a, b);
        int64_t nan = 0;
        for (int64_t j = 0; j < d; ++j) nan += std::isnan(DecodeBits(t, got[j]));
        EXPECT_EQ(nan, 0);
      }
    }
  }
}

// ---------------------------------------------------------------- memory and threads

TEST(ActivationMemory, NoReadOrWritePastRowEnd) {
  // The last row of each tensor ends right before a PROT_NONE page.
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (DType t : kDTypes) {
      for (int64_t d : {1, 2, 3, 7, 9, 13, 17, 31, 33, 64, 100}) {
        SCOPED_TRACE(std::string(hwy::TargetName(target)) + " " + ShortName(t) + " d=" + std::to_string(d));
        const int64_t rows = 3;
        const size_t in_bytes = rows * 2 * d * ElemSize(t), out_bytes = rows * d * ElemSize(t);
        GuardedRegion gx(in_bytes), gy(out_bytes);
        ASSERT_TRUE(gx.ok() && gy.ok());
        char* x = gx.tail(in_bytes);
        for (int64_t i = 0; i < rows * 2 * d; ++i) Store(t, x, i, 0.25f * (i % 9) - 1.0f);
        ActivationParams p = ContiguousParams(t, rows, d);
        p.input = x;
        p.out = gy.tail(out_bytes);
        for (Op op : kOps) EXPECT_TRUE(RunOp(op, p, 0, rows).is_ok());
        p.stream_out = true;
        for (Op op : kOps) EXPECT_TRUE(RunOp(op, p, 0, rows).is_ok());
      }
    }
  }
}

TEST(ActivationMemory, RowStridesBeyond2To31Elements) {
  // Rows {2, 3}: the outer input stride is > 2^31 elements; only the touched pages get committed.
  const int64_t d = 1000 + 3;
  const int64_t inner = 2 * d + 1;
  const int64_t outer = (int64_t{1} << 31) + 3 * inner + 17;
  for (DType t : kDTypes) {
    SCOPED_TRACE(ShortName(t));
    const int64_t span = outer + 2 * inner + 2 * d;
    GuardedRegion gx(span * ElemSize(t));
    if (!gx.ok()) GTEST_SKIP() << "cannot reserve the virtual address space";
    char* x = gx.tail(span * ElemSize(t));
    std::vector<int64_t> offsets;
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t k = 0; k < 3; ++k) offsets.push_back(i * outer + k * inner);
    }
    for (int64_t row = 0; row < 6; ++row) {
      for (int64_t j = 0; j < 2 * d; ++j) Store(t, x, offsets[row] + j, 0.125f * ((j + 3 * row) % 41) - 2.5f);
    }
    std::vector<unsigned char> y(6 * d * ElemSize(t), 0);
    ActivationParams p;
    p.dtype = t;
    p.d = d;
    p.shape.ndim = 2;
    p.shape.sizes[0] = 2;
    p.shape.sizes[1] = 3;
    p.shape.rows = 6;
    p.input_strides.s[0] = outer;
    p.input_strides.s[1] = inner;
    p.out_strides.s[0] = 3 * d;
    p.out_strides.s[1] = d;
    p.input = x;
    p.out = y.data();
    ASSERT_TRUE(silu_and_mul(p, 1, 6).is_ok());  // start mid-way, after row 0
    for (int64_t row = 0; row < 6; ++row) {
      for (int64_t j = 0; j < d; ++j) {
        const double got = Load(t, y.data(), row * d + j);
        if (row == 0) {
          ASSERT_EQ(got, 0.0) << "row 0 is outside the range";
          continue;
        }
        const double a = Load(t, x, offsets[row] + j), b = Load(t, x, offsets[row] + d + j);
        const double want = RefAct(Op::kSilu, a) * b;
        ASSERT_LE(std::fabs(got - want), Tolerance(Op::kSilu, t, a, b, want)) << "row " << row << " col " << j;
      }
    }
  }
}

TEST(ActivationThreads, DisjointRangesConcurrently) {
  // The bridge splits rows over threads: concurrent calls on disjoint ranges give the same bits
  // as one call.
  const int64_t rows = 23, d = 1000 + 1;
  for (DType t : kDTypes) {
    for (Op op : kOps) {
      SCOPED_TRACE(std::string(Name(op)) + " " + ShortName(t));
      std::vector<unsigned char> x(rows * 2 * d * ElemSize(t)), y1(rows * d * ElemSize(t)), y2(y1.size());
      std::mt19937 rng(3);
      std::normal_distribution<float> dist(0.0f, 3.0f);
      for (int64_t i = 0; i < rows * 2 * d; ++i) Store(t, x.data(), i, dist(rng));
      ActivationParams p = ContiguousParams(t, rows, d);
      p.input = x.data();
      p.out = y1.data();
      ASSERT_TRUE(RunOp(op, p, 0, rows).is_ok());
      p.out = y2.data();
      Status s1 = Status::invalid("not run"), s2 = Status::invalid("not run");
      std::thread ta([&] { s1 = RunOp(op, p, 0, 11); });
      std::thread tb([&] { s2 = RunOp(op, p, 11, rows); });
      ta.join();
      tb.join();
      EXPECT_TRUE(s1.is_ok());
      EXPECT_TRUE(s2.is_ok());
      EXPECT_TRUE(y1 == y2);
    }
  }
}

// ---------------------------------------------------------------- parameters

TEST(ActivationParamsCheck, RejectsInvalidParametersWithAReason) {
  std::vector<unsigned char> x(4 * 2 * 8 * 4), y(4 * 8 * 4);
  ActivationParams good = ContiguousParams(DType::kFloat32, 4, 8);
  good.input = x.data();
  good.out = y.data();
  for (Op op : kOps) {
    SCOPED_TRACE(Name(op));
    EXPECT_TRUE(RunOp(op, good, 0, 4).is_ok());
    EXPECT_TRUE(RunOp(op, good, 2, 2).is_ok());  // empty range
    ActivationParams empty = ContiguousParams(DType::kBFloat16, 0, 8);  // zero rows, no data
    EXPECT_TRUE(RunOp(op, empty, 0, 0).is_ok());
    ActivationParams empty3d = good;
    empty3d.shape.ndim = 2;
    empty3d.shape.sizes[0] = 3;
    empty3d.shape.sizes[1] = 0;
    empty3d.shape.rows = 0;
    EXPECT_TRUE(RunOp(op, empty3d, 0, 0).is_ok());

    auto bad = [&](auto mutate, int64_t b = 0, int64_t e = 4) {
      ActivationParams p = good;
      mutate(p);
      const Status s = RunOp(op, p, b, e);
      EXPECT_EQ(s, Status::kInvalidArgument);
      EXPECT_GT(std::strlen(s.reason), 0u);
      return s.code;
    };
    bad([](ActivationParams& p) { p.d = 0; });
    bad([](ActivationParams& p) { p.d = -1; });
    bad([](ActivationParams& p) { p.dtype = static_cast<DType>(7); });
    bad([](ActivationParams& p) { p.shape.ndim = 0; });
    bad([](ActivationParams& p) { p.shape.ndim = kernels::kMaxRowDims + 1; });
    bad([](ActivationParams& p) { p.shape.rows = 5; });
    bad([](ActivationParams& p) { p.shape.sizes[0] = -4; });
    bad([](ActivationParams& p) { p.input = nullptr; });
    bad([](ActivationParams& p) { p.out = nullptr; });
    bad([](ActivationParams&) {}, -1, 2);
    bad([](ActivationParams&) {}, 0, 5);
    bad([](ActivationParams&) {}, 3, 2);
  }
}

TEST(ActivationTarget, TestsEveryCompiledTarget) {
  ASSERT_FALSE(KernelTargets().empty());
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_EQ(std::string(simd_target()), hwy::TargetName(KernelTargets().front()));
  std::string tested;
  for (int64_t target : KernelTargets()) tested += std::string(" ") + hwy::TargetName(target);
  std::printf("simd_target: %s; targets under test:%s\n", simd_target(), tested.c_str());
}

}  // namespace
}  // namespace xllm_kernel::cpu
