// xllm-kernel-info: what this build registers, what initialize() selects and why, and one call of
// every selected operation.
//
//   xllm-kernel-info --list                     # catalog and registry
//   xllm-kernel-info --device cpu --explain --run
#include <ATen/ATen.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>

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
    for (const BackendModule& module : group->modules) {
      std::cout << "    module " << module.name << " [" << to_string(module.device) << "]"
                << (module.plugin.empty() ? "" : " plugin " + module.plugin) << "\n";
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
  auto kernels = registry().kernels();
  std::sort(kernels.begin(), kernels.end(), [](const auto& a, const auto& b) { return a->spec.name < b->spec.name; });
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
      for (const auto& k : kernels) {
        if (k->operation != op) continue;
        std::string modes;
        for (ExecutionMode m : k->spec.execution_modes) modes += (modes.empty() ? "" : ", ") + std::string(to_string(m));
        std::cout << "| `" << k->spec.name << "` | " << k->spec.solution << " | " << k->spec.binding << " | "
                  << k->spec.priority << " | " << modes << " | " << k->spec.input_domain << " |\n";
      }
    }
  }
}

// One call of every initialized operation on a small example; prints a checksum of the result.
void run_once(const Bindings& bindings) {
  const auto device = at::Device(to_string(bindings.device()));
  at::manual_seed(0);
  const auto options = at::TensorOptions().dtype(at::kBFloat16).device(device);
  at::Tensor input = at::randn({4, 4096}, options);
  at::Tensor weight = at::randn({4096}, options.dtype(at::kFloat));
  at::Tensor bias = at::randn({4096}, options.dtype(at::kFloat));
  for (const auto& name : bindings.operations()) {
    double checksum = 0;
    if (name == "rms_norm") {
      checksum = ops::rms_norm(input, weight, 1e-6).to(at::kDouble).abs().sum().item<double>();
    } else if (name == "fused_add_rms_norm") {
      at::Tensor x = input.clone();
      at::Tensor residual = at::randn_like(input);
      ops::fused_add_rms_norm(x, residual, weight, 1e-6);
      checksum = x.to(at::kDouble).abs().sum().item<double>();
    } else if (name == "layer_norm") {
      checksum = ops::layer_norm(input, weight, bias, 1e-5).to(at::kDouble).abs().sum().item<double>();
    } else {
      continue;
    }
    std::cout << "ran " << name << " [4, 4096] bfloat16 with " << bindings.at(name).spec().name
              << ": sum |out| = " << checksum << "\n";
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
