// `python -m xllm_kernel.numerics` / `.benchmark`: the C++ tools' entry points, so Python runs the
// same code with the same flags as xllm-kernel-numerics / xllm-kernel-benchmark.
#include <iostream>

#include "python/src/module.h"

#ifdef XLLM_KERNEL_HAVE_TOOLS
#include "xllm_kernel/tools.h"
#endif

namespace xllm_kernel::python {

void bind_tools(py::module_& m) {
#ifdef XLLM_KERNEL_HAVE_TOOLS
  // The tools print through std::cout while Python buffers its own sys.stdout: the caller flushes
  // Python's first, and std::cout is flushed before returning, so the two never interleave.
  // Without the GIL, because a tool may call kernels registered from Python.
  auto run = [](int (*main)(const std::vector<std::string>&)) {
    return [main](const std::vector<std::string>& argv) {
      py::gil_scoped_release no_gil;
      const int code = main(argv);
      std::cout.flush();
      std::cerr.flush();
      return code;
    };
  };
  m.def("numerics_main", run(&tools::numerics_main), py::arg("argv"),
        "Runs the numerics tool with argv (argv[0] is the program name); returns its exit code.");
  m.def("benchmark_main", run(&tools::benchmark_main), py::arg("argv"),
        "Runs the benchmark tool with argv (argv[0] is the program name); returns its exit code.");
#else
  (void)m;  // built without XLLM_KERNEL_BUILD_TOOLS: the package reports that the tools are missing
#endif
}

}  // namespace xllm_kernel::python
