#include "src/tools/run_tool.h"

#include <c10/util/Exception.h>

#include <iostream>

#include "src/tools/cli.h"
#include "src/tools/distributed/run.h"

namespace xllm_kernel::tools {

int run_tool(const std::string& program,
             const std::function<int(std::unique_ptr<distributed::DistributedRun>&)>& body) {
  std::unique_ptr<distributed::DistributedRun> run;
  auto end = [&](int code, const std::string& kind, const std::string& message, bool peer_failed) {
    const std::string where = run ? "rank " + std::to_string(run->rank()) + ": " : "";
    std::cout << std::flush;
    std::cerr << program << ": " << where << kind << message << std::endl;
    if (run) run->abort(message, peer_failed);
    return code;
  };
  try {
    return body(run);
  } catch (const UsageError& e) {
    return end(kUsage, "", e.what(), false);
  } catch (const distributed::PeerFailure& e) {
    return end(kCaseFailed, "error: ", e.what(), true);
  } catch (const c10::Error& e) {
    return end(kCaseFailed, "error: ", e.what_without_backtrace(), false);
  } catch (const std::exception& e) {
    return end(kCaseFailed, "error: ", e.what(), false);
  }
}

}  // namespace xllm_kernel::tools
