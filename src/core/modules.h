// Loading backend modules: probing their dependencies (once), loading device plugins, and
// checking each implementation's own `supports` probe. Selection (src/core/runtime.cpp) reads
// the results and never loads anything itself.
#pragma once

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
  void load(const BackendModule& module, const std::string& who);

  // What load() found; null for a module never loaded.
  const ProbeResult* probe(const BackendModule& module) const;
  // The implementation's supports probe; null when it declares none or its module is unavailable.
  const ProbeResult* supports(const Implementation& implementation) const;

 private:
  std::map<const BackendModule*, ProbeResult> probes_;
  std::map<const Implementation*, ProbeResult> supports_;
  std::map<const BackendModule*, void*> plugins_;  // dlopen handles, never closed
};

// The directory holding libxllm_kernel.so, where plugins are installed.
std::string library_directory();

}  // namespace xllm_kernel::detail
