// What the CUDA plugin's bridges share (not public): turning a launcher's status into an error
// naming the operation, and the row description in the CUDA kernels' terms.
#pragma once

#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

namespace xllm_kernel::bridge {

inline void check_launch(const char* op, cudaError_t status) {
  TORCH_CHECK(status == cudaSuccess, op, ": cuda.native kernel failed to launch: ", cudaGetErrorName(status), " (",
              cudaGetErrorString(status), ")");
}

}  // namespace xllm_kernel::bridge
