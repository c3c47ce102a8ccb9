// Valid arguments for any catalog operation, taken from its numerics suite: the IValue stack (schema
// order, scalars included) that the suite's first small case passes to an implementation, and the
// library's own implementations to call with it. Tests that walk the catalog (bad input,
// concurrency) start from these, so a new operation is covered by its suite alone.
//
// How the stack is found: the case is prepared for a recording kernel, a boxed kernel (the
// operation's boxer) that copies the stack it receives and aborts the call. Any KernelCase works,
// whatever it builds its inputs with, as long as it calls the kernel through its typed function.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/function_schema.h>
#include <CLI/CLI.hpp>
#include <torch/csrc/jit/frontend/function_schema_parser.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "src/numerics/suite.h"
#include "src/numerics/tensor_case.h"
#include "xllm_kernel/boxing.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing {

struct SuiteArguments {
  std::string case_id;
  torch::jit::Stack stack;  // CPU values, in schema order
};

namespace detail {
struct Recorded {};  // thrown by the recording kernel once it has the stack
}  // namespace detail

// The operation's schema, parsed from its contract.
inline c10::FunctionSchema parsed_schema(const Operation& operation) {
  return torch::jit::parseSchema(operation.contract().schema);
}

// A copy of a value: a tensor copied with its sizes, strides and storage offset (so a call may
// write it) onto `device` (its own when none; a meta tensor, which holds no values, stays as it
// is); anything else as is.
inline c10::IValue copy_value(const c10::IValue& v, std::optional<at::Device> device = std::nullopt) {
  if (!v.isTensor() || !v.toTensor().defined() || v.toTensor().is_meta()) return v;
  const at::Tensor& t = v.toTensor();
  return numerics::copy_with_layout(t, device.value_or(t.device()));
}

// A copy of a stack, value by value (copy_value).
inline torch::jit::Stack copy_stack(const torch::jit::Stack& stack, std::optional<at::Device> device = std::nullopt) {
  torch::jit::Stack out;
  for (const auto& v : stack) out.push_back(copy_value(v, device));
  return out;
}

// Whether a stack is small and exercises the general path: every tensor has at least one
// element and at least 2 elements in its last dimension (so a non-contiguous last dimension can
// be made and is checked), and at most `max_elements` elements. Tensors of one element after the
// first argument (a scale or a bound held in a tensor, whatever its shape) are exempt.
inline bool small_and_general(const torch::jit::Stack& stack, int64_t max_elements) {
  for (size_t i = 0; i < stack.size(); ++i) {
    const auto& v = stack[i];
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    if (i > 0 && t.numel() == 1 && t.defined()) continue;
    if (t.dim() == 0 || t.numel() == 0 || t.size(-1) < 2 || t.numel() > max_elements) return false;
  }
  return true;
}

// The stack of the first case of the operation's suite (default options) that `fits`; nothing when
// the operation has no suite or no such case.
inline std::optional<SuiteArguments> find_suite_arguments_where(const Operation& operation,
                                                                const std::function<bool(const torch::jit::Stack&)>& fits) {
  const numerics::OperationSuite* suite = numerics::find_suite(operation.name());
  if (suite == nullptr || operation.boxer() == nullptr) return std::nullopt;
  CLI::App app;
  numerics::SuiteOptions options;
  suite->add_arguments(app, options);
  app.parse(std::vector<std::string>{});

  auto recorded = std::make_shared<torch::jit::Stack>();
  auto recorder = std::make_shared<const BoxedKernel>([recorded](torch::jit::Stack& stack) {
    *recorded = stack;
    throw detail::Recorded{};
  });
  numerics::Plan plan;
  plan.kernel = std::make_shared<PreparedKernel>(
      KernelSpec{.name = "cpu.test.record_" + operation.name(), .contract = &operation.contract(), .device = Device::kCpu},
      operation.boxer()(recorder), "");
  for (const auto& c : suite->cases(options)) {
    if (c->unsupported_reason(plan)) continue;
    numerics::PreparedCase prepared = c->prepare(plan);
    recorded->clear();
    try {
      prepared.function();
    } catch (const detail::Recorded&) {
    }
    if (!recorded->empty() && fits(*recorded)) return SuiteArguments{c->case_id(), copy_stack(*recorded)};
  }
  return std::nullopt;
}

// The first case that is small and general (small_and_general).
inline std::optional<SuiteArguments> find_suite_arguments(const Operation& operation, int64_t max_elements) {
  return find_suite_arguments_where(operation,
                                    [max_elements](const torch::jit::Stack& s) { return small_and_general(s, max_elements); });
}

// find_suite_arguments, searched once per operation and process (the search prepares cases until
// one fits); each caller gets its own copy of the tensors.
inline std::optional<SuiteArguments> suite_arguments(const Operation& operation, int64_t max_elements = 1 << 16) {
  static std::mutex mutex;
  static std::map<std::pair<const Operation*, int64_t>, std::optional<SuiteArguments>> found;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(&operation, max_elements);
  auto it = found.find(key);
  if (it == found.end()) it = found.emplace(key, find_suite_arguments(operation, max_elements)).first;
  if (!it->second) return std::nullopt;
  return SuiteArguments{it->second->case_id, copy_stack(it->second->stack)};
}

// `stack` made ready for `kernel`: what its suite's bind_arguments puts in for that implementation
// (a weight packed by its own packer); unchanged for suites without the hook.
inline void bind_arguments(const Operation& operation, const KernelSpec& kernel, torch::jit::Stack& stack) {
  const numerics::OperationSuite* suite = numerics::find_suite(operation.name());
  if (suite != nullptr && suite->bind_arguments) suite->bind_arguments(kernel, stack);
}

// The library's own implementations of `operation` on `device` (declared by a catalog module;
// kernels that tests register without a module are left out).
inline std::vector<std::shared_ptr<const RegisteredKernel>> library_implementations(const Operation& operation,
                                                                                    Device device) {
  std::vector<std::shared_ptr<const RegisteredKernel>> out;
  for (const auto& k : registry().kernels()) {
    if (k->operation->name() == operation.name() && k->spec.device == device && k->spec.module != nullptr) {
      out.push_back(k);
    }
  }
  return out;
}

// The tensors a call returned (the stack after a boxed call), tensor lists flattened.
inline std::vector<at::Tensor> returned_tensors(const torch::jit::Stack& returned) {
  std::vector<at::Tensor> out;
  for (const auto& v : returned) {
    if (v.isTensor()) out.push_back(v.toTensor());
    if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) out.push_back(t);
    }
  }
  return out;
}

// The values a call leaves: the results on the stack, then every argument the contract mutates
// (in schema order).
inline std::vector<at::Tensor> call_results(const Operation& operation, const torch::jit::Stack& arguments,
                                            const torch::jit::Stack& returned) {
  std::vector<at::Tensor> out = returned_tensors(returned);
  const auto& mutates = operation.contract().mutates;
  const c10::FunctionSchema schema = parsed_schema(operation);
  for (size_t i = 0; i < schema.arguments().size() && i < arguments.size(); ++i) {
    const std::string& name = schema.arguments()[i].name();
    if (std::find(mutates.begin(), mutates.end(), name) != mutates.end() && arguments[i].isTensor()) {
      out.push_back(arguments[i].toTensor());
    }
  }
  return out;
}

// Calls `kernel` through the operation's boxed caller on `arguments` (written in place where the
// contract says so); returns what the call left (call_results).
inline std::vector<at::Tensor> call_boxed_kernel(const Operation& operation, const RegisteredKernel& kernel,
                                                 torch::jit::Stack& arguments) {
  torch::jit::Stack stack = arguments;  // IValues share the tensors: writes reach `arguments`
  operation.boxed_caller()(kernel.function, stack);
  return call_results(operation, arguments, stack);
}

}  // namespace xllm_kernel::testing
