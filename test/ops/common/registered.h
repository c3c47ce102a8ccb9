// What every family's bridge tests share: the registered implementations of an operation, a
// callable of one of them, and error capture.
#pragma once

#include <c10/util/Exception.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "xllm_kernel/registry.h"

namespace xllm_kernel::testing {

// Names of the registered implementations of `operation` on `device`.
inline std::vector<std::string> registered_implementations(const std::string& operation, Device device) {
  std::vector<std::string> names;
  for (const auto& k : registry().kernels()) {
    if (k->operation->name() == operation && k->spec.device == device) names.push_back(k->spec.name);
  }
  return names;
}

// A callable of one registered implementation, kept alive for the process.
template <class Sig>
KernelFunction<Sig> function_of(const std::string& name) {
  auto k = registry().find(name);
  if (!k) throw std::runtime_error("not registered: " + name);
  static std::vector<std::unique_ptr<PreparedKernel>> keep;
  keep.push_back(std::make_unique<PreparedKernel>(k->spec, k->function, ""));
  return keep.back()->function<Sig>();
}

// The message `fn` throws, without torch's backtrace; "<no error>" when it returns.
inline std::string error_message(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace xllm_kernel::testing
