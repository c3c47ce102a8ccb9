// Every CUDA implementation the build registers, of every family, through its operation's
// numerics suite on a GPU (the default grid plus the suites' cuda shapes), in every mode it
// declares (eager, graph): no list of operations here, so a new family is covered. The CPU counterpart is in
// test/numerics. Skips, saying why, where no usable GPU is.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test/cuda/cuda_test_support.h"
#include "xllm_kernel/tools.h"

namespace xllm_kernel::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::vector<std::string> operation_names() {
  std::vector<std::string> names;
  for (const Operation* op : builtin_operations()) names.push_back(op->name());
  return names;
}

// One test per operation of the catalog, so ctest runs them side by side (each within its own
// timeout) and a slow family does not hide the others' results.
class CudaSuites : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaSuites, EveryCudaImplementationPassesItsSuite) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  const std::string op = GetParam();
  int tested = 0;
  for (const auto& impl : cuda_implementations_of(op)) {
    const auto& modes = registry().find(impl)->spec.execution_modes;
    for (const char* mode : {"eager", "graph"}) {
      // Only the modes the implementation declares (cuda.torch.reshape_and_cache is eager only).
      const ExecutionMode m = std::string(mode) == "graph" ? ExecutionMode::kGraph : ExecutionMode::kEager;
      if (std::find(modes.begin(), modes.end(), m) == modes.end()) continue;
      SCOPED_TRACE(impl + " " + mode);
      const fs::path out = fs::temp_directory_path() / ("xk_cuda_suite_" + std::to_string(::getpid()) + ".json");
      fs::remove(out);
      const int code = tools::numerics_main({"xllm-kernel-numerics", "--operation", op, "--device", "cuda",
                                             "--mode", mode, "--implementation", impl, "--output", out.string()});
      ASSERT_TRUE(fs::exists(out)) << "no report (exit " << code << ")";
      std::ifstream in(out);
      const json report = json::parse(in);
      fs::remove(out);
      ASSERT_EQ(report["implementations"].size(), 1u);
      const json& i = report["implementations"][0];
      std::string failures;
      for (const auto& r : i["results"])
        for (const auto& f : r.value("failures", json::array())) failures += r["case_id"].get<std::string>() + ": " + f.get<std::string>() + "\n";
      EXPECT_EQ(code, 0) << failures;
      EXPECT_EQ(i["coverage"]["failed"], 0) << failures;
      EXPECT_GT(i["coverage"]["passed"].get<int>(), 20);
      EXPECT_LE(i["worst_headroom"].get<double>(), 1.0);
      ++tested;
    }
  }
  // Every operation of the catalog goes through its suite on the GPU (the parameters come from
  // the catalog: a new family is covered): one without a CUDA implementation fails here.
  EXPECT_GT(tested, 0) << op << ": no CUDA implementation ran its suite";
}

INSTANTIATE_TEST_SUITE_P(Catalog, CudaSuites, ::testing::ValuesIn(operation_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace xllm_kernel::testing
