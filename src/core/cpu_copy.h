// Non-temporal CPU copy over torch's threads (not public): the benchmark's second copy method.
#pragma once

#include <ATen/core/Tensor.h>

namespace xllm_kernel::detail {

// Copies src into dst (contiguous CPU tensors with the same number of bytes) with
// non-temporal stores, split over at::get_num_threads() threads. Throws c10::Error otherwise.
void cpu_stream_copy(const at::Tensor& dst, const at::Tensor& src);

}  // namespace xllm_kernel::detail
