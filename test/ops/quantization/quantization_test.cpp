// Every CPU quantization implementation (cpu.native, cpu.torch) through the shared bridge checks
// (test/ops/quantization/bridge_checks.h, written for any device): every operation x dtype x
// scheme x layout against the float64 reference, strided rows equal to contiguous ones, fused
// operations equal to their composition of the same implementation bit for bit (residual too),
// the non-finite rules, errors naming the argument, zero rows, rows past 2^31 elements; the two
// implementations bit for bit on a grid; the public API and torch.ops.xllm_kernel.*.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "test/ops/quantization/bridge_checks.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing {
namespace {

using namespace quantization;  // NOLINT: the shared bodies of the bridge checks

const at::Device kCpu(at::kCPU);

TEST(Quantization, EveryOperationHasBothCpuImplementations) {
  for (const auto& op : operations()) {
    const auto names = registered_implementations(op, Device::kCpu);
    EXPECT_NE(std::find(names.begin(), names.end(), "cpu.torch." + op), names.end()) << op;
    EXPECT_NE(std::find(names.begin(), names.end(), "cpu.native." + op), names.end()) << op;
  }
}

class QuantizationImpl : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantizationImpl, BridgeChecks) { check_bridge(GetParam(), kCpu); }

TEST_P(QuantizationImpl, RowsPast2To31Elements) { check_large_offsets(GetParam(), kCpu); }

INSTANTIATE_TEST_SUITE_P(Cpu, QuantizationImpl, ::testing::Values("cpu.native", "cpu.torch"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '.', '_');
                           return n;
                         });

// The unfused operations have no rounding left to the implementation: cpu.native and cpu.torch
// agree bit for bit on every dtype and scheme, ties and large values included.
TEST(Quantization, NativeAndTorchAgreeBitForBit) {
  for (const std::string op : {"per_token_quant", "per_token_quant_int8_azp", "static_quant"}) {
    for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      for (const bool fp8 : {false, true}) {
        for (const bool bound : {false, true}) {
          for (const double magnitude : {1.0, 1000.0}) {
            const at::Tensor values = at::randn({33, 1027}, at::kDouble).mul_(magnitude);
            Args a = make_args(op, 33, 1027, dtype, fp8, bound, "strided", kCpu, values);
            Args b = a;
            const auto n = run("cpu.native", op, a);
            const auto t = run("cpu.torch", op, b);
            for (size_t k = 0; k < n.size(); ++k) EXPECT_TRUE(same_bits(n[k], t[k])) << op << " " << dtype << " result " << k;
          }
        }
      }
    }
  }
}

// The public API and the dispatcher reach the prepared binding; fakes give the outputs' metadata.
TEST(Quantization, PublicApiAndDispatcher) {
  initialize("cpu");
  const at::Tensor x = at::randn({4, 64}).to(at::kBFloat16);
  auto [q, s] = ops::per_token_quant(x, at::kFloat8_e4m3fn, std::nullopt);
  Args a = make_args("per_token_quant", 4, 64, at::kBFloat16, true, false, "contiguous", kCpu, x.to(at::kDouble));
  const auto want = run("cpu.native", "per_token_quant", a);
  EXPECT_TRUE(same_bits(q, want[0]));
  EXPECT_TRUE(same_bits(s, want[1]));
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("xllm_kernel::per_token_quant", "");
  torch::jit::Stack stack{x, static_cast<int64_t>(at::kChar), c10::IValue()};
  op.callBoxed(stack);
  ASSERT_EQ(stack.size(), 2u);
  EXPECT_EQ(stack[0].toTensor().scalar_type(), at::kChar);
  EXPECT_EQ(stack[1].toTensor().sizes(), (std::vector<int64_t>{4, 1}));
  torch::jit::Stack meta{x.to(at::kMeta), static_cast<int64_t>(at::kFloat8_e4m3fn), c10::IValue()};
  op.callBoxed(meta);
  EXPECT_TRUE(meta[0].toTensor().is_meta());
  EXPECT_EQ(meta[0].toTensor().scalar_type(), at::kFloat8_e4m3fn);
  auto [q8, s8, z8] = ops::per_token_quant_int8_azp(x);
  EXPECT_EQ(z8.scalar_type(), at::kInt);
  at::Tensor residual = at::randn({4, 64}).to(at::kBFloat16);
  const at::Tensor w = at::ones({64}, at::kBFloat16);
  auto [qr, sr] = ops::fused_add_rms_norm_per_token_quant(x, residual, w, 1e-6, at::kChar, std::nullopt);
  EXPECT_EQ(qr.sizes(), x.sizes());
}

}  // namespace
}  // namespace xllm_kernel::testing
