// Registering a bridge under its implementation name, spelled out (not public).
//
//   XLLM_REGISTER_NAMED("cpu.native.silu_and_mul", modules().native_cpu, silu_and_mul_operation(),
//                       native_silu_and_mul);
//
// The name is the one the module composes (<device>.<solution>.<operation>[.<variant>], the
// variant read from its fourth part), written where the function registers so that a search for
// a name shown by explain() or a report finds its bridge. It is checked when the library loads: a
// name that is not the module's name for the operation fails initialize() with the reason (as a
// registration the module does not declare does), so it cannot go stale.
#pragma once

#include <string>
#include <type_traits>

#include "xllm_kernel/catalog.h"

namespace xllm_kernel::family {

// The variant a registration named `name` registers for (module, operation): "" for
// "<device>.<solution>.<operation>", "v" for "<...>.<operation>.v". Throws std::invalid_argument,
// naming both, when `name` is not the module's name for the operation.
std::string registered_variant(const char* name, const BackendModule& module, const Operation& operation);

// Records (never throws during static initialization) a name that does not match, else registers.
void register_named(const char* name, const BackendModule& module, const Operation& operation, ErasedFunction fn);

struct NamedRegistrar {
  template <class Sig>
  NamedRegistrar(const char* name, const BackendModule& module, const TypedOperation<Sig>& operation,
                 KernelFunction<Sig> fn) {
    register_named(name, module, operation, ErasedFunction::from(fn));
  }
};

// The implementation registered as `name` ("cpu.torch.per_token_quant"), prepared: what a family's
// fused operation composes from another family's (declared with XLLM_FAMILY_BUILDS_ON). Not
// registered: an error naming `who` (the operation that needs it). Call once, at first use.
PreparedKernel registered_kernel(const char* who, const std::string& name);

template <class Sig>
KernelFunction<Sig> registered_function(const char* who, const std::string& name) {
  return registered_kernel(who, name).function<Sig>();
}

}  // namespace xllm_kernel::family

#define XLLM_REGISTER_NAMED_JOIN2(A, B) A##B
#define XLLM_REGISTER_NAMED_JOIN(A, B) XLLM_REGISTER_NAMED_JOIN2(A, B)

// Registers FN (a plain function with the operation's signature) as MODULE's declared
// implementation NAME (a string literal) of OPERATION.
#define XLLM_REGISTER_NAMED(NAME, MODULE, OPERATION, FN)                                                        \
  static const ::xllm_kernel::family::NamedRegistrar XLLM_REGISTER_NAMED_JOIN(xllm_kernel_named_registrar_,   \
                                                                               __COUNTER__)(                    \
      NAME, MODULE, OPERATION, ::xllm_kernel::KernelFunction<std::remove_pointer_t<decltype(&FN)>>::template of<&FN>())
