// The offline tools as library entry points, so the C++ CLIs and `python -m xllm_kernel.numerics`
// / `.benchmark` run the same code with the same flags.
//
//   return xllm_kernel::tools::numerics_main({"xllm-kernel-numerics", "--operation", "rms_norm"});
//
// Exit codes (numerics): 0 every supported case passed, 1 a case failed, 2 usage error,
// 3 nothing passed.
#pragma once

#include <string>
#include <vector>

namespace xllm_kernel::tools {

int numerics_main(const std::vector<std::string>& argv);
int benchmark_main(const std::vector<std::string>& argv);

}  // namespace xllm_kernel::tools
