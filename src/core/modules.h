// Loading backend modules: probing their dependencies (once), loading device plugins, and
// checking each implementation's own `supports` probe. Selection (src/core/selection.cpp) reads
// the results and never loads anything itself.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "xllm_kernel/catalog.h"

namespace xllm_kernel::detail {

class ModuleLoader {
 public:
  // Probes `module` (once) and, when its dependency is there, loads its plugin and checks each
  // implementation's supports probe. A plugin that is installed but fails to load throws
  // std::runtime_error naming `who`, the module and the loader's message: that is a broken
  // installation, not a missing dependency.
  //
  // `registered(name)` says whether an implementation of that name already has a kernel: a module
  // whose implementations were registered by another front door (the Python package's module of the
  // same name, xllm_kernel/ops/<family>/<leaf>.py) keeps them and its plugin is not loaded (it
  // would register the same names again).
  void load(const BackendModule& module, const std::string& who,
            const std::function<bool(const std::string&)>& registered = {});

  // What load() found; null for a module never loaded.
  const ProbeResult* probe(const BackendModule& module) const;
  // The implementation's supports probe; null when it declares none or its module is unavailable.
  const ProbeResult* supports(const Implementation& implementation) const;

 private:
  std::map<const BackendModule*, ProbeResult> probes_;
  std::map<const Implementation*, ProbeResult> supports_;
  std::map<const BackendModule*, void*> plugins_;  // dlopen handles, never closed
};

// Why a front door could not load a module's dependency (the Python package: "python module
// torch_npu cannot be imported (ImportError: libhccl.so: ...)"), recorded before initialize(); a
// probe that then finds the dependency missing reports this beside its own reason. Empty: none.
void note_missing_dependency(const std::string& module, const std::string& reason);
std::string missing_dependency_note(const std::string& module);

// The directory holding libxllm_kernel.so, where plugins are installed.
std::string library_directory();

}  // namespace xllm_kernel::detail
