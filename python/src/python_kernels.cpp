// Kernels written in Python, registered into the library's registry as boxed kernels
// (xllm_kernel/boxing.h): selected, prepared, explained and called like native ones, through the
// same typed bindings that ops::rms_norm and torch.ops.xllm_kernel.rms_norm call.
#include <ATen/core/function_schema.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <deque>
#include <mutex>
#include <stdexcept>

#include "python/src/module.h"

namespace xllm_kernel::python {
namespace {

// The registry keeps kernels until the process exits and may drop one from any thread (a
// registration that fails validation), so the Python reference is released under the GIL.
struct PythonCallable {
  py::object fn;
  explicit PythonCallable(py::object f) : fn(std::move(f)) {}
  PythonCallable(const PythonCallable&) = delete;
  ~PythonCallable() {
    if (!Py_IsInitialized()) {
      fn.release();  // the interpreter is gone; leaking is the only safe choice
      return;
    }
    py::gil_scoped_acquire gil;
    fn = py::object();
  }
};

std::string type_name(const py::handle& value) { return py::str(py::type::handle_of(value).attr("__name__")); }

c10::IValue to_ivalue(const std::string& who, const py::handle& value, const c10::Argument& expected) {
  try {
    return torch::jit::toIValue(value, expected.type());
  } catch (const std::exception& e) {
    throw std::runtime_error(who + ": the kernel returned " + type_name(value) + " where the schema declares " +
                             expected.type()->str() + " (" + e.what() + ")");
  }
}

// The boxed kernel: IValues in schema order in, the schema's returns out. Mutable tensors reach
// Python as the caller's own tensor objects, so in-place writes land where the contract says.
BoxedKernel make_boxed_kernel(std::string who, std::shared_ptr<PythonCallable> callable,
                              const c10::FunctionSchema* schema) {
  return [who = std::move(who), callable = std::move(callable), schema](torch::jit::Stack& stack) {
    py::gil_scoped_acquire gil;
    py::tuple args(stack.size());
    for (size_t i = 0; i < stack.size(); ++i) args[i] = torch::jit::toPyObject(std::move(stack[i]));
    stack.clear();
    py::object result = callable->fn(*args);
    const auto& returns = schema->returns();
    if (returns.empty()) {
      if (!result.is_none()) {
        throw std::runtime_error(who + ": the kernel returned " + type_name(result) +
                                 "; the operation returns nothing (it writes its mutated arguments in place)");
      }
      return;
    }
    if (returns.size() == 1) {
      stack.push_back(to_ivalue(who, result, returns[0]));
      return;
    }
    if (!py::isinstance<py::tuple>(result) || py::len(result) != returns.size()) {
      throw std::runtime_error(who + ": the kernel must return a tuple of " + std::to_string(returns.size()) +
                               " values, got " + type_name(result));
    }
    py::tuple values = result;
    for (size_t i = 0; i < returns.size(); ++i) stack.push_back(to_ivalue(who, values[i], returns[i]));
  };
}

// The contract a Python kernel declares. The catalog's own when it is the same contract, so
// selection sees no mismatch; otherwise a copy of what Python declared, kept for the process's
// life (the registry points at it), which selection then excludes as a contract mismatch.
const OpContract* declared_contract(const Operation& operation, const py::dict& contract) {
  const OpContract& catalog = operation.contract();
  const int version = contract["version"].cast<int>();
  const std::string schema = contract["schema"].cast<std::string>();
  if (version == catalog.version && schema == catalog.schema) return &catalog;
  static std::mutex mutex;
  static auto* declared = new std::deque<OpContract>();
  std::lock_guard<std::mutex> lock(mutex);
  OpContract copy = catalog;
  copy.version = version;
  copy.schema = schema;
  copy.mutates = contract["mutates"].cast<std::vector<std::string>>();
  copy.aliases_inputs = contract["aliases_inputs"].cast<bool>();
  return &declared->emplace_back(std::move(copy));
}

void register_kernel(const py::dict& contract, const std::string& name, const std::string& device,
                     const std::vector<std::string>& execution_modes, const std::string& input_domain,
                     const std::string& solution, const std::string& variant, const std::string& binding,
                     int priority, py::object fn) {
  const std::string who = "register_kernel(" + name + ")";
  if (!PyCallable_Check(fn.ptr())) throw std::invalid_argument(who + ": the kernel must be callable");
  const Operation& operation = find_operation(who, contract["operation"].cast<std::string>());
  KernelSpec spec;
  spec.name = name;
  spec.contract = declared_contract(operation, contract);
  spec.device = parse_device(device);
  spec.execution_modes.clear();
  for (const auto& mode : execution_modes) spec.execution_modes.push_back(parse_execution_mode(mode));
  spec.input_domain = input_domain;
  spec.solution = solution;
  spec.variant = variant;
  spec.binding = binding;
  spec.priority = priority;
  auto callable = std::make_shared<PythonCallable>(std::move(fn));
  // Errors at call time name the implementation, as the bridges' errors name the operation.
  add_boxed_kernel(registry(), operation, std::move(spec),
                   make_boxed_kernel(name, std::move(callable), &torch_schema(operation)));
}

}  // namespace

void bind_python_kernels(py::module_& m) {
  m.def("register_kernel", &register_kernel, py::arg("contract"), py::arg("name"), py::arg("device"),
        py::arg("execution_modes"), py::arg("input_domain"), py::arg("solution"), py::arg("variant"),
        py::arg("binding"), py::arg("priority"), py::arg("fn"),
        "Registers a Python callable as a boxed kernel in the library's registry.");
}

}  // namespace xllm_kernel::python
