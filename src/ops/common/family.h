// A family declared as data (not public): what every family's group file uses to declare its
// operations and its backend modules, so that the mechanical parts are written once.
//
//   // src/ops/activation/activation.cpp
//   const family::DeclaredOperation<ActivationFn>& silu_and_mul_declared() {
//     static const family::DeclaredOperation<ActivationFn> op(silu_and_mul_contract(), &gated_fake<...>);
//     return op;  // its Meta, CPU and CUDA dispatcher kernels register with the group
//   }
//   const family::StandardModules& modules() {
//     static const family::StandardModules m = family::standard_modules(
//         {.family = "activation", .operations = {&silu_and_mul_operation()}, .domain = "float32/..."});
//     return m;
//   }
//   const Group& activation_group() {
//     static const Group group = modules().group();
//     return group;
//   }
//   XLLM_REGISTER_GROUP(activation_group);
//
//   // a bridge
//   XLLM_REGISTER_IMPLEMENTATION(cpu_native_silu_and_mul, modules().native_cpu, silu_and_mul_operation(), fn);
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "src/core/devices.h"
#include "xllm_kernel/boxing.h"
#include "xllm_kernel/catalog.h"

namespace xllm_kernel::family {

namespace detail {

template <class T>
inline constexpr bool kIsTensor = std::is_same_v<std::decay_t<T>, at::Tensor>;

// The tensor argument at `index` of a call, or null when that argument is not a tensor.
template <class... Args>
const at::Tensor* tensor_argument(int index, const Args&... args) {
  const at::Tensor* found = nullptr;
  int i = 0;
  auto visit = [&](const auto& arg) {
    if constexpr (kIsTensor<decltype(arg)>) {
      if (i == index) found = &arg;
    }
    ++i;
  };
  (visit(args), ...);
  return found;
}

}  // namespace detail

// An operation of a library family: its contract, its signature, its fake (Meta) kernel and the
// argument whose device picks the binding. Boxed callers (Python kernels, PreparedKernel.function)
// work as for any TypedOperation. When its group registers, it registers the Meta kernel (the fake)
// and CPU and CUDA kernels that call the prepared binding of the device argument's device, so
// torch.ops.xllm_kernel.<name> reaches the same binding as the C++ API.
template <class Sig>
class DeclaredOperation;

template <class R, class... Args>
class DeclaredOperation<R(Args...)> final : public TypedOperation<R(Args...)> {
 public:
  // Infers metadata only (shapes, dtypes): never reads or writes data.
  using Fake = R (*)(Args...);

  // `device_argument`: the index of the tensor argument whose device picks the binding.
  DeclaredOperation(const OpContract& contract, Fake fake, int device_argument = 0)
      : TypedOperation<R(Args...)>(contract, &boxed_function<R(Args...)>, &call_boxed<R(Args...)>),
        fake_(fake),
        device_argument_(device_argument) {
    constexpr bool kTensors[] = {detail::kIsTensor<Args>..., false};
    if (fake == nullptr) throw std::logic_error(contract.operation + ": a declared operation needs a fake kernel");
    if (device_argument < 0 || device_argument >= static_cast<int>(sizeof...(Args)) || !kTensors[device_argument]) {
      throw std::logic_error(contract.operation + ": device_argument " + std::to_string(device_argument) +
                             " is not a tensor argument of the signature");
    }
    this->set_dispatcher_kernels(&register_kernels);
  }

  // The public API: the prepared binding of the device argument's device (an undefined tensor or
  // another device is an error naming the operation).
  R operator()(Args... args) const {
    const at::Tensor* t = detail::tensor_argument(device_argument_, args...);
    const Device device = xllm_kernel::detail::device_of(this->name().c_str(), *t);
    return this->call(device, std::forward<Args>(args)...);
  }

 private:
  static void register_kernels(const Operation& base, torch::Library& library) {
    const auto& op = static_cast<const DeclaredOperation&>(base);
    auto call = [&op](Args... args) -> R { return op(std::forward<Args>(args)...); };
    library.impl(op.name().c_str(), torch::dispatch(c10::DispatchKey::Meta, op.fake_));
    library.impl(op.name().c_str(), torch::dispatch(c10::DispatchKey::CPU, call));
    library.impl(op.name().c_str(), torch::dispatch(c10::DispatchKey::CUDA, call));
  }

  Fake fake_;
  int device_argument_;
};

// Priorities of the standard modules: our kernels win over torch's where both can run.
inline constexpr int kTorchPriority = 10;
inline constexpr int kNativePriority = 20;
// The shared libraries initialize() loads for the CUDA and NPU modules.
inline constexpr const char* kCudaPlugin = "libxllm_kernel_cuda.so";
inline constexpr const char* kNpuPlugin = "libxllm_kernel_npu.so";

// A family's module table: every standard module implements every operation of the family with
// one input domain. The defaults are the rows every family shares; a family sets only what differs.
struct ModuleTable {
  std::string family;                        // "activation": modules "activation.native_cpu", ...
  std::vector<const Operation*> operations;  // the group's OPERATIONS, in order
  std::string domain;                        // what the bridges accept, after the device's words
  // cuda.torch: its modes, and a note on its domain ("cuda tensors (<note>), <domain>").
  std::vector<ExecutionMode> torch_cuda_modes{ExecutionMode::kEager, ExecutionMode::kGraph};
  std::string torch_cuda_note;
  // The torch_npu module's implementations (vendor operators differ per operation), or none.
  std::vector<Implementation> npu_implementations;
  // The standard modules whose implementations declare batch invariance (KernelSpec::
  // batch_invariant): a row's bits do not depend on the other rows, their number, its position or
  // the thread count. Declared only where the family's kernels guarantee it, and checked for every
  // such implementation by test/ops/batch_invariance_test.cpp.
  struct BatchInvariant {
    bool torch_cpu = false;
    bool native_cpu = false;
    bool torch_cuda = false;
    bool native_cuda = false;
  };
  BatchInvariant batch_invariant{};
};

// The standard modules built from a table:
//   <family>.torch_cpu    cpu   torch   aten     priority 10
//   <family>.native_cpu   cpu   native  highway  priority 20  probe: highway
//   <family>.torch_cuda   cuda  torch   aten     priority 10  probe: torch sees a CUDA device
//   <family>.native_cuda  cuda  native  cuda     priority 20  probe: sm_80+ device, plugin libxllm_kernel_cuda.so
//   <family>.torch_npu    npu   torch   torch_npu             probe: torch_npu loaded, plugin libxllm_kernel_npu.so
//                                                             (only with npu_implementations)
struct StandardModules {
  std::string family;
  std::vector<const Operation*> operations;
  BackendModule torch_cpu;
  BackendModule native_cpu;
  BackendModule torch_cuda;
  BackendModule native_cuda;
  std::optional<BackendModule> torch_npu;

  // The family's group: its operations and these modules (the npu one where declared).
  Group group() const;
};

StandardModules standard_modules(ModuleTable table);

}  // namespace xllm_kernel::family
