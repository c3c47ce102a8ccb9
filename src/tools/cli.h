// The command line both tools share (xllm-kernel-numerics, xllm-kernel-benchmark): exit codes,
// usage errors, the common flags, --device, and parsing. The chosen operation's own flags come from
// its suite (numerics::add_suite_arguments); a tool adds its own flags after both.
//
//   CLI::App app{"...", "xllm-kernel-numerics"};
//   tools::CommonOptions common;
//   tools::add_common_arguments(app, common);
//   if (auto code = tools::parse(app, argv)) return *code;  // --help, or a usage error (2)
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "xllm_kernel/contract.h"

namespace xllm_kernel::tools {

// Exit codes of both tools.
enum ExitCode : int { kPassed = 0, kCaseFailed = 1, kUsage = 2, kNothingPassed = 3 };

// A bad flag, value or environment: the tool prints it and exits 2 without writing a report.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct CommonOptions {
  bool list = false;
  std::string operation;
  std::string device = "cpu";
  std::string mode = "eager";
  std::string implementation = "selected";
  std::string grid = "default";  // --grid: "default" or "headline" (numerics::OperationSuite::headline)
  std::string revision = "unknown";
  std::string output;
  std::string markdown;
  uint64_t seed = 0;
  bool batch_invariant = false;      // --batch-invariant: as initialize(batch_invariant=true)
  bool distributed = false;          // under torchrun: see src/tools/distributed/run.h
  double distributed_timeout = 300;  // seconds any rank waits for the others
};

// Adds the common flags (--list, --operation, --device, --mode, ... --distributed-timeout).
void add_common_arguments(CLI::App& app, CommonOptions& common);

// --device: "cpu", "cuda", "cuda:1", ... Throws UsageError for an unknown device or a bad index.
struct DeviceFlag {
  Device device = Device::kCpu;
  int index = 0;
};
DeviceFlag parse_device_flag(const std::string& text);

// Parses; returns an exit code when the run should stop here (help, usage error), else nothing.
std::optional<int> parse(CLI::App& app, const std::vector<std::string>& argv);

}  // namespace xllm_kernel::tools
