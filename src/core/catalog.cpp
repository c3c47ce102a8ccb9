#include "xllm_kernel/catalog.h"

namespace xllm_kernel {

const std::vector<const Group*>& builtin_groups() {
  static const std::vector<const Group*> groups{&normalization_group()};
  return groups;
}

std::vector<const Operation*> builtin_operations() {
  std::vector<const Operation*> out;
  for (const Group* g : builtin_groups()) out.insert(out.end(), g->operations.begin(), g->operations.end());
  return out;
}

}  // namespace xllm_kernel
