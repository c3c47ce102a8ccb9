// Selection of one operation's implementation on one device (internal to the core). Pure: from the
// registered kernels, the declarations of the catalog's modules, what loading those modules found
// (src/core/modules.h) and the configuration to the explanation and the chosen kernel. It loads
// nothing: the runtime (src/core/runtime.cpp) loads the modules first.
//
//   std::vector<CandidateEntry> entries = gather(device, operation, kernels, groups);
//   filter(entries, operation, mode, modules);  // each eligible, or excluded with a code and words
//   Choice choice = choose(entries, operation, device, mode, override_target, kernels);  // sorts
//   Explanation ex = ...;                       // device, operation, mode, override
//   label(entries, choice, override_target, ex);  // verdicts and reasons, the selected one first
//
// select() runs the four in that order.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "src/core/modules.h"
#include "xllm_kernel/catalog.h"
#include "xllm_kernel/registry.h"
#include "xllm_kernel/runtime.h"

namespace xllm_kernel::detail {

// An override after resolution: its target (an implementation name or a solution) and where it
// came from ("argument" or "environment XLLM_KERNEL_OVERRIDE_<OPERATION>").
struct ResolvedOverride {
  std::string target;
  std::string source;
  bool operator==(const ResolvedOverride& o) const { return target == o.target && source == o.source; }
};

// What a device was initialized with, after resolution.
struct Config {
  std::vector<std::string> operations;  // sorted
  std::map<std::string, ResolvedOverride> overrides;
  ExecutionMode mode = ExecutionMode::kEager;
  bool batch_invariant = false;  // only implementations that declare it are eligible
};

// One candidate while selection runs: what explain() shows of it, and where it comes from.
struct CandidateEntry {
  Candidate candidate;  // name, solution, variant, binding, priority; filter() adds detail and rejection
  std::shared_ptr<const RegisteredKernel> kernel;  // null: declared by a module, never registered
  const BackendModule* module = nullptr;  // a kernel's spec.module, or the module declaring it; may be null
  const Implementation* implementation = nullptr;  // its declaration; null when no module declares it
  bool eligible = false;  // set by filter()
};

// The registered kernels of `operation` on `device` (in registration order, each with the
// declaration of its name, if any), then the implementations that a module of `device` declares
// but nothing registered (by name).
std::vector<CandidateEntry> gather(Device device, const Operation& operation,
                                   const std::vector<std::shared_ptr<const RegisteredKernel>>& kernels,
                                   const std::vector<const Group*>& groups);

// Whether a declared implementation can run here, from its module's probe and its own supports
// probe: false sets the candidate's rejection and reason; true adds the probes' details to it.
// Either may be null (no module, no declaration).
bool check_availability(const ModuleLoader& modules, const BackendModule* module, const Implementation* implementation,
                        Candidate& candidate);

// Marks each entry eligible, or sets its rejection and reason: availability, then contract, then
// execution mode for a registered kernel; availability, else "not registered", for one only declared.
void filter(std::vector<CandidateEntry>& entries, const Operation& operation, ExecutionMode mode,
            const ModuleLoader& modules, bool batch_invariant = false);

// What choose() picked: an entry of the vector it was given, or the error.
struct Choice {
  const CandidateEntry* chosen = nullptr;  // null when the choice failed
  std::string error;                       // why, when it failed
};

// Sorts the entries (eligible first, then higher priority, then name), then picks the first
// eligible one, or the override's target: an implementation name (which must be eligible) or a
// solution (its first eligible implementation). `kernels` are all registered kernels, to name the
// device and operation of a target that belongs to another.
Choice choose(std::vector<CandidateEntry>& entries, const Operation& operation, Device device, ExecutionMode mode,
              const ResolvedOverride* override_target,
              const std::vector<std::shared_ptr<const RegisteredKernel>>& kernels);

// Appends the candidates to `ex`: when the choice succeeded, the chosen one (selected) first, then
// the others in order, each eligible one saying why it lost; when it failed, all in order as they
// are, and the error.
void label(const std::vector<CandidateEntry>& entries, const Choice& choice, const ResolvedOverride* override_target,
           Explanation& ex);

struct Selection {
  Explanation explanation;
  std::shared_ptr<const RegisteredKernel> kernel;  // null when selection failed
};

// gather, filter, choose and label for one operation under `config`.
Selection select(Device device, const Operation& operation, const Config& config,
                 const std::vector<std::shared_ptr<const RegisteredKernel>>& kernels,
                 const std::vector<const Group*>& groups, const ModuleLoader& modules);

}  // namespace xllm_kernel::detail
