// xllm-kernel-info: what this build registers, what initialize() selects and why, and one call of
// every selected operation.
//
//   xllm-kernel-info --list                     # catalog and registry
//   xllm-kernel-info --device cpu --explain --run
#include <ATen/ATen.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>

#include "src/numerics/suite.h"
#include "xllm_kernel/xllm_kernel.h"

namespace {

using namespace xllm_kernel;

void print_list() {
  std::cout << "catalog:\n";
  for (const Group* group : builtin_groups()) {
    std::cout << "  group " << group->name << "\n";
    for (const Operation* op : group->operations) {
      std::cout << "    " << op->contract().schema << "  (v" << op->contract().version << ", "
                << to_string(op->contract().numerical_mode) << ")\n";
    }
    for (const BackendModule* module : group->modules) {
      std::cout << "    module " << module->name << " [" << to_string(module->device) << "]"
                << (module->plugin.empty() ? "" : " plugin " + module->plugin) << "\n";
    }
  }
  const auto kernels = registry().kernels();
  std::cout << "registered implementations: " << kernels.size() << "\n";
  for (const auto& k : kernels) {
    std::cout << "  " << k->spec.name << "  device=" << to_string(k->spec.device) << " solution=" << k->spec.solution
              << " binding=" << k->spec.binding << " priority=" << k->spec.priority << "\n";
  }
}

// docs/operators.md, generated from the contracts and the registry (a test keeps the file equal).
void print_operators_doc() {
  std::cout << "# Operators\n\n"
               "Generated from the contracts in the code by `xllm-kernel-info --operators-doc`; a test fails when\n"
               "this file and the code disagree.\n";
  for (const Group* group : builtin_groups()) {
    std::cout << "\n## Group `" << group->name << "`\n";
    for (const Operation* op : group->operations) {
      const OpContract& c = op->contract();
      std::cout << "\n### `" << c.operation << "`\n\n"
                << "```\n" << c.schema << "\n```\n\n"
                << "- version: " << c.version << "\n"
                << "- mutates: " << (c.mutates.empty() ? std::string("nothing") : "`" + [&] {
                     std::string s;
                     for (size_t i = 0; i < c.mutates.size(); ++i) s += (i ? "`, `" : "") + c.mutates[i];
                     return s;
                   }() + "`") << "\n"
                << "- output aliases an input: " << (c.aliases_inputs ? "yes" : "no") << "\n"
                << "- numerical mode: " << to_string(c.numerical_mode) << "\n"
                << "- dtypes: " << c.dtypes << "\n\n"
                << c.semantics << "\n\n"
                << "| implementation | solution | binding | priority | modes | input domain |\n"
                << "|---|---|---|---|---|---|\n";
      // Every declared implementation, plugins' included (declarations live in the library).
      std::vector<KernelSpec> specs;
      for (const BackendModule* module : group->modules) {
        for (const Implementation& impl : module->implementations) {
          if (impl.operation == op) specs.push_back(module->spec(impl));
        }
      }
      std::sort(specs.begin(), specs.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
      for (const KernelSpec& spec : specs) {
        std::string modes;
        for (ExecutionMode m : spec.execution_modes) modes += (modes.empty() ? "" : ", ") + std::string(to_string(m));
        std::cout << "| `" << spec.name << "` | " << spec.solution << " | " << spec.binding << " | " << spec.priority
                  << " | " << modes << " | " << spec.input_domain << " |\n";
      }
    }
  }
}

// One call of every initialized operation: the first case of its numerics suite (default
// options) that the selected implementation supports, validated against the suite's reference.
void run_once(const Bindings& bindings) {
  for (const auto& name : bindings.operations()) {
    const numerics::OperationSuite* suite = numerics::find_suite(name);
    if (suite == nullptr) {
      std::cout << "not run " << name << ": no numerics suite\n";
      continue;
    }
    CLI::App app;
    numerics::SuiteOptions options;
    suite->add_arguments(app, options);
    app.parse(std::vector<std::string>{});
    auto kernel = std::make_shared<const PreparedKernel>(bindings.at(name));
    numerics::Plan plan{bindings.device(), 0, ExecutionMode::kEager, kernel, 0};
    bool ran = false;
    for (const auto& c : suite->cases(options)) {
      if (c->unsupported_reason(plan)) continue;
      numerics::PreparedCase prepared = c->prepare(plan);
      prepared.function();
      const numerics::Validation v = prepared.validate();
      std::cout << "ran " << name << " " << c->case_id() << " with " << kernel->spec().name << ": "
                << (v.passed ? "passed" : "FAILED") << " (max abs error " << v.max_abs_error << ", headroom "
                << v.headroom << ")\n";
      if (!v.passed) throw std::runtime_error(name + ": " + (v.failures.empty() ? "validation failed" : v.failures[0]));
      ran = true;
      break;
    }
    if (!ran) std::cout << "not run " << name << ": no case of its suite supports " << kernel->spec().name << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xllm-kernel-info: registered implementations, selection and explain"};
  std::string device = "cpu";
  std::string mode = "eager";
  std::vector<std::string> operations;
  std::vector<std::string> overrides;
  bool list = false, explain_all = false, run = false, operators_doc = false, operations_list = false;
  app.add_option("--device", device, "Device to initialize: cpu, cuda, npu")->capture_default_str();
  app.add_option("--mode", mode, "Execution mode: eager or graph")->capture_default_str();
  app.add_option("--operations", operations, "Operations to initialize (default: the whole catalog)")->delimiter(',');
  app.add_option("--override", overrides, "OPERATION=IMPLEMENTATION_OR_SOLUTION, repeatable");
  app.add_flag("--list", list, "Print the catalog and every registered implementation");
  app.add_flag("--explain", explain_all, "Print every candidate of each operation with its verdict");
  app.add_flag("--operations-list", operations_list, "Print the catalog's operation names, one a line");
  app.add_flag("--operators-doc", operators_doc, "Print docs/operators.md, generated from the contracts");
  app.add_flag("--run", run, "Initialize and call each selected operation once");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (operations_list) {
      for (const Operation* op : builtin_operations()) std::cout << op->name() << "\n";
    }
    if (operators_doc) print_operators_doc();
    if (list) print_list();
    if (!explain_all && !run) return 0;
    std::map<std::string, std::string> override_map;
    for (const auto& o : overrides) {
      const auto eq = o.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == o.size()) {
        std::cerr << "xllm-kernel-info: --override expects OPERATION=TARGET, got '" << o << "'\n";
        return 2;
      }
      override_map[o.substr(0, eq)] = o.substr(eq + 1);
    }
    auto bindings = initialize(device, operations, override_map, mode);
    if (explain_all) {
      for (const auto& name : bindings->operations()) std::cout << explain(device, name).to_string() << "\n";
    }
    if (run) run_once(*bindings);
  } catch (const std::exception& e) {
    std::cerr << "xllm-kernel-info: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
