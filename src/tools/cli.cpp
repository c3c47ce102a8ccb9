#include "src/tools/cli.h"

#include <map>

namespace xllm_kernel::tools {

void add_common_arguments(CLI::App& app, CommonOptions& c) {
  app.add_flag("--list", c.list, "List operations, implementations and their availability here, then exit");
  app.add_option("--operation", c.operation, "Operation to run (see --list); with --help shows its own options");
  app.add_option("--device", c.device, "cpu, cuda[:N] or npu[:N]")->capture_default_str();
  // The device graph APIs' names (ACLGraph on npu, CUDA graphs) are the graph mode, as in the Python
  // registry (registry.execution_mode); the report records the canonical name.
  app.add_option("--mode", c.mode, "eager or graph (also spelled aclgraph, cudagraph)")
      ->capture_default_str()
      ->transform(CLI::Transformer(std::map<std::string, std::string>{{"aclgraph", "graph"},
                                                                       {"cudagraph", "graph"},
                                                                       {"cuda_graph", "graph"}}))
      ->check(CLI::IsMember({"eager", "graph"}));
  app.add_option("--implementation", c.implementation,
                 "An implementation name, 'selected' (what initialize picks), 'all', a solution ('torch': the "
                 "device's torch implementation) or a comma list of these but 'all' ('selected,torch')")
      ->capture_default_str();
  app.add_option("--grid", c.grid,
                 "The cases where the suite's own options are not given: 'default' (the numerics tool's validation "
                 "grid, the benchmark's timing grid) or 'headline' (the suite's one to four headline cases, for a "
                 "first answer in seconds; scripts/main.sh's quick default)")
      ->capture_default_str()
      ->check(CLI::IsMember({"default", "headline"}));
  app.add_flag("--batch-invariant", c.batch_invariant,
               "Only implementations that declare batch invariance (as initialize(batch_invariant=true)): "
               "'selected' is what that selects; with 'all', the others are listed as excluded");
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

}  // namespace xllm_kernel::tools
