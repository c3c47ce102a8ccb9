// Which implementations a tool runs (--implementation), and what --list prints: both tools ask the
// runtime the same questions through here.
//
//   for (const tools::Target& t : tools::resolve_targets("rms_norm", Device::kCpu, ExecutionMode::kEager, "all"))
//     if (t.kernel) ...;  // else t.excluded_reason says why it cannot run here
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "xllm_kernel/registry.h"

namespace xllm_kernel::numerics {
struct OperationSuite;
}

namespace xllm_kernel::tools {

// An implementation to run: prepared, or excluded on this machine with the reason.
struct Target {
  std::string name;
  std::shared_ptr<const PreparedKernel> kernel;
  std::string excluded_reason;
};

// "selected" (what initialize would pick), "all" (every candidate on the device), or a name.
// Throws UsageError for an unknown name (with the closest ones).
std::vector<Target> resolve_targets(const std::string& operation, Device device, ExecutionMode mode,
                                    const std::string& which);

// The targets of a suite's run: with --implementation not given (`which_given` false) and a suite
// that declares its implementations, those of them that are candidates on the device, in the
// suite's order (none there: the selected one); otherwise resolve_targets(which).
std::vector<Target> suite_targets(const numerics::OperationSuite& suite, Device device, ExecutionMode mode,
                                  const std::string& which, bool which_given);

// --list: every suite's operation, its implementations per device and their availability here.
std::string list_text();

}  // namespace xllm_kernel::tools
