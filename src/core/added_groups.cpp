// Groups added at run time (add_group): operations declared by the Python package's group modules
// and extensions, with boxed kernels. They join the same catalog, registry and runtime as the
// library's own groups, and torch.ops.xllm_kernel.<op> routes each device's dispatch key to the
// prepared binding, as the C++ groups' declared operations do (src/ops/common/family.h).
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>
#include <torch/library.h>

#include <algorithm>
#include <cctype>
#include <deque>
#include <mutex>
#include <set>
#include <stdexcept>
#include <variant>

#include "src/core/contract_check.h"
#include "src/core/prepared_dispatch.h"
#include "src/core/strings.h"
#include "xllm_kernel/boxing.h"
#include "xllm_kernel/catalog.h"

namespace xllm_kernel {

namespace detail {
void append_group(const Group& group);  // src/core/catalog.cpp
}  // namespace detail

ErasedFunction boxed_identity(std::shared_ptr<const void> boxed_kernel) {
  const void* context = boxed_kernel.get();
  KernelFunction<BoxedSignature> fn(
      [](const void* kernel, torch::jit::Stack& stack) { (*static_cast<const BoxedKernel*>(kernel))(stack); }, context);
  return ErasedFunction::from(fn, std::move(boxed_kernel));
}

void call_boxed_stack(const ErasedFunction& function, torch::jit::Stack& stack) {
  if (function.signature == nullptr || *function.signature != typeid(BoxedSignature)) {
    throw std::logic_error("call_boxed_stack: the callable is not a boxed binding");
  }
  reinterpret_cast<KernelFunction<BoxedSignature>::Thunk>(function.thunk)(function.context, stack);
}

namespace {

struct Added {
  std::mutex mutex;
  std::deque<OpContract> contracts;
  std::deque<std::unique_ptr<Operation>> operations;
  std::set<const Operation*> boxed;  // made by make_boxed_operation
  struct AddedGroup {
    Group group;
    std::deque<BackendModule> modules;
  };
  std::deque<AddedGroup> groups;
  std::vector<std::unique_ptr<torch::Library>> fragments;  // the registrations live as long as these
};

Added& added() {
  static Added* state = new Added();  // never destroyed: the catalog refers to it until exit
  return *state;
}

}  // namespace

const Operation& make_boxed_operation(OpContract contract) {
  detail::check_contract(contract);
  Added& state = added();
  std::lock_guard<std::mutex> lock(state.mutex);
  const OpContract& kept = state.contracts.emplace_back(std::move(contract));
  const Operation& op = *state.operations.emplace_back(
      std::make_unique<Operation>(kept, typeid(BoxedSignature), &boxed_identity, &call_boxed_stack));
  state.boxed.insert(&op);
  return op;
}

const Group& add_group(std::string name, std::vector<const Operation*> operations, std::vector<BackendModule> modules) {
  Added& state = added();
  std::lock_guard<std::mutex> lock(state.mutex);
  const std::string who = "add_group(" + name + ")";
  if (name.empty()) throw std::invalid_argument("add_group: the group needs a name");
  const auto catalog = builtin_groups();
  std::set<std::string> known_operations;
  std::set<std::string> module_names;
  std::set<std::string> implementation_names;
  for (const Group* g : catalog) {
    if (g->name == name) throw std::invalid_argument(who + ": the catalog already has a group of that name");
    for (const Operation* op : g->operations) known_operations.insert(op->name());
    for (const BackendModule* m : g->modules) {
      module_names.insert(m->name);
      for (const auto& impl : m->implementations) implementation_names.insert(m->implementation_name(impl));
    }
  }
  std::set<std::string> mine;
  for (const Operation* op : operations) {
    if (op == nullptr || !state.boxed.count(op)) {
      throw std::invalid_argument(who + ": operations added at run time must come from make_boxed_operation");
    }
    if (known_operations.count(op->name()) || !mine.insert(op->name()).second) {
      throw std::invalid_argument(who + ": the catalog already has an operation '" + op->name() + "'");
    }
  }
  for (const BackendModule& m : modules) {
    if (m.name.empty()) throw std::invalid_argument(who + ": a backend module needs a name");
    if (!module_names.insert(m.name).second) {
      throw std::invalid_argument(who + ": the catalog already has a backend module '" + m.name + "'");
    }
    if (m.solution.empty()) throw std::invalid_argument(who + ": module " + m.name + " declares no solution");
    for (const Implementation& impl : m.implementations) {
      if (impl.operation == nullptr ||
          (!known_operations.count(impl.operation->name()) && !mine.count(impl.operation->name()))) {
        throw std::invalid_argument(who + ": module " + m.name + " implements an operation the catalog lacks" +
                                    (impl.operation ? " ('" + impl.operation->name() + "')" : std::string()));
      }
      const std::string implementation = m.implementation_name(impl);
      if (!implementation_names.insert(implementation).second) {
        throw std::invalid_argument(who + ": module " + m.name + " declares " + implementation +
                                    ", which the catalog already declares");
      }
    }
  }

  // The schemas first: torch refuses a name some other library already defined in xllm_kernel::.
  if (!operations.empty()) {
    auto fragment = std::make_unique<torch::Library>(torch::Library::FRAGMENT, "xllm_kernel", std::nullopt, __FILE__,
                                                     __LINE__);
    for (const Operation* op : operations) {
      try {
        fragment->def(torch::schema(op->contract().schema.c_str()));
      } catch (const std::exception& e) {
        throw std::invalid_argument(who + ": torch.ops.xllm_kernel." + op->name() + " cannot be defined: " + e.what());
      }
      for (Device device : {Device::kCpu, Device::kCuda, Device::kNpu}) {
        fragment->impl(op->name().c_str(),
                       torch::dispatch(detail::dispatch_key(device),
                                       torch::CppFunction::makeFromBoxedFunctor(
                                           std::make_unique<detail::PreparedDispatch>(*op, device))));
      }
    }
    state.fragments.push_back(std::move(fragment));
  }

  Added::AddedGroup& entry = state.groups.emplace_back();
  entry.group.name = std::move(name);
  entry.group.operations = std::move(operations);
  for (BackendModule& m : modules) entry.group.modules.push_back(&entry.modules.emplace_back(std::move(m)));
  detail::append_group(entry.group);
  return entry.group;
}

}  // namespace xllm_kernel
