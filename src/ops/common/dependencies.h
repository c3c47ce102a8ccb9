// The families a family builds on, declared beside its group table (not public).
//
// A family may use another family's kernels, contract arithmetic or argument checks (the
// quantization family fuses a normalization or an activation with the quantization that follows).
// It says so in its group file, next to XLLM_REGISTER_GROUP:
//
//   // src/ops/quantization/quantization.cpp
//   XLLM_FAMILY_BUILDS_ON(quantization, "normalization", "activation");
//
// and then includes only the other family's entry points (docs/adding-an-operator.md, "A family
// that builds on another"): its public header, its contract header csrc/common/<family>.h, its kernel
// headers under csrc/{cpu,cuda}/<family>/ and src/ops/<family>/checks.h; never its internal.h.
// test/dependencies/family_dependencies_test.cpp reads every #include and Python import of the
// tree and fails on a reference to another family that is not declared here, on a declaration
// nothing uses, on a cycle, and on a reference to another family's internals.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

namespace xllm_kernel::family {

struct DeclaredDependencies {
  std::string family;                  // a folder of src/ops
  std::vector<std::string> builds_on;  // other folders of src/ops, in the order declared
};

// Every declaration of the loaded library, ordered by family. A family without one builds on none.
std::vector<DeclaredDependencies> declared_dependencies();

namespace detail {
struct DependencyRegistrar {
  DependencyRegistrar(const char* family, std::initializer_list<const char*> builds_on);
};
}  // namespace detail

}  // namespace xllm_kernel::family

// FAMILY: the family's folder name (an identifier); then the families it builds on, as strings.
#define XLLM_FAMILY_BUILDS_ON(FAMILY, ...)                                                                  \
  static const ::xllm_kernel::family::detail::DependencyRegistrar xllm_kernel_family_builds_on_##FAMILY( \
      #FAMILY, {__VA_ARGS__})
