// Shared by the activation group's bridges (not public).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include "src/ops/common/bridge.h"
#include "xllm_kernel/catalog.h"

namespace xllm_kernel::activation {

// Checks the input of a gated activation ([..., 2d], d >= 1, a supported dtype on `device`, a
// contiguous last dimension); the error names the op, the argument, what was expected and given.
// Returns d.
int64_t check_input(const char* op, const at::Tensor& input, c10::DeviceType device);

// A new contiguous [..., d] tensor of the input's dtype and device.
std::vector<int64_t> output_shape(const at::Tensor& input);

// The group's backend modules (src/ops/activation/activation.cpp).
const BackendModule& torch_cpu_module();
const BackendModule& native_cpu_module();
const BackendModule& torch_cuda_module();
const BackendModule& native_cuda_module();

}  // namespace xllm_kernel::activation
