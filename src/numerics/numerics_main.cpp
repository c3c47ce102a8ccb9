// xllm-kernel-numerics: validates implementations against the suites' float64 references.
#include <ATen/ATen.h>
#include <unistd.h>

#include <iostream>
#include <sstream>

#include "src/numerics/aggregate.h"
#include "src/numerics/suite_run.h"
#include "src/numerics/tensor_case.h"
#include "src/numerics/verify.h"
#include "src/tools/cli.h"
#include "src/tools/distributed/run.h"
#include "src/tools/occupancy.h"
#include "src/tools/report.h"
#include "src/tools/run_tool.h"
#include "xllm_kernel/device_api.h"
#include "xllm_kernel/runtime.h"
#include "xllm_kernel/tools.h"

namespace xllm_kernel {
namespace numerics {
namespace {

using tools::CommonOptions;
using tools::format_number;
using tools::Target;
using tools::UsageError;
using tools::distributed::DistributedRun;

struct Counts {
  int passed = 0, failed = 0, unsupported = 0;
};

// Runs one case; returns its result object.
// `prepared_reason`: why the suite's prepare hook rejected this implementation, if it did.
json run_case(const KernelCase& c, const Plan& plan, const Target& target, const std::optional<std::string>& prepared_reason,
              Counts& counts, DistributedRun* dist) {
  json r{{"case_id", c.case_id()}, {"parameters", c.parameters()}};
  if (const auto reason = case_unsupported_reason(c, plan, target, prepared_reason)) {
    ++counts.unsupported;
    r["status"] = "unsupported";
    r["reason"] = *reason;
    return r;
  }
  PreparedCase prepared = c.prepare(plan);
  const DeviceApi* api = device_api(plan.device);
  std::vector<at::Tensor> eager;
  if (plan.mode == ExecutionMode::kGraph) {
    // Eager first (also the warmup capture needs), then capture one call, replay it, and validate
    // what the replay produced; the replay must also equal the eager call bitwise.
    prepared.function();
    api->synchronize(plan.device_index);
    if (prepared.snapshot) eager = prepared.snapshot();
    if (prepared.reset) prepared.reset();
    auto graph = api->capture(plan.device_index, prepared.function, 1);
    if (prepared.reset) prepared.reset();
    graph->replay();
  } else {
    prepared.function();
  }
  api->synchronize(plan.device_index);
  Validation v = prepared.validate();
  if (!eager.empty()) {
    const std::vector<at::Tensor> replayed = prepared.snapshot();
    bool same = replayed.size() == eager.size();
    for (size_t i = 0; same && i < eager.size(); ++i) same = bitwise_equal(replayed[i], eager[i]);
    v.checks.push_back({{"name", "graph"}, {"kind", "graph_equals_eager"}, {"passed", same}});
    if (!same) {
      v.passed = false;
      v.failures.push_back("graph replay differs from the eager call (bitwise)");
    }
  }
  if (dist) dist->test_fault().after_validation(v.passed, v.failures);
  (v.passed ? counts.passed : counts.failed) += 1;
  r["status"] = v.passed ? "passed" : "failed";
  r["max_abs_error"] = v.max_abs_error;
  r["max_rel_error"] = v.max_rel_error;
  r["max_ulp"] = v.max_ulp;
  r["headroom"] = v.headroom;
  r["mismatches"] = v.mismatches;
  r["failures"] = v.failures;
  r["checks"] = v.checks;
  r["bytes_read"] = prepared.metadata.bytes_read;
  r["bytes_written"] = prepared.metadata.bytes_written;
  return r;
}

// `limit` caps the rows of cases that did not pass (the JSON report has them all).
std::string markdown(const json& report, size_t limit) {
  std::ostringstream md;
  md << "# Numerics: " << report["operation"].get<std::string>() << " on " << report["device"].get<std::string>()
     << " (" << report["mode"].get<std::string>() << ", " << report.value("grid", "default") << " grid)\n\n";
  const json& env = report["environment"];
  md << "Revision `" << env["revision"].get<std::string>() << "`, torch " << env["torch"].get<std::string>() << ", "
     << env["cpu_model"].get<std::string>() << " (" << env["cpu_simd_target"].get<std::string>() << "), seed "
     << report["seed"] << ".\n\n";
  if (report.contains("occupancy")) md << tools::occupancy_markdown(report["occupancy"]);
  md << "| implementation | cases | passed | failed | unsupported | worst headroom | max ULP |\n";
  md << "|---|---|---|---|---|---|---|\n";
  for (const auto& impl : report["implementations"]) {
    const json& c = impl["coverage"];
    md << "| `" << impl["implementation"]["name"].get<std::string>() << "` | " << c["cases"] << " | " << c["passed"]
       << " | " << c["failed"] << " | " << c["unsupported"] << " | " << format_number(impl["worst_headroom"].get<double>())
       << " | " << format_number(impl["worst_ulp"].get<double>()) << " |\n";
  }
  md << not_passed_markdown(report["implementations"], limit, [](const json& r) {
    std::string detail = r["status"] == "unsupported" ? r["reason"].get<std::string>() : "";
    if (r["status"] == "failed") {
      for (const auto& f : r["failures"]) detail += (detail.empty() ? "" : "; ") + f.get<std::string>();
    }
    return detail;
  });
  return md.str();
}

// What every implementation's run shares, filled once: the suite and its run, the seed, whether to
// show progress, the counts the runs add to, and the distributed run (null: none).
//   const TargetRun shared{.suite = *suite, .run = setup, .seed = common.seed, .progress = progress,
//                          .total = total, .dist = dist.get()};
struct TargetRun {
  const OperationSuite& suite;
  const SuiteRun& run;
  uint64_t seed = 0;
  bool progress = false;
  Counts& total;
  DistributedRun* dist = nullptr;
};

// One implementation's cases: its report entry ("implementation", "coverage", "results", ...);
// adds its counts to `shared.total`.
json run_target(const TargetRun& shared, const Target& target) {
  const SuiteRun& run = shared.run;
  const bool progress = shared.progress;
  DistributedRun* dist = shared.dist;
  Counts& total = shared.total;
  const auto& cases = run.cases;
  Plan plan{run.device, run.index, run.mode, target.kernel, shared.seed};
  const std::optional<std::string> prepared_reason = prepare_suite(shared.suite, plan, target);
  Counts counts;
  json results = json::array();
  double worst_headroom = 0, worst_ulp = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (progress) std::cerr << "\r" << target.name << " " << i + 1 << "/" << cases.size() << std::flush;
    json r;
    if (dist) dist->test_fault().before_case(i, cases.size());
    try {
      r = run_case(*cases[i], plan, target, prepared_reason, counts, dist);
    } catch (const std::exception& e) {
      throw std::runtime_error(target.name + " on " + cases[i]->case_id() + ": " + e.what());
    }
    if (r["status"] == "passed" || r["status"] == "failed") {
      worst_headroom = std::max(worst_headroom, r["headroom"].get<double>());
      worst_ulp = std::max(worst_ulp, r["max_ulp"].get<double>());
    }
    results.push_back(std::move(r));
  }
  if (progress) std::cerr << "\r\033[K";
  total.passed += counts.passed;
  total.failed += counts.failed;
  total.unsupported += counts.unsupported;
  json impl_json = target.kernel ? tools::implementation_json(*target.kernel) : json{{"name", target.name}};
  return {{"implementation", impl_json},
          {"excluded_reason", target.excluded_reason},
          {"coverage",
           {{"cases", cases.size()}, {"passed", counts.passed}, {"failed", counts.failed}, {"unsupported", counts.unsupported}}},
          {"worst_headroom", worst_headroom},
          {"worst_ulp", worst_ulp},
          {"results", std::move(results)}};
}

json summary_json(const Counts& total) {
  const int code = total.failed > 0 ? tools::kCaseFailed : total.passed == 0 ? tools::kNothingPassed : tools::kPassed;
  return {{"passed", total.passed},
          {"failed", total.failed},
          {"unsupported", total.unsupported},
          {"status", code == tools::kPassed ? "passed" : code == tools::kCaseFailed ? "failed" : "nothing_passed"},
          {"exit_code", code}};
}

int run(const std::vector<std::string>& argv, std::unique_ptr<DistributedRun>& dist) {
  CLI::App app{"xllm-kernel-numerics: validate implementations against float64 references.\n"
               "Exit codes: 0 every supported case passed, 1 a case failed (or an execution error), "
               "2 usage error, 3 nothing passed.",
               "xllm-kernel-numerics"};
  CommonOptions common;
  SuiteOptions suite_options;
  tools::add_common_arguments(app, common);
  const OperationSuite* suite = add_suite_arguments(app, suite_options, argv);
  if (auto code = tools::parse(app, argv)) return *code;
  if (common.list) {
    std::cout << list_text();
    return tools::kPassed;
  }
  if (common.operation.empty()) throw UsageError("--operation is required (or --list); see --help");
  if (suite == nullptr) {
    std::string names;
    for (const OperationSuite* s : builtin_suites()) names += (names.empty() ? "" : ", ") + s->operation;
    throw UsageError("--operation: unknown operation '" + common.operation + "'; known: " + names);
  }
  const SuiteRun setup = start_suite_run(common, *suite, suite_options, app.get_option("--implementation")->count() > 0,
                                         "numerics", dist);
  // Without the device's runtime support only excluded implementations can be listed: their
  // cases are reported unsupported with the exclusion's reason (exit 3).
  bool runnable = false;
  for (const Target& t : setup.targets) runnable |= t.kernel != nullptr;
  if (device_api(setup.device) == nullptr && runnable) {
    throw std::runtime_error(std::string("device ") + to_string(setup.device) + ": its runtime support is not loaded");
  }
  if (dist) dist->check_same_configuration(run_configuration(*suite, common, setup));

  json report{{"schema", "xllm-kernel/numerics-report/1"},
              {"tool", "numerics"},
              {"operation", suite->operation},
              {"device", setup.report_device},
              {"mode", common.mode},
              {"seed", common.seed},
              {"grid", setup.grid},
              {"environment", tools::environment(setup.device, setup.index, common.revision)},
              {"implementations", json::array()}};
  const tools::OccupancyProbe occupancy(setup.device, setup.index);
  Counts total;
  const bool progress = isatty(STDERR_FILENO);
  const TargetRun shared{.suite = *suite, .run = setup, .seed = common.seed, .progress = progress,
                         .total = total, .dist = dist.get()};
  for (const Target& target : setup.targets) report["implementations"].push_back(run_target(shared, target));
  report["occupancy"] = occupancy.finish();
  report["summary"] = summary_json(total);
  return tools::publish({std::move(report), common.output, common.markdown, markdown, 20,
                         "xllm-kernel-numerics: no case passed; that is a failure\n", aggregate_numerics,
                         numerics_aggregate_markdown},
                        dist.get());
}

}  // namespace
}  // namespace numerics

namespace tools {

int numerics_main(const std::vector<std::string>& argv) {
  return run_tool("xllm-kernel-numerics",
                  [&](std::unique_ptr<distributed::DistributedRun>& dist) { return numerics::run(argv, dist); });
}

}  // namespace tools
}  // namespace xllm_kernel
