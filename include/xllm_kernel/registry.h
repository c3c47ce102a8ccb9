// Implementations and the process-wide registry.
//
// An implementation is a KernelSpec (metadata in fields, never parsed from the name) plus a typed
// callable. The library's own implementations are declared in their group's backend modules and
// registered statically in their bridge (XLLM_REGISTER_IMPLEMENTATION, xllm_kernel/catalog.h);
// Python and tests register KernelSpecs directly:
//
//   registry().add(rms_norm_operation(),
//                  KernelSpec{.name = "cpu.python.rms_norm", .contract = &rms_norm_contract(),
//                             .device = Device::kCpu, .solution = "python", .binding = "python", .priority = 30},
//                  function);
//
// A call through a prepared binding is one indirect call: KernelFunction<Sig> holds a thunk and a
// context pointer; no lookup, lock or allocation.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "xllm_kernel/contract.h"

namespace c10 {
struct IValue;
}
namespace torch {
class Library;
}

namespace xllm_kernel {

struct BackendModule;
struct Implementation;

struct KernelSpec {
  std::string name;                 // <device>.<solution>.<operation>[.<variant>], unique
  const OpContract* contract = nullptr;
  Device device = Device::kCpu;
  std::vector<ExecutionMode> execution_modes{ExecutionMode::kEager};
  std::string input_domain;         // descriptive: what the bridge accepts
  std::string solution;             // torch | native | torch_npu | python
  std::string variant;              // optional
  std::string binding;              // what it calls: "aten", "highway", "cuda", "torch_npu", ...
  int priority = 0;                 // higher wins; ties broken by name
  // A row's output bits do not depend on the other rows of the call, their number, the row's
  // position or the thread count (docs/batch-invariance.md). initialize(batch_invariant) selects
  // only such implementations; test/ops/batch_invariance_test.cpp checks every one that says so.
  bool batch_invariant = false;
  // The module that declares it (its dependency probe applies), or null for implementations
  // registered outside a module (Python, tests).
  const BackendModule* module = nullptr;

  bool supports(ExecutionMode mode) const;
};

// A typed callable: a thunk plus an opaque context (for kernels that carry state, such as Python
// callables). Calling it is one indirect call.
template <class Sig>
class KernelFunction;

template <class R, class... Args>
class KernelFunction<R(Args...)> {
 public:
  using Thunk = R (*)(const void* context, Args...);

  KernelFunction() = default;
  KernelFunction(Thunk thunk, const void* context) : thunk_(thunk), context_(context) {}

  // Wraps a plain function known at compile time; the thunk calls it directly.
  template <R (*F)(Args...)>
  static KernelFunction of() {
    return KernelFunction([](const void*, Args... args) -> R { return F(std::forward<Args>(args)...); },
                          nullptr);
  }

  R operator()(Args... args) const { return thunk_(context_, std::forward<Args>(args)...); }
  explicit operator bool() const { return thunk_ != nullptr; }
  Thunk thunk() const { return thunk_; }
  const void* context() const { return context_; }

 private:
  Thunk thunk_ = nullptr;
  const void* context_ = nullptr;
};

// KernelFunction with its signature erased; `owner` keeps a context alive.
struct ErasedFunction {
  void (*thunk)() = nullptr;
  const void* context = nullptr;
  std::shared_ptr<const void> owner;
  const std::type_info* signature = nullptr;

  template <class Sig>
  static ErasedFunction from(KernelFunction<Sig> fn, std::shared_ptr<const void> owner = nullptr) {
    return ErasedFunction{reinterpret_cast<void (*)()>(fn.thunk()), fn.context(), std::move(owner),
                          &typeid(Sig)};
  }
};

class PreparedKernel;

// A declared operation: its contract, its C++ signature, and the binding published per device.
// The public API reads the published binding with one atomic load.
class Operation {
 public:
  // Makes a typed callable out of a boxed kernel (xllm_kernel/boxing.h); null when the operation's
  // arguments cannot be boxed.
  using Boxer = ErasedFunction (*)(std::shared_ptr<const void> boxed_kernel);
  // The other direction: calls a typed callable with its arguments as IValues in schema order and
  // leaves its results on the stack. Callers that only hold IValues (the Python package's
  // PreparedKernel.function) reach a prepared binding this way; null when not boxable.
  using BoxedCaller = void (*)(const ErasedFunction& function, std::vector<c10::IValue>& stack);
  // Registers the operation's dispatcher kernels (Meta fake, CPU and CUDA calling the prepared
  // binding) into its group's library fragment when the group registers; a family's declared
  // operations set it (src/ops/common/family.h), so no family writes TORCH_LIBRARY_IMPL blocks.
  using DispatcherKernels = void (*)(const Operation& operation, torch::Library& library);

  Operation(const OpContract& contract, const std::type_info& signature, Boxer boxer = nullptr,
            BoxedCaller boxed_caller = nullptr)
      : contract_(contract), signature_(signature), boxer_(boxer), boxed_caller_(boxed_caller) {}
  Operation(const Operation&) = delete;
  Operation& operator=(const Operation&) = delete;

  const OpContract& contract() const { return contract_; }
  const std::string& name() const { return contract_.operation; }
  const std::type_info& signature() const { return signature_; }
  Boxer boxer() const { return boxer_; }
  BoxedCaller boxed_caller() const { return boxed_caller_; }
  DispatcherKernels dispatcher_kernels() const { return dispatcher_kernels_; }

  // The binding initialize() published for `device`, or null.
  const PreparedKernel* prepared(Device device) const {
    return published_[static_cast<int>(device)].load(std::memory_order_acquire);
  }
  // Throws "<op>: device <d> is not initialized; call xllm_kernel::initialize(...)".
  const PreparedKernel& get_prepared(Device device) const;

  // Runtime only.
  void publish(Device device, const PreparedKernel* kernel) const {
    published_[static_cast<int>(device)].store(kernel, std::memory_order_release);
  }

 protected:
  void set_dispatcher_kernels(DispatcherKernels kernels) { dispatcher_kernels_ = kernels; }

 private:
  const OpContract& contract_;
  const std::type_info& signature_;
  Boxer boxer_;
  BoxedCaller boxed_caller_;
  DispatcherKernels dispatcher_kernels_ = nullptr;
  mutable std::atomic<const PreparedKernel*> published_[kNumDevices] = {};
};

template <class Sig>
class TypedOperation;

template <class R, class... Args>
class TypedOperation<R(Args...)> : public Operation {
 public:
  explicit TypedOperation(const OpContract& contract, Boxer boxer = nullptr, BoxedCaller boxed_caller = nullptr)
      : Operation(contract, typeid(R(Args...)), boxer, boxed_caller) {}

  // get_prepared(device).function<Sig>()
  KernelFunction<R(Args...)> function(Device device) const;

  // The serving path: one atomic load, one null check, one indirect call. The signature was
  // checked when the kernel was registered.
  R call(Device device, Args... args) const {
    const PreparedKernel* kernel = prepared(device);
    if (kernel == nullptr) get_prepared(device);  // throws "not initialized"
    return call_unchecked(*kernel, std::forward<Args>(args)...);
  }

 private:
  static R call_unchecked(const PreparedKernel& kernel, Args... args);
};

// An implementation chosen by initialize(): its spec and its callable.
class PreparedKernel {
 public:
  PreparedKernel(KernelSpec spec, ErasedFunction function, std::string detail)
      : spec_(std::move(spec)), function_(std::move(function)), detail_(std::move(detail)) {}

  const KernelSpec& spec() const { return spec_; }
  // What the module reported when probed, e.g. "highway AVX2".
  const std::string& detail() const { return detail_; }
  const ErasedFunction& erased() const { return function_; }

  template <class Sig>
  KernelFunction<Sig> function() const {
    if (function_.signature == nullptr || *function_.signature != typeid(Sig)) throw_signature_mismatch();
    return KernelFunction<Sig>(reinterpret_cast<typename KernelFunction<Sig>::Thunk>(function_.thunk),
                               function_.context);
  }

 private:
  [[noreturn]] void throw_signature_mismatch() const;
  KernelSpec spec_;
  ErasedFunction function_;
  std::string detail_;
};

template <class R, class... Args>
KernelFunction<R(Args...)> TypedOperation<R(Args...)>::function(Device device) const {
  return get_prepared(device).template function<R(Args...)>();
}

template <class R, class... Args>
R TypedOperation<R(Args...)>::call_unchecked(const PreparedKernel& kernel, Args... args) {
  using Thunk = typename KernelFunction<R(Args...)>::Thunk;
  const ErasedFunction& fn = kernel.erased();
  return reinterpret_cast<Thunk>(fn.thunk)(fn.context, std::forward<Args>(args)...);
}

struct RegisteredKernel {
  KernelSpec spec;
  const Operation* operation = nullptr;
  ErasedFunction function;
};

// The set of registered implementations. One process-wide instance (registry()); tests make
// their own. Freezing is per device: initialize(device) freezes that device, after which
// registering an implementation for it fails.
class Registry {
 public:
  // Throws std::invalid_argument for a duplicate name, a malformed spec, a signature that does
  // not match the operation's, or std::logic_error after freeze.
  void add(const Operation& operation, KernelSpec spec, ErasedFunction function);

  template <class Sig>
  void add(const TypedOperation<Sig>& operation, KernelSpec spec, KernelFunction<Sig> function,
           std::shared_ptr<const void> owner = nullptr) {
    add(static_cast<const Operation&>(operation), std::move(spec),
        ErasedFunction::from(function, std::move(owner)));
  }

  void freeze(Device device);
  bool frozen(Device device) const;

  // Snapshot of all registered kernels, in registration order.
  std::vector<std::shared_ptr<const RegisteredKernel>> kernels() const;
  std::shared_ptr<const RegisteredKernel> find(const std::string& name) const;
  size_t size() const;

  // Errors raised by static registrars (which must not throw during static initialization);
  // initialize() rethrows the first one.
  void record_error(const std::string& message);
  std::vector<std::string> errors() const;

  void unfreeze_for_testing();
  void clear_errors_for_testing();

 private:
  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<const RegisteredKernel>> kernels_;
  bool frozen_[kNumDevices] = {};
  std::vector<std::string> errors_;
};

// The process-wide registry (a function-local static).
Registry& registry();

namespace detail {
struct StaticRegistrar {
  template <class Sig, class Fn>
  StaticRegistrar(const TypedOperation<Sig>& operation, Fn make_spec, KernelFunction<Sig> function) {
    try {
      registry().add(operation, make_spec(), function);
    } catch (const std::exception& e) {
      registry().record_error(e.what());
    }
  }
};
}  // namespace detail

}  // namespace xllm_kernel

// Registers FN (a plain function with the operation's signature) at load time. OPERATION is an
// expression giving a TypedOperation<Sig>&; SPEC an expression giving a KernelSpec (evaluated at
// registration, so function-local statics it uses are constructed first).
#define XLLM_REGISTER_KERNEL(ID, OPERATION, SPEC, FN)                                             \
  static const ::xllm_kernel::detail::StaticRegistrar xllm_kernel_registrar_##ID(                \
      OPERATION, [] { return SPEC; },                                                            \
      ::xllm_kernel::KernelFunction<std::remove_pointer_t<decltype(&FN)>>::template of<&FN>())
