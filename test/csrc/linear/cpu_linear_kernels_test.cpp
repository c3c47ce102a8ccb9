// The linear family's CPU kernels (csrc/cpu/linear/) against a float64 reference built here from
// the canonical weights, on every Highway target: every scheme, odd shapes, bias, strided rows,
// batch invariance (a row's bits alone and among others, at any position, on any panel split) and
// reads that stay inside the packed panels and the input rows (guarded memory); bf16 rows against
// bf16 weights (the vdpbf16ps kernel where the CPU has AVX512_BF16) bit for bit against the
// instruction's chain emulated here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
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

using kernels::LinearScheme;
using kernels::kPanel;

struct Weights {
  LinearScheme scheme;
  int64_t n, k, group, groups;
  bool zeros;
  std::vector<uint8_t> raw;     // canonical [n][k] elements (f32/bf16/f16 bits, int8 values, fp8 bytes)
  std::vector<float> scales;    // [n][groups]
  std::vector<float> zero_pts;  // [n][groups]
  std::vector<float> w;         // the contract's W in float32, [n][k]
};

int64_t ElemBytes(LinearScheme s) { return s == LinearScheme::kInt4 ? 1 : kernels::scheme_bits(s) / 8; }

Weights MakeWeights(LinearScheme s, int64_t n, int64_t k, int64_t group, bool zeros, std::mt19937& rng) {
  Weights w{s, n, k, group, kernels::scheme_has_scales(s) ? kernels::ceil_div(k, group) : 1, zeros, {}, {}, {}, {}};
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255), i4(zeros ? 0 : -8, zeros ? 15 : 7), zp(0, 15);
  w.raw.resize(static_cast<size_t>(n * k * ElemBytes(s)));
  w.w.resize(static_cast<size_t>(n * k));
  if (kernels::scheme_has_scales(s)) {
    for (int64_t i = 0; i < n * w.groups; ++i) w.scales.push_back(0.01f + 0.02f * std::abs(normal(rng)));
    if (zeros) {
      for (int64_t i = 0; i < n * w.groups; ++i) w.zero_pts.push_back(static_cast<float>(zp(rng)));
    }
  }
  for (int64_t nn = 0; nn < n; ++nn) {
    for (int64_t kk = 0; kk < k; ++kk) {
      const int64_t i = nn * k + kk;
      const int64_t g = kernels::scheme_has_scales(s) ? kk / group : 0;
      float value = 0;
      switch (s) {
        case LinearScheme::kFloat32: {
          value = normal(rng);
          std::memcpy(&w.raw[i * 4], &value, 4);
          break;
        }
        case LinearScheme::kBFloat16:
        case LinearScheme::kFloat16: {
          const DType t = s == LinearScheme::kBFloat16 ? DType::kBFloat16 : DType::kFloat16;
          const uint32_t bits = EncodeBits(t, normal(rng));
          const uint16_t b16 = static_cast<uint16_t>(bits);
          std::memcpy(&w.raw[i * 2], &b16, 2);
          value = DecodeBits(t, bits);
          break;
        }
        case LinearScheme::kInt8: {
          const int8_t q = static_cast<int8_t>(byte(rng) - 128);
          w.raw[i] = static_cast<uint8_t>(q);
          value = static_cast<float>(q) * w.scales[nn * w.groups + g];
          break;
        }
        case LinearScheme::kFp8: {
          uint8_t b = static_cast<uint8_t>(byte(rng));
          if ((b & 0x7F) == 0x7F) b ^= 1;  // no NaN weights here
          w.raw[i] = b;
          value = static_cast<float>(Fp8Value(b)) * w.scales[nn * w.groups + g];
          break;
        }
        case LinearScheme::kInt4: {
          const int8_t q = static_cast<int8_t>(i4(rng));
          w.raw[i] = static_cast<uint8_t>(q);
          const float z = zeros ? w.zero_pts[nn * w.groups + g] : 0.0f;
          value = (static_cast<float>(q) - z) * w.scales[nn * w.groups + g];
          break;
        }
      }
      w.w[i] = value;
    }
  }
  return w;
}

// The packed panels, each section at the end of its own guarded region.
struct Packed {
  explicit Packed(const Weights& w)
      : sizes(kernels::linear_sizes(w.scheme, w.n, w.k, w.groups, w.zeros)),
        weights(static_cast<size_t>(linear_panels(w.n) * w.k * kPanel * kernels::scheme_bits(w.scheme) / 8)),
        scales(static_cast<size_t>(std::max<int64_t>(1, linear_panels(w.n) * w.groups * kPanel) * 4)),
        zeros(static_cast<size_t>(std::max<int64_t>(1, linear_panels(w.n) * w.groups * kPanel) * 4)) {
    const size_t weight_bytes = static_cast<size_t>(linear_panels(w.n) * w.k * kPanel * kernels::scheme_bits(w.scheme) / 8);
    const size_t scale_floats = static_cast<size_t>(linear_panels(w.n) * w.groups * kPanel);
    weight_ptr = weights.tail(weight_bytes);
    scale_ptr = reinterpret_cast<float*>(scales.tail(scale_floats * 4));
    zero_ptr = reinterpret_cast<float*>(zeros.tail(scale_floats * 4));
    const LinearPackSource src{.scheme = w.scheme,
                               .n = w.n,
                               .k = w.k,
                               .group = w.group,
                               .groups = w.groups,
                               .weight = w.raw.data(),
                               .weight_stride = w.k,
                               .scales = w.scales.empty() ? nullptr : w.scales.data(),
                               .zeros = w.zeros ? w.zero_pts.data() : nullptr};
    status = linear_pack_panels(src, weight_ptr, scale_ptr, zero_ptr);
    EXPECT_LE(static_cast<int64_t>(weight_bytes), sizes.weights_bytes);
  }
  kernels::LinearSizes sizes;
  GuardedRegion weights, scales, zeros;
  char* weight_ptr;
  float* scale_ptr;
  float* zero_ptr;
  Status status;
};

LinearParams Params(const Weights& w, const Packed& packed, DType out, int64_t m, const float* x, int64_t x_stride,
                    void* y, const float* bias) {
  LinearParams p;
  p.scheme = w.scheme;
  p.layout = linear_panel_layout(w.scheme, w.k);
  p.out_dtype = out;
  p.m = m;
  p.n = w.n;
  p.k = w.k;
  p.group = kernels::scheme_has_scales(w.scheme) ? w.group : 0;
  p.groups = kernels::scheme_has_scales(w.scheme) ? w.groups : 0;
  p.x = x;
  p.x_stride = x_stride;
  p.out = y;
  p.out_stride = w.n;
  p.weights = packed.weight_ptr;
  p.scales = kernels::scheme_has_scales(w.scheme) ? packed.scale_ptr : nullptr;
  p.zeros = w.zeros ? packed.zero_ptr : nullptr;
  p.bias = bias;
  return p;
}

struct Config {
  LinearScheme scheme;
  int64_t group;  // 0: K (one group)
  bool zeros;
};

std::string Name(const Config& c) {
  return std::string(kernels::scheme_name(c.scheme)) + (c.group > 0 ? "/g" + std::to_string(c.group) : "") +
         (c.zeros ? "/zeros" : "");
}

const std::vector<Config>& Configs() {
  static const std::vector<Config> configs = {
      {LinearScheme::kFloat32, 0, false}, {LinearScheme::kBFloat16, 0, false}, {LinearScheme::kFloat16, 0, false},
      {LinearScheme::kInt8, 0, false},    {LinearScheme::kFp8, 0, false},      {LinearScheme::kFp8, 128, false},
      {LinearScheme::kInt4, 32, false},   {LinearScheme::kInt4, 64, true},     {LinearScheme::kInt4, 0, false},
      {LinearScheme::kInt4, 0, true}};
  return configs;
}

TEST(CpuLinearKernel, MatchesTheFloat64ReferenceOnEveryScheme) {
  std::mt19937 rng(7);
  const int64_t shapes[][3] = {{1, 37, 67}, {3, 96, 256}, {9, 33, 300}, {20, 70, 513}};  // m, n, k
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (const Config& c : Configs()) {
      for (const auto& shape : shapes) {
        const int64_t m = shape[0], n = shape[1], k = shape[2];
        const int64_t group = c.group > 0 && c.group < k ? c.group : k;
        const Weights w = MakeWeights(c.scheme, n, k, group, c.zeros, rng);
        const Packed packed(w);
        ASSERT_TRUE(packed.status.is_ok()) << packed.status.reason;
        // x rows of k + 5 (strided), the last row ending at a guard page.
        const int64_t stride = k + 5;
        GuardedRegion xr(static_cast<size_t>(((m - 1) * stride + k) * 4));
        float* x = reinterpret_cast<float*>(xr.tail(static_cast<size_t>(((m - 1) * stride + k) * 4)));
        std::normal_distribution<float> normal(0.0f, 1.0f);
        for (int64_t i = 0; i < (m - 1) * stride + k; ++i) x[i] = normal(rng);
        std::vector<float> bias(static_cast<size_t>(n));
        for (float& b : bias) b = normal(rng);
        for (DType out : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
          for (bool with_bias : {false, true}) {
            GuardedRegion yr(static_cast<size_t>(m * n * ElemSize(out)));
            void* y = yr.tail(static_cast<size_t>(m * n * ElemSize(out)));
            const LinearParams p = Params(w, packed, out, m, x, stride, y, with_bias ? bias.data() : nullptr);
            const Status s = linear(p, 0, linear_panels(n));
            ASSERT_TRUE(s.is_ok()) << s.reason;
            for (int64_t r = 0; r < m; ++r) {
              for (int64_t nn = 0; nn < n; ++nn) {
                double want = with_bias ? bias[nn] : 0.0, mag = with_bias ? std::abs(bias[nn]) : 0.0;
                for (int64_t kk = 0; kk < k; ++kk) {
                  const double prod = static_cast<double>(x[r * stride + kk]) * w.w[nn * k + kk];
                  want += prod;
                  mag += std::abs(prod);
                }
                const double got = Load(out, y, r * n + nn);
                const double tol = (k + 2) * 0x1p-24 * mag + Roundoff(out) * std::abs(want) + SubnormalHalfSpacing(out);
                ASSERT_LE(std::abs(got - want), tol)
                    << hwy::TargetName(target) << " " << Name(c) << " m=" << m << " n=" << n << " k=" << k
                    << " out=" << ShortName(out) << " bias=" << with_bias << " at (" << r << ", " << nn << ")";
              }
            }
          }
        }
      }
    }
  }
}

// A row's output bits alone equal its bits among M others at any position, on one panel range
// or split in two on two threads.
TEST(CpuLinearKernel, ARowsBitsDoNotDependOnTheBatch) {
  std::mt19937 rng(11);
  const int64_t n = 100, k = 384;
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (const Config& c : Configs()) {
      const Weights w = MakeWeights(c.scheme, n, k, c.group > 0 ? c.group : k, c.zeros, rng);
      const Packed packed(w);
      ASSERT_TRUE(packed.status.is_ok());
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> bias(static_cast<size_t>(n));
      for (float& b : bias) b = normal(rng);
      std::vector<float> row(static_cast<size_t>(k));
      for (float& v : row) v = normal(rng);
      std::vector<uint16_t> alone(static_cast<size_t>(n));
      ASSERT_TRUE(linear(Params(w, packed, DType::kBFloat16, 1, row.data(), k, alone.data(), bias.data()), 0,
                         linear_panels(n))
                      .is_ok());
      for (int64_t m : {2, 7, 16, 64, 512}) {
        std::vector<float> x(static_cast<size_t>(m * k));
        for (float& v : x) v = normal(rng);
        const int64_t at = (m * 5) / 7;  // somewhere inside
        std::memcpy(&x[at * k], row.data(), static_cast<size_t>(k) * 4);
        for (int threads : {1, 2}) {
          std::vector<uint16_t> y(static_cast<size_t>(m * n));
          const LinearParams p = Params(w, packed, DType::kBFloat16, m, x.data(), k, y.data(), bias.data());
          const int64_t panels = linear_panels(n), mid = threads == 1 ? panels : panels / 2;
          Status s1, s2;
          std::thread t([&] { s2 = linear(p, mid, panels); });
          s1 = linear(p, 0, mid);
          t.join();
          ASSERT_TRUE(s1.is_ok() && s2.is_ok());
          ASSERT_EQ(0, std::memcmp(&y[at * n], alone.data(), static_cast<size_t>(n) * 2))
              << hwy::TargetName(target) << " " << Name(c) << " m=" << m << " threads=" << threads;
        }
      }
    }
  }
}

// bf16 rows (given as bits and widened to float32 for the chain) against bf16 weights.
struct Bf16Rows {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};

Bf16Rows MakeBf16Rows(int64_t elements, std::mt19937& rng) {
  Bf16Rows x;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < elements; ++i) {
    const uint32_t bits = EncodeBits(DType::kBFloat16, normal(rng));
    x.bits.push_back(static_cast<uint16_t>(bits));
    x.values.push_back(DecodeBits(DType::kBFloat16, bits));
  }
  return x;
}

float Bf16Value(const std::vector<uint8_t>& raw, int64_t i) {
  uint16_t b;
  std::memcpy(&b, &raw[i * 2], 2);
  return DecodeBits(DType::kBFloat16, b);
}

// vdpbf16ps's chain for one output, in float32: acc = (acc + x[k + 1] W[k + 1]) + x[k] W[k] for k =
// 0, 2, ... (normal inputs and sums here: no DAZ or FTZ to apply; the products are exact).
float Bf16DotChain(const float* x, const Weights& w, int64_t n) {
  volatile float acc = 0.0f;  // one rounding per step, whatever the compiler contracts
  for (int64_t k = 0; k < w.k; k += 2) {
    acc = acc + x[k + 1] * Bf16Value(w.raw, n * w.k + k + 1);
    acc = acc + x[k] * Bf16Value(w.raw, n * w.k + k);
  }
  return acc;
}

// bf16 rows with bf16 weights: where the kernel reads the rows as bf16 (the AVX-512 target on a CPU
// with AVX512_BF16), its float32 sums equal the vdpbf16ps chain bit for bit; elsewhere (odd K, other
// targets, dot products off) the float32 chain of the other schemes. Both within the reference's
// tolerance, each row's bits the same alone and among others, on one or two panel ranges; on each CPU
// class with a path of its own (the SSE4 and AVX2 targets, AVX-512 without and with AVX512_BF16).
class CpuLinearClass : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuLinearClass, Bf16RowsRunTheBf16DotChainWhereTheCpuHasIt) {
  XLLM_AS_CPU_CLASS(GetParam());
  const std::string cls = GetParam();
  std::mt19937 rng(17);
  // m, n, k (67: odd; 8200: above 8192, the chain resumed across the driver's blocks of 256 pairs)
  const int64_t shapes[][3] = {{1, 37, 66}, {9, 70, 512}, {20, 33, 130}, {3, 40, 67}, {11, 40, 8200}};
  for (const auto& shape : shapes) {
    const int64_t m = shape[0], n = shape[1], k = shape[2];
    const Weights w = MakeWeights(LinearScheme::kBFloat16, n, k, k, false, rng);
    const Packed packed(w);
    ASSERT_TRUE(packed.status.is_ok()) << packed.status.reason;
    const Bf16Rows x = MakeBf16Rows(m * k, rng);
    std::vector<float> y(static_cast<size_t>(m * n)), alone(static_cast<size_t>(n));
    LinearParams p = Params(w, packed, DType::kFloat32, m, x.values.data(), k, y.data(), nullptr);
    p.x_bf16 = x.bits.data();
    p.x_bf16_stride = k;
    const bool reads = linear_reads_bf16_rows(p);
    const bool expect = k % 2 == 0 && cls == "avx512_bf16";
    ASSERT_EQ(reads, expect) << cls << " k=" << k;
    if (reads) p.x = nullptr;  // the kernel must not need the float32 rows
    const int64_t panels = linear_panels(n);
    Status s2;
    std::thread t([&] { s2 = linear(p, panels / 2, panels); });
    const Status s1 = linear(p, 0, panels / 2);
    t.join();
    ASSERT_TRUE(s1.is_ok() && s2.is_ok()) << s1.reason << " " << s2.reason;
    for (int64_t r = 0; r < m; ++r) {
      LinearParams one = p;
      one.m = 1;
      one.x = reads ? nullptr : x.values.data() + r * k;
      one.x_bf16 = x.bits.data() + r * k;
      one.out = alone.data();
      ASSERT_TRUE(linear(one, 0, panels).is_ok());
      ASSERT_EQ(0, std::memcmp(alone.data(), &y[r * n], static_cast<size_t>(n) * 4))
          << cls << " m=" << m << " k=" << k << " row " << r;
      for (int64_t nn = 0; nn < n; ++nn) {
        double want = 0, mag = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const double prod = static_cast<double>(x.values[r * k + kk]) * w.w[nn * k + kk];
          want += prod;
          mag += std::abs(prod);
        }
        const float got = y[r * n + nn];
        ASSERT_LE(std::abs(got - want), (k + 2) * 0x1p-24 * mag) << cls << " k=" << k;
        if (reads) {
          ASSERT_EQ(got, Bf16DotChain(&x.values[r * k], w, nn))
              << cls << " m=" << m << " k=" << k << " at (" << r << ", " << nn << ")";
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, CpuLinearClass, CpuClasses({"sse4", "avx2", "avx512", "avx512_bf16"}), CpuClassTestName);

TEST(CpuLinearKernel, NonFiniteScalesPropagate) {
  std::mt19937 rng(3);
  Weights w = MakeWeights(LinearScheme::kInt8, 40, 64, 64, false, rng);
  w.scales[1] = NAN;
  w.scales[2] = INFINITY;
  const Packed packed(w);
  std::vector<float> x(64, 1.0f), y(40);
  ASSERT_TRUE(linear(Params(w, packed, DType::kFloat32, 1, x.data(), 64, y.data(), nullptr), 0, 2).is_ok());
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_TRUE(std::isinf(y[2]) || std::isnan(y[2]));  // +-inf products, NaN where they meet
  EXPECT_TRUE(std::isfinite(y[0]) && std::isfinite(y[3]));
}

TEST(CpuLinearKernel, RejectsInt4ValuesOutsideTheirRange) {
  std::mt19937 rng(5);
  Weights w = MakeWeights(LinearScheme::kInt4, 8, 32, 32, false, rng);
  w.raw[3] = static_cast<uint8_t>(int8_t{8});  // symmetric int4 is [-8, 7]
  const Packed packed(w);
  EXPECT_FALSE(packed.status.is_ok());
  Weights z = MakeWeights(LinearScheme::kInt4, 8, 32, 32, true, rng);
  z.raw[5] = static_cast<uint8_t>(int8_t{-1});  // with zeros [0, 15]
  const Packed packed_z(z);
  EXPECT_FALSE(packed_z.status.is_ok());
}

TEST(CpuLinearKernel, RejectsBadParameters) {
  LinearParams p;
  p.m = 1;
  p.n = 0;
  p.k = 4;
  EXPECT_FALSE(linear(p, 0, 0).is_ok());
  p.n = 40;
  EXPECT_FALSE(linear(p, 0, 3).is_ok());  // 2 panels
  p.scheme = LinearScheme::kInt8;
  p.group = 0;
  EXPECT_FALSE(linear(p, 0, 1).is_ok());  // a scaled scheme needs its groups
  p.scheme = LinearScheme::kBFloat16;
  p.layout = kernels::LinearLayout::kPanels;  // bf16 with K even is packed in pairs
  EXPECT_FALSE(linear(p, 0, 1).is_ok());
}

}  // namespace
}  // namespace xllm_kernel::cpu::test
