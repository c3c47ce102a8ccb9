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
BoxedKernel make_boxed_kernel(std::string who, std::shared_ptr<PyRef> callable,
                              const c10::FunctionSchema* schema) {
  return [who = std::move(who), callable = std::move(callable), schema](torch::jit::Stack& stack) {
    py::gil_scoped_acquire gil;
    py::tuple args(stack.size());
    for (size_t i = 0; i < stack.size(); ++i) args[i] = torch::jit::toPyObject(std::move(stack[i]));
    stack.clear();
    py::object result = callable->get()(*args);
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
  // An implementation a backend module declares takes the module's probe (its dependency) along.
  if (auto [module, declared] = find_declaration(name); module != nullptr) {
    if (module->device != spec.device || module->solution != solution || declared->operation != &operation) {
      throw std::invalid_argument(who + ": module " + module->name + " declares this name for device " +
                                  to_string(module->device) + ", solution " + module->solution + ", operation " +
                                  declared->operation->name() + "; the registration says " + device + ", " + solution +
                                  ", " + operation.name());
    }
    spec.module = module;
  }
  auto callable = std::make_shared<PyRef>(std::move(fn));
  // Errors at call time name the implementation, as the bridges' errors name the operation.
  add_boxed_kernel(registry(), operation, std::move(spec),
                   make_boxed_kernel(name, std::move(callable), &torch_schema(operation)));
}

NumericalMode parse_numerical_mode(const std::string& who, const std::string& mode) {
  for (NumericalMode m : {NumericalMode::kExact, NumericalMode::kFp32Accumulate, NumericalMode::kApproximate}) {
    if (mode == to_string(m)) return m;
  }
  throw std::invalid_argument(who + ": numerical_mode must be exact, fp32_accumulate or approximate, got '" + mode +
                              "'");
}

// A module's probe written in Python: () -> (available, detail). It runs while initialize() holds
// the runtime's lock, so it imports (registering implementations) but must not call initialize().
// A Python exception becomes a C++ one carrying its message: it propagates out of initialize().
std::function<ProbeResult()> python_probe(const std::string& module, py::object fn) {
  if (fn.is_none()) return nullptr;
  auto callable = std::make_shared<PyRef>(std::move(fn));
  return [module, callable] {
    py::gil_scoped_acquire gil;
    try {
      py::tuple result = callable->get()();
      if (result.size() != 2) throw std::runtime_error("the probe must return (available, detail)");
      const bool available = result[0].cast<bool>();
      const std::string detail = result[1].cast<std::string>();
      return available ? ProbeResult::ok(detail) : ProbeResult::missing(detail);
    } catch (py::error_already_set& e) {
      const std::string message = e.what();
      throw std::runtime_error("module " + module + ": " + message);
    } catch (const py::cast_error& e) {
      throw std::runtime_error("module " + module + ": the probe must return (bool, str): " + e.what());
    }
  };
}

void add_group_from_python(const std::string& name, const py::list& contracts, const py::list& modules) {
  const std::string who = "add_group(" + name + ")";
  std::vector<const Operation*> operations;
  for (const py::handle& item : contracts) {
    py::dict c = py::reinterpret_borrow<py::dict>(item);
    OpContract contract;
    contract.operation = c["operation"].cast<std::string>();
    contract.version = c["version"].cast<int>();
    contract.schema = c["schema"].cast<std::string>();
    contract.mutates = c["mutates"].cast<std::vector<std::string>>();
    contract.aliases_inputs = c["aliases_inputs"].cast<bool>();
    contract.numerical_mode = parse_numerical_mode(who, c["numerical_mode"].cast<std::string>());
    contract.semantics = c["semantics"].cast<std::string>();
    contract.dtypes = c["dtypes"].cast<std::string>();
    operations.push_back(&make_boxed_operation(std::move(contract)));
  }
  auto operation_named = [&](const std::string& op) -> const Operation* {
    for (const Operation* o : operations) {
      if (o->name() == op) return o;
    }
    return &find_operation(who, op);
  };
  std::vector<BackendModule> declared;
  for (const py::handle& item : modules) {
    py::dict d = py::reinterpret_borrow<py::dict>(item);
    BackendModule m;
    m.name = d["name"].cast<std::string>();
    m.device = parse_device(d["device"].cast<std::string>());
    m.solution = d["solution"].cast<std::string>();
    m.binding = d["binding"].cast<std::string>();
    m.execution_modes.clear();
    for (const auto& mode : d["execution_modes"].cast<std::vector<std::string>>()) {
      m.execution_modes.push_back(parse_execution_mode(mode));
    }
    for (const py::handle& i : d["implementations"].cast<py::list>()) {
      py::dict impl = py::reinterpret_borrow<py::dict>(i);
      m.implementations.push_back({.operation = operation_named(impl["operation"].cast<std::string>()),
                                   .variant = impl["variant"].cast<std::string>(),
                                   .input_domain = impl["input_domain"].cast<std::string>(),
                                   .priority = impl["priority"].cast<int>(),
                                   .supports = {}});
    }
    m.probe = python_probe(m.name, d["probe"]);
    declared.push_back(std::move(m));
  }
  add_group(name, std::move(operations), std::move(declared));
}

}  // namespace

void bind_python_kernels(py::module_& m) {
  m.def("add_group", &add_group_from_python, py::arg("name"), py::arg("operations"), py::arg("modules"),
        "Adds a group to the catalog: new operations (contracts) and backend modules (with Python probes).");
  m.def("register_kernel", &register_kernel, py::arg("contract"), py::arg("name"), py::arg("device"),
        py::arg("execution_modes"), py::arg("input_domain"), py::arg("solution"), py::arg("variant"),
        py::arg("binding"), py::arg("priority"), py::arg("fn"),
        "Registers a Python callable as a boxed kernel in the library's registry.");
}

}  // namespace xllm_kernel::python
