// Shared by the rotary group's bridges (not public).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include <optional>

#include "csrc/common/rotary.h"
#include "src/ops/common/bridge.h"
#include "src/ops/common/family.h"
#include "xllm_kernel/catalog.h"
#include "xllm_kernel/ops/rotary.h"

namespace xllm_kernel::rotary {

// The operation's name, from its contract, for messages.
inline const char* op_name() { return rotary_embedding_operation().name().c_str(); }

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

// One call's arguments as its bridge received them (the schema's) and the implementation's device:
// what check_arguments checks and kernel_params reads (is_neox only the latter).
//   const Call call{.positions = positions, .query = query, .key = key, .head_size = head_size,
//                   .cos_sin_cache = cos_sin_cache, .is_neox = is_neox, .device = kDevice};
struct Call {
  const at::Tensor& positions;
  const at::Tensor& query;  // written in place (through its data pointer)
  const std::optional<at::Tensor>& key;
  int64_t head_size = 0;
  const at::Tensor& cos_sin_cache;
  bool is_neox = false;
  c10::DeviceType device = c10::DeviceType::CPU;  // the implementation's
};

// Checks every argument of rotary_embedding for an implementation on `call.device`: dtypes,
// devices, shapes, head counts, rot_dim, contiguous last dimensions, query and key not overlapping.
// Errors name the operation, the argument, what was expected and what was given. Positions are not
// read here (see check_positions_in_range).
Layout check_arguments(const Call& call);

// CPU positions only: every position in [0, max_position), else an error naming the first bad one.
void check_positions_in_range(const at::Tensor& positions, int64_t max_position);

// `t` ([tokens, heads * head_size] or [tokens, heads, head_size]) as a [tokens, heads, head_size]
// view of the same memory.
at::Tensor as_heads(const at::Tensor& t, const Layout& layout, const Heads& heads);

// The kernel parameters from checked arguments, for the CPU and the CUDA kernel alike.
inline kernels::RotaryParams kernel_params(const Call& call, const Layout& l) {
  const at::Tensor& positions = call.positions;
  const at::Tensor& query = call.query;
  const at::Tensor& cos_sin_cache = call.cos_sin_cache;
  kernels::RotaryParams p;
  p.dtype = bridge::kernel_dtype(query.scalar_type());
  p.cache_dtype = bridge::kernel_dtype(cos_sin_cache.scalar_type());
  p.tokens = l.tokens;
  p.head_size = l.head_size;
  p.rot_dim = l.rot_dim;
  p.is_neox = call.is_neox;
  p.positions = positions.const_data_ptr<int64_t>();
  p.position_stride = positions.stride(0);
  p.cos_sin_cache = cos_sin_cache.const_data_ptr();
  p.cache_stride = cos_sin_cache.stride(0);
  p.max_position = l.max_position;
  p.query = query.mutable_data_ptr();
  p.query_heads = l.query.heads;
  p.query_token_stride = l.query.token_stride;
  p.query_head_stride = l.query.head_stride;
  if (l.key.heads > 0) {
    p.key = call.key->mutable_data_ptr();
    p.key_heads = l.key.heads;
    p.key_token_stride = l.key.token_stride;
    p.key_head_stride = l.key.head_stride;
  }
  return p;
}

// The group's backend modules (src/ops/rotary/rotary.cpp).
const family::StandardModules& modules();

}  // namespace xllm_kernel::rotary
