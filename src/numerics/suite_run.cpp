#include "src/numerics/suite_run.h"

#include <iostream>
#include <sstream>

#include "src/core/strings.h"
#include "src/tools/distributed/run.h"
#include "xllm_kernel/runtime.h"

namespace xllm_kernel::numerics {

using tools::distributed::DistributedRun;

std::vector<tools::Target> suite_targets(const OperationSuite& suite, Device device, ExecutionMode mode,
                                         const std::string& which, bool which_given, bool batch_invariant) {
  if (!which_given && !suite.implementations.empty()) {
    InitializeOptions options;
    options.operations = {suite.operation};
    options.mode = mode;
    options.batch_invariant = batch_invariant;
    const Explanation ex = runtime().explain(device, suite.operation, options);
    std::vector<tools::Target> targets;
    for (const std::string& name : suite.implementations) {
      for (const auto& c : ex.candidates) {
        if (c.name == name) {
          auto found = tools::resolve_targets(suite.operation, device, mode, name, batch_invariant);
          targets.insert(targets.end(), found.begin(), found.end());
          break;
        }
      }
    }
    if (!targets.empty()) return targets;
  }
  return tools::resolve_targets(suite.operation, device, mode, which, batch_invariant);
}

std::string list_text() {
  std::ostringstream out;
  for (const OperationSuite* suite : builtin_suites()) {
    out << suite->operation << ": " << suite->description << "\n";
    if (!suite->origin.empty()) out << "  suite: " << suite->origin << "\n";
    if (!suite->implementations.empty()) {
      out << "  suite implementations: " << detail::join(suite->implementations, ", ") << "\n";
    }
    for (Device device : {Device::kCpu, Device::kCuda, Device::kNpu}) {
      InitializeOptions options;
      options.operations = {suite->operation};
      Explanation ex;
      try {
        ex = runtime().explain(device, suite->operation, options);
      } catch (const std::exception& e) {
        out << "  " << to_string(device) << ": " << e.what() << "\n";
        continue;
      }
      for (const auto& c : ex.candidates) {
        out << "  " << c.name << "  " << (c.verdict == Verdict::kExcluded ? "unavailable: " + c.reason : "available")
            << (c.verdict == Verdict::kSelected ? " (selected)" : "") << "\n";
      }
    }
  }
  return out.str();
}

SuiteRun start_suite_run(const tools::CommonOptions& common, const OperationSuite& suite, const SuiteOptions& options,
                         bool implementation_given, const std::string& tool, std::unique_ptr<DistributedRun>& dist) {
  SuiteRun run;
  const tools::DeviceFlag device_flag = tools::parse_device_flag(common.device);
  run.device = device_flag.device;
  run.index = device_flag.index;
  if (common.distributed) {
    DistributedRun::start(tool, std::chrono::milliseconds(static_cast<int64_t>(common.distributed_timeout * 1000)), dist);
    run.index = dist->device_index(run.device, common.device);
  }
  run.report_device = dist ? std::string(to_string(run.device)) +
                                 (run.device == Device::kCpu ? "" : ":" + std::to_string(run.index))
                           : common.device;
  run.mode = parse_execution_mode(common.mode);
  const SuiteOptions values = grid_options(suite, options, common.grid, tool, run.grid);
  if (common.grid != run.grid) {
    std::cerr << "xllm-kernel-" << tool << ": " << suite.operation << "'s suite declares no headline cases; "
              << "running its default grid\n";
  }
  try {
    run.cases = suite.cases(values);
  } catch (const CLI::ValidationError& e) {
    throw tools::UsageError(e.what());
  }
  run.targets =
      suite_targets(suite, run.device, run.mode, common.implementation, implementation_given, common.batch_invariant);
  return run;
}

SuiteOptions grid_options(const OperationSuite& suite, const SuiteOptions& given, const std::string& grid,
                          const std::string& tool, std::string& grid_used) {
  const SuiteOptions* fill = nullptr;
  grid_used = "default";
  if (grid == "headline" && !suite.headline.empty()) {
    fill = &suite.headline;
    grid_used = "headline";
  } else if (grid != "headline" && grid != "default") {
    throw tools::UsageError("--grid: 'default' or 'headline', got '" + grid + "'");
  } else if (tool == "benchmark") {
    fill = &suite.benchmark_defaults;
  }
  SuiteOptions values = given;
  if (fill != nullptr) {
    for (const auto& [key, defaults] : *fill) {
      if (values[key].empty()) values[key] = defaults;
    }
  }
  return values;
}

json run_configuration(const OperationSuite& suite, const tools::CommonOptions& common, const SuiteRun& run) {
  std::vector<std::string> ids, names;
  for (const auto& c : run.cases) ids.push_back(c->case_id());
  for (const auto& t : run.targets) names.push_back(t.name + (t.kernel ? "" : " (excluded)"));
  return {{"operation", suite.operation},
          {"device", to_string(run.device)},
          {"mode", common.mode},
          {"grid", run.grid},
          {"implementations", names},
          {"seed", common.seed},
          {"cases", tools::distributed::case_list_digest(ids)}};
}

std::optional<std::string> case_unsupported_reason(const KernelCase& c, const Plan& plan, const tools::Target& target,
                                                   const std::optional<std::string>& prepared_reason) {
  std::optional<std::string> reason;
  if (!target.kernel) reason = target.excluded_reason;
  if (!reason) reason = prepared_reason;
  if (!reason) reason = c.unsupported_reason(plan);
  return reason;
}

}  // namespace xllm_kernel::numerics
