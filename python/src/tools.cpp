// `python -m xllm_kernel.numerics` / `.benchmark`: the C++ tools' entry points, so Python runs the
// same code with the same flags as xllm-kernel-numerics / xllm-kernel-benchmark.
#include <iostream>
#include <map>
#include <string>

#include "python/src/module.h"

#ifdef XLLM_KERNEL_HAVE_TOOLS
#include <torch/csrc/jit/python/pybind_utils.h>

#include "src/core/cpu_allocator.h"
#include "src/tools/cli.h"
#include "src/tools/distributed/environment.h"
#include "src/tools/distributed/run.h"
#include "src/tools/report.h"
#include "src/numerics/soak.h"
#include "xllm_kernel/tools.h"

// Weak references: libxllm_kernel_tools gains its entry points one tool at a time, and a missing
// one must not make `import xllm_kernel` fail on an undefined symbol. Each resolves to null when
// the library lacks it, and Python then reports that tool as not built.
namespace xllm_kernel::tools {
[[gnu::weak]] int numerics_main(const std::vector<std::string>& argv);
[[gnu::weak]] int benchmark_main(const std::vector<std::string>& argv);
}  // namespace xllm_kernel::tools
#endif

namespace xllm_kernel::python {

void bind_tools(py::module_& m) {
#ifdef XLLM_KERNEL_HAVE_TOOLS
  // The tools print through std::cout while Python buffers its own sys.stdout: the caller flushes
  // Python's first, and std::cout is flushed before returning, so the two never interleave.
  // Without the GIL, because a tool may call kernels registered from Python.
  auto bind = [&m](const char* name, int (*main)(const std::vector<std::string>&), const char* doc) {
    if (main == nullptr) return;
    m.def(name, [main](const std::vector<std::string>& argv) {
      py::gil_scoped_release no_gil;
      const int code = main(argv);
      std::cout.flush();
      std::cerr.flush();
      return code;
    }, py::arg("argv"), doc);
  };
  bind("numerics_main", &tools::numerics_main,
       "Runs the numerics tool with argv (argv[0] is the program name); returns its exit code.");
  bind("benchmark_main", &tools::benchmark_main,
       "Runs the benchmark tool with argv (argv[0] is the program name); returns its exit code.");
  // The Python soak (scripts/soak.py): the C++ soak's cases with their arguments, to call through
  // torch.ops.xllm_kernel.* and xllm_kernel.ops; and the CPU output block cache it watches.
  m.def("soak_cases", [](int64_t max_tokens, uint64_t seed) {
    py::list cases;
    for (auto& e : tools::soak::build_pool({.max_tokens = max_tokens, .seed = seed, .record_arguments = true})) {
      py::list arguments;
      for (auto& a : e.arguments) arguments.append(torch::jit::toPyObject(std::move(a)));
      cases.append(py::make_tuple(e.operation, e.case_id, e.tokens, e.weight, arguments));
    }
    return cases;
  }, py::arg("max_tokens") = 8192, py::arg("seed") = 0,
     "[(operation, case_id, tokens, weight, arguments)] for every catalog operation (initialize('cpu') first).");
  m.def("cpu_cache_bytes", &detail::cpu_cache_bytes, "Bytes the CPU output block cache holds.");
  m.def("cpu_cache_limit", &detail::cpu_cache_limit, "The bound on cpu_cache_bytes() (XLLM_KERNEL_CPU_CACHE_BYTES).");
  // xllm_kernel.numerics.distributed: torchrun's environment as the tools read it (the same rules
  // and messages), and the per-rank report paths they write.
  m.def("rank_environment", [](const std::map<std::string, std::string>& variables) {
    tools::distributed::RankEnvironment env;
    try {
      env = tools::distributed::rank_environment([&variables](const char* name) -> const char* {
        auto it = variables.find(name);
        return it == variables.end() ? nullptr : it->second.c_str();
      });
    } catch (const tools::UsageError& e) {
      throw py::value_error(e.what());
    }
    py::dict d;
    d["rank"] = env.rank;
    d["world_size"] = env.world_size;
    d["local_rank"] = env.local_rank;
    d["master_addr"] = env.master_addr;
    d["master_port"] = env.master_port;
    d["agent_store"] = env.agent_store;
    d["run_id"] = env.run_id;
    d["restart_count"] = env.restart_count;
    return d;
  }, py::arg("variables"), "torchrun's variables -> the rank's environment; ValueError naming what is missing or wrong.");
  m.def("insert_rank", &tools::distributed::insert_rank, py::arg("path"), py::arg("rank"),
        "`path` with .rankN before the extension of its file name (report.json -> report.rank1.json).");
  // The end-to-end tool (python -m xllm_kernel.e2e) writes its reports with the tools' writer and
  // records the same environment block.
  m.def("write_report_atomically", [](const std::string& path, const std::string& text) {
    py::gil_scoped_release no_gil;
    tools::write_atomically(path, text);
  }, py::arg("path"), py::arg("text"),
     "Writes text to path atomically (a fsynced temporary file renamed over it), as the tools write reports.");
  m.def("report_environment", [](const std::string& device, int device_index, const std::string& revision) {
    return tools::environment(parse_device(device), device_index, revision).dump();
  }, py::arg("device"), py::arg("device_index"), py::arg("revision"),
     "The tools' report environment block (host, CPU, device, torch, build, load, threads) as JSON text.");
  m.attr("tools_built") = true;
#else
  m.attr("tools_built") = false;  // built without XLLM_KERNEL_BUILD_TOOLS
#endif
}

}  // namespace xllm_kernel::python
