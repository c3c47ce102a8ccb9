// Every registered CPU scaled_mm and linear_dynamic_quant: the int8 schemes (w8a8-int8 with and
// without activation zero points, w4a8 symmetric and with zeros) give the same bits in every
// implementation and equal the contract's formula computed here (int64 sums, float32 epilogue one
// operation at a time); w8a8-fp8 agrees within the float32 accumulation's bound; the K bound holds at
// its extremes; linear_dynamic_quant equals scaled_mm(per_token_quant(x)) bit for bit; the native
// implementation is batch invariant; argument errors name the operation, the argument, the expected
// and the given value. The numerics suites (src/ops/linear/suites/scaled_mm.cpp) cover the shape grid.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "csrc/common/linear.h"
#include "test/ops/common/registered.h"
#include "test/ops/linear/scaled_mm_weights.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing {
namespace {

const std::vector<std::string> kSolutions = {"torch", "native"};

std::string impl(const std::string& solution, const char* op) { return "cpu." + solution + "." + op; }

at::Tensor pack(const std::string& solution, const at::Tensor& q, const at::Tensor& scales,
                const std::optional<at::Tensor>& zeros, const std::string& scheme, int64_t group) {
  return function_of<LinearPackFn>(impl(solution, "linear_pack"))(q, scales, zeros, scheme, group);
}

at::Tensor scaled(const std::string& solution, const at::Tensor& a, const at::Tensor& packed, const at::Tensor& sa,
                  const std::optional<at::Tensor>& azp, const std::optional<at::Tensor>& bias, at::ScalarType out) {
  return function_of<ScaledMmFn>(impl(solution, "scaled_mm"))(a, packed, sa, azp, bias, out);
}

struct Int8Case {
  std::string scheme;
  int64_t m, n, k, group;
  bool zeros, azp, per_tensor, bias;
  at::ScalarType out;
};

TEST(ScaledMm, Int8SchemesEqualTheFormulaBitForBitInEveryImplementation) {
  at::manual_seed(11);
  const std::vector<Int8Case> cases = {
      {"w8a8-int8", 5, 37, 64, 0, false, false, false, false, at::kBFloat16},
      {"w8a8-int8", 17, 70, 130, 0, false, true, false, true, at::kFloat},   // K not a multiple of 4, azp
      {"w8a8-int8", 3, 33, 68, 0, false, false, true, true, at::kHalf},      // per-tensor scale
      {"w8a8-int8", 1, 64, 4096, 0, false, true, true, false, at::kBFloat16},
      {"w8a8-int8", 0, 37, 64, 0, false, false, false, false, at::kBFloat16},
      {"w4a8", 7, 45, 256, 32, false, false, false, true, at::kBFloat16},
      {"w4a8", 16, 96, 512, 128, true, false, false, false, at::kFloat},
      {"w4a8", 2, 31, 64, 8, true, false, true, true, at::kHalf},
      {"w4a8", 9, 40, 200, 0, false, false, false, false, at::kBFloat16},    // one group of K = 200
  };
  for (const Int8Case& c : cases) {
    SCOPED_TRACE(c.scheme + " m " + std::to_string(c.m) + " n " + std::to_string(c.n) + " k " + std::to_string(c.k));
    const Weight w = make_weight(c.scheme, c.n, c.k, c.group, c.zeros);
    const at::Tensor a = at::randint(-128, 128, {c.m, c.k}, at::kChar);
    const at::Tensor sa = c.per_tensor ? at::rand({1}, at::kFloat).add_(0.01) : at::rand({c.m, 1}, at::kFloat).add_(0.01);
    const std::optional<at::Tensor> azp =
        c.azp ? std::optional<at::Tensor>(at::randint(-128, 128, sa.sizes(), at::kInt)) : std::nullopt;
    const std::optional<at::Tensor> bias =
        c.bias ? std::optional<at::Tensor>(at::randn({c.n}, at::kFloat)) : std::nullopt;
    const at::Tensor want = formula(w, a, sa, azp, bias, c.out);
    for (const std::string& solution : kSolutions) {
      SCOPED_TRACE(solution);
      const at::Tensor packed = pack(solution, w.q, w.scales, w.zeros, c.scheme, w.group_size);
      const at::Tensor got = scaled(solution, a, packed, sa, azp, bias, c.out);
      EXPECT_TRUE(same_bits(got, want)) << (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
    }
  }
}

TEST(ScaledMm, TheKBoundHoldsAtTheExtremes) {
  // K = 65535 with every product at its largest: acc = K * 128 * 127 (and, with azp 127 on a = -128,
  // K * 255 * 127), within int32; the float32 epilogue then sees the exact sums.
  const int64_t k = kernels::kScaledMmMaxK, n = 32;
  Weight w;
  w.scheme = "w8a8-int8";
  w.group = k;
  w.q = at::full({n, k}, -127, at::kChar);
  w.q.narrow(0, 0, 16).fill_(127);
  w.scales = at::full({n}, 1.0f, at::kFloat);
  const at::Tensor a = at::full({2, k}, -128, at::kChar);
  const at::Tensor sa = at::full({2, 1}, 1.0f, at::kFloat);
  const at::Tensor azp = at::tensor({0, 127}, at::kInt).view({2, 1});
  for (const std::string& solution : kSolutions) {
    SCOPED_TRACE(solution);
    const at::Tensor packed = pack(solution, w.q, w.scales, std::nullopt, w.scheme, 0);
    const at::Tensor got = scaled(solution, a, packed, sa, azp, std::nullopt, at::kFloat);
    EXPECT_TRUE(same_bits(got, formula(w, a, sa, azp, std::nullopt, at::kFloat)));
    EXPECT_EQ(got[1][0].item<float>(), static_cast<float>(-255.0 * 127.0 * k));
    EXPECT_EQ(got[0][20].item<float>(), static_cast<float>(128.0 * 127.0 * k));
  }
  const at::Tensor too_long = at::zeros({n, k + 1}, at::kChar);
  EXPECT_NE(error_message([&] { pack("native", too_long, w.scales, std::nullopt, "w8a8-int8", 0); })
                .find("linear_pack: K must be at most 65535 for scheme w8a8-int8"),
            std::string::npos);
}

TEST(ScaledMm, Fp8AgreesWithinTheFloat32Bound) {
  at::manual_seed(12);
  for (int64_t group : {0, 128}) {
    const int64_t m = 9, n = 70, k = 300;
    const Weight w = make_weight("w8a8-fp8", n, k, group);
    const at::Tensor a = at::randn({m, k}, at::kFloat).mul_(3).to(at::kFloat8_e4m3fn);
    const at::Tensor sa = at::rand({m, 1}, at::kFloat).add_(0.01);
    for (const std::string& solution : kSolutions) {
      SCOPED_TRACE(solution);
      const at::Tensor packed = pack(solution, w.q, w.scales, std::nullopt, "w8a8-fp8", 0);
      EXPECT_LE(fp8_bound_excess(w, a, sa, scaled(solution, a, packed, sa, std::nullopt, std::nullopt, at::kFloat)), 0.0);
    }
  }
}

TEST(ScaledMm, LinearDynamicQuantIsTheCompositionBitForBit) {
  at::manual_seed(13);
  const std::vector<std::tuple<std::string, int64_t, at::ScalarType>> schemes = {
      {"w8a8-int8", 0, at::kBFloat16}, {"w4a8", 32, at::kHalf}, {"w8a8-fp8", 128, at::kFloat},
      {"w8a8-int8", 0, at::kFloat}};
  for (const auto& [scheme, group, dtype] : schemes) {
    SCOPED_TRACE(scheme);
    const Weight w = make_weight(scheme, 50, 256, group);
    const at::Tensor x = at::randn({2, 6, 256 + 8}, at::kFloat).to(dtype).narrow(2, 0, 256);  // strided rows
    const at::Tensor bias = at::randn({50}, at::kFloat).to(dtype);
    const at::ScalarType qdtype = scheme == "w8a8-fp8" ? at::kFloat8_e4m3fn : at::kChar;
    for (const std::string& solution : kSolutions) {
      SCOPED_TRACE(solution);
      const at::Tensor packed = pack(solution, w.q, w.scales, w.zeros, scheme, w.group_size);
      const auto [q, s] = function_of<PerTokenQuantFn>(impl(solution, "per_token_quant"))(x, qdtype, std::nullopt);
      const at::Tensor composed = scaled(solution, q, packed, s, std::nullopt, bias, dtype);
      const at::Tensor fused =
          function_of<LinearDynamicQuantFn>(impl(solution, "linear_dynamic_quant"))(x, packed, bias);
      EXPECT_EQ(fused.sizes(), (std::vector<int64_t>{2, 6, 50}));
      EXPECT_TRUE(same_bits(fused, composed));
    }
  }
}

TEST(ScaledMm, NativeIsBatchInvariant) {
  at::manual_seed(14);
  for (const auto& [scheme, group] : std::vector<std::pair<std::string, int64_t>>{
           {"w8a8-int8", 0}, {"w4a8", 64}, {"w8a8-fp8", 0}, {"w8a8-fp8", 128}}) {
    SCOPED_TRACE(scheme);
    const int64_t n = 200, k = 512;
    const Weight w = make_weight(scheme, n, k, group);
    const at::Tensor packed = pack("native", w.q, w.scales, w.zeros, scheme, w.group_size);
    const bool fp8 = scheme == "w8a8-fp8";
    const at::Tensor a = fp8 ? at::randn({37, k}, at::kFloat).to(at::kFloat8_e4m3fn) : at::randint(-128, 128, {37, k}, at::kChar);
    const at::Tensor sa = at::rand({37, 1}, at::kFloat).add_(0.01);
    const int threads = at::get_num_threads();
    const at::Tensor batch = scaled("native", a, packed, sa, std::nullopt, std::nullopt, at::kBFloat16);
    at::set_num_threads(1);
    const at::Tensor one_thread = scaled("native", a, packed, sa, std::nullopt, std::nullopt, at::kBFloat16);
    at::set_num_threads(threads);
    EXPECT_TRUE(same_bits(batch, one_thread));
    for (int64_t row : {0, 5, 36}) {
      const at::Tensor alone = scaled("native", a.narrow(0, row, 1), packed, sa.narrow(0, row, 1), std::nullopt,
                                      std::nullopt, at::kBFloat16);
      EXPECT_TRUE(same_bits(alone, batch.narrow(0, row, 1))) << "row " << row;
      const at::Tensor pair = scaled("native", a.narrow(0, row == 0 ? 0 : row - 1, 2), packed,
                                     sa.narrow(0, row == 0 ? 0 : row - 1, 2), std::nullopt, std::nullopt, at::kBFloat16);
      EXPECT_TRUE(same_bits(pair, batch.narrow(0, row == 0 ? 0 : row - 1, 2))) << "row " << row;
    }
  }
}

TEST(ScaledMm, ArgumentErrorsNameTheOperationTheArgumentAndBothValues) {
  const Weight w = make_weight("w8a8-int8", 40, 64);
  const Weight w4 = make_weight("w4a8", 40, 64, 32);
  const at::Tensor a = at::randint(-128, 128, {3, 64}, at::kChar);
  const at::Tensor sa = at::rand({3, 1}, at::kFloat);
  for (const std::string& solution : kSolutions) {
    SCOPED_TRACE(solution);
    const at::Tensor packed = pack(solution, w.q, w.scales, std::nullopt, "w8a8-int8", 0);
    const at::Tensor packed4 = pack(solution, w4.q, w4.scales, std::nullopt, "w4a8", 32);
    auto fails_with = [](const std::function<void()>& fn, const std::string& text) {
      const std::string msg = error_message(fn);
      EXPECT_NE(msg.find(text), std::string::npos) << msg;
    };
    fails_with([&] { function_of<LinearFn>(impl(solution, "linear"))(at::randn({3, 64}), packed, std::nullopt); },
               "linear: packed holds a weight of scheme w8a8-int8, which scaled_mm and linear_dynamic_quant take");
    fails_with([&] { scaled(solution, a.to(at::kFloat8_e4m3fn), packed, sa, std::nullopt, std::nullopt, at::kFloat); },
               "scaled_mm: a must be int8 for a weight of scheme w8a8-int8, got float8_e4m3fn");
    fails_with([&] { scaled(solution, a, packed, at::rand({3, 2}), std::nullopt, std::nullopt, at::kFloat); },
               "scaled_mm: scale_a must be [3, 1] (per token) or hold one element (per tensor)");
    fails_with([&] { scaled(solution, a, packed, sa.to(at::kHalf), std::nullopt, std::nullopt, at::kFloat); },
               "scaled_mm: scale_a must be float32, got float16");
    fails_with([&] { scaled(solution, a, packed4, sa, at::zeros({3, 1}, at::kInt), std::nullopt, at::kFloat); },
               "scaled_mm: azp must be None for a weight of scheme w4a8");
    fails_with([&] { scaled(solution, a, packed, sa, at::zeros({3, 1}, at::kLong), std::nullopt, at::kFloat); },
               "scaled_mm: azp must be int32, got int64");
    fails_with([&] { scaled(solution, a, packed, sa, std::nullopt, at::zeros({41}), at::kFloat); },
               "scaled_mm: bias must be [N] = [40], got shape [41]");
    fails_with([&] { scaled(solution, a, packed, sa, std::nullopt, std::nullopt, at::kChar); },
               "scaled_mm: out_dtype must be float32, bfloat16 or float16, got int8");
    fails_with([&] { scaled(solution, a.narrow(1, 0, 60), packed, sa, std::nullopt, std::nullopt, at::kFloat); },
               "scaled_mm: a's last dimension must be K = 64 (the packed weight's), got 60");
    const std::string other = solution == "torch" ? "native" : "torch";
    const at::Tensor foreign = pack(other, w.q, w.scales, std::nullopt, "w8a8-int8", 0);
    fails_with([&] { scaled(solution, a, foreign, sa, std::nullopt, std::nullopt, at::kFloat); },
               "scaled_mm: packed was packed by cpu." + other + ".linear_pack");
    at::Tensor q128 = w.q.clone();
    q128[0][0] = -128;
    fails_with([&] { pack(solution, q128, w.scales, std::nullopt, "w8a8-int8", 0); },
               "linear_pack: weight must hold values in [-127, 127] for scheme w8a8-int8");
    fails_with([&] { pack(solution, w4.q, at::rand({40, 16}), std::nullopt, "w4a8", 4); },
               "linear_pack: group_size must be a multiple of 8 for scheme w4a8");
    fails_with([&] { pack(solution, w.q, w.scales, std::nullopt, "w8a8-int8", 32); },
               "linear_pack: group_size must be 0 for scheme w8a8-int8");
    fails_with([&] {
      function_of<LinearDynamicQuantFn>(impl(solution, "linear_dynamic_quant"))(a, packed, std::nullopt);
    }, "linear_dynamic_quant: input must be");
  }
}

TEST(ScaledMm, PublicApiAndDispatcherReachTheSelectedBinding) {
  initialize("cpu");
  const Weight w = make_weight("w8a8-int8", 24, 32);
  const at::Tensor packed = ops::linear_pack(w.q, w.scales, std::nullopt, "w8a8-int8", 0);
  const at::Tensor x = at::randn({4, 32}, at::kBFloat16);
  const auto [q, s] = ops::per_token_quant(x, at::kChar, std::nullopt);
  const at::Tensor y = ops::scaled_mm(q, packed, s, std::nullopt, std::nullopt, at::kBFloat16);
  EXPECT_TRUE(same_bits(y, ops::linear_dynamic_quant(x, packed, std::nullopt)));
  EXPECT_TRUE(same_bits(y, formula(w, q, s, std::nullopt, std::nullopt, at::kBFloat16)));
}

}  // namespace
}  // namespace xllm_kernel::testing
