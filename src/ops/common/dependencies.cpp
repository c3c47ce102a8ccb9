#include "src/ops/common/dependencies.h"

#include <algorithm>
#include <mutex>

namespace xllm_kernel::family {

namespace {

struct Declarations {
  std::mutex mutex;
  std::vector<DeclaredDependencies> all;
};

Declarations& declarations() {
  static Declarations d;  // filled while the library loads (static registrars), read afterwards
  return d;
}

}  // namespace

std::vector<DeclaredDependencies> declared_dependencies() {
  Declarations& d = declarations();
  std::lock_guard<std::mutex> lock(d.mutex);
  std::vector<DeclaredDependencies> out = d.all;
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.family < b.family; });
  return out;
}

detail::DependencyRegistrar::DependencyRegistrar(const char* family, std::initializer_list<const char*> builds_on) {
  Declarations& d = declarations();
  std::lock_guard<std::mutex> lock(d.mutex);
  d.all.push_back({family, std::vector<std::string>(builds_on.begin(), builds_on.end())});
}

}  // namespace xllm_kernel::family
