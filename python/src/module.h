// Shared by the translation units of the extension module xllm_kernel._C (not public).
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "xllm_kernel/xllm_kernel.h"

namespace c10 {
struct FunctionSchema;
}

namespace xllm_kernel::python {

namespace py = pybind11;

// A Python object held by C++ objects that any thread may drop (the registry keeps kernels and
// probes until exit; a failed registration drops one at once): released under the GIL.
class PyRef {
 public:
  explicit PyRef(py::object object) : object_(std::move(object)) {}
  PyRef(const PyRef&) = delete;
  ~PyRef() {
    if (!Py_IsInitialized()) {
      object_.release();  // the interpreter is gone; leaking is the only safe choice
      return;
    }
    py::gil_scoped_acquire gil;
    object_ = py::object();
  }
  const py::object& get() const { return object_; }

 private:
  py::object object_;
};

// The catalog operation called `name`; throws std::invalid_argument naming the closest ones.
const Operation& find_operation(const std::string& who, const std::string& name);

// The torch schema of torch.ops.xllm_kernel.<operation>, as the dispatcher holds it (the one
// defined from the contract), so Python arguments convert exactly as torch.ops converts them.
const c10::FunctionSchema& torch_schema(const Operation& operation);

py::dict contract_dict(const OpContract& contract);
py::dict spec_dict(const KernelSpec& spec);

// A Python callable for a prepared binding (the class PreparedFunction: operation's torch
// arguments in, its results out, the GIL released while it runs); it keeps `kernel` alive.
py::object prepared_function(std::shared_ptr<const PreparedKernel> kernel, const Operation& operation);

void bind_python_kernels(py::module_& m);
void bind_tools(py::module_& m);
void bind_python_suites(py::module_& m);

}  // namespace xllm_kernel::python
