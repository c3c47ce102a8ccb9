// Torch-free host tests of csrc/cuda/linear/scaled_mm: every block of the grid that plan_scaled_mm
// picks runs on the CPU (kernels::scaled_mm_tile with a team that runs each step for every lane in
// turn: the device's own loads, dp4a dot products, group flushes and epilogue), against
//   - the contract's formula written here for the int8 schemes (w8a8-int8 with and without azp,
//     w4a8 symmetric and with zeros): acc per group in int64, then the float32 epilogue one IEEE
//     operation at a time in the contract's order: the same bits (what cpu.torch.scaled_mm and
//     cpu.native.scaled_mm give; test/ops/linear/scaled_mm_test.cpp checks them against the same
//     formula, and test/cuda/linear/scaled_mm_cuda_test.cpp compares the GPU to cpu.torch);
//   - w8a8-fp8: a float64 reference within the float32 accumulation's bound, and bit for bit the
//     documented order (-0 + p_0 + p_1 + ... per group in increasing k);
// over M, N and K tails, K not a multiple of 4, groups of 8 to K, per-token and per-tensor scales,
// strided rows, the K bound's extremes and every out dtype. Plus the plan and the launcher's
// rejections. The device-only parts (__dp4a, the barrier, the grid) run on a GPU in
// test/cuda/linear/scaled_mm_cuda_test.cpp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "csrc/common/linear.h"
#include "csrc/common/quantization.h"
#include "csrc/cuda/linear/scaled_mm.cuh"
#include "csrc/cuda/linear/scaled_mm.h"
#include "test/cuda/element_codec.h"
#include "test/cuda/launcher_status.h"

namespace xllm_kernel::cuda {
namespace {

namespace hk = ::xllm_kernel::kernels;

// A block on the host: each step runs for every lane in turn, each lane with its own state (the
// barrier is the end of a step).
template <LinearScheme kScheme>
struct HostTeam {
  std::vector<kernels::ScaledMmThread<kScheme>> st{static_cast<size_t>(kScaledMmThreads)};
  template <class F>
  void each(F&& f) {
    for (int l = 0; l < kScaledMmThreads; ++l) f(l, st[l]);
  }
  void sync() {}
};

// Runs every block of plan_scaled_mm(p) on the host, as the launcher launches them.
void run_host(const ScaledMmParams& p) {
  ASSERT_TRUE(accepted(check_scaled_mm(p)));
  const ScaledMmPlan plan = plan_scaled_mm(p);
  auto shared = std::make_unique<kernels::ScaledMmShared>();
  const bool ran = kernels::dispatch_scaled_mm(p, false, [&](auto scheme, auto out) {
    using T = typename decltype(out)::type;
    constexpr LinearScheme kScheme = decltype(scheme)::value;
    for (int64_t by = 0; by < plan.grid_y; ++by) {
      for (int64_t bx = 0; bx < plan.grid_x; ++bx) {
        HostTeam<kScheme> team;
        for (int64_t rt = by; rt < plan.row_tiles; rt += plan.grid_y) {
          kernels::scaled_mm_tile<kScheme, T>(p, rt, bx, *shared, team);
        }
      }
    }
    return true;
  });
  EXPECT_TRUE(ran);
}

// A weight in the kRows sections, and its canonical values.
struct Packed {
  LinearScheme scheme;
  int64_t n = 0, k = 0, group = 0, groups = 0;
  std::vector<int32_t> q;        // [n][k]: int8 values (w8a8-int8), q (w4a8: [-8, 7] or [0, 15])
  std::vector<uint8_t> fp8;      // [n][k] e4m3 bytes (w8a8-fp8)
  std::vector<float> zeros;      // [n][groups] (w4a8 with zeros)
  std::vector<float> scales;     // [n][groups]
  std::vector<uint8_t> weights;  // the weights section
  std::vector<int32_t> sums;     // [n][groups] sum q
};

Packed make_weight(LinearScheme scheme, int64_t n, int64_t k, int64_t group, bool zeros, std::mt19937& rng,
                   int32_t fixed_q = 1000) {
  Packed w;
  w.scheme = scheme;
  w.n = n;
  w.k = k;
  w.group = group;
  w.groups = hk::ceil_div(k, group);
  std::uniform_real_distribution<float> scale(0.004f, 0.024f);
  for (int64_t i = 0; i < n * w.groups; ++i) w.scales.push_back(scale(rng));
  if (scheme == LinearScheme::kW8A8Fp8) {
    std::normal_distribution<float> normal(0.0f, 8.0f);
    for (int64_t i = 0; i < n * k; ++i) w.fp8.push_back(hk::float8_e4m3fn_from_float(normal(rng)));
    w.weights = w.fp8;
    return w;
  }
  const int lo = scheme == LinearScheme::kW8A8Int8 ? -127 : zeros ? 0 : -8;
  const int hi = scheme == LinearScheme::kW8A8Int8 ? 127 : zeros ? 15 : 7;
  std::uniform_int_distribution<int> value(lo, hi), zero(0, 15);
  for (int64_t i = 0; i < n * k; ++i) w.q.push_back(fixed_q != 1000 ? fixed_q : value(rng));
  if (zeros) {
    for (int64_t i = 0; i < n * w.groups; ++i) w.zeros.push_back(static_cast<float>(zero(rng)));
  }
  w.sums.assign(n * w.groups, 0);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) w.sums[r * w.groups + c / group] += w.q[r * k + c];
  }
  if (scheme == LinearScheme::kW8A8Int8) {
    for (int32_t v : w.q) w.weights.push_back(static_cast<uint8_t>(static_cast<int8_t>(v)));
  } else {  // two k per byte, low nibble first, q + 8 without zeros
    const int64_t row = hk::ceil_div(k, 2);
    w.weights.assign(n * row, 0);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        const auto u = static_cast<uint8_t>(w.q[r * k + c] + (zeros ? 0 : 8));
        w.weights[r * row + c / 2] |= static_cast<uint8_t>(c % 2 == 0 ? u : u << 4);
      }
    }
  }
  return w;
}

// The weight's integer value at [n, k]: q - z (z: the zeros, or 0 for w8a8-int8 and symmetric w4a8).
int64_t centered(const Packed& w, int64_t n, int64_t k) {
  const int64_t q = w.q[n * w.k + k];
  return w.zeros.empty() ? q : q - static_cast<int64_t>(w.zeros[n * w.groups + k / w.group]);
}

struct Case {
  LinearScheme scheme;
  int64_t m, n, k, group;
  bool zeros = false, azp = false, per_tensor = false, bias = false;
  DType out = DType::kFloat32;
  int64_t a_pad = 0;  // a's row stride is k + a_pad
  int fixed_a = 1000, fixed_q = 1000, fixed_azp = 1000;  // the K bound's extremes: every value this
};

std::string describe(const Case& c) {
  return std::string(hk::scheme_name(c.scheme)) + " m " + std::to_string(c.m) + " n " + std::to_string(c.n) + " k " +
         std::to_string(c.k) + " group " + std::to_string(c.group) + (c.zeros ? " zeros" : "") + (c.azp ? " azp" : "") +
         (c.per_tensor ? " per-tensor" : "") + (c.bias ? " bias" : "") + " " + name_of(c.out) + " a_pad " +
         std::to_string(c.a_pad);
}

struct Inputs {
  Packed w;
  std::vector<uint8_t> a;  // [m] rows of stride k + a_pad
  std::vector<float> sa, bias;
  std::vector<int32_t> azp;
  std::vector<uint8_t> out;
  ScaledMmParams p;
};

std::unique_ptr<Inputs> make_inputs(const Case& c, std::mt19937& rng) {
  auto in = std::make_unique<Inputs>();
  in->w = make_weight(c.scheme, c.n, c.k, c.group, c.zeros, rng, c.fixed_q);
  const int64_t stride = c.k + c.a_pad;
  in->a.assign(std::max<int64_t>(1, c.m * stride), 0x55);  // the pad holds garbage the kernel must skip
  std::uniform_int_distribution<int> a8(-128, 127);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (int64_t r = 0; r < c.m; ++r) {
    for (int64_t k = 0; k < c.k; ++k) {
      in->a[r * stride + k] = c.scheme == LinearScheme::kW8A8Fp8 ? hk::float8_e4m3fn_from_float(normal(rng))
                               : static_cast<uint8_t>(static_cast<int8_t>(c.fixed_a != 1000 ? c.fixed_a : a8(rng)));
    }
  }
  std::uniform_real_distribution<float> sa(0.01f, 1.01f);
  const int64_t scales = c.per_tensor ? 1 : std::max<int64_t>(1, c.m);
  for (int64_t i = 0; i < scales; ++i) {
    in->sa.push_back(sa(rng));
    if (c.azp) in->azp.push_back(c.fixed_azp != 1000 ? c.fixed_azp : a8(rng));
  }
  if (c.bias) {
    std::normal_distribution<float> b(0.0f, 1.0f);
    for (int64_t i = 0; i < c.n; ++i) in->bias.push_back(b(rng));
  }
  const int64_t esize = hk::element_size(c.out);
  in->out.assign(std::max<int64_t>(1, c.m * c.n) * esize, 0xA5);
  ScaledMmParams& p = in->p;
  p.scheme = c.scheme;
  p.out_dtype = c.out;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.group = c.group;
  p.groups = in->w.groups;
  p.a = in->a.data();
  p.a_stride = stride;
  p.scale_a = in->sa.data();
  p.scale_a_stride = c.per_tensor ? 0 : 1;
  p.azp = c.azp ? in->azp.data() : nullptr;
  p.azp_stride = c.per_tensor ? 0 : 1;
  p.out = in->out.data();
  p.out_stride = c.n;
  p.weights = in->w.weights.data();
  p.scales = in->w.scales.data();
  p.zeros = in->w.zeros.empty() ? nullptr : in->w.zeros.data();
  p.sums = in->w.sums.empty() ? nullptr : in->w.sums.data();
  p.bias = c.bias ? in->bias.data() : nullptr;
  return in;
}

// The contract's epilogue for one output: t = (float(acc_0) * sa) * s_0; t = t + (float(acc_g) *
// sa) * s_g; y = t + bias; each a float32 operation of its own (the host compiler contracts nothing:
// no -ffp-contract=fast target with fma here, and every step is stored).
float epilogue(const std::vector<float>& accs, float sa, const float* s, const float* bias) {
  float t = 0.0f;
  for (size_t g = 0; g < accs.size(); ++g) {
    volatile float prod = accs[g] * sa;
    volatile float term = prod * s[g];
    t = g == 0 ? static_cast<float>(term) : static_cast<float>(t + term);
  }
  if (bias != nullptr) {
    volatile float y = t + *bias;
    t = y;
  }
  return t;
}

void expect_int8_formula(const Case& c, std::mt19937& rng) {
  SCOPED_TRACE(describe(c));
  std::unique_ptr<Inputs> in = make_inputs(c, rng);
  run_host(in->p);
  const Packed& w = in->w;
  const int64_t esize = hk::element_size(c.out);
  int64_t mismatches = 0;
  for (int64_t m = 0; m < c.m; ++m) {
    const float sa = in->sa[c.per_tensor ? 0 : m];
    const int64_t azp = c.azp ? in->azp[c.per_tensor ? 0 : m] : 0;
    for (int64_t n = 0; n < c.n; ++n) {
      std::vector<float> accs;
      for (int64_t g = 0; g < w.groups; ++g) {
        int64_t acc = 0;
        for (int64_t k = g * c.group; k < std::min(c.k, (g + 1) * c.group); ++k) {
          acc += (static_cast<int64_t>(static_cast<int8_t>(in->a[m * in->p.a_stride + k])) - azp) * centered(w, n, k);
        }
        ASSERT_LT(std::abs(acc), int64_t{1} << 31) << "the K bound";
        accs.push_back(static_cast<float>(static_cast<int32_t>(acc)));
      }
      const float y = epilogue(accs, sa, &w.scales[n * w.groups], c.bias ? &in->bias[n] : nullptr);
      uint8_t want[4];
      from_double(want, c.out, y);  // one rounding of a float32
      if (std::memcmp(want, &in->out[(m * c.n + n) * esize], esize) != 0 && ++mismatches <= 5) {
        ADD_FAILURE() << "out[" << m << ", " << n << "] = " << to_double(&in->out[(m * c.n + n) * esize], c.out)
                      << ", the formula gives " << to_double(want, c.out);
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(CudaScaledMmHost, Int8SchemesEqualTheFormulaBitForBit) {
  std::mt19937 rng(7);
  using S = LinearScheme;
  const std::vector<Case> cases = {
      {S::kW8A8Int8, 5, 37, 64, 64},
      {S::kW8A8Int8, 17, 70, 130, 130, false, true, false, true, DType::kFloat32},  // K % 4 == 2, azp, bias
      {S::kW8A8Int8, 3, 33, 67, 67, false, false, true, true, DType::kFloat16},     // K % 4 == 3, per tensor
      {S::kW8A8Int8, 70, 65, 40, 40, false, true, true, false, DType::kBFloat16},   // K a multiple of 4, not 32
      {S::kW8A8Int8, 130, 129, 3, 3, false, true, false, true, DType::kBFloat16},   // K < 4; M, N past 2 tiles
      {S::kW8A8Int8, 9, 20, 96, 96, false, false, false, true, DType::kFloat32, 13},  // strided rows
      {S::kW8A8Int8, 1, 64, 4096, 4096, false, true, true, false, DType::kBFloat16},
      {S::kW4A8, 7, 45, 256, 32, false, false, false, true, DType::kBFloat16},
      {S::kW4A8, 16, 96, 512, 128, true, false, false, false, DType::kFloat32},
      {S::kW4A8, 2, 31, 64, 8, true, false, true, true, DType::kFloat16},
      {S::kW4A8, 9, 40, 200, 200, false, false, false, false, DType::kBFloat16},  // one group of K = 200
      {S::kW4A8, 66, 70, 48, 24, true, false, false, true, DType::kFloat32, 5},  // a group boundary mid-step
      {S::kW4A8, 3, 17, 120, 40, false, false, false, true, DType::kFloat16},
      {S::kW4A8, 4, 9, 8, 8, true, false, true, false, DType::kFloat32},
  };
  for (const Case& c : cases) expect_int8_formula(c, rng);
}

// |acc| up to 255 * 127 * 65535 < 2^31: exact, the dp4a partial sums included.
TEST(CudaScaledMmHost, TheKBoundHoldsAtTheExtremes) {
  std::mt19937 rng(3);
  using S = LinearScheme;
  const int64_t k = hk::kScaledMmMaxK;
  for (const DType out : {DType::kFloat32, DType::kBFloat16}) {
    Case c{S::kW8A8Int8, 2, 3, k, k, false, true, false, false, out};
    c.fixed_a = -128;
    c.fixed_q = -127;
    c.fixed_azp = 127;  // (a - azp) q = 255 * 127 per k
    expect_int8_formula(c, rng);
    Case d{S::kW8A8Int8, 1, 2, k, k, false, false, false, true, out};
    d.fixed_a = -128;
    d.fixed_q = -127;
    expect_int8_formula(d, rng);
  }
}

void expect_fp8(const Case& c, std::mt19937& rng) {
  SCOPED_TRACE(describe(c));
  std::unique_ptr<Inputs> in = make_inputs(c, rng);
  run_host(in->p);
  const Packed& w = in->w;
  const int64_t esize = hk::element_size(c.out);
  const double u = c.out == DType::kFloat32 ? std::ldexp(1.0, -24) : c.out == DType::kBFloat16 ? std::ldexp(1.0, -8)
                                                                                               : std::ldexp(1.0, -11);
  int64_t failures = 0;
  for (int64_t m = 0; m < c.m; ++m) {
    const float sa = in->sa[c.per_tensor ? 0 : m];
    for (int64_t n = 0; n < c.n; ++n) {
      std::vector<float> accs;  // the documented order: -0 + p_0 + p_1 + ... per group
      double want = 0.0, bound = 0.0;
      for (int64_t g = 0; g < w.groups; ++g) {
        float acc = -0.0f;
        double exact = 0.0, magnitude = 0.0;
        for (int64_t k = g * c.group; k < std::min(c.k, (g + 1) * c.group); ++k) {
          const float a = hk::float_from_float8_e4m3fn(in->a[m * in->p.a_stride + k]);
          const float q = hk::float_from_float8_e4m3fn(w.fp8[n * c.k + k]);
          volatile float prod = a * q;  // exact
          acc = acc + prod;
          exact += static_cast<double>(a) * q;
          magnitude += std::abs(static_cast<double>(a) * q);
        }
        accs.push_back(acc);
        const double s = static_cast<double>(sa) * w.scales[n * w.groups + g];
        want += exact * s;
        bound += (std::ldexp(1.0, -24) * c.group + 4 * std::ldexp(1.0, -24)) * magnitude * s;
      }
      if (c.bias) want += in->bias[n];
      const float y = epilogue(accs, sa, &w.scales[n * w.groups], c.bias ? &in->bias[n] : nullptr);
      uint8_t order[4];
      from_double(order, c.out, y);
      const void* got = &in->out[(m * c.n + n) * esize];
      const double g = to_double(got, c.out);
      const double tol = bound + 2 * std::ldexp(1.0, -24) * (std::abs(want) + (c.bias ? std::abs(in->bias[n]) : 0.0)) +
                         u * (std::abs(want) + bound) + 1e-30;
      const bool same_bits = std::memcmp(order, got, esize) == 0;
      if ((!same_bits || !(std::abs(g - want) <= tol)) && ++failures <= 5) {
        ADD_FAILURE() << "out[" << m << ", " << n << "] = " << g << ", float64 " << want << " (tolerance " << tol
                      << "), the documented order gives " << to_double(order, c.out);
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(CudaScaledMmHost, Fp8SumsInKOrderWithinTheFloat32Bound) {
  std::mt19937 rng(5);
  using S = LinearScheme;
  const std::vector<Case> cases = {
      {S::kW8A8Fp8, 5, 37, 64, 64},
      {S::kW8A8Fp8, 17, 70, 200, 200, false, false, false, true, DType::kBFloat16},   // per channel
      {S::kW8A8Fp8, 3, 33, 300, 128, false, false, true, true, DType::kFloat16},      // blocks, a partial last
      {S::kW8A8Fp8, 66, 130, 130, 128, false, false, false, false, DType::kFloat32, 7},
      {S::kW8A8Fp8, 2, 5, 3, 3, false, false, false, true, DType::kFloat32},
  };
  for (const Case& c : cases) expect_fp8(c, rng);
}

// A row's bits do not depend on the other rows or its position: row r of a launch of M rows equals
// the launch of that row alone.
TEST(CudaScaledMmHost, RowsAreBatchInvariant) {
  std::mt19937 rng(9);
  for (const LinearScheme s : {LinearScheme::kW8A8Fp8, LinearScheme::kW4A8, LinearScheme::kW8A8Int8}) {
    const int64_t k = 256, group = s == LinearScheme::kW8A8Fp8 ? 128 : s == LinearScheme::kW4A8 ? 64 : k;
    Case c{s, 70, 40, k, group, false, false, false, true, DType::kFloat32};
    std::unique_ptr<Inputs> in = make_inputs(c, rng);
    run_host(in->p);
    for (const int64_t r : {int64_t{0}, int64_t{63}, int64_t{69}}) {
      std::vector<uint8_t> one(c.n * 4);
      ScaledMmParams p = in->p;
      p.m = 1;
      p.a = in->a.data() + r * p.a_stride;
      p.scale_a = in->sa.data() + r;
      p.out = one.data();
      run_host(p);
      EXPECT_EQ(std::memcmp(one.data(), in->out.data() + r * c.n * 4, one.size()), 0)
          << hk::scheme_name(s) << " row " << r;
    }
  }
}

TEST(CudaScaledMmHost, NothingOutsideTheOutputIsWritten) {
  std::mt19937 rng(1);
  Case c{LinearScheme::kW4A8, 5, 7, 64, 16, false, false, false, false, DType::kBFloat16};
  std::unique_ptr<Inputs> in = make_inputs(c, rng);
  // out rows of stride n + 3: the 3 elements past each row keep their bytes.
  std::vector<uint8_t> out((c.n + 3) * c.m * 2, 0xA5);
  in->p.out = out.data();
  in->p.out_stride = c.n + 3;
  run_host(in->p);
  for (int64_t m = 0; m < c.m; ++m) {
    for (int64_t e = c.n * 2; e < (c.n + 3) * 2; ++e) EXPECT_EQ(out[(m * (c.n + 3)) * 2 + e], 0xA5);
  }
}

TEST(CudaScaledMmHost, PlanCoversEveryTile) {
  ScaledMmParams p;
  p.scheme = LinearScheme::kW8A8Int8;
  p.n = 130;
  p.k = 64;
  p.group = 64;
  p.groups = 1;
  p.out_stride = 130;
  uint8_t byte = 0;
  float f = 0;
  p.a = p.weights = p.out = &byte;
  p.scales = p.scale_a = &f;
  p.m = 0;
  EXPECT_EQ(plan_scaled_mm(p).grid_x, 0);
  p.m = 65;
  ScaledMmPlan plan = plan_scaled_mm(p);
  EXPECT_EQ(plan.row_tiles, 2);
  EXPECT_EQ(plan.col_tiles, 3);
  EXPECT_EQ(plan.grid_x, 3);
  EXPECT_EQ(plan.grid_y, 2);
  p.m = kScaledMmMaxRowBlocks * kScaledMmTileM + 1;  // blocks loop over the row tiles past gridDim.y
  plan = plan_scaled_mm(p);
  EXPECT_EQ(plan.row_tiles, kScaledMmMaxRowBlocks + 1);
  EXPECT_EQ(plan.grid_y, kScaledMmMaxRowBlocks);
}

TEST(CudaScaledMmHost, LauncherRejectsWhatTheKernelCannotTake) {
  ScaledMmParams good;
  good.scheme = LinearScheme::kW4A8;
  good.m = 2;
  good.n = 3;
  good.k = 64;
  good.group = 16;
  good.groups = 4;
  good.out_stride = 3;
  uint8_t byte = 0;
  float f = 0;
  int32_t i = 0;
  good.a = good.weights = good.out = &byte;
  good.scales = good.scale_a = &f;
  EXPECT_TRUE(accepted(check_scaled_mm(good)));
  auto with = [&](auto change) {
    ScaledMmParams p = good;
    change(p);
    return check_scaled_mm(p);
  };
  EXPECT_TRUE(rejected(with([](ScaledMmParams& p) { p.scheme = LinearScheme::kInt8; }), "scheme"));
  EXPECT_TRUE(rejected(with([](ScaledMmParams& p) { p.out_dtype = static_cast<DType>(7); }), "out_dtype"));
  EXPECT_TRUE(rejected(with([](ScaledMmParams& p) { p.k = hk::kScaledMmMaxK + 1; }), "k must be"));
  EXPECT_TRUE(rejected(with([](ScaledMmParams& p) { p.group = 12; p.groups = 6; }), "multiple of 8"));
  EXPECT_TRUE(rejected(with([](ScaledMmParams& p) { p.groups = 3; }), "groups"));
  EXPECT_TRUE(rejected(with([&](ScaledMmParams& p) { p.azp = &i; }), "azp"));
  EXPECT_TRUE(rejected(with([&](ScaledMmParams& p) {
                         p.scheme = LinearScheme::kW8A8Int8;
                         p.group = 64;
                         p.groups = 1;
                         p.zeros = &f;
                       }),
                       "zeros"));
  EXPECT_TRUE(rejected(with([](ScaledMmParams& p) { p.scheme = LinearScheme::kW8A8Fp8; p.group = 16; }), "w8a8-fp8"));
  EXPECT_TRUE(rejected(with([](ScaledMmParams& p) { p.out = nullptr; }), "null"));
  EXPECT_TRUE(rejected(with([](ScaledMmParams& p) { p.out_stride = 2; }), "out_stride"));
  EXPECT_TRUE(accepted(with([](ScaledMmParams& p) { p.m = 0; p.out = nullptr; })));
  // m == 0: ok, nothing launched (no device needed).
  ScaledMmParams empty = good;
  empty.m = 0;
  EXPECT_TRUE(accepted(scaled_mm(empty, nullptr)));
}

}  // namespace
}  // namespace xllm_kernel::cuda
