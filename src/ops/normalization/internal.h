// Shared by the normalization group's bridges (not public).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include <initializer_list>
#include <optional>
#include <utility>

#include "xllm_kernel/catalog.h"

namespace xllm_kernel::normalization {

// Checks every argument of a normalization op (the error names the op, the argument, what was
// expected and what was given). `residual` is set for fused_add_rms_norm, `bias` may be set for
// layer_norm. `device` is the implementation's device.
void check_arguments(const char* op, const at::Tensor& input, const at::Tensor& weight,
                     const std::optional<at::Tensor>& bias, const at::Tensor* residual, double eps,
                     c10::DeviceType device);

// Describes the leading dimensions of same-shaped tensors for a torch-free kernel: size-1
// dimensions dropped, neighbours merged where every tensor lays them out as one. Fills
// row_sizes[0, ndim) and, for each (tensor, strides) pair, strides[0, ndim) (arrays of max_dims
// entries); sets rows (0 when shape is empty) and returns ndim (>= 1). More than max_dims
// dimensions after merging is an error naming `op`.
int describe_rows(const char* op, const at::Tensor& shape,
                  std::initializer_list<std::pair<const at::Tensor*, int64_t*>> tensors, int max_dims,
                  int64_t* row_sizes, int64_t& rows);

// Dependency probes of the group's modules.
ProbeResult probe_native_cpu();
ProbeResult probe_torch_cuda();   // torch's CUDA backend (libtorch_cuda) sees a device
ProbeResult probe_native_cuda();  // the driver sees a device our kernels were built for

}  // namespace xllm_kernel::normalization
