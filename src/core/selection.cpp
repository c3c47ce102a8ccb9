#include "src/core/selection.h"

#include <algorithm>

#include "src/core/strings.h"

namespace xllm_kernel::detail {

std::vector<CandidateEntry> gather(Device device, const Operation& operation,
                                   const std::vector<std::shared_ptr<const RegisteredKernel>>& kernels,
                                   const std::vector<const Group*>& groups) {
  // Every implementation of this operation that a module of this device declares.
  struct Declared {
    const BackendModule* module;
    const Implementation* implementation;
  };
  std::map<std::string, Declared> declared;
  for (const Group* group : groups) {
    for (const BackendModule* module : group->modules) {
      if (module->device != device) continue;
      for (const Implementation& impl : module->implementations) {
        if (impl.operation->name() != operation.name()) continue;
        declared[module->implementation_name(impl)] = {module, &impl};
      }
    }
  }

  std::vector<CandidateEntry> entries;
  std::vector<std::string> registered_here;
  for (const auto& kernel : kernels) {
    if (kernel->operation->name() != operation.name() || kernel->spec.device != device) continue;
    const KernelSpec& spec = kernel->spec;
    registered_here.push_back(spec.name);
    CandidateEntry e;
    e.kernel = kernel;
    e.candidate = {.name = spec.name, .solution = spec.solution, .variant = spec.variant, .binding = spec.binding,
                   .priority = spec.priority, .batch_invariant = spec.batch_invariant};
    e.module = spec.module;
    auto where = declared.find(spec.name);
    e.implementation = where == declared.end() ? nullptr : where->second.implementation;
    entries.push_back(std::move(e));
  }
  // Declared by a module whose dependency is missing (or whose plugin was not loaded), so never
  // registered.
  for (const auto& [name, where] : declared) {
    if (std::find(registered_here.begin(), registered_here.end(), name) != registered_here.end()) continue;
    CandidateEntry e;
    e.candidate = {.name = name, .solution = where.module->solution, .variant = where.implementation->variant,
                   .binding = where.module->binding, .priority = where.implementation->priority,
                   .batch_invariant = where.implementation->batch_invariant};
    e.module = where.module;
    e.implementation = where.implementation;
    entries.push_back(std::move(e));
  }
  return entries;
}

bool check_availability(const ModuleLoader& modules, const BackendModule* module, const Implementation* implementation,
                        Candidate& c) {
  const ProbeResult* probe = module == nullptr ? nullptr : modules.probe(*module);
  if (probe != nullptr && !probe->available) {
    c.rejection = Rejection::kMissingDependency;
    c.reason = "missing dependency: " + probe->detail;
    return false;
  }
  if (probe != nullptr) c.detail = probe->detail;
  const ProbeResult* own = implementation == nullptr ? nullptr : modules.supports(*implementation);
  if (own != nullptr && !own->available) {
    c.rejection = Rejection::kUnsupported;
    c.reason = "unsupported here: " + own->detail;
    return false;
  }
  if (own != nullptr && !own->detail.empty()) c.detail += (c.detail.empty() ? "" : ", ") + own->detail;
  return true;
}

void filter(std::vector<CandidateEntry>& entries, const Operation& operation, ExecutionMode mode,
            const ModuleLoader& modules, bool batch_invariant) {
  for (CandidateEntry& e : entries) {
    if (e.kernel == nullptr) {
      if (check_availability(modules, e.module, e.implementation, e.candidate)) {
        e.candidate.rejection = Rejection::kNotRegistered;
        e.candidate.reason = modules.probe(*e.module) == nullptr
                                 ? "module " + e.module->name + " was not loaded"
                                 : "declared by module " + e.module->name + " but not registered";
      }
      continue;
    }
    const KernelSpec& spec = e.kernel->spec;
    if (!check_availability(modules, e.module, e.implementation, e.candidate)) {
      // excluded with the reason check_availability() gave
    } else if (spec.contract->version != operation.contract().version ||
               spec.contract->schema != operation.contract().schema) {
      e.candidate.rejection = Rejection::kContractMismatch;
      e.candidate.reason = "contract mismatch: implements version " + std::to_string(spec.contract->version) +
                           " '" + spec.contract->schema + "', the operation is version " +
                           std::to_string(operation.contract().version);
    } else if (!spec.supports(mode)) {
      std::vector<std::string> modes;
      for (ExecutionMode m : spec.execution_modes) modes.push_back(to_string(m));
      e.candidate.rejection = Rejection::kUnsupportedMode;
      e.candidate.reason = std::string("unsupported mode ") + to_string(mode) + " (supports " + join(modes, ", ") + ")";
    } else if (batch_invariant && !spec.batch_invariant) {
      e.candidate.rejection = Rejection::kNotBatchInvariant;
      e.candidate.reason = "not batch-invariant (batch_invariant was asked for: a row's bits may depend on the batch)";
    } else {
      e.eligible = true;
    }
  }
}

namespace {

Choice failed(std::string error) { return Choice{.chosen = nullptr, .error = std::move(error)}; }

// The override's target names an implementation (which must be eligible) or a solution (its first
// eligible implementation in order).
Choice choose_override(const std::vector<CandidateEntry>& entries, const Operation& operation, Device device,
                       const ResolvedOverride& override_target,
                       const std::vector<std::shared_ptr<const RegisteredKernel>>& kernels) {
  const std::string& target = override_target.target;
  const std::string who = operation.name() + ": override '" + target + "' (" + override_target.source + ")";
  for (const CandidateEntry& e : entries) {
    if (e.candidate.name != target) continue;
    if (!e.eligible) return failed(who + " names an excluded implementation: " + e.candidate.reason);
    return Choice{.chosen = &e};
  }
  const CandidateEntry* chosen = nullptr;
  bool solution_known = false;
  std::vector<std::string> reasons;
  for (const CandidateEntry& e : entries) {
    if (e.candidate.solution != target) continue;
    solution_known = true;
    if (e.eligible && chosen == nullptr) chosen = &e;
    if (!e.eligible) reasons.push_back(e.candidate.name + ": " + e.candidate.reason);
  }
  if (!solution_known) {
    auto other = std::find_if(kernels.begin(), kernels.end(), [&](const auto& k) { return k->spec.name == target; });
    if (other != kernels.end()) {
      return failed(who + " names " + target + ", an implementation for device " + to_string((*other)->spec.device) +
                    " and operation " + (*other)->operation->name() + ", not " + operation.name() + " on " +
                    to_string(device));
    }
    std::vector<std::string> names;
    for (const CandidateEntry& e : entries) {
      names.push_back(e.candidate.name);
      names.push_back(e.candidate.solution);
    }
    return failed(who + " is neither an implementation nor a solution of " + operation.name() + " on " +
                  to_string(device) + "; closest: " + join(closest(target, names), ", "));
  }
  if (chosen == nullptr) return failed(who + ": every implementation of that solution is excluded: " + join(reasons, "; "));
  return Choice{.chosen = chosen};
}

}  // namespace

Choice choose(std::vector<CandidateEntry>& entries, const Operation& operation, Device device, ExecutionMode mode,
              const ResolvedOverride* override_target,
              const std::vector<std::shared_ptr<const RegisteredKernel>>& kernels) {
  std::stable_sort(entries.begin(), entries.end(), [](const CandidateEntry& a, const CandidateEntry& b) {
    if (a.eligible != b.eligible) return a.eligible;
    if (a.candidate.priority != b.candidate.priority) return a.candidate.priority > b.candidate.priority;
    return a.candidate.name < b.candidate.name;
  });
  if (override_target != nullptr) return choose_override(entries, operation, device, *override_target, kernels);
  for (const CandidateEntry& e : entries) {
    if (e.eligible) return Choice{.chosen = &e};
  }
  bool invariance_excluded = false;
  for (const CandidateEntry& e : entries) invariance_excluded |= e.candidate.rejection == Rejection::kNotBatchInvariant;
  return failed(operation.name() + ": no eligible implementation on " + to_string(device) + " in " + to_string(mode) +
                " mode" + (invariance_excluded ? " that is batch-invariant" : ""));
}

void label(const std::vector<CandidateEntry>& entries, const Choice& choice, const ResolvedOverride* override_target,
           Explanation& ex) {
  if (choice.chosen == nullptr) {
    ex.error = choice.error;
    for (const CandidateEntry& e : entries) ex.candidates.push_back(e.candidate);
    return;
  }
  const Candidate& chosen = choice.chosen->candidate;
  ex.candidates.push_back(chosen);
  ex.candidates.back().verdict = Verdict::kSelected;
  for (const CandidateEntry& e : entries) {
    if (&e == choice.chosen) continue;
    Candidate c = e.candidate;
    if (e.eligible) {
      if (override_target != nullptr) {
        c.verdict = Verdict::kNotOverridden;
        c.reason = "override selects " + chosen.name + " (" + override_target->source + ")";
      } else {
        c.verdict = Verdict::kLowerPriority;
        c.reason = c.priority < chosen.priority
                       ? "priority " + std::to_string(c.priority) + " < " + std::to_string(chosen.priority)
                       : "same priority, name orders after " + chosen.name;
      }
    }
    ex.candidates.push_back(std::move(c));
  }
}

Selection select(Device device, const Operation& operation, const Config& config,
                 const std::vector<std::shared_ptr<const RegisteredKernel>>& kernels,
                 const std::vector<const Group*>& groups, const ModuleLoader& modules) {
  Selection result;
  Explanation& ex = result.explanation;
  ex.device = device;
  ex.operation = operation.name();
  ex.mode = config.mode;
  const ResolvedOverride* override_target = nullptr;
  if (auto it = config.overrides.find(operation.name()); it != config.overrides.end()) {
    override_target = &it->second;
    ex.override_target = it->second.target;
    ex.override_source = it->second.source;
  }
  std::vector<CandidateEntry> entries = gather(device, operation, kernels, groups);
  ex.batch_invariant = config.batch_invariant;
  filter(entries, operation, config.mode, modules, config.batch_invariant);
  const Choice choice = choose(entries, operation, device, config.mode, override_target, kernels);
  label(entries, choice, override_target, ex);
  if (choice.chosen != nullptr) result.kernel = choice.chosen->kernel;
  return result;
}

}  // namespace xllm_kernel::detail
