// The numerics tool end to end on the CPU: real suites pass, deliberately wrong implementations
// are caught, exit codes and reports follow the documented protocol.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "src/numerics/suite.h"
#include "src/numerics/suite_run.h"
#include "src/tools/cli.h"
#include "xllm_kernel/xllm_kernel.h"
#include "xllm_kernel/tools.h"

namespace xllm_kernel::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// ---- deliberately wrong implementations (priority -100: never selected) ----

at::Tensor correct_rms(const at::Tensor& input, const at::Tensor& weight, double eps) {
  at::Tensor x = input.to(at::kFloat);
  return (x * at::rsqrt(x.square().mean(-1, true) + eps) * weight.to(at::kFloat)).to(input.scalar_type());
}
at::Tensor wrong_value_rms_norm(const at::Tensor& input, const at::Tensor& weight, double eps) {
  return correct_rms(input, weight, eps) * 1.05;
}
at::Tensor mutating_rms_norm(const at::Tensor& input, const at::Tensor& weight, double eps) {
  at::Tensor out = correct_rms(input, weight, eps);
  const_cast<at::Tensor&>(input).add_(1);  // writes an input the contract says is read-only
  return out;
}
at::Tensor aliasing_layer_norm(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                               double eps) {
  at::Tensor x = input.to(at::kFloat);
  at::Tensor y = at::layer_norm(x, {input.size(-1)}, weight.to(at::kFloat), bias ? std::optional<at::Tensor>(bias->to(at::kFloat)) : std::nullopt, eps);
  const_cast<at::Tensor&>(input).copy_(y);
  return input;  // the result aliases the input
}
void forgetful_fused_add_rms_norm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps) {
  at::Tensor sum = input + residual;  // never written back to residual
  input.copy_(correct_rms(sum, weight, eps));
}

// gelu in float32 without cancellation (0.5 x erfc(-x / sqrt 2)), then off by 16 float32 ulps of
// the tensor's largest |x| on every element: within the activation suites' former bound (32 ulps of
// the largest |a b|), far outside the element-by-element one for the small results of x < 0.
at::Tensor absolute_error_gelu(const at::Tensor& input) {
  at::Tensor x = input.to(at::kFloat);
  at::Tensor out = x * 0.5 * at::erfc(x * -M_SQRT1_2);
  const double shift = x.numel() > 0 ? 16 * std::ldexp(1.0, -24) * x.abs().max().item<double>() : 0.0;
  return (out + shift).to(input.scalar_type());
}

KernelSpec wrong(const std::string& solution, const OpContract& c) {
  return KernelSpec{.name = "cpu." + solution + "." + c.operation, .contract = &c, .device = Device::kCpu,
                    .input_domain = "test", .solution = solution, .binding = "test", .priority = -100};
}

XLLM_REGISTER_KERNEL(wrong_value, rms_norm_operation(), wrong("test_wrong_value", rms_norm_contract()), wrong_value_rms_norm);
XLLM_REGISTER_KERNEL(mutating, rms_norm_operation(), wrong("test_mutating", rms_norm_contract()), mutating_rms_norm);
XLLM_REGISTER_KERNEL(aliasing, layer_norm_operation(), wrong("test_aliasing", layer_norm_contract()), aliasing_layer_norm);
XLLM_REGISTER_KERNEL(absolute_error, gelu_operation(), wrong("test_absolute_error", gelu_contract()), absolute_error_gelu);
XLLM_REGISTER_KERNEL(forgetful, fused_add_rms_norm_operation(), wrong("test_forgetful", fused_add_rms_norm_contract()),
                     forgetful_fused_add_rms_norm);

// ---- helpers ----

struct ToolRun {
  int code;
  json report;
};

ToolRun numerics(std::vector<std::string> args, const std::string& tag) {
  const fs::path out = fs::temp_directory_path() / ("xk_numerics_" + tag + "_" + std::to_string(::getpid()) + ".json");
  fs::remove(out);
  args.insert(args.begin(), "xllm-kernel-numerics");
  args.push_back("--output");
  args.push_back(out.string());
  ToolRun r{tools::numerics_main(args), json()};
  if (fs::exists(out)) {
    std::ifstream in(out);
    r.report = json::parse(in);
    fs::remove(out);
  }
  return r;
}

std::string failures_of(const json& report) {
  std::string all;
  for (const auto& impl : report["implementations"])
    for (const auto& r : impl["results"])
      for (const auto& f : r.value("failures", json::array())) all += f.get<std::string>() + "\n";
  return all;
}

// ---- tests ----

// The implementations the library declares and registers on the CPU, of every family (no list of
// operations here: a new family is covered).
std::vector<std::string> library_cpu_implementations() {
  std::vector<std::string> names;
  for (const auto& k : registry().kernels()) {
    if (k->spec.device == Device::kCpu && k->spec.module != nullptr) names.push_back(k->spec.name);
  }
  return names;
}

// Every one of them passes its operation's suite over the default grid, each a test of its own (so
// that a long suite has its own time budget and the test runner spreads them over its jobs). What a
// case's rows are the suite says (row_shape); the test names no family, operation or parameter.
class RealSuites : public ::testing::TestWithParam<std::string> {};

TEST_P(RealSuites, PassForTheCpuImplementation) {
  const std::string impl = GetParam();
  const auto k = registry().find(impl);
  ASSERT_NE(k, nullptr) << impl << " is not registered";
  const std::string op = k->operation->name();
  const numerics::OperationSuite* suite = numerics::find_suite(op);
  ASSERT_NE(suite, nullptr) << "no numerics suite";
  ASSERT_TRUE(suite->row_shape) << "the suite declares no row_shape";
  ToolRun r = numerics({"--operation", op, "--implementation", impl, "--revision", "test"}, "real");
  ASSERT_EQ(r.code, 0) << failures_of(r.report);
  ASSERT_EQ(r.report["implementations"].size(), 1u);
  const json& i = r.report["implementations"][0];
  EXPECT_EQ(i["implementation"]["name"], impl);
  EXPECT_EQ(i["implementation"]["solution"], k->spec.solution);
  EXPECT_EQ(i["implementation"]["contract_version"], k->spec.contract->version);
  EXPECT_GT(i["coverage"]["passed"].get<int>(), 50);
  EXPECT_EQ(i["coverage"]["failed"], 0);
  EXPECT_LE(i["worst_headroom"].get<double>(), 1.0);
  // Errors are measured, not zero by accident (an exact operation's errors are zero).
  if (k->spec.contract->numerical_mode != NumericalMode::kExact) EXPECT_GT(i["worst_headroom"].get<double>(), 0.0);
  EXPECT_EQ(r.report["environment"]["revision"], "test");
  // Empty calls (no rows) and tails (a row width above 16 that no SIMD width divides) are covered.
  bool zero = false, tail = false;
  for (const auto& c : i["results"]) {
    const numerics::RowShape shape = suite->row_shape(c["parameters"]);
    zero |= shape.rows == 0;
    tail |= shape.width > 16 && shape.width % 8 != 0;
  }
  EXPECT_TRUE(zero) << "no case without rows";
  EXPECT_TRUE(tail) << "no case with a tail";
}

INSTANTIATE_TEST_SUITE_P(Numerics, RealSuites, ::testing::ValuesIn(library_cpu_implementations()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '.' ? '_' : c;
                           return n;
                         });

// Every CPU implementation the catalog declares is registered, and so has its RealSuites test.
TEST(Numerics, EveryDeclaredCpuImplementationHasARealSuiteTest) {
  const std::vector<std::string> names = library_cpu_implementations();
  const std::set<std::string> tested(names.begin(), names.end());
  EXPECT_FALSE(tested.empty());
  size_t declared = 0;
  for (const Group* group : builtin_groups()) {
    for (const BackendModule* module : group->modules) {
      if (module->device != Device::kCpu) continue;
      for (const Implementation& implementation : module->implementations) {
        ++declared;
        EXPECT_TRUE(tested.count(module->implementation_name(implementation)))
            << module->implementation_name(implementation) << " is declared but was not tested";
      }
    }
  }
  EXPECT_GT(declared, 0u);
}

TEST(Numerics, CatchesWrongValue) {
  ToolRun r = numerics({"--operation", "rms_norm", "--implementation", "cpu.test_wrong_value.rms_norm", "--hidden", "64"}, "value");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.report["summary"]["status"], "failed");
  EXPECT_NE(failures_of(r.report).find("output out0:"), std::string::npos) << failures_of(r.report);
  EXPECT_GT(r.report["implementations"][0]["worst_headroom"].get<double>(), 1.0);
}

// The activation suites bound the float32 evaluation's error element by element: an absolute error
// sized by the tensor's largest value is caught where the true result is small.
TEST(Numerics, ActivationBoundIsElementwise) {
  ToolRun r = numerics({"--operation", "gelu", "--implementation", "cpu.test_absolute_error.gelu", "--hidden", "64",
                        "--tokens", "7", "--dtype", "float32"},
                       "elementwise");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(failures_of(r.report).find("output out0:"), std::string::npos) << failures_of(r.report);
  EXPECT_GT(r.report["implementations"][0]["worst_headroom"].get<double>(), 1.0);
  // The same shapes pass on the library's own implementations (the bound is not simply too tight).
  ToolRun ok = numerics({"--operation", "gelu", "--implementation", "all", "--device", "cpu", "--hidden", "64",
                         "--tokens", "7", "--dtype", "float32"},
                        "elementwise_ok");
  for (const auto& i : ok.report["implementations"]) {
    if (i["implementation"]["solution"] == "test_absolute_error") continue;
    EXPECT_EQ(i["coverage"]["failed"], 0) << i["implementation"]["name"];
  }
}

TEST(Numerics, CatchesUndeclaredMutation) {
  ToolRun r = numerics({"--operation", "rms_norm", "--implementation", "cpu.test_mutating.rms_norm", "--hidden", "64"}, "mutation");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(failures_of(r.report).find("input input was modified, but the contract does not declare it mutated"),
            std::string::npos)
      << failures_of(r.report);
}

TEST(Numerics, CatchesUndeclaredAlias) {
  ToolRun r = numerics({"--operation", "layer_norm", "--implementation", "cpu.test_aliasing.layer_norm", "--hidden", "64"}, "alias");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(failures_of(r.report).find("output out0 aliases input input"), std::string::npos) << failures_of(r.report);
}

TEST(Numerics, CatchesMissingDeclaredMutation) {
  ToolRun r = numerics({"--operation", "fused_add_rms_norm", "--implementation", "cpu.test_forgetful.fused_add_rms_norm", "--hidden", "64"},
                   "forgetful");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(failures_of(r.report).find("mutation residual:"), std::string::npos) << failures_of(r.report);
}

TEST(Numerics, NothingPassedIsExitThree) {
  // The CPU has no graph API: every case is unsupported, with the reason.
  ToolRun r = numerics({"--operation", "rms_norm", "--mode", "graph", "--hidden", "64"}, "graph");
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.report["summary"]["status"], "nothing_passed");
  EXPECT_EQ(r.report["summary"]["passed"], 0);
  EXPECT_EQ(r.report["implementations"][0]["results"][0]["reason"], "device cpu has no graph API");
}

TEST(Numerics, UsageErrorsAreExitTwoWithoutReport) {
  const std::vector<std::vector<std::string>> bad{
      {"--operation", "no_such_op"},
      {"--operation", "rms_norm", "--implementation", "cpu.natve.rms_norm"},
      {"--operation", "rms_norm", "--tokens", "x"},
      {"--operation", "rms_norm", "--hidden", "0"},
      {"--operation", "rms_norm", "--dtype", "float64"},
      {"--operation", "rms_norm", "--mode", "turbo"},
      {"--operation", "no_such_op", "--help"},
      {"--operation", "rms_norm", "--device", "tpu"},
      {"--operation", "rms_norm", "--device", "cuda:x"},
      {"--no-such-flag"},
      {},
  };
  for (const auto& args : bad) {
    ToolRun r = numerics(args, "usage");
    EXPECT_EQ(r.code, 2) << (args.empty() ? "(no args)" : args.back());
    EXPECT_TRUE(r.report.is_null());
  }
}

TEST(Numerics, DeviceGraphNamesAreTheGraphMode) {
  for (const char* name : {"aclgraph", "cudagraph"}) {
    ToolRun r = numerics({"--operation", "rms_norm", "--mode", name, "--hidden", "64"}, name);
    EXPECT_EQ(r.code, 3) << name;  // the CPU has no graph API: every case unsupported
    EXPECT_EQ(r.report["mode"], "graph") << name;
    EXPECT_EQ(r.report["implementations"][0]["results"][0]["reason"], "device cpu has no graph API");
  }
}

TEST(Numerics, UnknownOperationHelpNamesTheKnownOnes) {
  ::testing::internal::CaptureStderr();
  const int code = tools::numerics_main({"xllm-kernel-numerics", "--operation", "my_operation", "--help"});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 2);
  EXPECT_NE(err.find("unknown operation 'my_operation'"), std::string::npos) << err;
  EXPECT_NE(err.find("rms_norm"), std::string::npos) << err;
}

TEST(Numerics, HelpShowsSuiteOptions) {
  ::testing::internal::CaptureStdout();
  const int code = tools::numerics_main({"xllm-kernel-numerics", "--operation", "layer_norm", "--help"});
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(code, 0);
  for (const char* flag : {"--tokens", "--hidden", "--dtype", "--bias", "--implementation", "--seed"}) {
    EXPECT_NE(out.find(flag), std::string::npos) << flag;
  }
}

TEST(Numerics, ListShowsAvailability) {
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(tools::numerics_main({"xllm-kernel-numerics", "--list"}), 0);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("cpu.native.rms_norm  available (selected)"), std::string::npos) << out;
  EXPECT_NE(out.find("cpu.torch.layer_norm  available"), std::string::npos) << out;
}

// --implementation: a solution's name, and a comma list run in its order, each implementation once;
// --grid headline: the report says so and has the suite's headline cases.
TEST(Numerics, ImplementationListAndHeadlineGrid) {
  ToolRun r = numerics({"--operation", "rms_norm", "--implementation", "selected,torch,cpu.torch.rms_norm,selected",
                        "--grid", "headline"},
                       "list");
  ASSERT_EQ(r.code, 0) << failures_of(r.report);
  EXPECT_EQ(r.report["grid"], "headline");
  const json& impls = r.report["implementations"];
  ASSERT_EQ(impls.size(), 2u);
  EXPECT_EQ(impls[0]["implementation"]["name"], "cpu.native.rms_norm");
  EXPECT_EQ(impls[1]["implementation"]["name"], "cpu.torch.rms_norm");
  std::string grid;
  const numerics::OperationSuite* suite = numerics::find_suite("rms_norm");
  EXPECT_EQ(impls[0]["results"].size(), suite->cases(numerics::grid_options(*suite, {}, "headline", "numerics", grid)).size());
  for (const char* bad : {"all,torch", "selected,", "no_such_solution"}) {
    EXPECT_EQ(numerics({"--operation", "rms_norm", "--implementation", bad}, "bad").code, 2) << bad;
  }
  EXPECT_EQ(numerics({"--operation", "rms_norm", "--grid", "everything"}, "bad_grid").code, 2);
}

TEST(Numerics, SameSeedSameInputsAnyOrder) {
  ToolRun a = numerics({"--operation", "rms_norm", "--implementation", "cpu.torch.rms_norm", "--hidden", "7,64", "--dtype", "bfloat16"}, "seed_a");
  ToolRun b = numerics({"--operation", "rms_norm", "--implementation", "cpu.torch.rms_norm", "--hidden", "64", "--dtype", "bfloat16"}, "seed_b");
  ASSERT_EQ(a.code, 0);
  ASSERT_EQ(b.code, 0);
  // The hidden=64 cases saw the same inputs whether or not hidden=7 ran first.
  for (const auto& rb : b.report["implementations"][0]["results"]) {
    for (const auto& ra : a.report["implementations"][0]["results"]) {
      if (ra["case_id"] == rb["case_id"]) EXPECT_EQ(ra["max_abs_error"], rb["max_abs_error"]) << rb["case_id"];
    }
  }
  ToolRun c = numerics({"--operation", "rms_norm", "--implementation", "cpu.torch.rms_norm", "--hidden", "64", "--dtype", "bfloat16", "--seed", "7"}, "seed_c");
  bool differs = false;
  for (size_t i = 0; i < c.report["implementations"][0]["results"].size(); ++i) {
    differs |= c.report["implementations"][0]["results"][i]["max_abs_error"] != b.report["implementations"][0]["results"][i]["max_abs_error"];
  }
  EXPECT_TRUE(differs) << "another seed should give other inputs";
}

TEST(Numerics, ReportsAreWrittenAtomically) {
  const fs::path dir = fs::temp_directory_path() / ("xk_atomic_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path missing_dir = dir / "missing" / "r.json";
  EXPECT_EQ(tools::numerics_main({"xllm-kernel-numerics", "--operation", "rms_norm", "--hidden", "7", "--output", missing_dir.string()}), 1);
  EXPECT_FALSE(fs::exists(missing_dir));
  // An existing report is replaced whole, and no temporary file stays behind.
  const fs::path out = dir / "r.json";
  { std::ofstream(out) << "old"; }
  EXPECT_EQ(tools::numerics_main({"xllm-kernel-numerics", "--operation", "rms_norm", "--hidden", "7", "--output", out.string(),
                                  "--markdown", (dir / "r.md").string()}),
            0);
  std::ifstream in(out);
  EXPECT_NO_THROW(json::parse(in));
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 2u);  // r.json and r.md only
  fs::remove_all(dir);
}

// The "adding an operator" checklist: every catalog operation has a fake, a suite and a reference.
TEST(Checklist, EveryOperationHasFakeSuiteAndReference) {
  for (const Operation* op : builtin_operations()) {
    SCOPED_TRACE(op->name());
    auto handle = c10::Dispatcher::singleton().findSchema({"xllm_kernel::" + op->name(), ""});
    ASSERT_TRUE(handle.has_value()) << "no torch schema";
    EXPECT_TRUE(handle->hasKernelForDispatchKey(c10::DispatchKey::Meta)) << "no fake (Meta) kernel";
    const numerics::OperationSuite* suite = numerics::find_suite(op->name());
    ASSERT_NE(suite, nullptr) << "no numerics suite";
    EXPECT_TRUE(suite->has_reference) << "suite without an independent reference";
    EXPECT_TRUE(suite->row_shape) << "suite without row_shape (the generic tests' view of a case)";
    EXPECT_FALSE(suite->cases({}).empty()) << "suite without default cases";
    // The headline cases of scripts/main.sh's quick default: one to four, each with rows.
    ASSERT_FALSE(suite->headline.empty()) << "suite without headline cases (--grid headline)";
    std::string grid;
    const auto headline = suite->cases(numerics::grid_options(*suite, {}, "headline", "numerics", grid));
    EXPECT_EQ(grid, "headline");
    EXPECT_GE(headline.size(), 1u);
    EXPECT_LE(headline.size(), 4u) << "a headline grid is one to four cases";
    for (const auto& c : headline) EXPECT_GT(suite->row_shape(c->parameters()).rows, 0) << c->case_id();
  }
}

// --grid: the headline cases where the user gave no option, the user's values where given; the
// benchmark's default grid is the suite's benchmark_defaults, the numerics tool's its own.
TEST(Numerics, GridOptionsFillWhatTheUserLeftOut) {
  const numerics::OperationSuite* suite = numerics::find_suite("rms_norm");
  ASSERT_NE(suite, nullptr);
  std::string grid;
  numerics::SuiteOptions given{{"dtype", {"float32"}}};
  const numerics::SuiteOptions headline = numerics::grid_options(*suite, given, "headline", "benchmark", grid);
  EXPECT_EQ(grid, "headline");
  EXPECT_EQ(headline.at("dtype"), std::vector<std::string>{"float32"});
  EXPECT_EQ(headline.at("tokens"), suite->headline.at("tokens"));
  const numerics::SuiteOptions timing = numerics::grid_options(*suite, {}, "default", "benchmark", grid);
  EXPECT_EQ(grid, "default");
  EXPECT_EQ(timing.at("tokens"), suite->benchmark_defaults.at("tokens"));
  EXPECT_TRUE(numerics::grid_options(*suite, {}, "default", "numerics", grid).empty());
  numerics::OperationSuite without = *suite;
  without.headline.clear();
  EXPECT_TRUE(numerics::grid_options(without, {}, "headline", "numerics", grid).empty());
  EXPECT_EQ(grid, "default") << "a suite without headline cases runs its default grid";
  EXPECT_THROW(numerics::grid_options(*suite, {}, "all", "numerics", grid), tools::UsageError);
}

}  // namespace
}  // namespace xllm_kernel::testing
