// What the CUDA plugin's bridges share (not public): the per-device capability check and turning a
// launcher's status into an error naming the operation.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include "csrc/common/rows.h"
#include "src/core/cuda_driver.h"

namespace xllm_kernel::bridge {

// The plugin loads where any device is sm_80+; each call checks the device its input is on.
inline void check_capability(const char* op, const at::Tensor& input) {
  const detail::CudaDriver& driver = detail::cuda_driver();
  TORCH_CHECK(driver.capable(input.get_device(), detail::kCudaPluginMinCapability), op, ": cuda.native.", op,
              " needs a device of compute capability >= 8.0, but the input's device ",
              driver.capability_shortfall(input.get_device(), detail::kCudaPluginMinCapability));
}

// A launcher's status as an error naming the operation: parameters the launcher rejected (a bug in
// the bridge, which checks every argument first), or the CUDA runtime's error and the step it
// failed at.
inline void check_launch(const char* op, const kernels::Status& status) {
  if (status.is_ok()) return;
  TORCH_CHECK(status.code != kernels::Status::kInvalidArgument, op, ": cuda.native kernel rejected its parameters (",
              status.reason, "); this is a bug in the bridge");
  const auto error = static_cast<cudaError_t>(status.device_error);  // kDeviceError
  TORCH_CHECK(false, op, ": cuda.native kernel failed to launch (", status.reason, "): ", cudaGetErrorName(error), " (",
              cudaGetErrorString(error), ")");
}

}  // namespace xllm_kernel::bridge
