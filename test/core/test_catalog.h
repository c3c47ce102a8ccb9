// A self-contained catalog for selection tests: two operations with an int(int) signature and
// a registry/runtime of their own, so tests never touch the process-wide state.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>

#include "xllm_kernel/runtime.h"

namespace xllm_kernel::testing {

using UnaryFn = int(int);

inline const OpContract& alpha_contract() {
  static const OpContract c{.operation = "alpha", .version = 1, .schema = "alpha(int x) -> int",
                            .numerical_mode = NumericalMode::kExact, .semantics = "x + k", .dtypes = "int"};
  return c;
}
inline const OpContract& beta_contract() {
  static const OpContract c{.operation = "beta", .version = 1, .schema = "beta(int x) -> int",
                            .numerical_mode = NumericalMode::kExact, .semantics = "x * k", .dtypes = "int"};
  return c;
}
inline const TypedOperation<UnaryFn>& alpha() {
  static const TypedOperation<UnaryFn> op(alpha_contract());
  return op;
}
inline const TypedOperation<UnaryFn>& beta() {
  static const TypedOperation<UnaryFn> op(beta_contract());
  return op;
}

inline int plus1(int x) { return x + 1; }
inline int plus2(int x) { return x + 2; }
inline int plus3(int x) { return x + 3; }
inline int times2(int x) { return x * 2; }
inline int times3(int x) { return x * 3; }

inline KernelSpec spec(const std::string& name, const OpContract& contract, Device device, const std::string& solution,
                       int priority, std::vector<ExecutionMode> modes = {ExecutionMode::kEager},
                       const std::string& variant = "") {
  return KernelSpec{.name = name, .contract = &contract, .device = device, .execution_modes = std::move(modes),
                    .input_domain = "any int", .solution = solution, .variant = variant, .binding = "test",
                    .priority = priority};
}

// Sets an environment variable for the scope of a test.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const std::string& value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    setenv(name_.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_.empty()) unsetenv(name_.c_str());
    else setenv(name_.c_str(), old_.c_str(), 1);
  }

 private:
  std::string name_;
  std::string old_;
};

}  // namespace xllm_kernel::testing
