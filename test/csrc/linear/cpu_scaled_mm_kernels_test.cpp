// scaled_mm's CPU kernels (csrc/cpu/linear/scaled_mm.h) against references built here from the
// canonical weights, on every Highway target and with the dot-product instructions (vpdpbusd on
// zmm or ymm, vdpbf16ps) on, off, and off in their AVX-512 forms only: the int schemes (w8a8-int8,
// w4a8) bit for bit against the contract's formula (int64 sums, then the float32 epilogue one
// operation at a time), w8a8-fp8 within a bound from the float32 sums' length; odd shapes, extreme
// values at the largest K, bias, every output type, panel ranges on threads, batch invariance, NaN,
// rejected arguments and reads that stay inside the packed sections and the input rows (guarded
// memory).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "csrc/cpu/common/cpu_features.h"
#include "csrc/cpu/linear/linear.h"
#include "csrc/cpu/linear/scaled_mm.h"
#include "test/csrc/common/cpu_test_support.h"

namespace xllm_kernel::cpu::test {
namespace {

using kernels::kPanel;
using kernels::LinearScheme;

// A canonical weight: q [n][k] (int8 values or e4m3 bytes), scales and zero points [n][groups].
struct Weights {
  LinearScheme scheme;
  int64_t n, k, group, groups;
  bool zeros;
  std::vector<int8_t> q;
  std::vector<float> scales, zero_pts;
};

// kFill: 0 random; otherwise every weight is kFill (extremes).
Weights MakeWeights(LinearScheme s, int64_t n, int64_t k, int64_t group, bool zeros, std::mt19937& rng, int fill = 0) {
  Weights w{s, n, k, group, kernels::ceil_div(k, group), zeros, {}, {}, {}};
  std::uniform_int_distribution<int> i8(-127, 127), i4(zeros ? 0 : -8, zeros ? 15 : 7), zp(0, 15), byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  w.q.resize(static_cast<size_t>(n * k));
  for (int8_t& v : w.q) {
    if (fill != 0) {
      v = static_cast<int8_t>(fill);
    } else if (s == LinearScheme::kW8A8Int8) {
      v = static_cast<int8_t>(i8(rng));
    } else if (s == LinearScheme::kW4A8) {
      v = static_cast<int8_t>(i4(rng));
    } else {
      int b = byte(rng);
      if ((b & 0x7F) == 0x7F) b ^= 1;  // no NaN weights here
      v = static_cast<int8_t>(b);
    }
  }
  for (int64_t i = 0; i < n * w.groups; ++i) w.scales.push_back(scale(rng));
  if (zeros) {
    for (int64_t i = 0; i < n * w.groups; ++i) w.zero_pts.push_back(static_cast<float>(zp(rng)));
  }
  return w;
}

// The packed sections, each ending at a guard page.
struct Packed {
  explicit Packed(const Weights& w)
      : sizes(kernels::linear_sizes(w.scheme, w.n, w.k, w.groups, w.zeros)),
        weights(static_cast<size_t>(sizes.weights_bytes)),
        scales(static_cast<size_t>(sizes.scales_bytes)),
        zeros(static_cast<size_t>(std::max<int64_t>(sizes.zeros_bytes, 4))),
        sums(static_cast<size_t>(std::max<int64_t>(sizes.sums_bytes, 4))) {
    weight_ptr = weights.tail(static_cast<size_t>(sizes.weights_bytes));
    scale_ptr = reinterpret_cast<float*>(scales.tail(static_cast<size_t>(sizes.scales_bytes)));
    zero_ptr = w.zeros ? zeros.tail(static_cast<size_t>(sizes.zeros_bytes)) : nullptr;
    sum_ptr = sizes.sums_bytes > 0 ? reinterpret_cast<int32_t*>(sums.tail(static_cast<size_t>(sizes.sums_bytes))) : nullptr;
    const ScaledMmPackSource src{.scheme = w.scheme,
                                 .n = w.n,
                                 .k = w.k,
                                 .group = w.group,
                                 .groups = w.groups,
                                 .weight = w.q.data(),
                                 .weight_stride = w.k,
                                 .scales = w.scales.data(),
                                 .zeros = w.zeros ? w.zero_pts.data() : nullptr};
    status = scaled_mm_pack(src, weight_ptr, scale_ptr, zero_ptr, sum_ptr);
  }
  kernels::LinearSizes sizes;
  GuardedRegion weights, scales, zeros, sums;
  char* weight_ptr;
  float* scale_ptr;
  char* zero_ptr;
  int32_t* sum_ptr;
  Status status;
};

// Activation rows of k bytes, `stride` apart, the last one ending at a guard page, with their
// scales (per token or one) and zero points (per token, one, or none).
struct Acts {
  Acts(LinearScheme s, int64_t m_, int64_t k_, std::mt19937& rng, int fill = 0)
      : m(m_), k(k_), stride(k_ + 3), region(static_cast<size_t>(std::max<int64_t>(1, Bytes()))) {
    a = reinterpret_cast<uint8_t*>(region.tail(static_cast<size_t>(Bytes())));
    std::uniform_int_distribution<int> byte(0, 255), zp(-128, 127);
    std::uniform_real_distribution<float> scale(0.001f, 0.1f);
    for (int64_t i = 0; i < Bytes(); ++i) {
      int b = fill != 0 ? fill & 0xFF : byte(rng);
      if (s == LinearScheme::kW8A8Fp8 && (b & 0x7F) == 0x7F) b ^= 1;  // no NaN inputs here
      a[i] = static_cast<uint8_t>(b);
    }
    for (int64_t r = 0; r < std::max<int64_t>(m, 1); ++r) {
      scale_a.push_back(scale(rng));
      azp.push_back(zp(rng));
    }
  }
  int64_t Bytes() const { return m > 0 ? (m - 1) * stride + k : 0; }
  const uint8_t* Row(int64_t r) const { return a + r * stride; }
  int64_t m, k, stride;
  GuardedRegion region;
  uint8_t* a;
  std::vector<float> scale_a;
  std::vector<int32_t> azp;
};

struct Options {
  DType out = DType::kFloat32;
  bool per_token = true;  // scale_a (and azp) per row, or one for all
  bool with_azp = false;
  const float* bias = nullptr;
};

ScaledMmParams Params(const Weights& w, const Packed& packed, const Acts& x, const Options& o, void* out) {
  ScaledMmParams p;
  p.scheme = w.scheme;
  p.out_dtype = o.out;
  p.m = x.m;
  p.n = w.n;
  p.k = w.k;
  p.group = w.group;
  p.groups = w.groups;
  p.a = x.a;
  p.a_stride = x.stride;
  p.scale_a = x.scale_a.data();
  p.scale_a_stride = o.per_token ? 1 : 0;
  p.azp = o.with_azp ? x.azp.data() : nullptr;
  p.azp_stride = o.per_token ? 1 : 0;
  p.out = out;
  p.out_stride = w.n;
  p.weights = packed.weight_ptr;
  p.scales = packed.scale_ptr;
  p.zeros = packed.zero_ptr;
  p.sums = packed.sum_ptr;
  p.bias = o.bias;
  return p;
}

// The contract's output bits for row r, channel nn of an int scheme: int64 sums, then the
// epilogue one float32 operation at a time (volatile: nothing fused).
uint32_t IntReferenceBits(const Weights& w, const Acts& x, const Options& o, int64_t r, int64_t nn) {
  const int64_t rr = o.per_token ? r : 0;
  const int64_t azp = o.with_azp ? x.azp[rr] : 0;
  const float sa = x.scale_a[rr];
  volatile float t = 0.0f;
  for (int64_t g = 0; g < w.groups; ++g) {
    const int64_t z = w.zeros ? static_cast<int64_t>(w.zero_pts[nn * w.groups + g]) : 0;
    int64_t acc = 0;
    for (int64_t kk = g * w.group; kk < std::min(w.k, (g + 1) * w.group); ++kk) {
      acc += (static_cast<int8_t>(x.Row(r)[kk]) - azp) * (w.q[nn * w.k + kk] - z);
    }
    EXPECT_LT(std::abs(acc), int64_t{1} << 31);
    volatile float prod = static_cast<float>(acc);
    prod = prod * sa;
    prod = prod * w.scales[nn * w.groups + g];
    t = g == 0 ? static_cast<float>(prod) : t + prod;
  }
  volatile float y = t;
  if (o.bias != nullptr) y = t + o.bias[nn];
  return EncodeBits(o.out, y);
}

// The scheme's rows against the reference: bit for bit (int schemes), or within the float32 sums'
// bound (fp8: every product exact, each group's sum of K_g terms off by at most (K_g - 1) * 2^-24
// of the sum of |products|, then three roundings per group and the bias', then the output's).
void ExpectMatches(const Weights& w, const Acts& x, const Options& o, const void* y, const std::string& what) {
  for (int64_t r = 0; r < x.m; ++r) {
    for (int64_t nn = 0; nn < w.n; ++nn) {
      const uint32_t got = LoadBits(o.out, y, r * w.n + nn);
      if (w.scheme != LinearScheme::kW8A8Fp8) {
        const uint32_t want = IntReferenceBits(w, x, o, r, nn);
        ASSERT_TRUE(SameValue(o.out, got, want))
            << what << " at (" << r << ", " << nn << "): got " << std::hex << got << " want " << want;
        continue;
      }
      const int64_t rr = o.per_token ? r : 0;
      double want = 0.0, tol = 0.0;
      for (int64_t g = 0; g < w.groups; ++g) {
        double acc = 0.0, mag = 0.0;
        const int64_t k0 = g * w.group, k1 = std::min(w.k, (g + 1) * w.group);
        for (int64_t kk = k0; kk < k1; ++kk) {
          const double prod = Fp8Value(x.Row(r)[kk]) * Fp8Value(static_cast<uint8_t>(w.q[nn * w.k + kk]));
          acc += prod;
          mag += std::abs(prod);
        }
        const double factor = static_cast<double>(x.scale_a[rr]) * w.scales[nn * w.groups + g];
        want += acc * factor;
        tol += ((k1 - k0) * 0x1p-24 * mag + 4 * 0x1p-24 * std::abs(acc)) * std::abs(factor);
      }
      if (o.bias != nullptr) {
        tol += 0x1p-24 * (std::abs(want) + std::abs(o.bias[nn]));
        want += o.bias[nn];
      }
      tol += Roundoff(o.out) * (std::abs(want) + tol) + SubnormalHalfSpacing(o.out);
      ASSERT_LE(std::abs(DecodeBits(o.out, got) - want), tol) << what << " at (" << r << ", " << nn << ")";
    }
  }
}

// The kernel tests below run on each CPU class (cpu_test_support.h, XLLM_AS_CPU_CLASS) scaled_mm
// has kernels for, as the driver picks them (scaled_mm-inl.h: ScaledMmKernel):
//   sse4              the scalar kernels (Highway's SSE4 target)
//   avx2              vpmaddubsw + vpmaddwd, float32 FMA (AVX2 target)
//   avx2_vnni         vpdpbusd on ymm (AVX2 target)
//   avx512            the AVX2 kernels under the AVX3 target's driver
//   avx512_avx_vnni   vpdpbusd on ymm under the AVX3 target's driver
//   avx512_vnni       vpdpbusd on zmm; fp8 on FMA
//   avx512_bf16       vpdpbusd on zmm; fp8 on vdpbf16ps
// A class this CPU lacks is skipped with what it lacks. scaled_mm has no AMX kernel of its own (its
// AMX paths are torch's brgemm: test/ops/linear/native_brgemm_test.cpp).
class CpuScaledMmClass : public ::testing::TestWithParam<std::string> {};

const std::vector<std::string> kScaledMmClasses = {"sse4",        "avx2",        "avx2_vnni", "avx512", "avx512_avx_vnni",
                                                   "avx512_vnni", "avx512_bf16"};

std::vector<uint8_t> RunScaledMm(const ScaledMmParams& p, int threads = 1) {
  std::vector<uint8_t> y(static_cast<size_t>(std::max<int64_t>(1, p.m * p.n * ElemSize(p.out_dtype))));
  ScaledMmParams q = p;
  q.out = y.data();
  const int64_t panels = linear_panels(p.n), mid = threads == 1 ? panels : panels / 2;
  Status s1, s2;
  std::thread t([&] { s2 = scaled_mm(q, mid, panels); });
  s1 = scaled_mm(q, 0, mid);
  t.join();
  EXPECT_TRUE(s1.is_ok()) << s1.reason;
  EXPECT_TRUE(s2.is_ok()) << s2.reason;
  return y;
}

std::string Describe(const Weights& w, int64_t m, const Options& o) {
  return std::string(kernels::scheme_name(w.scheme)) + " m=" + std::to_string(m) + " n=" + std::to_string(w.n) +
         " k=" + std::to_string(w.k) + " group=" + std::to_string(w.group) + (w.zeros ? " zeros" : "") +
         " out=" + ShortName(o.out) + (o.per_token ? " per-token" : " one-scale") + (o.with_azp ? " azp" : "") +
         (o.bias != nullptr ? " bias" : "");
}

// Every output type, bias or not, per-token or one scale (and azp for w8a8-int8), on one shape.
void CheckShape(const Weights& w, int64_t m, std::mt19937& rng, const std::string& path) {
  const Packed packed(w);
  ASSERT_TRUE(packed.status.is_ok()) << packed.status.reason;
  const Acts x(w.scheme, m, w.k, rng);
  std::vector<float> bias(static_cast<size_t>(w.n));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& b : bias) b = normal(rng);
  for (DType out : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (int variant = 0; variant < 4; ++variant) {
      Options o;
      o.out = out;
      o.bias = variant & 1 ? bias.data() : nullptr;
      o.per_token = (variant & 2) == 0;
      for (bool with_azp : {false, true}) {
        if (with_azp && w.scheme != LinearScheme::kW8A8Int8) continue;
        o.with_azp = with_azp;
        GuardedRegion yr(static_cast<size_t>(std::max<int64_t>(1, m * w.n * ElemSize(out))));
        void* y = yr.tail(static_cast<size_t>(m * w.n * ElemSize(out)));
        const Status s = scaled_mm(Params(w, packed, x, o, y), 0, linear_panels(w.n));
        ASSERT_TRUE(s.is_ok()) << s.reason;
        ExpectMatches(w, x, o, y, path + " " + Describe(w, m, o));
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST_P(CpuScaledMmClass, W8a8Int8MatchesTheContractBitForBit) {
  XLLM_AS_CPU_CLASS(GetParam());
  const std::string path = GetParam();
  std::mt19937 rng(7);
  const int64_t shapes[][3] = {{1, 37, 67}, {3, 64, 256}, {17, 33, 130}, {9, 100, 1023}, {2, 32, 1}, {8, 70, 4}};
  for (const auto& s : shapes) {
    CheckShape(MakeWeights(LinearScheme::kW8A8Int8, s[1], s[2], s[2], false, rng), s[0], rng, path);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST_P(CpuScaledMmClass, W4a8MatchesTheContractBitForBit) {
  XLLM_AS_CPU_CLASS(GetParam());
  const std::string path = GetParam();
  std::mt19937 rng(9);
  struct Shape {
    int64_t m, n, group, groups;
  };
  const Shape shapes[] = {{1, 37, 8, 5}, {3, 64, 32, 4}, {17, 33, 128, 3}, {5, 96, 128, 1}, {4, 40, 8, 1}, {6, 50, 32, 9}};
  for (const Shape& s : shapes) {
    for (bool zeros : {false, true}) {
      CheckShape(MakeWeights(LinearScheme::kW4A8, s.n, s.group * s.groups, s.group, zeros, rng), s.m, rng, path);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST_P(CpuScaledMmClass, W4a8AllowsAShorterLastGroup) {
  XLLM_AS_CPU_CLASS(GetParam());
  const std::string path = GetParam();
  std::mt19937 rng(13);
  CheckShape(MakeWeights(LinearScheme::kW4A8, 45, 136, 32, true, rng), 5, rng, path);  // groups 32 x 4 + 8
}

TEST_P(CpuScaledMmClass, W8a8Fp8MatchesTheFloat64Reference) {
  XLLM_AS_CPU_CLASS(GetParam());
  const std::string path = GetParam();
  std::mt19937 rng(11);
  const int64_t shapes[][4] = {{1, 37, 67, 67}, {3, 64, 256, 128}, {17, 33, 300, 128}, {6, 50, 130, 130}, {5, 40, 1, 1}};
  for (const auto& s : shapes) {
    CheckShape(MakeWeights(LinearScheme::kW8A8Fp8, s[1], s[2], s[3], false, rng), s[0], rng, path);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(CpuScaledMmKernel, MEqualToZeroWritesNothing) {
  std::mt19937 rng(1);
  for (LinearScheme s : {LinearScheme::kW8A8Int8, LinearScheme::kW4A8, LinearScheme::kW8A8Fp8}) {
    const Weights w = MakeWeights(s, 40, 64, s == LinearScheme::kW8A8Fp8 ? 64 : 32, false, rng);
    const Weights w1 = s == LinearScheme::kW8A8Int8 ? MakeWeights(s, 40, 64, 64, false, rng) : w;
    const Packed packed(w1);
    ASSERT_TRUE(packed.status.is_ok());
    const Acts x(s, 0, 64, rng);
    ScaledMmParams p = Params(w1, packed, x, Options{}, nullptr);
    p.a = nullptr;
    EXPECT_TRUE(scaled_mm(p, 0, linear_panels(40)).is_ok());
  }
}

// The largest K with every product at its extreme: the int32 sums (and the VNNI kernels' a + 128
// shifted ones) must not overflow.
TEST_P(CpuScaledMmClass, ExtremeValuesAtTheLargestKDoNotOverflow) {
  XLLM_AS_CPU_CLASS(GetParam());
  const std::string path = GetParam();
  std::mt19937 rng(17);
  const int64_t k = kernels::kScaledMmMaxK;
  for (int q : {127, -127}) {
    for (int a : {-128, 127}) {
      const Weights w = MakeWeights(LinearScheme::kW8A8Int8, 35, k, k, false, rng, q);
      const Packed packed(w);
      ASSERT_TRUE(packed.status.is_ok());
      Acts x(LinearScheme::kW8A8Int8, 3, k, rng, a);
      x.azp = {0, -128, a == 127 ? -128 : 127};  // (a - azp) up to 255 in magnitude
      for (bool with_azp : {false, true}) {
        Options o;
        o.with_azp = with_azp;
        std::vector<float> y(static_cast<size_t>(3 * w.n));
        ASSERT_TRUE(scaled_mm(Params(w, packed, x, o, y.data()), 0, linear_panels(w.n)).is_ok());
        ExpectMatches(w, x, o, y.data(), path + " " + Describe(w, 3, o) + " q=" + std::to_string(q) + " a=" + std::to_string(a));
      }
    }
  }
  // w4a8: |a| = 128 against the extreme nibbles, one group of the largest K that is a multiple of 8.
  const int64_t k8 = k / 8 * 8;
  for (int q : {-8, 7}) {
    const Weights w = MakeWeights(LinearScheme::kW4A8, 33, k8, k8, false, rng, q);
    const Packed packed(w);
    ASSERT_TRUE(packed.status.is_ok());
    const Acts x(LinearScheme::kW4A8, 2, k8, rng, -128);
    std::vector<float> y(static_cast<size_t>(2 * w.n));
    ASSERT_TRUE(scaled_mm(Params(w, packed, x, Options{}, y.data()), 0, linear_panels(w.n)).is_ok());
    ExpectMatches(w, x, Options{}, y.data(), path + " w4a8 extreme q=" + std::to_string(q));
  }
}

// A row's output bits alone equal its bits among M others at any position, on one panel range or
// split in two on two threads; fp8 included (its sums' order depends on K alone).
TEST_P(CpuScaledMmClass, ARowsBitsDoNotDependOnTheBatch) {
  XLLM_AS_CPU_CLASS(GetParam());
  const std::string path = GetParam();
  std::mt19937 rng(19);
  struct Config {
    LinearScheme scheme;
    int64_t k, group;
    bool zeros;
  };
  const Config configs[] = {{LinearScheme::kW8A8Int8, 390, 390, false},
                            {LinearScheme::kW4A8, 384, 32, true},
                            {LinearScheme::kW4A8, 384, 128, false},
                            {LinearScheme::kW8A8Fp8, 390, 390, false},
                            {LinearScheme::kW8A8Fp8, 384, 128, false}};
  const int64_t n = 100;
  for (const Config& c : configs) {
    const Weights w = MakeWeights(c.scheme, n, c.k, c.group, c.zeros, rng);
    const Packed packed(w);
    ASSERT_TRUE(packed.status.is_ok());
    std::vector<float> bias(static_cast<size_t>(n));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& b : bias) b = normal(rng);
    Options o;
    o.out = DType::kBFloat16;
    o.bias = bias.data();
    o.with_azp = c.scheme == LinearScheme::kW8A8Int8;
    const Acts alone(c.scheme, 1, c.k, rng);
    const std::vector<uint8_t> want = RunScaledMm(Params(w, packed, alone, o, nullptr));
    for (int64_t m : {2, 5, 17, 64}) {
      Acts x(c.scheme, m, c.k, rng);
      const int64_t at = (m * 5) / 7;
      std::memcpy(x.a + at * x.stride, alone.a, static_cast<size_t>(c.k));
      x.scale_a[at] = alone.scale_a[0];
      x.azp[at] = alone.azp[0];
      for (int threads : {1, 2}) {
        const std::vector<uint8_t> y = RunScaledMm(Params(w, packed, x, o, nullptr), threads);
        ASSERT_EQ(0, std::memcmp(&y[at * n * 2], want.data(), static_cast<size_t>(n) * 2))
            << path << " " << kernels::scheme_name(c.scheme) << " m=" << m << " threads=" << threads;
      }
    }
  }
}

// Long batches run in chunks of rows (scaled_mm-inl.h: about 2 MiB of prepared activations, at
// least 64 rows): rows on either side of a chunk's edge give the bits they give alone.
TEST_P(CpuScaledMmClass, ChunksOfRowsGiveTheRowsBitsAlone) {
  XLLM_AS_CPU_CLASS(GetParam());
  const std::string path = GetParam();
  std::mt19937 rng(41);
  const int64_t n = 40, m = 150;
  for (LinearScheme s : {LinearScheme::kW8A8Int8, LinearScheme::kW8A8Fp8}) {
    const int64_t k = s == LinearScheme::kW8A8Int8 ? 32768 + 3 : 8192 + 1;  // chunks of 64 rows (f32 rows for fp8)
    const Weights w = MakeWeights(s, n, k, k, false, rng);
    const Packed packed(w);
    ASSERT_TRUE(packed.status.is_ok());
    Options o;
    o.with_azp = s == LinearScheme::kW8A8Int8;
    const Acts x(s, m, k, rng);
    const std::vector<uint8_t> all = RunScaledMm(Params(w, packed, x, o, nullptr));
    for (int64_t r : {0, 63, 64, 127, 128, 149}) {
      Acts one(s, 1, k, rng);
      std::memcpy(one.a, x.Row(r), static_cast<size_t>(k));
      one.scale_a[0] = x.scale_a[r];
      one.azp[0] = x.azp[r];
      const std::vector<uint8_t> alone = RunScaledMm(Params(w, packed, one, o, nullptr));
      ASSERT_EQ(0, std::memcmp(&all[r * n * 4], alone.data(), static_cast<size_t>(n) * 4))
          << path << " " << kernels::scheme_name(s) << " row " << r;
    }
  }
}

// The scalar kernel and the AVX2 FMA kernel (under the AVX2 and the AVX3 target's drivers) sum fp8
// products in the same order (k = 0, 1, ...).
TEST(CpuScaledMmKernel, Fp8ScalarAndAvx2KernelsGiveTheSameBits) {
  std::mt19937 rng(23);
  const Weights w = MakeWeights(LinearScheme::kW8A8Fp8, 70, 4096 + 6, 128, false, rng);
  const Packed packed(w);
  ASSERT_TRUE(packed.status.is_ok());
  const Acts x(LinearScheme::kW8A8Fp8, 5, w.k, rng);
  std::vector<std::vector<uint8_t>> outs;
  std::vector<std::string> ran;
  for (const char* cls : {"sse4", "avx2", "avx512"}) {
    const CpuClassScope scope(cls);
    if (!scope.missing().empty()) continue;
    outs.push_back(RunScaledMm(Params(w, packed, x, Options{}, nullptr)));
    ran.push_back(cls);
  }
  if (ran.size() < 2) GTEST_SKIP() << "fewer than two of the classes sse4, avx2, avx512 run here: nothing to compare";
  for (size_t i = 1; i < outs.size(); ++i) EXPECT_EQ(outs[0], outs[i]) << ran[i];
}

TEST_P(CpuScaledMmClass, NanPropagates) {
  XLLM_AS_CPU_CLASS(GetParam());
  const std::string path = GetParam();
  std::mt19937 rng(29);
  for (LinearScheme s : {LinearScheme::kW8A8Int8, LinearScheme::kW4A8, LinearScheme::kW8A8Fp8}) {
    Weights w = MakeWeights(s, 40, 64, s == LinearScheme::kW4A8 ? 32 : 64, false, rng);
    w.scales[1 * w.groups] = NAN;  // channel 1, group 0
    const Packed packed(w);
    ASSERT_TRUE(packed.status.is_ok());
    Acts x(s, 3, 64, rng);
    x.scale_a[2] = NAN;  // row 2
    if (s == LinearScheme::kW8A8Fp8) x.a[0 * x.stride + 5] = 0x7F;  // row 0: a NaN input
    std::vector<float> y(static_cast<size_t>(3 * 40));
    ASSERT_TRUE(scaled_mm(Params(w, packed, x, Options{}, y.data()), 0, 2).is_ok());
    for (int64_t r = 0; r < 3; ++r) {
      for (int64_t nn = 0; nn < 40; ++nn) {
        const bool nan = nn == 1 || r == 2 || (s == LinearScheme::kW8A8Fp8 && r == 0);
        EXPECT_EQ(nan, std::isnan(y[r * 40 + nn])) << path << " " << kernels::scheme_name(s) << " (" << r << ", " << nn << ")";
      }
    }
  }
}

// The int8 kernel each CPU class selects, and the Highway target it runs under.
TEST_P(CpuScaledMmClass, IsaNamesThePath) {
  XLLM_AS_CPU_CLASS(GetParam());
  const std::map<std::string, std::pair<std::string, std::string>> want = {
      {"sse4", {"scalar", "SSE4"}},         {"avx2", {"avx2", "AVX2"}},
      {"avx2_vnni", {"avx-vnni", "AVX2"}},  {"avx512", {"avx2", "AVX3"}},
      {"avx512_avx_vnni", {"avx-vnni", "AVX3"}}, {"avx512_vnni", {"avx512-vnni", "AVX3"}},
      {"avx512_bf16", {"avx512-vnni", "AVX3"}}};
  EXPECT_EQ(std::string(scaled_mm_isa()), want.at(GetParam()).first);
  EXPECT_EQ(std::string(simd_target()), want.at(GetParam()).second);
}

INSTANTIATE_TEST_SUITE_P(Cpu, CpuScaledMmClass, CpuClasses(kScaledMmClasses), CpuClassTestName);

TEST(CpuScaledMmKernel, PackRejectsValuesOutsideTheirRange) {
  std::mt19937 rng(31);
  Weights w = MakeWeights(LinearScheme::kW8A8Int8, 8, 32, 32, false, rng);
  w.q[3] = -128;
  EXPECT_FALSE(Packed(w).status.is_ok());
  Weights s4 = MakeWeights(LinearScheme::kW4A8, 8, 32, 32, false, rng);
  s4.q[3] = 8;
  EXPECT_FALSE(Packed(s4).status.is_ok());
  Weights z4 = MakeWeights(LinearScheme::kW4A8, 8, 32, 32, true, rng);
  z4.q[5] = -1;
  EXPECT_FALSE(Packed(z4).status.is_ok());
  Weights zz = MakeWeights(LinearScheme::kW4A8, 8, 32, 32, true, rng);
  zz.zero_pts[2] = 16.0f;
  EXPECT_FALSE(Packed(zz).status.is_ok());
  zz.zero_pts[2] = 2.5f;
  EXPECT_FALSE(Packed(zz).status.is_ok());
}

TEST(CpuScaledMmKernel, RejectsBadParameters) {
  std::mt19937 rng(37);
  const Weights w = MakeWeights(LinearScheme::kW8A8Int8, 40, 64, 64, false, rng);
  const Packed packed(w);
  const Acts x(w.scheme, 2, 64, rng);
  std::vector<float> y(80);
  const ScaledMmParams good = Params(w, packed, x, Options{}, y.data());
  EXPECT_TRUE(scaled_mm(good, 0, 2).is_ok());
  ScaledMmParams p = good;
  EXPECT_FALSE(scaled_mm(p, 0, 3).is_ok());  // 2 panels
  p.scheme = LinearScheme::kInt8;
  EXPECT_FALSE(scaled_mm(p, 0, 2).is_ok());
  p = good;
  p.k = kernels::kScaledMmMaxK + 1;
  p.group = p.k;
  EXPECT_FALSE(scaled_mm(p, 0, 2).is_ok());
  p = good;
  p.group = 32;
  p.groups = 2;  // w8a8-int8 is per channel
  EXPECT_FALSE(scaled_mm(p, 0, 2).is_ok());
  p = good;
  p.sums = nullptr;
  EXPECT_FALSE(scaled_mm(p, 0, 2).is_ok());
  p = good;
  p.scheme = LinearScheme::kW4A8;
  p.k = 60;  // not a multiple of 8
  p.group = 60;
  EXPECT_FALSE(scaled_mm(p, 0, 2).is_ok());
  p = good;
  p.a_stride = 10;
  EXPECT_FALSE(scaled_mm(p, 0, 2).is_ok());
}

}  // namespace
}  // namespace xllm_kernel::cpu::test
