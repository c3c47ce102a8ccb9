// Mapping torch devices to xllm_kernel devices (not public).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include "xllm_kernel/contract.h"

namespace xllm_kernel::detail {

inline Device device_of(const char* op, const at::Tensor& input) {
  TORCH_CHECK(input.defined(), op, ": input must be a defined tensor, got an undefined one");
  switch (input.device().type()) {
    case c10::DeviceType::CPU: return Device::kCpu;
    case c10::DeviceType::CUDA: return Device::kCuda;
    case c10::DeviceType::PrivateUse1: return Device::kNpu;
    default:
      TORCH_CHECK(false, op, ": input must be on cpu, cuda or npu, got ", input.device());
  }
}

}  // namespace xllm_kernel::detail
