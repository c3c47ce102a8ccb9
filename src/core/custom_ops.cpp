// torch.ops.xllm_kernel.*: every catalog operation's schema, defined once from its contract. Each
// group registers its Meta (fake) kernel and one kernel per dispatch key that calls the device's
// prepared binding.
#include <torch/library.h>

#include "xllm_kernel/catalog.h"

TORCH_LIBRARY(xllm_kernel, m) {
  for (const xllm_kernel::Operation* op : xllm_kernel::builtin_operations()) {
    m.def(torch::schema(op->contract().schema.c_str()));
  }
}
