// Shared by the normalization group's bridges (not public).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include <initializer_list>
#include <optional>
#include <utility>

#include "src/ops/common/bridge.h"
#include "src/ops/common/family.h"
#include "xllm_kernel/catalog.h"

namespace xllm_kernel::normalization {

// Checks every argument of a normalization op (the error names the op, the argument, what was
// expected and what was given). `residual` is set for fused_add_rms_norm, `bias` may be set for
// layer_norm. `device` is the implementation's device.
void check_arguments(const char* op, const at::Tensor& input, const at::Tensor& weight,
                     const std::optional<at::Tensor>& bias, const at::Tensor* residual, double eps,
                     c10::DeviceType device);

// The row description every bridge uses (src/ops/common/bridge.h).
using bridge::describe_rows;

// The group's backend modules: each declares its implementations once; the bridges register
// their functions against these declarations (XLLM_REGISTER_IMPLEMENTATION).
const family::StandardModules& modules();

}  // namespace xllm_kernel::normalization
