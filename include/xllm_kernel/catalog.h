// The catalog: operator groups, the operations each declares, and the backend modules that provide
// implementations for them.
//
// A group is declared once, in src/ops/<group>/<group>.cpp:
//
//   const Group& normalization_group() {
//     static const Group group{"normalization", {&rms_norm_operation(), ...},
//                              {BackendModule{"normalization.torch_cpu", Device::kCpu, {...}, probe}}};
//     return group;
//   }
//
// and listed in builtin_groups(). Adding an implementation touches its own file and its group's
// module list, nothing central.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "xllm_kernel/registry.h"

namespace xllm_kernel {

// What probing a module's dependencies found. Probing never creates a device context.
struct ProbeResult {
  bool available = true;
  std::string detail;  // available: e.g. "highway AVX2"; unavailable: the missing dependency

  static ProbeResult ok(std::string detail = {}) { return {true, std::move(detail)}; }
  static ProbeResult missing(std::string what) { return {false, std::move(what)}; }
};

// An implementation a module registers, declared up front so that explain() can list it even
// when the module's dependency is missing and nothing was registered.
struct DeclaredImplementation {
  std::string operation;  // "rms_norm"
  std::string name;       // "cpu.native.rms_norm"
  std::string solution;   // "native"
};

struct BackendModule {
  std::string name;                          // "normalization.native_cpu"
  Device device = Device::kCpu;
  std::vector<DeclaredImplementation> implementations;
  std::function<ProbeResult()> probe;        // null: always available
  // Empty: linked into the library (registered at load). Otherwise a shared library that
  // initialize() loads when the device is requested (libxllm_kernel_cuda.so).
  std::string plugin;
};

struct Group {
  std::string name;
  std::vector<const Operation*> operations;  // OPERATIONS
  std::vector<BackendModule> modules;
};

// The groups this build knows.
const std::vector<const Group*>& builtin_groups();

// Every operation of the built-in groups, in catalog order.
std::vector<const Operation*> builtin_operations();

const Group& normalization_group();

}  // namespace xllm_kernel
