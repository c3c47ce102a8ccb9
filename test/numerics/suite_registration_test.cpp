// Suites added at run time (add_suite, as the Python package adds its suites): one suite per
// operation, the tools list them, and their options appear under `--operation NAME --help`.
#include <gtest/gtest.h>

#include <stdexcept>

#include "src/numerics/suite.h"
#include "xllm_kernel/tools.h"

namespace xllm_kernel::testing {
namespace {

using numerics::OperationSuite;

std::shared_ptr<OperationSuite> runtime_suite(const std::string& operation, const std::string& origin) {
  auto suite = std::make_shared<OperationSuite>();
  suite->operation = operation;
  suite->description = "a suite added at run time";
  suite->origin = origin;
  suite->add_arguments = [](CLI::App& app, numerics::SuiteOptions& o) {
    app.add_option("--widths", o["widths"], "Widths of the runtime suite");
  };
  suite->cases = [](const numerics::SuiteOptions&) { return std::vector<std::shared_ptr<const numerics::KernelCase>>{}; };
  return suite;
}

TEST(SuiteRegistration, SecondSuiteForAnOperationIsAnErrorNamingBoth) {
  try {
    numerics::add_suite(runtime_suite("rms_norm", "Python module test.duplicate"));
    FAIL() << "a second rms_norm suite was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rms_norm"), std::string::npos) << what;
    EXPECT_NE(what.find("the C++ suite (XLLM_REGISTER_SUITE)"), std::string::npos) << what;
    EXPECT_NE(what.find("Python module test.duplicate"), std::string::npos) << what;
  }
  EXPECT_EQ(numerics::find_suite("rms_norm")->origin, "");  // the C++ suite is still the one
}

TEST(SuiteRegistration, AddedSuiteIsListedOnceAndShowsItsOptions) {
  const size_t before = numerics::builtin_suites().size();
  numerics::add_suite(runtime_suite("zz_runtime_suite", "Python module test.first"));
  EXPECT_EQ(numerics::builtin_suites().size(), before + 1);
  EXPECT_EQ(numerics::builtin_suites().back()->operation, "zz_runtime_suite");  // ordered by operation
  ASSERT_NE(numerics::find_suite("zz_runtime_suite"), nullptr);

  try {
    numerics::add_suite(runtime_suite("zz_runtime_suite", "Python module test.second"));
    FAIL() << "a second zz_runtime_suite suite was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("Python module test.first"), std::string::npos) << what;
    EXPECT_NE(what.find("Python module test.second"), std::string::npos) << what;
  }
  EXPECT_EQ(numerics::builtin_suites().size(), before + 1);

  ::testing::internal::CaptureStdout();
  const int code = tools::numerics_main({"xllm-kernel-numerics", "--operation", "zz_runtime_suite", "--help"});
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(code, 0);
  EXPECT_NE(out.find("--widths"), std::string::npos) << out;
}

TEST(SuiteRegistration, SuiteWithoutCallbacksIsRejected) {
  auto suite = runtime_suite("zz_incomplete", "Python module test.incomplete");
  suite->cases = nullptr;
  EXPECT_THROW(numerics::add_suite(suite), std::invalid_argument);
  EXPECT_EQ(numerics::find_suite("zz_incomplete"), nullptr);
}

}  // namespace
}  // namespace xllm_kernel::testing
