#include "src/tools/targets.h"

#include <sstream>

#include "src/core/strings.h"
#include "src/numerics/suite.h"
#include "src/tools/cli.h"
#include "xllm_kernel/runtime.h"

namespace xllm_kernel::tools {

std::vector<Target> resolve_targets(const std::string& operation, Device device, ExecutionMode mode,
                                    const std::string& which) {
  InitializeOptions options;
  options.operations = {operation};
  options.mode = mode;
  const Explanation ex = runtime().explain(device, operation, options);
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
      return resolve_targets(operation, device, ExecutionMode::kEager, which);
    }
    if (s == nullptr) {
      throw UsageError(operation + ": no implementation would be selected on " + std::string(to_string(device)) +
                       " in " + to_string(mode) + " mode (" + ex.error + "); name one with --implementation or use all");
    }
    return {make(*s)};
  }
  std::vector<std::string> names;
  for (const auto& c : ex.candidates) {
    if (c.name == which) return {make(c)};
    names.push_back(c.name);
  }
  throw UsageError("--implementation: unknown implementation '" + which + "' of " + operation + " on " +
                   to_string(device) + "; closest: " + detail::join(detail::closest(which, names), ", "));
}

std::vector<Target> suite_targets(const numerics::OperationSuite& suite, Device device, ExecutionMode mode,
                                  const std::string& which, bool which_given) {
  if (!which_given && !suite.implementations.empty()) {
    InitializeOptions options;
    options.operations = {suite.operation};
    options.mode = mode;
    const Explanation ex = runtime().explain(device, suite.operation, options);
    std::vector<Target> targets;
    for (const std::string& name : suite.implementations) {
      for (const auto& c : ex.candidates) {
        if (c.name == name) {
          auto found = resolve_targets(suite.operation, device, mode, name);
          targets.insert(targets.end(), found.begin(), found.end());
          break;
        }
      }
    }
    if (!targets.empty()) return targets;
  }
  return resolve_targets(suite.operation, device, mode, which);
}

std::string list_text() {
  std::ostringstream out;
  for (const numerics::OperationSuite* suite : numerics::builtin_suites()) {
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

}  // namespace xllm_kernel::tools
