// Every CUDA quantization implementation in the registry (cuda.native.* from the plugin,
// cuda.torch.* where the family has them) on a GPU: the bridge checks the CPU tests run
// (test/ops/quantization/bridge_checks.h: the reference, the compositions bit for bit, non-finite
// rows, errors, empty inputs), rows 2^31 elements apart, and cuda.native equal to cpu.native bit for
// bit. Every test skips, saying why, where no usable GPU is.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "test/cuda/cuda_test_support.h"
#include "test/ops/quantization/bridge_checks.h"

namespace xllm_kernel::testing {
namespace {

using namespace quantization;  // NOLINT: the shared bodies of the bridge checks

const at::Device kGpu(at::kCUDA, 0);

// The solutions ("cuda.native", "cuda.torch") that implement every operation of the family.
std::vector<std::string> solutions() {
  std::set<std::string> found;
  for (const std::string& op : operations()) {
    for (const std::string& name : cuda_implementations_of(op)) {
      const std::string suffix = "." + op;
      if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        found.insert(name.substr(0, name.size() - suffix.size()));
      }
    }
  }
  std::vector<std::string> out;
  for (const std::string& s : found) {
    bool all = true;
    for (const std::string& op : operations()) {
      const auto names = cuda_implementations_of(op);
      all = all && std::find(names.begin(), names.end(), s + "." + op) != names.end();
    }
    if (all) out.push_back(s);
  }
  return out;
}

class CudaQuantizationImpl : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaQuantizationImpl, BridgeChecks) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  check_bridge(GetParam(), kGpu);
}

TEST_P(CudaQuantizationImpl, RowsPast2To31Elements) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  check_large_offsets(GetParam(), kGpu);
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaQuantizationImpl, ::testing::ValuesIn(solutions()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) c = (c == '.') ? '_' : c;
                           return n;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaQuantizationImpl);

// The plugin registers cuda.native for all eight operations where a GPU can run it.
TEST(CudaQuantization, NativeImplementsEveryOperation) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  for (const std::string& op : operations()) {
    const Candidate c = cuda_candidate(op, "cuda.native." + op);
    EXPECT_NE(c.verdict, Verdict::kExcluded) << op << ": " << c.reason;
  }
}

// The unfused operations leave no rounding to the implementation: cuda.native equals cpu.native bit
// for bit on every dtype and scheme, non-finite rows included.
TEST(CudaQuantization, NativeUnfusedEqualsCpuNative) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  for (const std::string op : {"per_token_quant", "per_token_quant_int8_azp", "static_quant"}) {
    for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      for (const bool fp8 : {false, true}) {
        for (const bool bound : {false, true}) {
          for (const std::string layout : {"contiguous", "strided"}) {
            at::Tensor values = at::randn({33, 1027}, at::kDouble).mul_(fp8 ? 1000.0 : 1.0);
            values[3][5] = kNaN;
            values[4][0] = kInf;
            values[5].zero_();
            Args c = make_args(op, 33, 1027, dtype, fp8, bound, layout, at::kCPU, values);
            Args g = c;
            g.input = laid_out(values, layout, dtype, kGpu);
            for (at::Tensor* t : {&g.scale, &g.azp, &g.scale_ub}) {
              if (t->defined()) *t = t->to(kGpu);
            }
            const auto want = run("cpu.native", op, c);
            const auto got = run("cuda.native", op, g);
            ASSERT_EQ(want.size(), got.size());
            for (size_t k = 0; k < want.size(); ++k) {
              EXPECT_TRUE(same_bits(want[k], got[k])) << op << " " << dtype << " fp8 " << fp8 << " bound " << bound << " "
                                                      << layout << " result " << k;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace xllm_kernel::testing
