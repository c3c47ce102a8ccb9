// cpu.native.linear on bf16 input with bf16 weights, on each of its paths: the vdpbf16ps kernel
// (or the float32 chain where the CPU has no AVX512_BF16) and torch's brgemm (AMX-BF16 where the CPU
// has it; set_native_linear_brgemm_for_test runs it wherever torch's brgemm does). Each is within the
// float64 reference's tolerance, batch invariant (a row's bits alone, among others, on 1 or 2
// threads, from strided rows), and a packed weight of another layout is refused by name.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "csrc/cpu/common/cpu_features.h"
#include "src/ops/linear/internal.h"
#include "test/ops/common/bits.h"
#include "test/ops/common/registered.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing {
namespace {

using linear::NativeLinearBrgemm;

struct PolicyScope {
  explicit PolicyScope(NativeLinearBrgemm p) { linear::set_native_linear_brgemm_for_test(p); }
  ~PolicyScope() { linear::set_native_linear_brgemm_for_test(NativeLinearBrgemm::kAuto); }
};

// The paths this CPU can run: the kernels always; torch's brgemm where its bf16 microkernel runs.
std::vector<NativeLinearBrgemm> policies() {
  std::vector<NativeLinearBrgemm> p = {NativeLinearBrgemm::kNever};
  const cpu::CpuFeatures& f = cpu::cpu_features();
  if (f.avx512_bf16 || f.amx_bf16) p.push_back(NativeLinearBrgemm::kAlways);
  return p;
}

const char* name(NativeLinearBrgemm p) { return p == NativeLinearBrgemm::kAlways ? "brgemm" : "kernels"; }

TEST(LinearBf16, EveryPathIsWithinTheReferenceAndBatchInvariant) {
  at::manual_seed(21);
  const auto pack = function_of<LinearPackFn>("cpu.native.linear_pack");
  const auto linear = function_of<LinearFn>("cpu.native.linear");
  const int64_t n = 200, k = 512, m = 37;  // n: a partial last panel
  const at::Tensor weight = at::randn({n, k}).to(at::kBFloat16);
  const at::Tensor packed = pack(weight, std::nullopt, std::nullopt, "bf16", 0);
  const at::Tensor wide = at::randn({m, k + 8}).to(at::kBFloat16);
  const at::Tensor x = wide.narrow(1, 4, k);  // strided rows
  const at::Tensor bias = at::randn({n});
  const at::Tensor exact = x.to(at::kDouble).matmul(weight.to(at::kDouble).t());
  const at::Tensor want = exact + bias.to(at::kDouble);
  const at::Tensor mag = x.to(at::kDouble).abs().matmul(weight.to(at::kDouble).abs().t()) + bias.to(at::kDouble).abs();
  for (NativeLinearBrgemm policy : policies()) {
    SCOPED_TRACE(name(policy));
    const PolicyScope scope(policy);
    const at::Tensor y = linear(x, packed, bias);
    ASSERT_EQ(y.scalar_type(), at::kBFloat16);
    const at::Tensor err = (y.to(at::kDouble) - want).abs();
    const at::Tensor tol = mag * ((k + 2) * std::ldexp(1.0, -24)) + want.abs() * std::ldexp(1.0, -8);
    EXPECT_TRUE(err.le(tol).all().item<bool>()) << "worst excess " << (err - tol).max().item<double>();
    const int threads = at::get_num_threads();
    at::set_num_threads(1);
    const at::Tensor one_thread = linear(x, packed, bias);
    at::set_num_threads(threads);
    EXPECT_TRUE(same_bits(y, one_thread));
    for (int64_t row : {0, 17, 36}) {
      EXPECT_TRUE(same_bits(linear(x.narrow(0, row, 1), packed, bias), y.narrow(0, row, 1))) << "row " << row;
      EXPECT_TRUE(same_bits(linear(x.narrow(0, row, 1).contiguous(), packed, bias), y.narrow(0, row, 1)));
    }
    for (int64_t rows : {2, 7, 16}) {
      EXPECT_TRUE(same_bits(linear(x.narrow(0, 3, rows), packed, bias), y.narrow(0, 3, rows))) << rows << " rows";
    }
    // 130 rows (more than a brgemm chunk and a kernel chunk of K = 512) with x's rows among them.
    const at::Tensor big = at::randn({130, k}).to(at::kBFloat16);
    big.narrow(0, 90, m).copy_(x);
    EXPECT_TRUE(same_bits(linear(big, packed, bias).narrow(0, 90, m), y));
  }
}

TEST(LinearBf16, APackedWeightOfAnotherLayoutIsRefused) {
  const auto pack = function_of<LinearPackFn>("cpu.native.linear_pack");
  const auto linear = function_of<LinearFn>("cpu.native.linear");
  at::Tensor packed = pack(at::randn({40, 64}).to(at::kBFloat16), std::nullopt, std::nullopt, "bf16", 0).clone();
  kernels::LinearHeader h;
  std::memcpy(&h, packed.const_data_ptr(), sizeof(h));
  EXPECT_EQ(h.layout, kernels::LinearLayout::kPanelPairs);
  h.layout = kernels::LinearLayout::kPanels;
  std::memcpy(packed.mutable_data_ptr(), &h, sizeof(h));
  const std::string e = error_message([&] { linear(at::randn({2, 64}).to(at::kBFloat16), packed, std::nullopt); });
  EXPECT_NE(e.find("linear: packed weight's layout is 1, expected 3"), std::string::npos) << e;
  EXPECT_NE(e.find("pack the weight again"), std::string::npos) << e;
}

}  // namespace
}  // namespace xllm_kernel::testing
