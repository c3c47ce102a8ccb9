// torch.ops.xllm_kernel.*: every catalog operation's schema, defined once from its contract when
// its group registers (a library fragment per group, so the order in which the library's files
// initialize does not matter). Each group registers its Meta (fake) kernel and its CPU and CUDA
// kernels calling the device's prepared binding; the PrivateUse1 (npu) kernel of every operation
// is registered here, boxed (src/core/prepared_dispatch.h), so a family needs no edit for it.
#include <torch/library.h>

#include <memory>
#include <mutex>
#include <vector>

#include "src/core/prepared_dispatch.h"
#include "xllm_kernel/catalog.h"

namespace xllm_kernel::detail {

void define_schemas(const Group& group) {
  static std::mutex mutex;
  static auto* fragments = new std::vector<std::unique_ptr<torch::Library>>();  // kept until exit
  std::lock_guard<std::mutex> lock(mutex);
  auto fragment = std::make_unique<torch::Library>(torch::Library::FRAGMENT, "xllm_kernel", std::nullopt, __FILE__,
                                                   __LINE__);
  for (const Operation* op : group.operations) {
    fragment->def(torch::schema(op->contract().schema.c_str()));
    fragment->impl(op->name().c_str(),
                   torch::dispatch(c10::DispatchKey::PrivateUse1,
                                   torch::CppFunction::makeFromBoxedFunctor(
                                       std::make_unique<PreparedDispatch>(*op, Device::kNpu))));
  }
  fragments->push_back(std::move(fragment));
}

}  // namespace xllm_kernel::detail

// The namespace's one library; the schemas come in fragments, one per group.
TORCH_LIBRARY(xllm_kernel, m) {}
