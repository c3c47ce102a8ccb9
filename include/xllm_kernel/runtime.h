// Start-up: select one implementation per operation, once, and publish the bindings.
//
//   auto bindings = xllm_kernel::initialize("cpu");                 // every catalog operation
//   auto bindings = xllm_kernel::initialize("cpu", {"rms_norm"},     // or a subset
//                                           {{"rms_norm", "torch"}});  // override by solution
//   at::Tensor y = xllm_kernel::ops::rms_norm(x, w, 1e-6);          // one indirect call
//   std::cout << xllm_kernel::explain("cpu", "rms_norm").to_string();
//
// Selection: load the modules the device needs (probing dependencies), freeze the device's
// registrations, filter by contract, device, execution mode and availability, then take the
// highest priority, ties by name. XLLM_KERNEL_OVERRIDE_<OPERATION> beats the overrides argument.
// Every requested operation prepares, or nothing is published. The same configuration returns the
// same Bindings object; a different one for an initialized device is an error ("restart the
// worker").
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "xllm_kernel/catalog.h"
#include "xllm_kernel/registry.h"

namespace xllm_kernel {

struct InitializeOptions {
  std::vector<std::string> operations;          // empty: the whole catalog
  std::map<std::string, std::string> overrides;  // operation -> implementation name or solution
  ExecutionMode mode = ExecutionMode::kEager;
  // Only implementations that declare KernelSpec::batch_invariant; an operation without one on the
  // device fails initialize. The environment variable XLLM_KERNEL_BATCH_INVARIANT=1 turns it on too.
  bool batch_invariant = false;
};

// Read-only mapping operation -> prepared kernel for one device.
class Bindings {
 public:
  Bindings(Device device, ExecutionMode mode, std::map<std::string, std::shared_ptr<const PreparedKernel>> kernels)
      : device_(device), mode_(mode), kernels_(std::move(kernels)) {}

  Device device() const { return device_; }
  ExecutionMode mode() const { return mode_; }
  bool contains(const std::string& operation) const { return kernels_.count(operation) != 0; }
  const PreparedKernel& at(const std::string& operation) const;  // throws naming the known ones
  const PreparedKernel& operator[](const std::string& operation) const { return at(operation); }
  std::vector<std::string> operations() const;
  size_t size() const { return kernels_.size(); }

 private:
  Device device_;
  ExecutionMode mode_;
  std::map<std::string, std::shared_ptr<const PreparedKernel>> kernels_;
};

enum class Verdict { kSelected, kLowerPriority, kNotOverridden, kExcluded };
const char* to_string(Verdict verdict);

// Why a candidate is excluded (Verdict::kExcluded), as a code beside the reason's text.
enum class Rejection {
  kNone,               // not excluded
  kMissingDependency,  // its module's dependency probe failed (no driver, no device, no plugin)
  kUnsupported,        // its own supports probe failed (an ISA, a compute capability)
  kContractMismatch,   // implements another version of the contract
  kUnsupportedMode,    // does not run in the requested execution mode
  kNotRegistered,      // declared by its module, but nothing registered it
  kNotBatchInvariant,  // batch invariance was asked for and it does not declare it
};
const char* to_string(Rejection rejection);  // "missing_dependency", ...

struct Candidate {
  std::string name;
  std::string solution;
  std::string variant;
  std::string binding;
  std::string detail;  // module probe detail (e.g. SIMD target) when available
  int priority = 0;
  bool batch_invariant = false;  // KernelSpec::batch_invariant (of its declaration when not registered)
  Verdict verdict = Verdict::kExcluded;
  std::string reason;  // why excluded / not chosen; empty when selected
  Rejection rejection = Rejection::kNone;  // set when verdict is kExcluded
};

struct Explanation {
  Device device = Device::kCpu;
  std::string operation;
  ExecutionMode mode = ExecutionMode::kEager;
  bool batch_invariant = false;  // asked for (InitializeOptions or the environment)
  std::string override_target;  // empty when none
  std::string override_source;  // "environment XLLM_KERNEL_OVERRIDE_RMS_NORM" | "argument"
  std::vector<Candidate> candidates;  // selected first, then in selection order
  std::string error;                  // set when selection fails (no eligible / bad override)

  const Candidate* selected() const;
  std::string to_string() const;  // a table for people
};

// A self-contained selection engine over a registry and a catalog. The process uses one
// (runtime()); tests build their own over test registries.
class Runtime {
 public:
  // Over a fixed list of groups (tests), or over a source read at every initialize() and explain()
  // (the process's runtime reads the catalog, which add_group extends).
  Runtime(Registry& registry, std::vector<const Group*> groups, bool publish_to_operations);
  Runtime(Registry& registry, std::function<std::vector<const Group*>()> groups, bool publish_to_operations);
  ~Runtime();

  std::shared_ptr<const Bindings> initialize(Device device, const InitializeOptions& options);
  // Uses the device's initialized configuration, or defaults (eager, environment overrides only).
  Explanation explain(Device device, const std::string& operation);
  Explanation explain(Device device, const std::string& operation, const InitializeOptions& options);
  std::shared_ptr<const Bindings> bindings(Device device) const;  // null if not initialized
  std::vector<const Operation*> operations() const;
  std::vector<const Group*> groups() const { return groups_(); }

  // Forgets every device's bindings and unfreezes the registry's devices. Tests only: prepared
  // kernels may still be referenced by callers.
  void reset_for_testing();

 private:
  struct State;
  std::unique_ptr<State> state_;
  Registry& registry_;
  std::function<std::vector<const Group*>()> groups_;
  bool publish_;
};

// The process-wide runtime over registry() and builtin_groups().
Runtime& runtime();

std::shared_ptr<const Bindings> initialize(const std::string& device,
                                           std::vector<std::string> operations = {},
                                           std::map<std::string, std::string> overrides = {},
                                           const std::string& mode = "eager", bool batch_invariant = false);
std::shared_ptr<const Bindings> initialize(Device device, const InitializeOptions& options = {});
Explanation explain(const std::string& device, const std::string& operation);

}  // namespace xllm_kernel
