// The activation family's argument checks (checks.cpp): its own bridges' and the entry point for a
// family that builds on it (the quantization family's silu_and_mul_*_quant check their input here).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include <cstdint>

namespace xllm_kernel::activation {

// Checks the input of a gated activation ([..., 2d], d >= 1, a supported dtype on `device`, a
// contiguous last dimension); the error names the op, the argument, what was expected and given.
// Returns d.
int64_t check_input(const char* op, const at::Tensor& input, c10::DeviceType device);

// The same for an activation without the gate: input [..., d] with d >= 1. Returns d.
int64_t check_plain_input(const char* op, const at::Tensor& input, c10::DeviceType device);

}  // namespace xllm_kernel::activation
