#include "src/tools/targets.h"

#include <algorithm>

#include "src/core/strings.h"
#include "src/tools/cli.h"
#include "xllm_kernel/catalog.h"
#include "xllm_kernel/device_api.h"
#include "xllm_kernel/runtime.h"

namespace xllm_kernel::tools {

std::vector<Target> resolve_targets(const std::string& operation, Device device, ExecutionMode mode,
                                    const std::string& which, bool batch_invariant) {
  if (which.find(',') != std::string::npos) {
    std::vector<Target> targets;
    size_t start = 0;
    while (start <= which.size()) {
      const size_t end = std::min(which.find(',', start), which.size());
      const std::string one = which.substr(start, end - start);
      start = end + 1;
      if (one.empty() || one == "all") {
        throw UsageError("--implementation: a list names implementations, solutions or 'selected', got '" + which + "'");
      }
      for (Target& t : resolve_targets(operation, device, mode, one, batch_invariant)) {
        bool seen = false;
        for (const Target& earlier : targets) seen |= earlier.name == t.name;
        if (!seen) targets.push_back(std::move(t));
      }
    }
    return targets;
  }
  InitializeOptions options;
  options.operations = {operation};
  options.mode = mode;
  options.batch_invariant = batch_invariant;
  const Explanation ex = runtime().explain(device, operation, options);
  if (device != Device::kCpu && device_api(device) == nullptr) {
    // The tools time and capture through the device's runtime support, which comes with its
    // plugin; explain() loads only the modules of this operation, and an operation without a
    // native implementation there (linear on CUDA: cuda.torch only) does not load the plugin.
    // The other operations' modules do, where it is installed and the device usable.
    for (const Operation* other : builtin_operations()) {
      if (device_api(device) != nullptr) break;
      InitializeOptions one;
      one.operations = {other->name()};
      (void)runtime().explain(device, other->name(), one);
    }
  }
  auto make = [&](const Candidate& c) {
    Target t{c.name, nullptr, ""};
    if (c.verdict == Verdict::kExcluded) {
      t.excluded_reason = c.reason;
      // A mode the implementation lacks is reported per case, not as an exclusion.
      if (c.reason.rfind("unsupported mode", 0) != 0) return t;
    }
    auto k = registry().find(c.name);
    if (!k) {
      t.excluded_reason = c.reason.empty() ? "not registered" : c.reason;
      return t;
    }
    t.excluded_reason.clear();
    t.kernel = std::make_shared<PreparedKernel>(k->spec, k->function, c.detail);
    return t;
  };
  std::vector<Target> targets;
  if (which == "all") {
    for (const auto& c : ex.candidates) targets.push_back(make(c));
    if (targets.empty()) {
      throw UsageError(operation + ": no implementation registered or declared for device " + to_string(device));
    }
    return targets;
  }
  if (which == "selected") {
    const Candidate* s = ex.selected();
    if (s == nullptr && mode == ExecutionMode::kGraph) {
      // Nothing captures on this device: run the eager selection so its cases report why.
      return resolve_targets(operation, device, ExecutionMode::kEager, which, batch_invariant);
    }
    if (s == nullptr) {
      throw UsageError(operation + ": no implementation would be selected on " + std::string(to_string(device)) +
                       " in " + to_string(mode) + " mode" + (batch_invariant ? " with --batch-invariant" : "") + " (" +
                       ex.error + "); name one with --implementation or use all");
    }
    return {make(*s)};
  }
  std::vector<std::string> names;
  for (const auto& c : ex.candidates) {
    if (c.name == which) return {make(c)};
    names.push_back(c.name);
  }
  // A solution's name: the device's implementation of the operation in that solution.
  const std::string solution_name = std::string(to_string(device)) + "." + which + "." + operation;
  for (const auto& c : ex.candidates) {
    if (c.name == solution_name) return {make(c)};
  }
  throw UsageError("--implementation: unknown implementation '" + which + "' of " + operation + " on " +
                   to_string(device) + "; closest: " + detail::join(detail::closest(which, names), ", "));
}

}  // namespace xllm_kernel::tools
