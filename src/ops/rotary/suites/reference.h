// The float64 reference of rotary_embedding, shared by the suite (rotary_embedding.cpp) and the
// bridge checks (test/ops/rotary/bridge_checks.h, on every device); and the cos/sin table both
// build their inputs with. Plain float64 ATen on the CPU, independent of every registered
// implementation.
//
//   double terms = 0;
//   const at::Tensor want = reference_rotary_embedding(positions, query, head_size, cache, true, terms);
#pragma once

#include <ATen/ATen.h>

#include <algorithm>

namespace xllm_kernel::numerics::rotary {

// A real cos/sin table, [max_position, rot_dim]: row pos holds cos(pos f_i), then sin(pos f_i),
// f_i = 10000^(-2i / rot_dim).
inline at::Tensor cos_sin_cache(int64_t max_position, int64_t rot_dim, at::ScalarType dtype) {
  const at::Tensor freq = at::pow(10000.0, at::arange(0, rot_dim, 2, at::kDouble) / -static_cast<double>(rot_dim));
  const at::Tensor angle = at::arange(max_position, at::kDouble).unsqueeze(1) * freq.unsqueeze(0);
  return at::cat({angle.cos(), angle.sin()}, 1).to(dtype);
}

// Float64 [tokens, heads, head_size] on the CPU: x ([tokens, heads * head_size] or [tokens, heads,
// head_size], any device) with each head's first rot_dim elements (cos_sin_cache's last dimension)
// rotated by its token's cache row, NeoX halves or GPT-J pairs. `max_terms` gets the largest
// |x1 c| + |x2 s| of either member of a pair (the tolerance's scale) if that is larger.
inline at::Tensor reference_rotary_embedding(const at::Tensor& positions, const at::Tensor& x, int64_t head_size,
                                             const at::Tensor& cos_sin_cache, bool is_neox, double& max_terms) {
  const int64_t rot_dim = cos_sin_cache.size(1), half = rot_dim / 2;
  const at::Tensor heads = x.dim() == 3 ? x : x.unflatten(1, {x.size(1) / head_size, head_size});
  at::Tensor out = heads.to(at::kCPU).to(at::kDouble).contiguous().clone();
  const at::Tensor rows = cos_sin_cache.to(at::kCPU).to(at::kDouble).index_select(0, positions.to(at::kCPU));
  const at::Tensor c = rows.narrow(1, 0, half).unsqueeze(1), s = rows.narrow(1, half, half).unsqueeze(1);
  at::Tensor rot = out.narrow(2, 0, rot_dim);
  at::Tensor x1, x2;
  if (is_neox) {
    x1 = rot.narrow(2, 0, half).clone();
    x2 = rot.narrow(2, half, half).clone();
  } else {
    const at::Tensor pairs = rot.unflatten(2, {half, 2});
    x1 = pairs.select(3, 0).clone();
    x2 = pairs.select(3, 1).clone();
  }
  const at::Tensor o1 = x1 * c - x2 * s, o2 = x2 * c + x1 * s;
  if (is_neox) {
    rot.narrow(2, 0, half).copy_(o1);
    rot.narrow(2, half, half).copy_(o2);
  } else {
    rot.copy_(at::stack({o1, o2}, 3).flatten(2));
  }
  if (x1.numel() > 0) {
    // Over finite terms only: a non-finite input gives a non-finite result, compared exactly.
    const auto finite_max = [](const at::Tensor& t) {
      return at::where(t.isfinite(), t, at::zeros({}, t.options())).max().item<double>();
    };
    max_terms = std::max({max_terms, finite_max(x1.abs() * c.abs() + x2.abs() * s.abs()),
                          finite_max(x2.abs() * c.abs() + x1.abs() * s.abs())});
  }
  return out;
}

}  // namespace xllm_kernel::numerics::rotary
