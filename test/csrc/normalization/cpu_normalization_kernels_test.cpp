// Torch-free tests of csrc/cpu/normalization: every kernel against a float64 reference written
// here, on every Highway target this CPU can run, plus exact rounding, strides beyond 2^31,
// no reads past a row end and no writes outside the rows.
#include "csrc/cpu/normalization/normalization.h"
#include "csrc/cpu/common/simd.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "hwy/targets.h"
#include "test/csrc/common/cpu_test_support.h"

namespace xllm_kernel::cpu {
namespace {

using namespace test;  // NOLINT: the element codecs, targets and guarded memory of the kernel tests

const char* Name(DType t) { return ShortName(t); }

// Unit roundoff of the output dtype: RNE is off by at most this fraction of the value.
double OutputRoundoff(DType t) { return Roundoff(t); }

// f16 outputs below 2^-14 are subnormal with absolute spacing 2^-24.
double OutputAtol(DType t) { return t == DType::kFloat16 ? 0x1p-24 : 1e-30; }

// Relative error of an fp32 reduction over `hidden` terms: rounding errors of a long sum
// grow like sqrt(n) (the kernel also splits the sum over many lanes), plus a few ulps for
// sqrt, the division and the products. A reduction in bf16/f16, or E[x^2] - mean^2, is off
// by orders of magnitude more than this on the data below.
double ComputeRel(int64_t hidden) { return 0x1p-24 * (4.0 * std::sqrt(double(hidden)) + 16.0); }

// ---------------------------------------------------------------- layouts

enum class Kernel { kRms, kFused, kLayerNorm, kLayerNormBias };

const char* Name(Kernel k) {
  switch (k) {
    case Kernel::kRms: return "rms_norm";
    case Kernel::kFused: return "fused_add_rms_norm";
    case Kernel::kLayerNorm: return "layer_norm";
    case Kernel::kLayerNormBias: return "layer_norm+bias";
  }
  return "?";
}

Status RunKernel(Kernel k, const NormParams& p, int64_t b, int64_t e) {
  switch (k) {
    case Kernel::kRms: return rms_norm(p, b, e);
    case Kernel::kFused: return fused_add_rms_norm(p, b, e);
    default: return layer_norm(p, b, e);
  }
}

struct Shape {
  int ndim = 1;
  int64_t sizes[2] = {0, 1};
  int64_t rows() const { return ndim == 1 ? sizes[0] : sizes[0] * sizes[1]; }
};

// 3-D shapes are {outer, inner} with both > 1 where possible so that the strides below
// cannot be merged into a single row stride.
Shape MakeShape(RowLayout l, int64_t rows) {
  Shape s;
  if (l != RowLayout::k3D) {
    s.sizes[0] = rows;
    return s;
  }
  s.ndim = 2;
  switch (rows) {
    case 0: s.sizes[0] = 3; s.sizes[1] = 0; break;
    case 1: s.sizes[0] = 1; s.sizes[1] = 1; break;
    case 7: s.sizes[0] = 2; s.sizes[1] = 4; break;      // 8 rows
    default: s.sizes[0] = 16; s.sizes[1] = 16; break;  // 256 rows
  }
  return s;
}

// Rows of `hidden` elements with their own padding: `pad` elements between rows (but for the
// contiguous layout), `gap` more between outer rows; sentinels around them (sentinel_rows.h).
using Tensor = SentinelRows;

Tensor MakeTensor(DType t, RowLayout l, const Shape& s, int64_t hidden, int64_t pad, int64_t gap) {
  return MakeSentinelRows(ElemSize(t), l, s.ndim, s.sizes, hidden, pad, gap);
}

// ---------------------------------------------------------------- reference test

struct DTypes {
  DType dtype;
  DType weight_dtype;
};

std::string DTypesName(const DTypes& d) {
  return std::string(Name(d.dtype)) + "_w" + Name(d.weight_dtype);
}

const DTypes kAllDTypes[] = {
    {DType::kFloat32, DType::kFloat32},   {DType::kBFloat16, DType::kFloat32},
    {DType::kBFloat16, DType::kBFloat16}, {DType::kFloat16, DType::kFloat32},
    {DType::kFloat16, DType::kFloat16},
};

// Checks one kernel on one shape against the float64 reference, reporting the first few
// mismatches.
// outlying_head: the first 16 elements of each input row sit 3000 above the rest.
// stream_out: the kernel is asked for non-temporal output stores.
void CheckCase(Kernel kernel, DTypes dt, RowLayout layout, int64_t rows, int64_t hidden,
               uint32_t seed, bool outlying_head = false, bool stream_out = false) {
  SCOPED_TRACE(std::string(Name(kernel)) + " " + DTypesName(dt) + " " + Name(layout) +
               " rows=" + std::to_string(rows) + " hidden=" + std::to_string(hidden) +
               (stream_out ? " streamed" : ""));
  const DType t = dt.dtype;
  const Shape shape = MakeShape(layout, rows);
  const int64_t nrows = shape.rows();
  // Different padding per tensor, so a kernel using the wrong tensor's strides fails.
  Tensor in = MakeTensor(t, layout, shape, hidden, 3, 7);
  Tensor out = MakeTensor(t, layout, shape, hidden, 5, 11);
  Tensor res = MakeTensor(t, layout, shape, hidden, 2, 4);

  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> offset(-1000.0f, 1000.0f);
  std::uniform_real_distribution<float> noise(-2.0f, 2.0f);
  std::uniform_real_distribution<float> wdist(0.5f, 1.5f);
  std::uniform_real_distribution<float> bdist(-1.0f, 1.0f);

  // Large per-row offsets: fp32 accumulation and the two-pass variance are then necessary.
  std::vector<double> xs(static_cast<size_t>(nrows * hidden)), rs(xs.size());
  for (int64_t r = 0; r < nrows; ++r) {
    const float xo = offset(rng), ro = 0.5f * offset(rng);
    for (int64_t j = 0; j < hidden; ++j) {
      const float head = outlying_head && j < 16 ? 3000.0f : 0.0f;
      xs[r * hidden + j] = Store(t, in.data(), in.row_offsets[r] + j, xo + head + noise(rng));
      rs[r * hidden + j] = Store(t, res.data(), res.row_offsets[r] + j, ro + noise(rng));
    }
  }
  std::vector<unsigned char> wbytes(hidden * ElemSize(dt.weight_dtype));
  std::vector<unsigned char> bbytes(wbytes.size());
  std::vector<double> ws(hidden), bs(hidden, 0.0);
  for (int64_t j = 0; j < hidden; ++j) {
    ws[j] = Store(dt.weight_dtype, wbytes.data(), j, wdist(rng));
    bs[j] = Store(dt.weight_dtype, bbytes.data(), j, bdist(rng));
  }
  const bool has_bias = kernel == Kernel::kLayerNormBias;
  if (!has_bias) std::fill(bs.begin(), bs.end(), 0.0);
  const auto in_before = in.bytes;

  NormParams p;
  p.dtype = t;
  p.weight_dtype = dt.weight_dtype;
  p.rows = nrows;
  p.hidden = hidden;
  p.row_ndim = shape.ndim;
  for (int d = 0; d < shape.ndim; ++d) {
    p.row_sizes[d] = shape.sizes[d];
    p.input_strides[d] = in.strides[d];
    p.out_strides[d] = out.strides[d];
    p.residual_strides[d] = res.strides[d];
  }
  p.input = in.data();
  p.weight = wbytes.data();
  p.eps = kernel == Kernel::kFused || kernel == Kernel::kRms ? 1e-6 : 1e-5;
  if (kernel == Kernel::kFused) {
    p.residual = res.data();
  } else {
    p.out = out.data();
  }
  if (has_bias) p.bias = bbytes.data();
  p.stream_out = stream_out;

  // Three row ranges: the row cursor must start correctly mid-tensor.
  const int64_t cut1 = nrows / 3, cut2 = 2 * nrows / 3;
  ASSERT_EQ(RunKernel(kernel, p, 0, cut1), Status::kOk);
  ASSERT_EQ(RunKernel(kernel, p, cut1, cut2), Status::kOk);
  ASSERT_EQ(RunKernel(kernel, p, cut2, nrows), Status::kOk);

  const double u_out = OutputRoundoff(t), atol = OutputAtol(t), rel = ComputeRel(hidden);
  const Tensor& y = kernel == Kernel::kFused ? in : out;
  int64_t bad = 0, bad_res = 0;
  std::vector<double> v(hidden);
  for (int64_t r = 0; r < nrows; ++r) {
    const double* x = &xs[r * hidden];
    if (kernel == Kernel::kFused) {
      // The residual is rounded once from the fp32 sum; the norm uses that rounded value.
      for (int64_t j = 0; j < hidden; ++j) {
        const float sum = static_cast<float>(x[j]) + static_cast<float>(rs[r * hidden + j]);
        const uint32_t want = EncodeBits(t, sum);
        const uint32_t got = LoadBits(t, res.data(), res.row_offsets[r] + j);
        if (!SameValue(t, want, got) && bad_res++ < 5) {
          ADD_FAILURE() << "residual row " << r << " col " << j << ": got " << DecodeBits(t, got)
                        << " want " << DecodeBits(t, want);
        }
        v[j] = DecodeBits(t, want);
      }
    } else {
      std::copy(x, x + hidden, v.begin());
    }
    double mean = 0.0;
    double scale;
    if (kernel == Kernel::kRms || kernel == Kernel::kFused) {
      double ss = 0.0;
      for (int64_t j = 0; j < hidden; ++j) ss += v[j] * v[j];
      scale = 1.0 / std::sqrt(ss / hidden + p.eps);
    } else {
      for (int64_t j = 0; j < hidden; ++j) mean += v[j];
      mean /= hidden;
      double var = 0.0;
      for (int64_t j = 0; j < hidden; ++j) var += (v[j] - mean) * (v[j] - mean);
      scale = 1.0 / std::sqrt(var / hidden + p.eps);
    }
    for (int64_t j = 0; j < hidden; ++j) {
      const double want = (v[j] - mean) * scale * ws[j] + bs[j];
      const double got = Load(t, y.bytes.data(), y.row_offsets[r] + j);
      // fp32 errors: relative to each term, and for layer_norm the error of the fp32 mean is
      // relative to |mean|, not to the (much smaller) deviation.
      const double compute_err =
          rel * ((std::fabs(v[j] - mean) + std::fabs(mean)) * scale * std::fabs(ws[j]) +
                 std::fabs(bs[j]));
      const double tol = u_out * std::fabs(want) + 2.0 * compute_err + atol;
      if (!(std::fabs(got - want) <= tol) && bad++ < 5) {
        ADD_FAILURE() << "row " << r << " col " << j << ": got " << got << " want " << want
                      << " tol " << tol;
      }
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(bad_res, 0);

  if (kernel == Kernel::kFused) {
    ExpectGuardsIntact(in, "input");
    ExpectGuardsIntact(res, "residual");
  } else {
    EXPECT_TRUE(in.bytes == in_before) << "input was modified";
    ExpectGuardsIntact(out, "out");
  }
}

class NormReferenceTest : public ::testing::TestWithParam<std::tuple<Kernel, DTypes>> {};

TEST_P(NormReferenceTest, MatchesFloat64Reference) {
  const Kernel kernel = std::get<0>(GetParam());
  const DTypes dt = std::get<1>(GetParam());
  uint32_t seed = 1;
  ForEachKernelTarget([&](int64_t) {
    for (RowLayout layout : {RowLayout::kContiguous, RowLayout::kStrided, RowLayout::k3D}) {
      for (int64_t rows : {0, 1, 7, 257}) {
        for (int64_t hidden : {1, 7, 64, 4096 + 13}) {
          CheckCase(kernel, dt, layout, rows, hidden, seed++);
          if (HasFatalFailure()) return;
        }
      }
    }
  });
}

TEST(NormLayerNorm, OutlyingFirstElementsMatchReference) {
  // layer_norm estimates the mean from the row's first vector and computes the variance in one
  // pass around it. First elements far from the rest would make that subtraction cancel (about
  // 1% error at hidden 4109 here), so the kernel must detect it and take its exact two passes.
  uint32_t seed = 1000;
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    SCOPED_TRACE(std::string("target ") + hwy::TargetName(target));
    for (const DTypes& dt : kAllDTypes) {
      for (Kernel kernel : {Kernel::kLayerNorm, Kernel::kLayerNormBias}) {
        for (int64_t hidden : {64, 4096 + 13}) {
          CheckCase(kernel, dt, RowLayout::kContiguous, 7, hidden, seed++, /*outlying_head=*/true);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(NormStreaming, NonTemporalOutputsMatchReference) {
  // Rows of 64 elements start on vector boundaries (streamed); rows of 4109 mostly do not (the
  // kernel must notice and store normally); the tail of each row is always stored normally.
  uint32_t seed = 2000;
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    SCOPED_TRACE(std::string("target ") + hwy::TargetName(target));
    for (const DTypes& dt : kAllDTypes) {
      for (Kernel kernel : {Kernel::kRms, Kernel::kLayerNormBias}) {
        for (RowLayout layout : {RowLayout::kContiguous, RowLayout::k3D}) {
          for (int64_t rows : {1, 7}) {
            for (int64_t hidden : {64, 4096 + 13}) {
              CheckCase(kernel, dt, layout, rows, hidden, seed++, /*outlying_head=*/false, /*stream_out=*/true);
              if (HasFatalFailure()) return;
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllKernels, NormReferenceTest,
    ::testing::Combine(::testing::Values(Kernel::kRms, Kernel::kFused, Kernel::kLayerNorm,
                                         Kernel::kLayerNormBias),
                       ::testing::ValuesIn(kAllDTypes)),
    [](const ::testing::TestParamInfo<NormReferenceTest::ParamType>& info) {
      std::string k = Name(std::get<0>(info.param));
      std::replace(k.begin(), k.end(), '+', '_');
      return k + "_" + DTypesName(std::get<1>(info.param));
    });

// ---------------------------------------------------------------- exact rounding

// Params for `rows` contiguous rows of `hidden` in every tensor (pointers left to the caller).
NormParams ContiguousParams(DType t, DType wt, int64_t rows, int64_t hidden) {
  NormParams p;
  p.dtype = t;
  p.weight_dtype = wt;
  p.rows = rows;
  p.hidden = hidden;
  p.row_ndim = 1;
  p.row_sizes[0] = rows;
  p.input_strides[0] = p.out_strides[0] = p.residual_strides[0] = hidden;
  return p;
}

// layer_norm of an all-zero row with weight 1 and eps 1 is exactly 0 + bias, so the output is
// bias rounded once to the dtype: an exact probe of the kernel's conversions. With 1 row the
// kernel reads the weights as given; from 4 rows on it converts them once (bf16 rows then take
// the even/odd path, and with no NaN among weights and bias, the rounding without a NaN guard).
// Every row must give the same bits; returns row 0.
std::vector<uint32_t> LayerNormOfZeroRows(DType t, DType wt, const std::vector<uint32_t>& bias, int64_t rows) {
  const int64_t hidden = static_cast<int64_t>(bias.size());
  std::vector<unsigned char> x(rows * hidden * ElemSize(t), 0), y(rows * hidden * ElemSize(t), kSentinel);
  std::vector<unsigned char> w(hidden * ElemSize(wt)), b(hidden * ElemSize(wt));
  for (int64_t j = 0; j < hidden; ++j) {
    StoreBits(wt, w.data(), j, EncodeBits(wt, 1.0f));
    StoreBits(wt, b.data(), j, bias[j]);
  }
  NormParams p = ContiguousParams(t, wt, rows, hidden);
  p.input = x.data();
  p.out = y.data();
  p.weight = w.data();
  p.bias = b.data();
  p.eps = 1.0;
  EXPECT_EQ(layer_norm(p, 0, rows), Status::kOk);
  std::vector<uint32_t> got(hidden);
  for (int64_t j = 0; j < hidden; ++j) got[j] = LoadBits(t, y.data(), j);
  int64_t differ = 0;
  for (int64_t r = 1; r < rows; ++r) {
    for (int64_t j = 0; j < hidden; ++j) differ += LoadBits(t, y.data(), r * hidden + j) != got[j];
  }
  EXPECT_EQ(differ, 0) << "rows of the same input differ";
  return got;
}

// Each check below runs on one row and on several, with all biases at once and with only the
// finite ones, so every rounding path of the kernel is probed.
constexpr int64_t kRowCounts[] = {1, 5};

std::vector<uint32_t> WithoutNaN(DType t, const std::vector<uint32_t>& bits) {
  std::vector<uint32_t> out;
  for (uint32_t u : bits) {
    if (!std::isnan(DecodeBits(t, u))) out.push_back(u);
  }
  return out;
}

TEST(NormRounding, HalfDTypesRoundTripEveryBitPattern) {
  // Every 16-bit pattern as bias in the input dtype: promotion must be exact (subnormals,
  // Inf, NaN included) and demotion must give it back (-0 + +0 is +0).
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (DType t : {DType::kBFloat16, DType::kFloat16}) {
      SCOPED_TRACE(std::string(hwy::TargetName(target)) + " " + Name(t));
      std::vector<uint32_t> all(65536);
      for (uint32_t i = 0; i < 65536; ++i) all[i] = i;
      for (const auto& bias : {all, WithoutNaN(t, all)}) {
        for (int64_t rows : kRowCounts) {
          SCOPED_TRACE("rows " + std::to_string(rows) + ", biases " + std::to_string(bias.size()));
          const std::vector<uint32_t> got = LayerNormOfZeroRows(t, t, bias, rows);
          int64_t bad = 0;
          for (size_t i = 0; i < bias.size(); ++i) {
            const uint32_t want = EncodeBits(t, 0.0f + DecodeBits(t, bias[i]));
            if (!SameValue(t, want, got[i]) && bad++ < 5) {
              ADD_FAILURE() << std::hex << "bits 0x" << bias[i] << ": got 0x" << got[i] << " want 0x" << want;
            }
          }
          EXPECT_EQ(bad, 0);
        }
      }
    }
  }
}

TEST(NormRounding, Float32ToHalfIsRoundToNearestEven) {
  // f32 biases covering ties, near-ties, overflow to Inf, subnormal results and NaN.
  std::vector<uint32_t> bias;
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 65504.0f, 65519.99f,
                            65520.0f, -65520.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-24f, 0x1p-26f,
                            0x1.ff8p-15f, 3.3895314e38f, 3.4028235e38f, 1.0f + 0x1p-8f,
                            1.0f + 0x1.8p-7f, 1.0f + 0x1p-11f, 1.0f + 0x1.8p-10f, 1e-40f};
  for (float f : specials) bias.push_back(F32Bits(f));
  bias.push_back(0x7F800001u);  // NaN whose payload is only in the low bits: must not become Inf
  bias.push_back(0x7FFFFFFFu);  // NaN that a blind +0x7FFF rounding would carry into the sign
  std::mt19937 rng(42);
  for (int i = 0; i < 20000; ++i) {
    const uint32_t sign = (rng() & 1u) << 31;
    const uint32_t mant = rng() & 0x7FFFFFu;
    // Exponents around the f16 range (2^-27 .. 2^17) and anywhere in f32.
    const uint32_t exp = i % 2 ? 100 + rng() % 45 : rng() % 256;
    uint32_t u = sign | (exp << 23) | mant;
    if (i % 5 == 0) u = (u & ~0xFFFFu) | 0x8000u;  // bf16 tie
    if (i % 5 == 1) u = (u & ~0x1FFFu) | 0x1000u;  // f16 tie in the normal range
    bias.push_back(u);
  }
  // f16 subnormal ties.
  for (int k = 0; k < 2048; ++k) bias.push_back(F32Bits((2 * k + 1) * 0x1p-25f));
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (DType t : {DType::kBFloat16, DType::kFloat16}) {
      SCOPED_TRACE(std::string(hwy::TargetName(target)) + " " + Name(t));
      for (const auto& b : {bias, WithoutNaN(DType::kFloat32, bias)}) {
        for (int64_t rows : kRowCounts) {
          SCOPED_TRACE("rows " + std::to_string(rows) + ", biases " + std::to_string(b.size()));
          const std::vector<uint32_t> got = LayerNormOfZeroRows(t, DType::kFloat32, b, rows);
          int64_t bad = 0;
          for (size_t i = 0; i < b.size(); ++i) {
            const uint32_t want = EncodeBits(t, 0.0f + F32FromBits(b[i]));
            if (!SameValue(t, want, got[i]) && bad++ < 5) {
              ADD_FAILURE() << std::hex << "f32 0x" << b[i] << ": got 0x" << got[i] << " want 0x" << want;
            }
          }
          EXPECT_EQ(bad, 0);
        }
      }
    }
  }
}

TEST(NormRounding, NaNRowStaysNaN) {
  // Row 0 holds a NaN whose payload fills the f32 mantissa (a blind +0x7FFF bf16 rounding would
  // carry it into the sign and give -0); the other rows stay finite. 2 rows read the weights as
  // given, 6 rows convert them first.
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      for (int64_t rows : {2, 6}) {
        SCOPED_TRACE(std::string(hwy::TargetName(target)) + " " + Name(t) + " rows " + std::to_string(rows));
        const int64_t hidden = 37;
        std::vector<unsigned char> x(rows * hidden * ElemSize(t)), y(x.size());
        std::vector<unsigned char> w(hidden * 4);
        for (int64_t i = 0; i < rows * hidden; ++i) Store(t, x.data(), i, 1.0f + i % 3);
        StoreBits(t, x.data(), 20, t == DType::kFloat32 ? 0x7FFFFFFFu : t == DType::kBFloat16 ? 0x7FFFu : 0x7FFFu);
        for (int64_t j = 0; j < hidden; ++j) Store(DType::kFloat32, w.data(), j, 1.0f);
        NormParams p = ContiguousParams(t, DType::kFloat32, rows, hidden);
        p.input = x.data();
        p.out = y.data();
        p.weight = w.data();
        for (bool ln : {false, true}) {
          ASSERT_EQ(ln ? layer_norm(p, 0, rows) : rms_norm(p, 0, rows), Status::kOk);
          for (int64_t j = 0; j < hidden; ++j) {
            EXPECT_TRUE(std::isnan(Load(t, y.data(), j))) << "col " << j;
            for (int64_t r = 1; r < rows; ++r) {
              EXPECT_TRUE(std::isfinite(Load(t, y.data(), r * hidden + j))) << "row " << r << " col " << j;
            }
          }
        }
      }
    }
  }
}

TEST(NormRounding, NaNWeightOrBiasStaysNaNInEveryRow) {
  // An f32 weight (or bias) NaN with a full mantissa payload, on half-precision rows: its
  // column is NaN in every row, every other column finite, however many rows a call has.
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (DType t : {DType::kBFloat16, DType::kFloat16}) {
      for (int64_t rows : {1, 6}) {
        for (int kernel = 0; kernel < 3; ++kernel) {  // rms_norm weight, layer_norm weight, layer_norm bias
          SCOPED_TRACE(std::string(hwy::TargetName(target)) + " " + Name(t) + " rows " + std::to_string(rows) +
                       " case " + std::to_string(kernel));
          const int64_t hidden = 40, bad_col = 19;
          std::vector<unsigned char> x(rows * hidden * ElemSize(t)), y(x.size());
          std::vector<unsigned char> w(hidden * 4), b(hidden * 4);
          for (int64_t i = 0; i < rows * hidden; ++i) Store(t, x.data(), i, 1.0f + i % 5);
          for (int64_t j = 0; j < hidden; ++j) {
            Store(DType::kFloat32, w.data(), j, 1.0f);
            Store(DType::kFloat32, b.data(), j, 0.5f);
          }
          StoreBits(DType::kFloat32, kernel == 2 ? b.data() : w.data(), bad_col, 0x7FFFFFFFu);
          NormParams p = ContiguousParams(t, DType::kFloat32, rows, hidden);
          p.input = x.data();
          p.out = y.data();
          p.weight = w.data();
          p.bias = kernel == 0 ? nullptr : b.data();
          ASSERT_EQ(kernel == 0 ? rms_norm(p, 0, rows) : layer_norm(p, 0, rows), Status::kOk);
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t j = 0; j < hidden; ++j) {
              const double v = Load(t, y.data(), r * hidden + j);
              EXPECT_EQ(std::isnan(v), j == bad_col) << "row " << r << " col " << j << " = " << v;
            }
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------- memory safety

// GuardedRegion (test/csrc/common/cpu_test_support.h): the last row of a tensor ends right
// before an inaccessible page, so a read or write past it faults.

TEST(NormMemory, NoReadOrWritePastRowEnd) {
  // The last row of each tensor ends right before a PROT_NONE page.
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (const DTypes& dt : kAllDTypes) {
      for (int64_t hidden : {1, 3, 7, 9, 13, 64, 100, 4096 + 13}) {
        SCOPED_TRACE(std::string(hwy::TargetName(target)) + " " + DTypesName(dt) +
                     " hidden=" + std::to_string(hidden));
        const int64_t rows = 3;
        const size_t tbytes = rows * hidden * ElemSize(dt.dtype);
        const size_t wbytes = hidden * ElemSize(dt.weight_dtype);
        GuardedRegion gx(tbytes), gy(tbytes), gr(tbytes), gw(wbytes), gb(wbytes);
        ASSERT_TRUE(gx.ok() && gy.ok() && gr.ok() && gw.ok() && gb.ok());
        char* x = gx.tail(tbytes);
        char* r = gr.tail(tbytes);
        char* w = gw.tail(wbytes);
        char* b = gb.tail(wbytes);
        for (int64_t i = 0; i < rows * hidden; ++i) {
          Store(dt.dtype, x, i, 0.5f + i % 5);
          Store(dt.dtype, r, i, -0.25f * (i % 3));
        }
        for (int64_t j = 0; j < hidden; ++j) {
          Store(dt.weight_dtype, w, j, 1.0f);
          Store(dt.weight_dtype, b, j, 0.5f);
        }
        NormParams p = ContiguousParams(dt.dtype, dt.weight_dtype, rows, hidden);
        p.input = x;
        p.out = gy.tail(tbytes);
        p.residual = r;
        p.weight = w;
        p.bias = b;
        p.eps = 1e-6;
        EXPECT_EQ(rms_norm(p, 0, rows), Status::kOk);
        EXPECT_EQ(layer_norm(p, 0, rows), Status::kOk);
        EXPECT_EQ(fused_add_rms_norm(p, 0, rows), Status::kOk);
      }
    }
  }
}

TEST(NormMemory, RowStridesBeyond2To31Elements) {
  // Rows {2, 3}: the outer stride is > 2^31 elements; only the touched pages get committed.
  const int64_t hidden = 4096 + 13;
  const int64_t inner = hidden + 1;
  const int64_t outer = (int64_t{1} << 31) + 3 * inner + 17;
  for (const DTypes& dt : {DTypes{DType::kBFloat16, DType::kFloat32},
                           DTypes{DType::kFloat32, DType::kFloat32},
                           DTypes{DType::kFloat16, DType::kFloat16}}) {
    SCOPED_TRACE(DTypesName(dt));
    const DType t = dt.dtype;
    const int64_t span = outer + 2 * inner + hidden;  // elements from row 0 to the last row end
    GuardedRegion gx(span * ElemSize(t)), gr(span * ElemSize(t));
    if (!gx.ok() || !gr.ok()) GTEST_SKIP() << "cannot reserve the virtual address space";
    char* x = gx.tail(span * ElemSize(t));
    char* r = gr.tail(span * ElemSize(t));
    std::vector<int64_t> offsets;
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t k = 0; k < 3; ++k) offsets.push_back(i * outer + k * inner);
    }
    std::vector<unsigned char> y(6 * hidden * ElemSize(t)), w(hidden * ElemSize(dt.weight_dtype));
    for (int64_t j = 0; j < hidden; ++j) {
      Store(dt.weight_dtype, w.data(), j, 1.0f + (j % 4) * 0.25f);
    }
    auto fill = [&] {
      for (int64_t row = 0; row < 6; ++row) {
        for (int64_t j = 0; j < hidden; ++j) {
          Store(t, x, offsets[row] + j, 100.0f * (row + 1) + (j % 17) - 8.0f);
          Store(t, r, offsets[row] + j, 0.5f * (j % 5) - row);
        }
      }
    };
    fill();
    NormParams p;
    p.dtype = t;
    p.weight_dtype = dt.weight_dtype;
    p.rows = 6;
    p.hidden = hidden;
    p.row_ndim = 2;
    p.row_sizes[0] = 2;
    p.row_sizes[1] = 3;
    p.input_strides[0] = p.residual_strides[0] = outer;
    p.input_strides[1] = p.residual_strides[1] = inner;
    p.out_strides[0] = 3 * hidden;
    p.out_strides[1] = hidden;
    p.input = x;
    p.out = y.data();
    p.residual = r;
    p.weight = w.data();
    p.eps = 1e-6;

    auto rms_ref = [&](const std::vector<double>& v, int64_t j, double ss) {
      return v[j] / std::sqrt(ss / hidden + p.eps) * Load(dt.weight_dtype, w.data(), j);
    };
    const double tol_rel = OutputRoundoff(t) + 2 * ComputeRel(hidden);
    ASSERT_EQ(rms_norm(p, 1, 6), Status::kOk);  // start mid-way, after row 0
    for (int64_t row = 0; row < 6; ++row) {
      std::vector<double> v(hidden);
      double ss = 0.0;
      for (int64_t j = 0; j < hidden; ++j) {
        v[j] = Load(t, x, offsets[row] + j);
        ss += v[j] * v[j];
      }
      for (int64_t j = 0; j < hidden; ++j) {
        const double got = Load(t, y.data(), row * hidden + j);
        if (row == 0) {
          ASSERT_EQ(got, 0.0) << "row 0 is outside the range";
          continue;
        }
        const double want = rms_ref(v, j, ss);
        ASSERT_NEAR(got, want, tol_rel * std::fabs(want)) << "row " << row << " col " << j;
      }
    }
    std::vector<std::vector<double>> sums(6, std::vector<double>(hidden));
    std::vector<double> sumsq(6, 0.0);
    for (int64_t row = 0; row < 6; ++row) {
      for (int64_t j = 0; j < hidden; ++j) {
        const float sum = static_cast<float>(Load(t, x, offsets[row] + j)) +
                          static_cast<float>(Load(t, r, offsets[row] + j));
        sums[row][j] = DecodeBits(t, EncodeBits(t, sum));
        sumsq[row] += sums[row][j] * sums[row][j];
      }
    }
    ASSERT_EQ(fused_add_rms_norm(p, 0, 6), Status::kOk);
    for (int64_t row = 0; row < 6; ++row) {
      for (int64_t j = 0; j < hidden; ++j) {
        ASSERT_EQ(Load(t, r, offsets[row] + j), sums[row][j])
            << "residual row " << row << " col " << j;
        const double want = rms_ref(sums[row], j, sumsq[row]);
        ASSERT_NEAR(Load(t, x, offsets[row] + j), want, tol_rel * std::fabs(want))
            << "row " << row << " col " << j;
      }
    }
  }
}

TEST(NormThreads, DisjointRangesConcurrently) {
  // Two threads on one 3-D tensor, split inside an inner dimension; must equal one call.
  const DType t = DType::kBFloat16;
  const int64_t hidden = 1000, sizes[2] = {5, 7}, inner = hidden + 3, outer = 7 * inner + 5;
  const int64_t rows = sizes[0] * sizes[1];
  std::vector<unsigned char> x(sizes[0] * outer * 2), y1(x.size(), 0), y2(x.size(), 0);
  std::vector<float> w(hidden, 1.25f);
  std::mt19937 rng(7);
  for (size_t i = 0; i < x.size() / 2; ++i) Store(t, x.data(), i, float(rng() % 2000) - 1000.0f);
  NormParams p;
  p.dtype = t;
  p.rows = rows;
  p.hidden = hidden;
  p.row_ndim = 2;
  p.row_sizes[0] = sizes[0];
  p.row_sizes[1] = sizes[1];
  p.input_strides[0] = p.out_strides[0] = outer;
  p.input_strides[1] = p.out_strides[1] = inner;
  p.input = x.data();
  p.weight = w.data();
  p.eps = 1e-5;
  p.out = y1.data();
  ASSERT_EQ(layer_norm(p, 0, rows), Status::kOk);
  p.out = y2.data();
  Status s1 = Status::invalid("not run"), s2 = Status::invalid("not run");
  std::thread a([&] { s1 = layer_norm(p, 0, 11); });
  std::thread b([&] { s2 = layer_norm(p, 11, rows); });
  a.join();
  b.join();
  EXPECT_EQ(s1, Status::kOk);
  EXPECT_EQ(s2, Status::kOk);
  EXPECT_TRUE(y1 == y2);
}

// ---------------------------------------------------------------- arguments

TEST(NormArguments, RejectsInvalidParams) {
  std::vector<float> x(64, 1.0f), y(64), r(64, 1.0f), w(16, 1.0f);
  NormParams good;
  good.rows = 4;
  good.hidden = 16;
  good.row_ndim = 1;
  good.row_sizes[0] = 4;
  good.input_strides[0] = good.out_strides[0] = good.residual_strides[0] = 16;
  good.input = x.data();
  good.out = y.data();
  good.residual = r.data();
  good.weight = w.data();
  good.eps = 1e-6;
  for (Kernel k : {Kernel::kRms, Kernel::kFused, Kernel::kLayerNorm}) {
    SCOPED_TRACE(Name(k));
    EXPECT_EQ(RunKernel(k, good, 0, 4), Status::kOk);
    EXPECT_EQ(RunKernel(k, good, 2, 2), Status::kOk);  // empty range
    NormParams empty = good;
    empty.rows = 0;
    empty.row_sizes[0] = 0;
    EXPECT_EQ(RunKernel(k, empty, 0, 0), Status::kOk);

    auto bad = [&](auto mutate, int64_t b = 0, int64_t e = 4) {
      NormParams p = good;
      mutate(p);
      return RunKernel(k, p, b, e);
    };
    EXPECT_EQ(bad([](NormParams& p) { p.hidden = 0; }), Status::kInvalidArgument);
    EXPECT_EQ(bad([](NormParams& p) { p.row_ndim = 0; }), Status::kInvalidArgument);
    EXPECT_EQ(bad([](NormParams& p) { p.row_ndim = kMaxRowDims + 1; }), Status::kInvalidArgument);
    EXPECT_EQ(bad([](NormParams& p) { p.input = nullptr; }), Status::kInvalidArgument);
    EXPECT_EQ(bad([](NormParams& p) { p.weight = nullptr; }), Status::kInvalidArgument);
    EXPECT_EQ(bad([](NormParams& p) { p.rows = 5; }), Status::kInvalidArgument);
    EXPECT_EQ(bad([](NormParams& p) { p.eps = -1.0; }), Status::kInvalidArgument);
    EXPECT_EQ(bad([](NormParams& p) { p.eps = NAN; }), Status::kInvalidArgument);
    EXPECT_EQ(bad([](NormParams& p) { p.dtype = static_cast<DType>(7); }),
              Status::kInvalidArgument);
    EXPECT_EQ(bad([](NormParams& p) {
                p.dtype = DType::kBFloat16;
                p.weight_dtype = DType::kFloat16;
              }),
              Status::kInvalidArgument);
    EXPECT_EQ(bad([](NormParams&) {}, -1, 2), Status::kInvalidArgument);
    EXPECT_EQ(bad([](NormParams&) {}, 0, 5), Status::kInvalidArgument);
    EXPECT_EQ(bad([](NormParams&) {}, 3, 2), Status::kInvalidArgument);
    if (k == Kernel::kFused) {
      EXPECT_EQ(bad([](NormParams& p) { p.residual = nullptr; }), Status::kInvalidArgument);
    } else {
      EXPECT_EQ(bad([](NormParams& p) { p.out = nullptr; }), Status::kInvalidArgument);
    }
  }
}

TEST(NormTarget, NamesASupportedTarget) {
  hwy::SetSupportedTargetsForTest(0);
  const std::string name = simd_target();
  bool found = false;
  for (int64_t rest = hwy::SupportedTargets(); rest != 0; rest &= rest - 1) {
    found |= name == hwy::TargetName(rest & -rest);
  }
  EXPECT_TRUE(found) << name;
  // The best supported target the library was built for comes first.
  ASSERT_FALSE(KernelTargets().empty());
  EXPECT_EQ(name, hwy::TargetName(KernelTargets().front()));
  std::string tested;
  for (int64_t target : KernelTargets()) tested += std::string(" ") + hwy::TargetName(target);
  std::printf("simd_target: %s; targets under test:%s\n", name.c_str(), tested.c_str());
}

}  // namespace
}  // namespace xllm_kernel::cpu
