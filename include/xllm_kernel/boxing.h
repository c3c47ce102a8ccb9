// Boxed kernels: implementations that take their arguments as a stack of IValues in schema order
// and leave the results on it, as the torch dispatcher does. Python kernels (register_kernel in the
// Python package) arrive this way; any operation declared with a boxer accepts them.
//
//   static const TypedOperation<RmsNormFn> op(rms_norm_contract(), &boxed_function<RmsNormFn>,
//                                             &call_boxed<RmsNormFn>);
//   add_boxed_kernel(registry(), op, spec, [](torch::jit::Stack& stack) { ... });
//   op.boxed_caller()(prepared.erased(), stack);  // any prepared binding, called with IValues
//
// The typed thunk boxes the arguments, calls the kernel and unboxes the result: slower than a
// native call, but selected, prepared and validated like any other implementation.
#pragma once

#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <c10/util/Exception.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "xllm_kernel/registry.h"

namespace xllm_kernel {

using BoxedKernel = std::function<void(torch::jit::Stack& stack)>;

namespace detail {

// Results on a stack, as the torch dispatcher leaves them: a tuple return (std::tuple of tensors,
// the schema's "-> (Tensor, Tensor)") is one stack entry per element, any other result one entry.
template <class R>
struct StackResults {
  static constexpr size_t kCount = 1;
  static void push(torch::jit::Stack& stack, R&& result) { stack.emplace_back(std::move(result)); }
  static R pop(torch::jit::Stack& stack) { return std::move(stack[0]).template to<R>(); }
};

template <class... T>
struct StackResults<std::tuple<T...>> {
  static constexpr size_t kCount = sizeof...(T);
  static void push(torch::jit::Stack& stack, std::tuple<T...>&& result) {
    std::apply([&](auto&&... element) { (stack.emplace_back(std::move(element)), ...); }, std::move(result));
  }
  // One entry per element, or a single tuple IValue (a kernel that pushed the tuple itself).
  static std::tuple<T...> pop(torch::jit::Stack& stack) {
    if (stack.size() == 1 && stack[0].isTuple()) return std::move(stack[0]).template to<std::tuple<T...>>();
    return pop(stack, std::index_sequence_for<T...>{});
  }
  template <size_t... I>
  static std::tuple<T...> pop(torch::jit::Stack& stack, std::index_sequence<I...>) {
    return std::tuple<T...>(std::move(stack[I]).template to<T>()...);
  }
};

template <class Sig>
struct BoxedThunk;

template <class R, class... Args>
struct BoxedThunk<R(Args...)> {
  static R call(const void* context, Args... args) {
    const auto& kernel = *static_cast<const BoxedKernel*>(context);
    torch::jit::Stack stack;
    stack.reserve(sizeof...(Args));
    (stack.emplace_back(args), ...);
    kernel(stack);
    if constexpr (!std::is_void_v<R>) {
      using Results = StackResults<std::decay_t<R>>;
      const bool one_tuple = Results::kCount > 1 && stack.size() == 1 && stack[0].isTuple();
      TORCH_CHECK(stack.size() == Results::kCount || one_tuple, "boxed kernel must leave exactly ", Results::kCount,
                  " result(s) on the stack, left ", stack.size());
      return Results::pop(stack);
    }
  }
};
template <class Sig>
struct BoxedCall;

template <class R, class... Args>
struct BoxedCall<R(Args...)> {
  using Thunk = typename KernelFunction<R(Args...)>::Thunk;

  // A mutable tensor argument (Tensor&) binds to the tensor inside the IValue, so writes reach the
  // caller's tensor; everything else converts to the parameter's value type. None for a Tensor
  // argument arrives as an undefined tensor, which the bridge rejects naming the operation and
  // the argument (IValue::toTensor would throw an error naming neither).
  template <class Arg>
  static decltype(auto) unbox(c10::IValue& value) {
    if constexpr (std::is_same_v<std::decay_t<Arg>, at::Tensor>) {
      if (value.isNone()) value = at::Tensor();
      return value.toTensor();
    } else {
      return std::move(value).template to<std::decay_t<Arg>>();
    }
  }

  static void call(const ErasedFunction& function, torch::jit::Stack& stack) {
    TORCH_CHECK(stack.size() == sizeof...(Args), "call_boxed: expected ", sizeof...(Args),
                " arguments on the stack, got ", stack.size());
    call(reinterpret_cast<Thunk>(function.thunk), function.context, stack, std::index_sequence_for<Args...>{});
  }

  template <size_t... I>
  static void call(Thunk thunk, const void* context, torch::jit::Stack& stack, std::index_sequence<I...>) {
    if constexpr (std::is_void_v<R>) {
      thunk(context, unbox<Args>(stack[I])...);
      stack.clear();
    } else {
      R result = thunk(context, unbox<Args>(stack[I])...);
      stack.clear();
      StackResults<R>::push(stack, std::move(result));
    }
  }
};
}  // namespace detail

// The BoxedCaller of an operation with signature Sig: calls `function` (which must have that
// signature) with the arguments on `stack`, in schema order, and leaves the result there.
template <class Sig>
void call_boxed(const ErasedFunction& function, torch::jit::Stack& stack) {
  if (function.signature == nullptr || *function.signature != typeid(Sig)) {
    throw std::logic_error("call_boxed: the callable's signature does not match the operation's");
  }
  detail::BoxedCall<Sig>::call(function, stack);
}

// The Boxer of an operation with signature Sig.
template <class Sig>
ErasedFunction boxed_function(std::shared_ptr<const void> boxed_kernel) {
  const void* context = boxed_kernel.get();
  return ErasedFunction::from(KernelFunction<Sig>(&detail::BoxedThunk<Sig>::call, context), std::move(boxed_kernel));
}

// The signature of operations declared at run time (add_group in xllm_kernel/catalog.h): their
// kernels are boxed, and so is the prepared binding: it takes the arguments as a stack in schema
// order and leaves the results there.
using BoxedSignature = void(torch::jit::Stack& stack);

// The Boxer of such an operation: the typed callable is the boxed kernel itself.
ErasedFunction boxed_identity(std::shared_ptr<const void> boxed_kernel);
// Its BoxedCaller: calls the binding on `stack`.
void call_boxed_stack(const ErasedFunction& function, torch::jit::Stack& stack);

// Registers a boxed kernel for `operation` (which must have been declared with a boxer).
inline void add_boxed_kernel(Registry& registry, const Operation& operation, KernelSpec spec, BoxedKernel kernel) {
  if (operation.boxer() == nullptr) {
    throw std::invalid_argument("register_kernel(" + spec.name + "): operation '" + operation.name() +
                                "' does not accept boxed kernels");
  }
  if (!kernel) throw std::invalid_argument("register_kernel(" + spec.name + "): kernel must not be empty");
  auto owned = std::make_shared<const BoxedKernel>(std::move(kernel));
  registry.add(operation, std::move(spec), operation.boxer()(std::move(owned)));
}

}  // namespace xllm_kernel
