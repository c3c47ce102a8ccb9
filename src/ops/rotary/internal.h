// Shared by the rotary group's bridges (not public).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include <optional>

#include "src/ops/common/bridge.h"
#include "xllm_kernel/catalog.h"

namespace xllm_kernel::rotary {

// One of query and key as [tokens, heads, head_size] with its strides (in elements).
struct Heads {
  int64_t heads = 0;  // 0: key not given
  int64_t token_stride = 0;
  int64_t head_stride = 0;
};

// What every bridge needs once the arguments are checked.
struct Layout {
  int64_t tokens = 0;
  int64_t head_size = 0;
  int64_t rot_dim = 0;
  int64_t max_position = 0;
  Heads query;
  Heads key;
};

// Checks every argument of rotary_embedding for an implementation on `device`: dtypes, devices,
// shapes, head counts, rot_dim, contiguous last dimensions, query and key not overlapping. Errors
// name the operation, the argument, what was expected and what was given. Positions are not
// read here (see check_positions_in_range).
Layout check_arguments(const at::Tensor& positions, const at::Tensor& query, const std::optional<at::Tensor>& key,
                       int64_t head_size, const at::Tensor& cos_sin_cache, c10::DeviceType device);

// CPU positions only: every position in [0, max_position), else an error naming the first bad one.
void check_positions_in_range(const at::Tensor& positions, int64_t max_position);

// `t` ([tokens, heads * head_size] or [tokens, heads, head_size]) as a [tokens, heads, head_size]
// view of the same memory.
at::Tensor as_heads(const at::Tensor& t, const Layout& layout, const Heads& heads);

// The group's backend modules (src/ops/rotary/rotary.cpp).
const BackendModule& torch_cpu_module();
const BackendModule& native_cpu_module();
const BackendModule& torch_cuda_module();
const BackendModule& native_cuda_module();

}  // namespace xllm_kernel::rotary
