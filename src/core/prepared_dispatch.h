// torch.ops.xllm_kernel.<op> on one dispatch key, boxed: moves the operation's arguments off the
// dispatcher's stack, calls the device's prepared binding through the operation's boxed caller and
// leaves the results. Serves every key of the operations added at run time (add_group) and the
// PrivateUse1 (npu) key of every operation: the C++ groups' CPU and CUDA keys keep unboxed kernels
// (src/ops/common/family.h: one call less on the hot path).
#pragma once

#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <iterator>
#include <stdexcept>

#include "xllm_kernel/registry.h"

namespace xllm_kernel::detail {

class PreparedDispatch final : public c10::OperatorKernel {
 public:
  PreparedDispatch(const Operation& operation, Device device) : operation_(operation), device_(device) {
    if (operation.boxed_caller() == nullptr) {
      throw std::logic_error("torch.ops.xllm_kernel." + operation.name() + ": the operation has no boxed caller");
    }
  }

  void operator()(const c10::OperatorHandle& handle, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const size_t arguments = handle.schema().arguments().size();
    const PreparedKernel& kernel = operation_.get_prepared(device_);  // throws "not initialized"
    torch::jit::Stack own(std::make_move_iterator(stack->end() - arguments), std::make_move_iterator(stack->end()));
    stack->erase(stack->end() - arguments, stack->end());
    operation_.boxed_caller()(kernel.erased(), own);
    for (auto& value : own) stack->push_back(std::move(value));
  }

 private:
  const Operation& operation_;
  const Device device_;
};

// The dispatch key torch uses for a device's tensors (npu: PrivateUse1, torch_npu's backend).
inline c10::DispatchKey dispatch_key(Device device) {
  switch (device) {
    case Device::kCpu: return c10::DispatchKey::CPU;
    case Device::kCuda: return c10::DispatchKey::CUDA;
    case Device::kNpu: return c10::DispatchKey::PrivateUse1;
  }
  return c10::DispatchKey::Undefined;
}

}  // namespace xllm_kernel::detail
