// xllm_kernel._C: the Python package's window onto the C++ core. There is one registry and one
// runtime, the library's: Python sees the bindings the C++ ops call, and a kernel registered from
// Python competes in the same selection as the native ones.
//
// Everything here returns plain Python values (dicts, tuples, strings); the package wraps them in
// its own read-only types (xllm_kernel/registry.py, runtime.py), so this file stays a thin layer.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <stdexcept>

#include "python/src/module.h"
#include "src/core/modules.h"
#include "src/core/strings.h"

namespace xllm_kernel::python {

const Operation& find_operation(const std::string& who, const std::string& name) {
  std::vector<std::string> names;
  for (const Operation* op : builtin_operations()) {
    if (op->name() == name) return *op;
    names.push_back(op->name());
  }
  throw std::invalid_argument(who + ": unknown operation '" + name + "'; closest: " +
                              detail::join(detail::closest(name, names), ", ") + " (catalog: " +
                              detail::join(names, ", ") + ")");
}

const c10::FunctionSchema& torch_schema(const Operation& operation) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(("xllm_kernel::" + operation.name()).c_str(), "").schema();
}

py::dict contract_dict(const OpContract& contract) {
  py::dict d;
  d["operation"] = contract.operation;
  d["version"] = contract.version;
  d["schema"] = contract.schema;
  d["mutates"] = py::tuple(py::cast(contract.mutates));
  d["aliases_inputs"] = contract.aliases_inputs;
  d["numerical_mode"] = to_string(contract.numerical_mode);
  d["semantics"] = contract.semantics;
  d["dtypes"] = contract.dtypes;
  return d;
}

py::dict spec_dict(const KernelSpec& spec) {
  py::dict d;
  d["name"] = spec.name;
  d["contract"] = contract_dict(*spec.contract);
  d["device"] = to_string(spec.device);
  py::list modes;
  for (ExecutionMode mode : spec.execution_modes) modes.append(to_string(mode));
  d["execution_modes"] = py::tuple(modes);
  d["input_domain"] = spec.input_domain;
  d["solution"] = spec.solution;
  d["variant"] = spec.variant;
  d["binding"] = spec.binding;
  d["priority"] = spec.priority;
  d["batch_invariant"] = spec.batch_invariant;
  return d;
}

namespace {

// A prepared binding, callable from Python with the operation's torch arguments. Arguments are
// converted against the operation's torch schema (positional or by name, like torch.ops), then the
// prepared callable runs without the GIL, as torch.ops runs its kernels.
class PreparedFunction {
 public:
  // `owner` keeps `kernel` alive (the Bindings that hold it, or the kernel itself).
  PreparedFunction(std::shared_ptr<const void> owner, const PreparedKernel& kernel, const Operation& operation)
      : owner_(std::move(owner)),
        kernel_(&kernel),
        caller_(operation.boxed_caller()),
        schema_(&torch_schema(operation)) {
    if (caller_ == nullptr) {
      throw std::logic_error(operation.name() + ": the operation declares no boxed caller, so Python cannot call "
                             "its binding directly; use torch.ops.xllm_kernel." + operation.name());
    }
  }

  py::object operator()(const py::args& args, const py::kwargs& kwargs) const {
    torch::jit::Stack stack = torch::jit::createStackForSchema(*schema_, args, kwargs, std::nullopt);
    {
      py::gil_scoped_release no_gil;
      caller_(kernel_->erased(), stack);
    }
    return torch::jit::createPyObjectForStack(std::move(stack));
  }

  const PreparedKernel& kernel() const { return *kernel_; }

 private:
  std::shared_ptr<const void> owner_;  // keeps kernel_ alive
  const PreparedKernel* kernel_;
  Operation::BoxedCaller caller_;
  const c10::FunctionSchema* schema_;
};

// What initialize() returned for one device; the package wraps it in a read-only Mapping.
struct BindingsHandle {
  std::shared_ptr<const Bindings> bindings;
};

py::dict explanation_dict(const Explanation& ex) {
  py::dict d;
  d["device"] = to_string(ex.device);
  d["operation"] = ex.operation;
  d["mode"] = to_string(ex.mode);
  d["batch_invariant"] = ex.batch_invariant;
  d["override_target"] = ex.override_target;
  d["override_source"] = ex.override_source;
  py::list candidates;
  for (const Candidate& c : ex.candidates) {
    py::dict cd;
    cd["name"] = c.name;
    cd["solution"] = c.solution;
    cd["variant"] = c.variant;
    cd["binding"] = c.binding;
    cd["detail"] = c.detail;
    cd["priority"] = c.priority;
    cd["batch_invariant"] = c.batch_invariant;
    cd["verdict"] = to_string(c.verdict);
    cd["reason"] = c.reason;
    cd["rejection"] = to_string(c.rejection);
    candidates.append(cd);
  }
  d["candidates"] = py::tuple(candidates);
  d["error"] = ex.error;
  d["text"] = ex.to_string();
  return d;
}

py::list catalog_list() {
  py::list groups;
  for (const Group* group : builtin_groups()) {
    py::dict g;
    g["name"] = group->name;
    py::list operations;
    for (const Operation* op : group->operations) operations.append(contract_dict(op->contract()));
    g["operations"] = py::tuple(operations);
    py::list modules;
    for (const BackendModule* module : group->modules) {
      py::dict md;
      md["name"] = module->name;
      md["device"] = to_string(module->device);
      md["plugin"] = module->plugin;
      md["binding"] = module->binding;
      py::list implementations;
      for (const Implementation& impl : module->implementations) {
        implementations.append(
            py::make_tuple(impl.operation->name(), module->implementation_name(impl), module->solution));
      }
      md["implementations"] = py::tuple(implementations);
      modules.append(md);
    }
    g["modules"] = py::tuple(modules);
    groups.append(g);
  }
  return groups;
}

}  // namespace

py::object prepared_function(std::shared_ptr<const PreparedKernel> kernel, const Operation& operation) {
  const PreparedKernel& k = *kernel;
  return py::cast(PreparedFunction(std::move(kernel), k, operation));
}

}  // namespace xllm_kernel::python

PYBIND11_MODULE(_C, m) {
  using namespace xllm_kernel;
  using namespace xllm_kernel::python;
  m.doc() = "xllm_kernel C++ core (registry, selection runtime, prepared bindings)";
  m.attr("__version__") = XLLM_KERNEL_VERSION;

  m.def("catalog", &catalog_list, "Groups of the catalog: operations (contracts) and backend modules.");
  m.def("operations", [] {
    py::list out;
    for (const Operation* op : builtin_operations()) out.append(contract_dict(op->contract()));
    return out;
  }, "Contracts of every catalog operation, in catalog order.");
  m.def("contract", [](const std::string& operation) { return contract_dict(find_operation("contract", operation).contract()); },
        py::arg("operation"));
  m.def("kernels", [] {
    py::list out;
    for (const auto& k : registry().kernels()) out.append(spec_dict(k->spec));
    return out;
  }, "Specs of every registered implementation, in registration order.");
  m.def("frozen", [](const std::string& device) { return registry().frozen(parse_device(device)); }, py::arg("device"));

  py::class_<PreparedFunction>(m, "PreparedFunction",
                               "The prepared binding of one operation: call it with the operation's arguments.")
      .def("__call__", &PreparedFunction::operator())
      .def_property_readonly("name", [](const PreparedFunction& f) { return f.kernel().spec().name; })
      .def("__repr__", [](const PreparedFunction& f) { return "<prepared " + f.kernel().spec().name + ">"; });

  py::class_<BindingsHandle>(m, "Bindings", "What initialize() published for one device.")
      .def_property_readonly("device", [](const BindingsHandle& h) { return to_string(h.bindings->device()); })
      .def_property_readonly("mode", [](const BindingsHandle& h) { return to_string(h.bindings->mode()); })
      .def("operations", [](const BindingsHandle& h) { return h.bindings->operations(); })
      .def("spec", [](const BindingsHandle& h, const std::string& op) { return spec_dict(h.bindings->at(op).spec()); })
      .def("detail", [](const BindingsHandle& h, const std::string& op) { return h.bindings->at(op).detail(); })
      .def("function", [](const BindingsHandle& h, const std::string& op) {
        return PreparedFunction(h.bindings, h.bindings->at(op), find_operation("bindings", op));
      })
      // The runtime returns the same Bindings for the same configuration; the package keys its
      // cache of Python mappings on this.
      .def("identity", [](const BindingsHandle& h) { return reinterpret_cast<uintptr_t>(h.bindings.get()); });

  m.def("initialize",
        [](const std::string& device, std::vector<std::string> operations, std::map<std::string, std::string> overrides,
           const std::string& mode, bool batch_invariant) {
          return BindingsHandle{initialize(device, std::move(operations), std::move(overrides), mode, batch_invariant)};
        },
        py::arg("device"), py::arg("operations"), py::arg("overrides"), py::arg("mode"),
        py::arg("batch_invariant") = false,
        py::call_guard<py::gil_scoped_release>());
  m.def("bindings", [](const std::string& device) -> std::optional<BindingsHandle> {
    auto b = runtime().bindings(parse_device(device));
    if (!b) return std::nullopt;
    return BindingsHandle{b};
  }, py::arg("device"));
  m.def("note_missing_dependency", &xllm_kernel::detail::note_missing_dependency, py::arg("module"), py::arg("reason"),
        "Records why the Python package could not import a backend module's dependency; the module's probe "
        "reports it beside its own reason when it finds the dependency missing ('' clears it).");
  m.def("explain", [](const std::string& device, const std::string& operation) {
    Explanation ex;
    {
      py::gil_scoped_release no_gil;
      ex = explain(device, operation);
    }
    return explanation_dict(ex);
  }, py::arg("device"), py::arg("operation"));

  bind_python_kernels(m);
  bind_tools(m);
  bind_python_suites(m);
}
