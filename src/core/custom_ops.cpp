// torch.ops.xllm_kernel.*: every catalog operation's schema, defined once from its contract when
// its group registers (a library fragment per group, so the order in which the library's files
// initialize does not matter). Each group registers its Meta (fake) kernel and one kernel per
// dispatch key that calls the device's prepared binding.
#include <torch/library.h>

#include <memory>
#include <mutex>
#include <vector>

#include "xllm_kernel/catalog.h"

namespace xllm_kernel::detail {

void define_schemas(const Group& group) {
  static std::mutex mutex;
  static auto* fragments = new std::vector<std::unique_ptr<torch::Library>>();  // kept until exit
  std::lock_guard<std::mutex> lock(mutex);
  auto fragment = std::make_unique<torch::Library>(torch::Library::FRAGMENT, "xllm_kernel", std::nullopt, __FILE__,
                                                   __LINE__);
  for (const Operation* op : group.operations) fragment->def(torch::schema(op->contract().schema.c_str()));
  fragments->push_back(std::move(fragment));
}

}  // namespace xllm_kernel::detail

// The namespace's one library; the schemas come in fragments, one per group.
TORCH_LIBRARY(xllm_kernel, m) {}
