// cuda.native.scaled_mm, linear_dynamic_quant and linear_pack on a GPU: the int8 schemes (w8a8-int8
// with and without activation zero points, w4a8 symmetric and with zeros) equal cpu.torch.scaled_mm
// bit for bit (both follow the contract's exact int32 sums and float32 epilogue order); w8a8-fp8
// agrees within the float32 accumulation's bound; linear_dynamic_quant is the composition of
// cuda.native.per_token_quant and cuda.native.scaled_mm bit for bit, and for the int8 schemes equals
// cpu.torch.linear_dynamic_quant; rows are batch invariant, also past gridDim.y's row tiles;
// cuda.native.linear_pack packs linear's schemes too, for cuda.native.linear (cuda.torch's ATen path),
// and a weight packed by another solution is refused. Every test skips, saying why, where no
// usable GPU is. (The kernels' arithmetic runs on the host in scaled_mm_kernels_host_test.cpp.)
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "csrc/common/linear.h"
#include "test/cuda/cuda_test_support.h"
#include "test/ops/common/registered.h"
#include "test/ops/linear/scaled_mm_weights.h"
#include "xllm_kernel/ops/linear.h"
#include "xllm_kernel/ops/quantization.h"

namespace xllm_kernel::testing {
namespace {

const at::Device kGpu(at::kCUDA, 0);

std::optional<at::Tensor> on(const std::optional<at::Tensor>& t, const at::Device& d) {
  return t ? std::optional<at::Tensor>(t->to(d)) : std::nullopt;
}

at::Tensor pack(const std::string& solution, const Weight& w, const at::Device& d) {
  return function_of<LinearPackFn>(solution + ".linear_pack")(w.q.to(d), w.scales.to(d), on(w.zeros, d), w.scheme,
                                                              w.group_size);
}

at::Tensor scaled(const std::string& solution, const at::Tensor& a, const at::Tensor& packed, const at::Tensor& sa,
                  const std::optional<at::Tensor>& azp, const std::optional<at::Tensor>& bias, at::ScalarType out) {
  return function_of<ScaledMmFn>(solution + ".scaled_mm")(a, packed, sa, azp, bias, out);
}

struct Int8Case {
  std::string scheme;
  int64_t m, n, k, group;
  bool zeros, azp, per_tensor, bias;
  at::ScalarType out;
};

TEST(CudaScaledMm, NativeImplementsTheScaledOperations) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  for (const std::string op : {"linear_pack", "linear", "scaled_mm", "linear_dynamic_quant"}) {
    const Candidate c = cuda_candidate(op, "cuda.native." + op);
    EXPECT_NE(c.verdict, Verdict::kExcluded) << op << ": " << c.reason;
  }
}

TEST(CudaScaledMm, Int8SchemesEqualCpuTorchBitForBit) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  at::manual_seed(11);
  const std::vector<Int8Case> cases = {
      {"w8a8-int8", 5, 37, 64, 0, false, false, false, false, at::kBFloat16},
      {"w8a8-int8", 17, 70, 130, 0, false, true, false, true, at::kFloat},  // K not a multiple of 4, azp
      {"w8a8-int8", 3, 33, 68, 0, false, false, true, true, at::kHalf},     // per-tensor scale
      {"w8a8-int8", 1, 64, 4096, 0, false, true, true, false, at::kBFloat16},
      {"w8a8-int8", 300, 520, 1000, 0, false, true, false, true, at::kBFloat16},
      {"w8a8-int8", 0, 37, 64, 0, false, false, false, false, at::kBFloat16},
      {"w4a8", 7, 45, 256, 32, false, false, false, true, at::kBFloat16},
      {"w4a8", 16, 96, 512, 128, true, false, false, false, at::kFloat},
      {"w4a8", 2, 31, 64, 8, true, false, true, true, at::kHalf},
      {"w4a8", 9, 40, 200, 0, false, false, false, false, at::kBFloat16},  // one group of K = 200
      {"w4a8", 129, 200, 384, 24, true, false, false, true, at::kFloat},
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
    const at::Tensor want = scaled("cpu.torch", a, pack("cpu.torch", w, at::kCPU), sa, azp, bias, c.out);
    const at::Tensor got =
        scaled("cuda.native", a.to(kGpu), pack("cuda.native", w, kGpu), sa.to(kGpu), on(azp, kGpu), on(bias, kGpu), c.out);
    EXPECT_TRUE(got.is_cuda());
    EXPECT_TRUE(same_bits(got, want)) << (got.cpu().to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
  }
}

TEST(CudaScaledMm, StridedRowsAndLeadingDimensions) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  at::manual_seed(5);
  const Weight w = make_weight("w8a8-int8", 48, 96);
  const at::Tensor wide = at::randint(-128, 128, {2, 3, 130}, at::kChar);
  const at::Tensor a = wide.narrow(2, 7, 96);  // rows 130 apart
  const at::Tensor sa = at::rand({2, 3, 1}, at::kFloat).add_(0.01);
  const at::Tensor want = scaled("cpu.torch", a, pack("cpu.torch", w, at::kCPU), sa, std::nullopt, std::nullopt, at::kFloat);
  const at::Tensor got = scaled("cuda.native", a.to(kGpu), pack("cuda.native", w, kGpu), sa.to(kGpu), std::nullopt,
                                std::nullopt, at::kFloat);
  EXPECT_EQ(got.sizes(), (std::vector<int64_t>{2, 3, 48}));
  EXPECT_TRUE(same_bits(got, want));
}

TEST(CudaScaledMm, Fp8AgreesWithinTheFloat32Bound) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  at::manual_seed(13);
  for (const int64_t group : {int64_t{0}, int64_t{128}}) {
    for (const at::ScalarType out : {at::kFloat, at::kBFloat16}) {
      const int64_t m = 33, n = 150, k = 300;
      const Weight w = make_weight("w8a8-fp8", n, k, group);
      const at::Tensor a = at::randn({m, k}, at::kFloat).mul_(4).to(at::kFloat8_e4m3fn);
      const at::Tensor sa = at::rand({m, 1}, at::kFloat).add_(0.01);
      const at::Tensor bias = at::randn({n}, at::kFloat);
      const at::Tensor want = scaled("cpu.torch", a, pack("cpu.torch", w, at::kCPU), sa, std::nullopt, bias, at::kFloat);
      const at::Tensor got =
          scaled("cuda.native", a.to(kGpu), pack("cuda.native", w, kGpu), sa.to(kGpu), std::nullopt, bias.to(kGpu), out)
              .cpu()
              .to(at::kDouble);
      // The float32 accumulation's bound, 2^-24 K sum |a q| s scale_a (twice: two orders), plus
      // the epilogue's roundings and the output's.
      const at::Tensor s = group == 0 ? w.scales.view({n, 1})
                                      : w.scales.repeat_interleave(128, 0).narrow(0, 0, n).amax(1, true);
      const at::Tensor magnitude =
          a.to(at::kDouble).abs().matmul(w.q.to(at::kDouble).abs().t()) * sa.to(at::kDouble) * s.to(at::kDouble).t();
      const double u = out == at::kFloat ? std::ldexp(1.0, -24) : std::ldexp(1.0, -8);
      const at::Tensor want64 = want.to(at::kDouble);
      const at::Tensor tol = magnitude * (2.0 * k * std::ldexp(1.0, -24) + 8 * std::ldexp(1.0, -24)) +
                             (want64.abs() + bias.to(at::kDouble).abs()) * (u + 4 * std::ldexp(1.0, -24));
      EXPECT_TRUE((got - want64).abs().le(tol).all().item<bool>())
          << "group " << group << " out " << out << ": max excess " << ((got - want64).abs() - tol).max().item<double>();
    }
  }
}

TEST(CudaScaledMm, LinearDynamicQuantIsTheCompositionBitForBit) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  at::manual_seed(17);
  const auto quant = function_of<PerTokenQuantFn>("cuda.native.per_token_quant");
  const auto ldq = function_of<LinearDynamicQuantFn>("cuda.native.linear_dynamic_quant");
  const auto cpu_ldq = function_of<LinearDynamicQuantFn>("cpu.torch.linear_dynamic_quant");
  for (const std::string scheme : {"w8a8-int8", "w4a8", "w8a8-fp8"}) {
    for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      SCOPED_TRACE(scheme + " " + std::string(c10::toString(dtype)));
      const Weight w = make_weight(scheme, 70, 256, scheme == "w4a8" ? 64 : 0);
      const at::Tensor packed = pack("cuda.native", w, kGpu);
      const at::Tensor x = at::randn({2, 9, 256}, at::kFloat).to(dtype);
      const at::Tensor bias = at::randn({70}, at::kFloat).to(dtype);
      const at::Tensor got = ldq(x.to(kGpu), packed, bias.to(kGpu));
      const auto [q, scale] = quant(x.to(kGpu), scheme == "w8a8-fp8" ? at::kFloat8_e4m3fn : at::kChar, std::nullopt);
      const at::Tensor composed = scaled("cuda.native", q, packed, scale, std::nullopt, bias.to(kGpu), dtype);
      EXPECT_TRUE(same_bits(got, composed));
      if (scheme != "w8a8-fp8") {  // per_token_quant's codes are the same on both devices
        EXPECT_TRUE(same_bits(got, cpu_ldq(x, pack("cpu.torch", w, at::kCPU), bias)));
      }
    }
  }
}

// A row's bits do not depend on the other rows, their number or its position, also for row tiles
// past gridDim.y (65535 blocks of 64 rows).
TEST(CudaScaledMm, RowsAreBatchInvariant) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  at::manual_seed(19);
  for (const std::string scheme : {"w8a8-fp8", "w8a8-int8"}) {
    const int64_t k = 40, n = 12, m = 65535 * 64 + 70;
    const Weight w = make_weight(scheme, n, k);
    const at::Tensor packed = pack("cuda.native", w, kGpu);
    const at::Tensor a = scheme == "w8a8-fp8" ? at::randn({m, k}, at::TensorOptions(kGpu)).to(at::kFloat8_e4m3fn)
                                              : at::randint(-128, 128, {m, k}, at::TensorOptions(kGpu).dtype(at::kChar));
    const at::Tensor sa = at::rand({m, 1}, at::TensorOptions(kGpu)).add_(0.01);
    const at::Tensor all = scaled("cuda.native", a, packed, sa, std::nullopt, std::nullopt, at::kFloat);
    for (const int64_t r : {int64_t{0}, int64_t{63}, int64_t{65535 * 64 - 1}, int64_t{65535 * 64}, m - 1}) {
      const at::Tensor one =
          scaled("cuda.native", a.narrow(0, r, 1), packed, sa.narrow(0, r, 1), std::nullopt, std::nullopt, at::kFloat);
      EXPECT_TRUE(same_bits(one, all.narrow(0, r, 1))) << scheme << " row " << r;
    }
  }
}

TEST(CudaScaledMm, LinearSchemesPackForTheNativeLinear) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  const auto pack_fn = function_of<LinearPackFn>("cuda.native.linear_pack");
  const at::Tensor weight = at::randn({8, 16}, at::TensorOptions(kGpu).dtype(at::kBFloat16));
  const at::Tensor x = at::randn({3, 16}, at::TensorOptions(kGpu).dtype(at::kBFloat16));
  const at::Tensor y = function_of<LinearFn>("cuda.native.linear")(x, pack_fn(weight, std::nullopt, std::nullopt, "bf16", 0),
                                                                   std::nullopt);
  const at::Tensor want = function_of<LinearFn>("cuda.torch.linear")(
      x, function_of<LinearPackFn>("cuda.torch.linear_pack")(weight, std::nullopt, std::nullopt, "bf16", 0),
      std::nullopt);
  EXPECT_TRUE(at::equal(y, want));
  // A weight packed by another solution is refused, naming both.
  const Weight w = make_weight("w8a8-int8", 8, 16);
  const at::Tensor other = pack("cuda.torch", w, kGpu);
  const std::string wrong = error_message([&] {
    scaled("cuda.native", at::zeros({1, 16}, at::TensorOptions(kGpu).dtype(at::kChar)), other,
           at::ones({1, 1}, at::TensorOptions(kGpu)), std::nullopt, std::nullopt, at::kFloat);
  });
  EXPECT_NE(wrong.find("cuda.torch.linear_pack"), std::string::npos) << wrong;
}

}  // namespace
}  // namespace xllm_kernel::testing
