// Which implementations a tool runs (--implementation): both tools ask the runtime the same
// question through here (per suite: numerics::suite_targets, src/numerics/suite_run.h).
//
//   for (const tools::Target& t : tools::resolve_targets("rms_norm", Device::kCpu, ExecutionMode::kEager, "all"))
//     if (t.kernel) ...;  // else t.excluded_reason says why it cannot run here
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "xllm_kernel/registry.h"

namespace xllm_kernel::tools {

// An implementation to run: prepared, or excluded on this machine with the reason.
struct Target {
  std::string name;
  std::shared_ptr<const PreparedKernel> kernel;
  std::string excluded_reason;
};

// "selected" (what initialize would pick), "all" (every candidate on the device), a name, a
// solution's name standing for the device's implementation of it ("torch": cpu.torch.rms_norm), or a
// comma list of those but "all" (each implementation once, in the list's order: "selected,torch"
// times what initialize picks beside the torch solution, once when they are the same).
// Throws UsageError for an unknown name (with the closest ones).
// batch_invariant: as InitializeOptions::batch_invariant (the others are excluded, with the reason).
std::vector<Target> resolve_targets(const std::string& operation, Device device, ExecutionMode mode,
                                    const std::string& which, bool batch_invariant = false);

}  // namespace xllm_kernel::tools
