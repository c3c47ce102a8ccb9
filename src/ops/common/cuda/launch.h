// What the CUDA plugin's bridges share (not public): the per-device capability check and turning a
// launcher's status into an error naming the operation.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include "src/core/cuda_driver.h"

namespace xllm_kernel::bridge {

// The plugin loads where any device is sm_80+; each call checks the device its input is on.
inline void check_capability(const char* op, const at::Tensor& input) {
  const detail::CudaDriver& driver = detail::cuda_driver();
  TORCH_CHECK(driver.capable(input.get_device(), detail::kCudaPluginMinCapability), op, ": cuda.native.", op,
              " needs a device of compute capability >= 8.0, but the input's device ",
              driver.capability_shortfall(input.get_device(), detail::kCudaPluginMinCapability));
}

inline void check_launch(const char* op, cudaError_t status) {
  TORCH_CHECK(status == cudaSuccess, op, ": cuda.native kernel failed to launch: ", cudaGetErrorName(status), " (",
              cudaGetErrorString(status), ")");
}

}  // namespace xllm_kernel::bridge
