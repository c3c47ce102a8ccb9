#include "src/numerics/arguments.h"

#include <sstream>

#include "src/core/strings.h"
#include "xllm_kernel/runtime.h"

namespace xllm_kernel::numerics {

const OperationSuite* add_arguments(CLI::App& app, CommonOptions& c, SuiteOptions& suite_options,
                                    const std::vector<std::string>& argv) {
  app.add_flag("--list", c.list, "List operations, implementations and their availability here, then exit");
  app.add_option("--operation", c.operation, "Operation to run (see --list); with --help shows its own options");
  app.add_option("--device", c.device, "cpu, cuda[:N] or npu[:N]")->capture_default_str();
  app.add_option("--mode", c.mode, "eager or graph")->capture_default_str()->check(CLI::IsMember({"eager", "graph"}));
  app.add_option("--implementation", c.implementation,
                 "An implementation name, 'selected' (what initialize picks) or 'all'")
      ->capture_default_str();
  app.add_option("--revision", c.revision, "Source revision recorded in the report")->capture_default_str();
  app.add_option("--output", c.output, "JSON report path (written atomically)");
  app.add_option("--markdown", c.markdown, "Markdown report path (written atomically)");
  app.add_option("--seed", c.seed, "Seed of the CPU generator the inputs come from")->capture_default_str();
  app.add_flag("--distributed", c.distributed,
               "Run on every rank of a torchrun launch (>= 2 ranks, each on its own device); each rank writes its "
               "report with .rankN before the extension, rank 0 writes the aggregate (docs/distributed.md)");
  app.add_option("--distributed-timeout", c.distributed_timeout, "Seconds a rank waits for the others before failing")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  for (size_t i = 1; i < argv.size(); ++i) {
    std::string name;
    if (argv[i] == "--operation" && i + 1 < argv.size()) name = argv[i + 1];
    if (argv[i].rfind("--operation=", 0) == 0) name = argv[i].substr(12);
    if (name.empty()) continue;
    if (const OperationSuite* suite = find_suite(name)) {
      CLI::App* group = &app;
      suite->add_arguments(*group, suite_options);
      app.footer("Options of --operation " + name + " are listed above (" + suite->description + ").");
      return suite;
    }
  }
  std::string names;
  for (const OperationSuite* s : builtin_suites()) names += (names.empty() ? "" : ", ") + s->operation;
  app.footer("Operations: " + names + ". `--operation NAME --help` shows that operation's options.");
  return nullptr;
}

DeviceFlag parse_device_flag(const std::string& text) {
  DeviceFlag flag;
  try {
    flag.device = parse_device(text);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--device: ") + e.what());
  }
  const auto colon = text.find(':');
  if (colon == std::string::npos) return flag;
  const std::string index = text.substr(colon + 1);
  size_t used = 0;
  try {
    flag.index = std::stoi(index, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (index.empty() || used != index.size() || flag.index < 0) {
    throw UsageError("--device: expected a device index >= 0 after ':', got '" + text + "'");
  }
  return flag;
}

std::optional<int> parse(CLI::App& app, const std::vector<std::string>& argv) {
  std::vector<std::string> args(argv.rbegin(), argv.rend() - 1);  // CLI11 takes them reversed
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    app.exit(e);
    return kPassed;
  } catch (const CLI::CallForAllHelp& e) {
    app.exit(e);
    return kPassed;
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kUsage;
  }
  return std::nullopt;
}

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

std::string list_text() {
  std::ostringstream out;
  for (const OperationSuite* suite : builtin_suites()) {
    out << suite->operation << ": " << suite->description << "\n";
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

}  // namespace xllm_kernel::numerics
