// The C++ checkpoint importers of include/xllm_kernel/ops/linear.h, on tensors built here from the
// formats' documented layouts (test/python/test_linear_formats.py covers every format from Python):
// GGUF Q4_0 blocks byte by byte, and GPTQ v2 with act-order through LinearWeight::permute_input and
// ops::linear_pack(LinearWeight) against x W^T in float64.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing {
namespace {

// The float64 product against y within the contract's bound (float32 fma chain, one rounding).
void expect_linear(const at::Tensor& y, const at::Tensor& x, const at::Tensor& w) {
  const at::Tensor want = x.to(at::kDouble).matmul(w.to(at::kDouble).t());
  const at::Tensor mag = x.to(at::kDouble).abs().matmul(w.to(at::kDouble).abs().t());
  const at::Tensor bound = mag * ((x.size(1) + 2) * std::ldexp(1.0, -24)) + want.abs() * std::ldexp(1.0, -23) + 1e-30;
  EXPECT_TRUE((y.to(at::kDouble) - want).abs().le(bound).all().item<bool>());
}

TEST(LinearFormats, GgufQ4_0BlocksByteByByte) {
  initialize("cpu");
  const int64_t n = 3, k = 64;
  at::Tensor q = at::randint(0, 16, {n, k}, at::kLong);
  at::Tensor d = (at::rand({n, k / 32}) * 0.02 + 0.001).to(at::kHalf);
  std::vector<uint8_t> bytes;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t b = 0; b < k / 32; ++b) {
      const at::Half h = d[r][b].item<at::Half>();
      uint8_t hb[2];
      std::memcpy(hb, &h.x, 2);  // little-endian f16 d
      bytes.insert(bytes.end(), hb, hb + 2);
      for (int64_t j = 0; j < 16; ++j) {
        const int64_t lo = q[r][32 * b + j].item<int64_t>(), hi = q[r][32 * b + j + 16].item<int64_t>();
        bytes.push_back(static_cast<uint8_t>(lo | (hi << 4)));
      }
    }
  }
  const at::Tensor data = at::from_blob(bytes.data(), {static_cast<int64_t>(bytes.size())}, at::kByte).clone();
  const ops::LinearWeight w = ops::linear_weight_from_gguf(data, "Q4_0", n, k);
  EXPECT_EQ(w.scheme, "int4");
  EXPECT_EQ(w.group_size, 32);
  EXPECT_FALSE(w.zeros.has_value());
  const at::Tensor want_w = (q.to(at::kFloat) - 8) * d.to(at::kFloat).repeat_interleave(32, 1);
  EXPECT_TRUE(at::equal(w.weight.to(at::kFloat) * w.scales->to(at::kFloat).repeat_interleave(32, 1), want_w));
  const at::Tensor x = at::randn({4, k});
  expect_linear(ops::linear(w.permute_input(x), ops::linear_pack(w), std::nullopt), x, want_w);
}

TEST(LinearFormats, GptqActOrderPermutesTheInput) {
  initialize("cpu");
  const int64_t n = 8, k = 64, g = 16, groups = k / g;
  const at::Tensor q = at::randint(0, 16, {n, k}, at::kLong);
  const at::Tensor z = at::randint(0, 16, {n, groups}, at::kLong);
  const at::Tensor s = (at::rand({n, groups}) * 0.02 + 0.005).to(at::kHalf);
  const at::Tensor g_idx = at::randperm(k, at::kLong).div(g, "floor").to(at::kInt);  // act-order groups
  // qweight [K / 8, N]: weight k of column n in field k % 8 of word k / 8; qzeros [G, N / 8] likewise along N.
  at::Tensor qweight = at::zeros({k / 8, n}, at::kLong), qzeros = at::zeros({groups, n / 8}, at::kLong);
  for (int64_t c = 0; c < n; ++c) {
    for (int64_t kk = 0; kk < k; ++kk) qweight[kk / 8][c] += q[c][kk].item<int64_t>() << (4 * (kk % 8));
    for (int64_t gg = 0; gg < groups; ++gg) qzeros[gg][c / 8] += z[c][gg].item<int64_t>() << (4 * (c % 8));
  }
  auto to_int32 = [](const at::Tensor& words) {  // two's complement of the unsigned 32-bit words
    return at::where(words.ge(int64_t{1} << 31), words - (int64_t{1} << 32), words).to(at::kInt);
  };
  const ops::LinearWeight w =
      ops::linear_weight_from_gptq(to_int32(qweight), to_int32(qzeros), s.t().contiguous(), g_idx, 4, "v2");
  ASSERT_TRUE(w.input_permutation.has_value());
  const at::Tensor gi = g_idx.to(at::kLong);
  const at::Tensor want_w = (q.to(at::kFloat) - z.to(at::kFloat).index_select(1, gi)) *
                            s.to(at::kFloat).index_select(1, gi);
  const at::Tensor x = at::randn({5, k});
  expect_linear(ops::linear(w.permute_input(x), ops::linear_pack(w), std::nullopt), x, want_w);
  EXPECT_THROW(ops::linear_weight_from_gptq(to_int32(qweight), to_int32(qzeros), s.t().contiguous(), g_idx, 4, "v9"),
               c10::Error);
}

}  // namespace
}  // namespace xllm_kernel::testing
