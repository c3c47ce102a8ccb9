// Both tools' outer layer: exceptions become exit codes and one-line messages, and a distributed
// run tells the other ranks first.
//
//   int numerics_main(const std::vector<std::string>& argv) {
//     return tools::run_tool("xllm-kernel-numerics", [&](auto& dist) { return run(argv, dist); });
//   }
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace xllm_kernel::tools {

namespace distributed {
class DistributedRun;
}

// Runs `body`, turns exceptions into exit codes and "<program>: ..." messages on stderr (usage 2,
// errors 1), and in a distributed run (`body` sets `run` once connected) publishes the error to the
// other ranks first.
int run_tool(const std::string& program,
             const std::function<int(std::unique_ptr<distributed::DistributedRun>& run)>& body);

}  // namespace xllm_kernel::tools
