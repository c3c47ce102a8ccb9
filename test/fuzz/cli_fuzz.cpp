// Fuzzes the command line both tools share: the common flags, --device, and the options of every
// suite (an --operation in the input adds that suite's flags, as the tools do), through to the
// suite turning its options into cases. Any input either parses or ends in the tool's usage error
// (or another exception with a message, which the tools turn into an exit code); never a crash,
// an out-of-bounds access or undefined behaviour.
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "src/numerics/suite.h"
#include "src/tools/cli.h"

namespace {

// The input as argv: arguments separated by NUL bytes (at most 24, each at most 48 bytes).
std::vector<std::string> arguments(const uint8_t* data, size_t size) {
  std::vector<std::string> argv{"xllm-kernel-numerics"};
  std::string current;
  for (size_t i = 0; i < size && argv.size() < 25; ++i) {
    if (data[i] == 0) {
      argv.push_back(current);
      current.clear();
    } else if (current.size() < 48) {
      current.push_back(static_cast<char>(data[i]));
    }
  }
  if (!current.empty() && argv.size() < 25) argv.push_back(current);
  return argv;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace xllm_kernel;
  const std::vector<std::string> argv = arguments(data, size);
  // The tools print help and usage errors; keep the fuzzer's output readable.
  std::ostringstream sink;
  auto* out = std::cout.rdbuf(sink.rdbuf());
  auto* err = std::cerr.rdbuf(sink.rdbuf());
  try {
    CLI::App app{"fuzz", "xllm-kernel-numerics"};
    tools::CommonOptions common;
    tools::add_common_arguments(app, common);
    numerics::SuiteOptions options;
    const numerics::OperationSuite* suite = numerics::add_suite_arguments(app, options, argv);
    if (!tools::parse(app, argv)) {
      tools::parse_device_flag(common.device);
      if (suite != nullptr) {
        for (const auto& c : suite->cases(options)) {
          (void)c->case_id();
          (void)c->parameters().dump();
        }
      }
    }
  } catch (const std::exception& e) {
    if (std::string(e.what()).empty()) __builtin_trap();  // every error says what went wrong
  }
  std::cout.rdbuf(out);
  std::cerr.rdbuf(err);
  return 0;
}
