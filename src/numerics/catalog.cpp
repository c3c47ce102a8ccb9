// The suites the tools know (metadata only: building a suite touches no device).
#include "src/numerics/suite.h"

namespace xllm_kernel::numerics {

const OperationSuite& rms_norm_suite();
const OperationSuite& fused_add_rms_norm_suite();
const OperationSuite& layer_norm_suite();

const std::vector<const OperationSuite*>& builtin_suites() {
  static const std::vector<const OperationSuite*> suites{&rms_norm_suite(), &fused_add_rms_norm_suite(),
                                                         &layer_norm_suite()};
  return suites;
}

const OperationSuite* find_suite(const std::string& operation) {
  for (const OperationSuite* s : builtin_suites()) {
    if (s->operation == operation) return s;
  }
  return nullptr;
}

}  // namespace xllm_kernel::numerics
