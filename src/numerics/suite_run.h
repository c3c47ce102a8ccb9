// What both tools (xllm-kernel-numerics, xllm-kernel-benchmark) do with a suite around its cases:
// which implementations run (--implementation, or the suite's own list), what --list prints, the
// run's setup from the common flags (device, distributed start, cases, targets), the configuration
// every rank must share, and why one case does not run with one target.
//
//   const OperationSuite* suite = add_suite_arguments(app, suite_options, argv);
//   if (auto code = tools::parse(app, argv)) return *code;
//   const SuiteRun run = start_suite_run(common, *suite, suite_options,
//                                        app.get_option("--implementation")->count() > 0, "numerics", dist);
//   if (dist) dist->check_same_configuration(run_configuration(*suite, common, run));
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/numerics/suite.h"
#include "src/tools/cli.h"
#include "src/tools/targets.h"

namespace xllm_kernel::tools::distributed {
class DistributedRun;
}

namespace xllm_kernel::numerics {

// The targets of a suite's run: with --implementation not given (`which_given` false) and a suite
// that declares its implementations, those of them that are candidates on the device, in the
// suite's order (none there: the selected one); otherwise tools::resolve_targets(which).
std::vector<tools::Target> suite_targets(const OperationSuite& suite, Device device, ExecutionMode mode,
                                         const std::string& which, bool which_given, bool batch_invariant = false);

// --list: every suite's operation, its implementations per device and their availability here.
std::string list_text();

// A suite's run as the common flags set it up.
struct SuiteRun {
  Device device = Device::kCpu;
  int index = 0;  // the device index: --device's, or the rank's own in a distributed run
  ExecutionMode mode = ExecutionMode::kEager;
  std::string report_device;  // the report's "device": the rank's own ("cuda:1") when distributed, else --device
  std::string grid = "default";  // the grid the cases come from (--grid; "default" where the suite has no headline)
  std::vector<std::shared_ptr<const KernelCase>> cases;
  std::vector<tools::Target> targets;
};

// In order: --device, the distributed start (with --distributed; sets `dist`, named `tool`), --mode,
// the suite's cases from `options` where given, else from --grid's values (grid_options; a suite's
// CLI::ValidationError becomes tools::UsageError), and the targets (suite_targets with
// --implementation).
SuiteRun start_suite_run(const tools::CommonOptions& common, const OperationSuite& suite, const SuiteOptions& options,
                         bool implementation_given, const std::string& tool,
                         std::unique_ptr<tools::distributed::DistributedRun>& dist);

// The option values a run's cases come from: `given` (the user's), then, for each option the user
// left out, the grid's: under "headline" the suite's headline cases; under "default" nothing for
// the numerics tool (its validation grid) and the suite's benchmark_defaults for the benchmark.
// `grid_used` is the grid applied ("default" when the suite declares no headline cases).
SuiteOptions grid_options(const OperationSuite& suite, const SuiteOptions& given, const std::string& grid,
                          const std::string& tool, std::string& grid_used);

// What every rank of a distributed run must share: operation, device kind, mode, implementations
// (an excluded one marked), seed and the digest of the case list. A tool adds its own flags.
json run_configuration(const OperationSuite& suite, const tools::CommonOptions& common, const SuiteRun& run);

// Why case `c` does not run with `target` (planned as `plan`), first reason first: the target's
// exclusion, the suite's prepare hook's reason (`prepared_reason`), the case's own reason.
std::optional<std::string> case_unsupported_reason(const KernelCase& c, const Plan& plan, const tools::Target& target,
                                                   const std::optional<std::string>& prepared_reason);

}  // namespace xllm_kernel::numerics
