// cpu.native's two paths through torch's at::native::cpublas::brgemm, each against the kernels'
// own, forced on any CPU torch's brgemm runs on (cpu::ScopedCpuFeatures' torch_brgemm_without_amx; by
// default they run where the CPU has AMX):
//   linear, bf16 input with bf16 weights: the vdpbf16ps kernel (or the float32 chain where the CPU has
//     no AVX512_BF16) and brgemm are each within the float64 reference's tolerance and batch invariant
//     (a row's bits alone, among others, on 1 or 2 threads, from strided rows); a packed weight of
//     another layout is refused by name.
//   scaled_mm, w8a8-int8: brgemm's int32 sums give the contract's formula bit for bit, as the kernels
//     do, with and without azp, K not a multiple of 4, any M.
//   scaled_mm, w8a8-fp8 (per channel and 128 x 128 blocks): brgemm's float32 sums are within the
//     float32 bound of the float64 value, and batch invariant.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <optional>
#include <tuple>
#include <string>
#include <vector>

#include "csrc/cpu/common/cpu_features.h"
#include "src/ops/linear/internal.h"
#include "test/ops/common/bits.h"
#include "test/ops/common/registered.h"
#include "test/ops/linear/scaled_mm_weights.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing {
namespace {

// Which path cpu.native takes: its own kernels (AMX taken away, so never torch's brgemm), or torch's
// brgemm on any CPU it runs on (cpu::ScopedCpuFeatures' torch_brgemm_without_amx).
enum class NativeLinearBrgemm { kNever, kAlways };

class PolicyScope {
 public:
  explicit PolicyScope(NativeLinearBrgemm p) : scope_(Allowed(p), p == NativeLinearBrgemm::kAlways) {}

 private:
  static cpu::CpuFeatures Allowed(NativeLinearBrgemm p) {
    cpu::CpuFeatures f = cpu::probed_cpu_features();
    if (p == NativeLinearBrgemm::kNever) f.amx_bf16 = f.amx_int8 = false;
    return f;
  }
  const cpu::ScopedCpuFeatures scope_;
};

// The paths this CPU can run: the kernels always; torch's brgemm where its bf16 (int8) microkernel runs.
std::vector<NativeLinearBrgemm> policies(bool int8) {
  std::vector<NativeLinearBrgemm> p = {NativeLinearBrgemm::kNever};
  const cpu::CpuFeatures& f = cpu::cpu_features();
  if (int8 ? f.avx512_vnni || f.amx_int8 : f.avx512_bf16 || f.amx_bf16) p.push_back(NativeLinearBrgemm::kAlways);
  return p;
}

const char* name(NativeLinearBrgemm p) { return p == NativeLinearBrgemm::kAlways ? "brgemm" : "kernels"; }

TEST(NativeBrgemm, LinearBf16PathsAreWithinTheReferenceAndBatchInvariant) {
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
  for (NativeLinearBrgemm policy : policies(false)) {
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

TEST(NativeBrgemm, ScaledMmInt8SumsGiveTheFormulasBits) {
  at::manual_seed(22);
  const auto pack = function_of<LinearPackFn>("cpu.native.linear_pack");
  const auto scaled = function_of<ScaledMmFn>("cpu.native.scaled_mm");
  if (policies(true).size() == 1) GTEST_SKIP() << "torch's int8 brgemm does not run here (no AVX512_VNNI or AMX-INT8)";
  for (const auto& [m, n, k, with_azp] : std::vector<std::tuple<int64_t, int64_t, int64_t, bool>>{
           {1, 64, 4096, false}, {17, 70, 130, true}, {130, 200, 512, false}, {0, 40, 64, false}, {5, 37, 68, true}}) {
    SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k));
    const Weight w = make_weight("w8a8-int8", n, k);
    const at::Tensor packed = pack(w.q, w.scales, w.zeros, "w8a8-int8", w.group_size);
    const at::Tensor a = at::randint(-128, 128, {m, k}, at::kChar);
    const at::Tensor sa = at::rand({m, 1}).add_(0.01);
    const std::optional<at::Tensor> azp =
        with_azp ? std::optional<at::Tensor>(at::randint(-20, 20, {m, 1}, at::kInt)) : std::nullopt;
    const at::Tensor bias = at::randn({n});
    const at::Tensor want = formula(w, a, sa, azp, bias, at::kBFloat16);
    for (NativeLinearBrgemm policy : policies(true)) {
      SCOPED_TRACE(name(policy));
      const PolicyScope scope(policy);
      EXPECT_TRUE(same_bits(scaled(a, packed, sa, azp, bias, at::kBFloat16), want));
    }
  }
}

TEST(NativeBrgemm, ScaledMmFp8IsWithinTheFloat32BoundAndBatchInvariant) {
  at::manual_seed(23);
  const auto pack = function_of<LinearPackFn>("cpu.native.linear_pack");
  const auto scaled = function_of<ScaledMmFn>("cpu.native.scaled_mm");
  for (const auto& [group, k] : std::vector<std::pair<int64_t, int64_t>>{{0, 300}, {128, 512}, {128, 300}}) {
    SCOPED_TRACE("group " + std::to_string(group) + " k " + std::to_string(k));
    const int64_t m = 37, n = 70;
    const Weight w = make_weight("w8a8-fp8", n, k, group);
    const at::Tensor packed = pack(w.q, w.scales, std::nullopt, "w8a8-fp8", 0);
    const at::Tensor a = at::randn({m, k}).mul_(3).to(at::kFloat8_e4m3fn);
    const at::Tensor sa = at::rand({m, 1}).add_(0.01);
    for (NativeLinearBrgemm policy : policies(false)) {
      SCOPED_TRACE(name(policy));
      const PolicyScope scope(policy);
      const at::Tensor y = scaled(a, packed, sa, std::nullopt, std::nullopt, at::kFloat);
      EXPECT_LE(fp8_bound_excess(w, a, sa, y), 0.0);
      for (int64_t row : {0, 20, 36}) {
        EXPECT_TRUE(same_bits(scaled(a.narrow(0, row, 1), packed, sa.narrow(0, row, 1), std::nullopt, std::nullopt,
                                     at::kFloat),
                              y.narrow(0, row, 1)))
            << "row " << row;
      }
    }
  }
}

TEST(NativeBrgemm, LinearRefusesAPackedWeightOfAnotherLayout) {
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
// explain says when cpu.native hands its GEMM tiles to torch's oneDNN brgemm, and only then.
TEST(NativeBrgemm, ExplainSaysWhenCpuNativeRunsTorchsBrgemm) {
  // A runtime of its own for each question: a runtime runs an implementation's probes once.
  const auto detail = [](const std::string& op) {
    Runtime fresh(registry(), std::vector<const Group*>{&linear_group()}, false);
    for (const Candidate& c : fresh.explain(Device::kCpu, op).candidates) {
      if (c.name == "cpu.native." + op) return c.detail;
    }
    return std::string("(no candidate)");
  };
  {
    const PolicyScope scope(NativeLinearBrgemm::kNever);
    for (const char* op : {"linear", "scaled_mm", "linear_dynamic_quant", "linear_pack"}) {
      EXPECT_EQ(detail(op).find("oneDNN"), std::string::npos) << op << ": " << detail(op);
    }
  }
  const PolicyScope scope(NativeLinearBrgemm::kAlways);
  EXPECT_NE(detail("linear").find("oneDNN via torch: bf16 rows on bf16 weights"), std::string::npos) << detail("linear");
  for (const char* op : {"scaled_mm", "linear_dynamic_quant"}) {
    EXPECT_NE(detail(op).find("w8a8-int8's int32 sums: torch's oneDNN u8s8 brgemm"), std::string::npos) << detail(op);
    if (cpu::cpu_features().avx512_bf16) EXPECT_NE(detail(op).find("w8a8-fp8's float32 sums"), std::string::npos) << op;
  }
  EXPECT_EQ(detail("linear_pack").find("oneDNN"), std::string::npos);
}

}  // namespace xllm_kernel::testing
