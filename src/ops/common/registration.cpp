#include "src/ops/common/registration.h"

#include <c10/util/Exception.h>

#include <stdexcept>
#include <string>

#include "xllm_kernel/registry.h"

namespace xllm_kernel::family {

std::string registered_variant(const char* name, const BackendModule& module, const Operation& operation) {
  const std::string composed = std::string(to_string(module.device)) + "." + module.solution + "." + operation.name();
  const std::string written = name;
  if (written == composed) return {};
  if (written.size() > composed.size() + 1 && written.compare(0, composed.size(), composed) == 0 &&
      written[composed.size()] == '.') {
    return written.substr(composed.size() + 1);
  }
  throw std::invalid_argument("register_kernel(" + written + "): module " + module.name + " names its " +
                              operation.name() + " " + composed + "[.<variant>], not " + written +
                              "; write the implementation's name at its registration");
}

void register_named(const char* name, const BackendModule& module, const Operation& operation, ErasedFunction fn) {
  std::string variant;
  try {
    variant = registered_variant(name, module, operation);
  } catch (const std::exception& e) {
    registry().record_error(e.what());
    return;
  }
  detail::ImplementationRegistrar::add(module, operation, std::move(fn), variant.c_str());
}

PreparedKernel registered_kernel(const char* who, const std::string& name) {
  const auto found = registry().find(name);
  TORCH_CHECK(found != nullptr, who, ": the implementation ", name, " it composes is not registered");
  return PreparedKernel(found->spec, found->function, "");
}

}  // namespace xllm_kernel::family
