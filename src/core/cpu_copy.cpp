#include "src/core/cpu_copy.h"

#include <c10/util/Exception.h>

#include <algorithm>

#include "csrc/cpu/copy.h"
#include "src/core/parallel.h"

namespace xllm_kernel::detail {

void cpu_stream_copy(const at::Tensor& dst, const at::Tensor& src) {
  TORCH_CHECK(dst.device().is_cpu() && src.device().is_cpu(), "cpu_stream_copy: dst and src must be cpu tensors, got ",
              dst.device(), " and ", src.device());
  TORCH_CHECK(dst.is_contiguous() && src.is_contiguous(), "cpu_stream_copy: dst and src must be contiguous");
  TORCH_CHECK(dst.nbytes() == src.nbytes(), "cpu_stream_copy: dst has ", dst.nbytes(), " bytes, src ", src.nbytes());
  const int64_t bytes = static_cast<int64_t>(src.nbytes());
  constexpr int64_t kChunk = int64_t{1} << 20;
  auto* out = static_cast<char*>(dst.data_ptr());
  const auto* in = static_cast<const char*>(src.const_data_ptr());
  parallel_rows((bytes + kChunk - 1) / kChunk, 1, [&](int64_t begin, int64_t end) {
    const int64_t from = begin * kChunk, to = std::min(bytes, end * kChunk);
    cpu::stream_copy(out + from, in + from, static_cast<size_t>(to - from));
  });
}

}  // namespace xllm_kernel::detail
