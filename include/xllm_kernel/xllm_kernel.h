// xllm-kernel: one contract per operator, many implementations, one selection at start-up.
//
//   #include <xllm_kernel/xllm_kernel.h>
//
//   auto bindings = xllm_kernel::initialize("cpu");  // select, once, before serving
//   at::Tensor y = xllm_kernel::ops::rms_norm(x, weight, 1e-6);
//   std::cout << xllm_kernel::explain("cpu", "rms_norm").to_string();
#pragma once

#include "xllm_kernel/boxing.h"
#include "xllm_kernel/catalog.h"
#include "xllm_kernel/contract.h"
#include "xllm_kernel/ops.h"
#include "xllm_kernel/registry.h"
#include "xllm_kernel/runtime.h"
