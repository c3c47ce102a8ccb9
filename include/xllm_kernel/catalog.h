// The catalog: operator groups, the operations each declares, and the backend modules that provide
// implementations for them. A family is a folder: its group registers itself, so adding one edits
// no central list.
//
// The library's families declare their modules from a table (src/ops/common/family.h): in
// src/ops/<group>/<group>.cpp,
//
//   const family::StandardModules& modules() {
//     static const family::StandardModules m = family::standard_modules(
//         {.family = "activation", .operations = {&silu_and_mul_operation()}, .domain = "float32/..."});
//     return m;  // activation.torch_cpu, .native_cpu, .torch_cuda, .native_cuda with their probes
//   }
//   const Group& activation_group() {
//     static const Group group = modules().group();
//     return group;
//   }
//   XLLM_REGISTER_GROUP(activation_group);
//
// and in the bridge (src/ops/<group>/native_cpu.cpp, or src/ops/<group>/cuda/ for the CUDA plugin):
//
//   XLLM_REGISTER_IMPLEMENTATION(cpu_native_silu_and_mul, modules().native_cpu, silu_and_mul_operation(),
//                                native_silu_and_mul);
//
// A BackendModule can also be written out field by field (.name, .device, .solution, .binding,
// .implementations, .probe, .plugin), as tests and add_group do.
//
// Each implementation is declared once, in its module: its name (<device>.<solution>.<operation>
// [.<variant>]), priority, modes and binding come from the declaration, and a registration that
// names no declaration fails initialize() with the reason.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "xllm_kernel/registry.h"

namespace xllm_kernel {

// What probing a dependency found. Probing never creates a device context.
struct ProbeResult {
  bool available = true;
  std::string detail;  // available: e.g. "highway AVX2"; unavailable: the missing dependency

  static ProbeResult ok(std::string detail = {}) { return {true, std::move(detail)}; }
  static ProbeResult missing(std::string what) { return {false, std::move(what)}; }
};

struct BackendModule;

// One implementation a module provides, declared up front so that explain() lists it even when
// the module's dependency is missing and nothing was registered.
struct Implementation {
  const Operation* operation = nullptr;
  std::string variant;       // optional: the name's fourth part
  std::string input_domain;  // what the bridge accepts, for people
  int priority = 0;          // higher wins; ties broken by name
  bool batch_invariant = false;  // KernelSpec::batch_invariant
  // Optional: whether this implementation can run here (an ISA, a compute capability), checked
  // once when its module loads, after the module's own probe. Unavailable excludes it with
  // the reason (Rejection::kUnsupported).
  std::function<ProbeResult()> supports;
};

struct BackendModule {
  std::string name;      // "normalization.native_cpu"
  Device device = Device::kCpu;
  std::string solution;  // torch | native | torch_npu | python
  std::string binding;   // what the implementations call: "aten", "highway", "cuda", ...
  std::vector<ExecutionMode> execution_modes{ExecutionMode::kEager};
  std::vector<Implementation> implementations;
  std::function<ProbeResult()> probe;  // null: always available
  // Empty: linked into the library (registered at load). Otherwise a shared library that
  // initialize() loads beside libxllm_kernel.so when the device is requested.
  std::string plugin;

  // <device>.<solution>.<operation>[.<variant>]
  std::string implementation_name(const Implementation& implementation) const;
  // The registry's spec of one of this module's implementations.
  KernelSpec spec(const Implementation& implementation) const;
  // The declaration for (operation, variant), or null.
  const Implementation* find(const Operation& operation, const std::string& variant = {}) const;
};

struct Group {
  std::string name;
  std::vector<const Operation*> operations;  // OPERATIONS, in the group's order
  std::vector<const BackendModule*> modules;
};

// The catalog: every group, ordered by name. The library's own groups register while it loads, so
// they are all there before main(); groups added at run time (add_group) join them.
std::vector<const Group*> builtin_groups();

// Every operation of the catalog, in catalog order.
std::vector<const Operation*> builtin_operations();

// An operation declared at run time (by the Python package's group modules and extensions): its
// contract is checked (a schema torch parses, named after the operation, whose written arguments
// are exactly `mutates`), and its kernels are boxed (xllm_kernel/boxing.h: signature
// BoxedSignature). The catalog owns it until exit; it joins the catalog through add_group.
const Operation& make_boxed_operation(OpContract contract);

// Adds a group at run time, kept until exit: its operations (made by make_boxed_operation, none
// already in the catalog) get their torch schemas (torch.ops.xllm_kernel.<op>) with a kernel for
// each device's dispatch key that calls the prepared binding; its modules may implement any
// catalog operation (a group may consist of modules only: implementations of another group's
// operations). Throws std::invalid_argument for a group, operation or module name the catalog
// already has, an operation that was not made by make_boxed_operation, or a module whose
// implementations name operations the catalog lacks.
const Group& add_group(std::string name, std::vector<const Operation*> operations, std::vector<BackendModule> modules);

// The module declaring an implementation of this name, with the declaration; {null, null} if none.
std::pair<const BackendModule*, const Implementation*> find_declaration(const std::string& implementation_name);

namespace detail {
struct GroupRegistrar {
  explicit GroupRegistrar(const Group& (*group)());
};
struct ImplementationRegistrar {
  template <class Sig>
  ImplementationRegistrar(const BackendModule& module, const TypedOperation<Sig>& operation, KernelFunction<Sig> fn,
                          const char* variant = "") {
    add(module, operation, ErasedFunction::from(fn), variant);
  }
  // Records (never throws during static initialization) a registration its module does not declare.
  static void add(const BackendModule& module, const Operation& operation, ErasedFunction fn, const char* variant);
};
}  // namespace detail

}  // namespace xllm_kernel

// Adds a group to the catalog at load time. FN names a function `const Group& FN()`.
#define XLLM_REGISTER_GROUP(FN) \
  static const ::xllm_kernel::detail::GroupRegistrar xllm_kernel_group_registrar_##FN(&FN)

// Registers FN (a plain function with the operation's signature) as MODULE's declared
// implementation of OPERATION (expressions giving the module and the TypedOperation).
#define XLLM_REGISTER_IMPLEMENTATION(ID, MODULE, OPERATION, FN)                 \
  static const ::xllm_kernel::detail::ImplementationRegistrar xllm_kernel_impl_registrar_##ID( \
      MODULE, OPERATION, ::xllm_kernel::KernelFunction<std::remove_pointer_t<decltype(&FN)>>::template of<&FN>())

// The same for a declared variant ("<device>.<solution>.<operation>.<VARIANT>").
#define XLLM_REGISTER_VARIANT(ID, MODULE, OPERATION, VARIANT, FN)                                 \
  static const ::xllm_kernel::detail::ImplementationRegistrar xllm_kernel_impl_registrar_##ID( \
      MODULE, OPERATION, ::xllm_kernel::KernelFunction<std::remove_pointer_t<decltype(&FN)>>::template of<&FN>(), \
      VARIANT)
