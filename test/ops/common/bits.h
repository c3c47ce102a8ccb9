// Bitwise comparison of two tensors for the operation tests (any device): what "the same bits"
// means where a contract promises them.
#pragma once

#include <ATen/ATen.h>

#include <cstring>

namespace xllm_kernel::testing {

// Whether a and b have the same shape, dtype and bytes (on any device; NaN payloads compared as bits).
// Empty tensors of the same shape are equal without touching their data pointers, which may be
// null (std::memcmp of a null pointer is undefined even for zero bytes).
inline bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  if (a.numel() == 0) return true;
  const at::Tensor x = a.to(at::kCPU).contiguous(), y = b.to(at::kCPU).contiguous();
  return std::memcmp(x.const_data_ptr(), y.const_data_ptr(), x.nbytes()) == 0;
}

}  // namespace xllm_kernel::testing
