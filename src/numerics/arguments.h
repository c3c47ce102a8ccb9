// The command line shared by xllm-kernel-numerics and xllm-kernel-benchmark: common flags, the
// chosen suite's own flags, and which implementations to run.
#pragma once

#include <stdexcept>

#include "src/numerics/suite.h"

namespace xllm_kernel::numerics {

// Exit codes of both tools.
enum ExitCode : int { kPassed = 0, kCaseFailed = 1, kUsage = 2, kNothingPassed = 3 };

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct CommonOptions {
  bool list = false;
  std::string operation;
  std::string device = "cpu";
  std::string mode = "eager";
  std::string implementation = "selected";
  std::string revision = "unknown";
  std::string output;
  std::string markdown;
  uint64_t seed = 0;
  bool distributed = false;          // under torchrun: see src/numerics/distributed.h
  double distributed_timeout = 300;  // seconds any rank waits for the others
};

// Adds the common flags; if argv names a known --operation, that suite's flags too (so that
// `--operation NAME --help` shows them). Returns the suite, or null.
const OperationSuite* add_arguments(CLI::App& app, CommonOptions& common, SuiteOptions& suite_options,
                                    const std::vector<std::string>& argv);

// --device: "cpu", "cuda", "cuda:1", ... Throws UsageError for an unknown device or a bad index.
struct DeviceFlag {
  Device device = Device::kCpu;
  int index = 0;
};
DeviceFlag parse_device_flag(const std::string& text);

// Parses; returns an exit code when the run should stop here (help, usage error), else nothing.
std::optional<int> parse(CLI::App& app, const std::vector<std::string>& argv);

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

// --list: every suite's operation, its implementations per device and their availability here.
std::string list_text();

}  // namespace xllm_kernel::numerics
