// Numerics suites written in Python, run by the one C++ runner (src/numerics/): a Python
// OperationSuite (xllm_kernel.numerics.suite) is adapted into a C++ OperationSuite and added to the
// tools' suite list, as Python kernels are boxed into the registry (python_kernels.cpp). Its
// arguments become CLI11 options, its cases C++ KernelCases, its prepared cases C++ PreparedCases;
// the reports, exit codes, graph capture and timing are the C++ tools' own.
//
// The tools run without the GIL: every call into Python takes it, a Python exception becomes a
// C++ exception carrying its message (the tools report it as an error, exit 1; a ValueError from
// the suite's cases() is a usage error, exit 2), and Python objects are released under the GIL.
// The Python side of the protocol is xllm_kernel/numerics/_bridge.py.
//
// Also exposed (as _C._numerics): the C++ comparison (verify.h) and tensor-case validation
// (tensor_case.h), so Python cases validate exactly as C++ ones do.
#include <torch/csrc/utils/pybind.h>

#include <stdexcept>

#include "python/src/module.h"

#ifdef XLLM_KERNEL_HAVE_TOOLS
#include "src/numerics/suite.h"
#include "src/numerics/tensor_case.h"
#include "src/numerics/verify.h"
#endif

namespace xllm_kernel::python {

#ifdef XLLM_KERNEL_HAVE_TOOLS
namespace {

using numerics::json;

using Ref = std::shared_ptr<const PyRef>;
Ref hold(py::object object) { return std::make_shared<const PyRef>(std::move(object)); }

// The Python exception's type and message, without pybind11's traceback.
std::string python_message(const py::error_already_set& e) {
  std::string type = py::str(e.type().attr("__name__"));
  std::string message = py::str(e.value());
  return message.empty() ? type : type + ": " + message;
}

// Runs `body` under the GIL; a Python exception becomes std::runtime_error("who: Type: message").
template <typename Body>
auto with_gil(const std::string& who, Body&& body) -> decltype(body()) {
  py::gil_scoped_acquire gil;
  try {
    return body();
  } catch (py::error_already_set& e) {
    throw std::runtime_error(who + ": " + python_message(e));
  } catch (const py::cast_error& e) {
    throw std::runtime_error(who + ": " + e.what());
  }
}

py::module_ bridge() { return py::module_::import("xllm_kernel.numerics._bridge"); }

// The Python Plan (xllm_kernel.numerics.suite.Plan) of a C++ plan; the GIL is held.
py::object plan_object(const numerics::Plan& plan) {
  py::object spec = py::none(), function = py::none();
  std::string detail;
  if (plan.kernel) {
    const KernelSpec& s = plan.kernel->spec();
    spec = spec_dict(s);
    function = prepared_function(plan.kernel, find_operation("numerics", s.contract->operation));
    detail = plan.kernel->detail();
  }
  return bridge().attr("make_plan")(to_string(plan.device), plan.device_index, to_string(plan.mode), plan.seed, spec,
                                    function, detail);
}

numerics::Validation validation_from(const py::tuple& t) {
  // (passed, max_abs_error, max_rel_error, max_ulp, headroom, mismatches, failures, checks as JSON)
  numerics::Validation v;
  v.passed = t[0].cast<bool>();
  v.max_abs_error = t[1].cast<double>();
  v.max_rel_error = t[2].cast<double>();
  v.max_ulp = t[3].cast<double>();
  v.headroom = t[4].cast<double>();
  v.mismatches = t[5].cast<int64_t>();
  v.failures = t[6].cast<std::vector<std::string>>();
  v.checks = json::parse(t[7].cast<std::string>());
  return v;
}

py::tuple validation_tuple(const numerics::Validation& v) {
  return py::make_tuple(v.passed, v.max_abs_error, v.max_rel_error, v.max_ulp, v.headroom, v.mismatches, v.failures,
                        v.checks.dump());
}

// One case of a Python suite: the Python KernelCase, its id and parameters read once.
class PythonKernelCase final : public numerics::KernelCase {
 public:
  PythonKernelCase(Ref adapter, Ref kernel_case, std::string id, json parameters)
      : adapter_(std::move(adapter)), case_(std::move(kernel_case)), id_(std::move(id)), parameters_(std::move(parameters)) {}

  std::string case_id() const override { return id_; }
  json parameters() const override { return parameters_; }

  std::optional<std::string> unsupported_reason(const numerics::Plan& plan) const override {
    // What no case can run with (graph mode without a graph API, an undeclared mode) is the
    // runner's to say, as for C++ tensor cases; the rest is the case's.
    if (auto reason = numerics::plan_unsupported_reason(plan)) return reason;
    return with_gil(id_ + ": unsupported_reason", [&]() -> std::optional<std::string> {
      py::object reason = adapter_->get().attr("unsupported_reason")(case_->get(), plan_object(plan));
      if (reason.is_none()) return std::nullopt;
      return reason.cast<std::string>();
    });
  }

  numerics::PreparedCase prepare(const numerics::Plan& plan) const override {
    return with_gil(id_ + ": prepare", [&] {
      py::object runner = adapter_->get().attr("prepare_case")(case_->get(), plan_object(plan));
      numerics::PreparedCase prepared;
      py::tuple meta = runner.attr("metadata_tuple")();
      prepared.metadata = {meta[0].cast<int64_t>(), meta[1].cast<int64_t>(), meta[2].cast<double>(), {}};
      const std::string id = id_;
      auto run = hold(runner.attr("run"));
      prepared.function = [run, id] { with_gil(id + ": function", [&] { run->get()(); }); };
      auto validate = hold(runner.attr("validate"));
      prepared.validate = [validate, id] {
        return with_gil(id + ": validate", [&] { return validation_from(validate->get()()); });
      };
      if (runner.attr("has_reset").cast<bool>()) {
        auto reset = hold(runner.attr("reset"));
        prepared.reset = [reset, id] { with_gil(id + ": reset", [&] { reset->get()(); }); };
      }
      if (runner.attr("has_snapshot").cast<bool>()) {
        auto snapshot = hold(runner.attr("snapshot"));
        prepared.snapshot = [snapshot, id] {
          return with_gil(id + ": snapshot", [&] { return snapshot->get()().cast<std::vector<at::Tensor>>(); });
        };
      }
      return prepared;
    });
  }

 private:
  Ref adapter_;
  Ref case_;
  std::string id_;
  json parameters_;
};

// A suite argument as the CLI sees it (the adapter derives it from the add_argument calls).
struct Argument {
  std::string flags;  // "-t,--tokens"
  std::string dest;   // the SuiteOptions key and the attribute cases() reads
  std::string help;
  std::string type_name;
  std::string action;  // "store" or "flag"
  int min_values = 1;
  int max_values = 1;  // -1: unbounded
  bool required = false;
  bool delimited = false;  // comma lists allowed besides separate values
};

std::vector<Argument> arguments_of(const py::object& adapter) {
  std::vector<Argument> out;
  for (const py::handle& a : adapter.attr("cli_arguments")()) {
    Argument arg;
    arg.flags = a.attr("flags").cast<std::string>();
    arg.dest = a.attr("dest").cast<std::string>();
    arg.help = a.attr("help").cast<std::string>();
    arg.type_name = a.attr("type_name").cast<std::string>();
    arg.action = a.attr("action").cast<std::string>();
    arg.min_values = a.attr("min_values").cast<int>();
    arg.max_values = a.attr("max_values").cast<int>();
    arg.required = a.attr("required").cast<bool>();
    arg.delimited = a.attr("delimited").cast<bool>();
    out.push_back(std::move(arg));
  }
  return out;
}

void add_cli_arguments(const std::string& operation, const std::string& origin, const std::vector<Argument>& arguments,
                       CLI::App& app, numerics::SuiteOptions& options) {
  for (const Argument& a : arguments) {
    try {
      if (a.action == "flag") {
        std::vector<std::string>& values = options[a.dest];
        app.add_flag_callback(a.flags, [&values] { values = {"1"}; }, a.help);
        continue;
      }
      CLI::Option* option = app.add_option(a.flags, options[a.dest], a.help);
      option->type_name(a.type_name);
      option->expected(a.min_values, a.max_values < 0 ? CLI::detail::expected_max_vector_size : a.max_values);
      if (a.delimited) option->delimiter(',');
      if (a.max_values == 1) option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
      if (a.required) option->required();
    } catch (const CLI::ConstructionError& e) {
      throw std::invalid_argument("suite " + operation + " (" + origin + "): argument " + a.flags +
                                  " cannot be added to the tool's options: " + e.what());
    }
  }
}

std::shared_ptr<const numerics::OperationSuite> make_suite(py::object adapter_object) {
  auto suite = std::make_shared<numerics::OperationSuite>();
  suite->operation = adapter_object.attr("operation").cast<std::string>();
  suite->description = adapter_object.attr("description").cast<std::string>();
  suite->origin = adapter_object.attr("origin").cast<std::string>();
  suite->implementations = adapter_object.attr("implementations").cast<std::vector<std::string>>();
  suite->benchmark_defaults = adapter_object.attr("cli_benchmark_defaults")().cast<numerics::SuiteOptions>();
  suite->headline = adapter_object.attr("cli_headline")().cast<numerics::SuiteOptions>();
  suite->has_reference = true;  // every case validates against its own reference (guide 4.2)
  const bool has_prepare = adapter_object.attr("has_prepare").cast<bool>();
  std::vector<Argument> arguments = arguments_of(adapter_object);
  Ref adapter = hold(std::move(adapter_object));
  const std::string operation = suite->operation, origin = suite->origin;

  suite->add_arguments = [operation, origin, arguments](CLI::App& app, numerics::SuiteOptions& options) {
    add_cli_arguments(operation, origin, arguments, app, options);
  };
  suite->cases = [adapter, operation](const numerics::SuiteOptions& options) {
    py::gil_scoped_acquire gil;
    std::vector<std::shared_ptr<const numerics::KernelCase>> cases;
    try {
      py::list made = adapter->get().attr("cases")(py::cast(options));
      for (const py::handle& item : made) {
        py::tuple t = py::reinterpret_borrow<py::tuple>(item);  // (case, case_id, parameters as JSON)
        cases.push_back(std::make_shared<PythonKernelCase>(adapter, hold(py::reinterpret_borrow<py::object>(t[0])),
                                                           t[1].cast<std::string>(),
                                                           json::parse(t[2].cast<std::string>())));
      }
    } catch (py::error_already_set& e) {
      // Arguments cases() rejects are usage errors (exit 2), as a C++ suite's ValidationError.
      if (e.matches(PyExc_ValueError)) throw CLI::ValidationError("--operation " + operation, python_message(e));
      throw std::runtime_error(operation + " suite: cases: " + python_message(e));
    }
    return cases;
  };
  if (has_prepare) {
    suite->prepare = [adapter, operation](const numerics::Plan& plan) {
      return with_gil(operation + " suite: prepare", [&]() -> std::optional<std::string> {
        py::object reason = adapter->get().attr("prepare")(plan_object(plan));
        if (reason.is_none()) return std::nullopt;
        return reason.cast<std::string>();
      });
    };
  }
  return suite;
}

std::map<std::string, numerics::Tolerance> tolerances(const std::map<std::string, std::pair<double, double>>& in) {
  std::map<std::string, numerics::Tolerance> out;
  for (const auto& [name, t] : in) out[name] = numerics::Tolerance{t.first, t.second};
  return out;
}

std::vector<at::Tensor> tensors(const std::vector<std::optional<at::Tensor>>& in) {
  std::vector<at::Tensor> out;
  for (const auto& t : in) out.push_back(t ? *t : at::Tensor());
  return out;
}

}  // namespace
#endif

void bind_python_suites(py::module_& m) {
#ifdef XLLM_KERNEL_HAVE_TOOLS
  py::module_ n = m.def_submodule("_numerics", "The C++ numerics runner's suite list and validation (internal).");
  n.def("add_suite", [](py::object adapter) { numerics::add_suite(make_suite(std::move(adapter))); }, py::arg("adapter"),
        "Adds a Python suite (an xllm_kernel.numerics._bridge.SuiteAdapter) to the tools' suite list.");
  n.def("suites", [] {
    py::list out;
    for (const numerics::OperationSuite* s : numerics::builtin_suites()) {
      out.append(py::make_tuple(s->operation, numerics::suite_origin(*s)));
    }
    return out;
  }, "(operation, origin) of every suite the tools know.");
  n.def("compare", [](const std::string& name, const std::string& kind, const at::Tensor& got, const at::Tensor& want,
                      double atol, double rtol) {
    numerics::Validation v;
    numerics::compare(v, name, kind, got, want, numerics::Tolerance{atol, rtol});
    return validation_tuple(v);
  }, py::arg("name"), py::arg("kind"), py::arg("got"), py::arg("want"), py::arg("atol"), py::arg("rtol"));
  n.def("bitwise_equal", &numerics::bitwise_equal, py::arg("a"), py::arg("b"));
  n.def("unit_roundoff", [](at::ScalarType dtype) { return numerics::unit_roundoff(dtype); }, py::arg("dtype"));
  n.def("accumulate_tolerance", [](at::ScalarType dtype, int64_t reduction) {
    const numerics::Tolerance t = numerics::accumulate_tolerance(dtype, reduction);
    return py::make_tuple(t.atol, t.rtol);
  }, py::arg("dtype"), py::arg("reduction"));
  n.def("copy_with_layout", &numerics::copy_with_layout, py::arg("tensor"), py::arg("device"));
  n.def("check_tensors",
        [](std::vector<std::string> names, std::vector<std::string> mutates, bool aliases_inputs, double atol,
           double rtol, const std::map<std::string, std::pair<double, double>>& overrides,
           const std::vector<std::optional<at::Tensor>>& inputs, const std::vector<std::optional<at::Tensor>>& pristine,
           std::vector<at::Tensor> outputs, std::vector<at::Tensor> expected_outputs,
           std::map<std::string, at::Tensor> expected_mutated) {
          numerics::TensorCheck check{std::move(names),
                                      std::move(mutates),
                                      aliases_inputs,
                                      numerics::Tolerance{atol, rtol},
                                      tolerances(overrides),
                                      tensors(inputs),
                                      tensors(pristine),
                                      std::move(outputs),
                                      numerics::Expected{std::move(expected_outputs), std::move(expected_mutated)}};
          return validation_tuple(numerics::check_tensors(check));
        },
        py::arg("names"), py::arg("mutates"), py::arg("aliases_inputs"), py::arg("atol"), py::arg("rtol"),
        py::arg("overrides"), py::arg("inputs"), py::arg("pristine"), py::arg("outputs"), py::arg("expected_outputs"),
        py::arg("expected_mutated"),
        "Validates a tensor case's state as the C++ TensorCase does (src/numerics/tensor_case.h).");
  m.attr("numerics_built") = true;
#else
  m.attr("numerics_built") = false;  // built without XLLM_KERNEL_BUILD_TOOLS
#endif
}

}  // namespace xllm_kernel::python
