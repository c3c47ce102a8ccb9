// cuda.native.paged_attention: bridge from at::Tensor to the CUDA kernels in csrc/cuda/attention/.
// Built into the plugin libxllm_kernel_cuda.so, which initialize("cuda") loads when the
// attention.native_cuda module's probe finds a usable device; loading it registers this. The values
// of block_tables, query_start_loc and seq_lens are not checked here (that would synchronize): the
// kernels handle them as csrc/cuda/attention/attention.h says. The workspace's size comes from the
// shapes alone and the caching allocator provides it, so the call can be captured into a graph.
//
// cuda.native.paged_attention.batch_invariant: the same kernels with key ranges from each row alone
// (PagedAttentionParams::batch_invariant), below the default's priority: initialize("cuda",
// batch_invariant=true) selects it.
//
// cuda.native.paged_attention_quant (and .batch_invariant): the same kernels over float8_e4m3fn or
// int8 caches, which dequantize every element they read (csrc/cuda/attention).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "csrc/cuda/attention/attention.h"
#include "csrc/cuda/common/device.h"
#include "src/ops/attention/internal.h"
#include "src/ops/common/cuda/launch.h"
#include "src/ops/common/registration.h"
#include "xllm_kernel/ops/attention.h"

namespace xllm_kernel::attention {
namespace {

template <bool kBatchInvariant>
at::Tensor run(const Call& call) {
  const at::Tensor& query = call.query;
  const char* const name = call_name(call);
  const AttentionShape s = check_arguments(call);
  bridge::check_capability(name, query);
  const c10::cuda::CUDAGuard guard(query.device());
  if (s.tokens == 0 || s.num_seqs == 0) return at::zeros(query.sizes(), query.options());  // padding rows only
  at::Tensor out = new_output(query);  // every row written: the padding rows (from query_start_loc[seqs] on) zero
  cuda::PagedAttentionParams p = kernel_params(call, s, out);
  p.batch_invariant = kBatchInvariant;
  int sm_count = 0;
  bridge::check_launch(name, cuda::cuda_status(cuda::current_sm_count(&sm_count), "cudaDeviceGetAttribute"));
  const int64_t bytes = cuda::paged_attention_workspace_bytes(p, sm_count);
  const at::Tensor workspace = at::empty({std::max<int64_t>(bytes, 1)}, query.options().dtype(at::kByte));
  bridge::check_launch(name, cuda::paged_attention(p, workspace.mutable_data_ptr(), bytes,
                                                   c10::cuda::getCurrentCUDAStream().stream()));
  return out;
}

}  // namespace

XLLM_REGISTER_NAMED("cuda.native.paged_attention", modules().native_cuda, paged_attention_operation(),
                    (paged_attention_entry<c10::DeviceType::CUDA, run<false>>));
XLLM_REGISTER_NAMED("cuda.native.paged_attention.batch_invariant", modules().native_cuda, paged_attention_operation(),
                    (paged_attention_entry<c10::DeviceType::CUDA, run<true>>));

XLLM_REGISTER_NAMED("cuda.native.paged_attention_quant", modules().native_cuda, paged_attention_quant_operation(),
                    (paged_attention_quant_entry<c10::DeviceType::CUDA, run<false>>));
XLLM_REGISTER_NAMED("cuda.native.paged_attention_quant.batch_invariant", modules().native_cuda,
                    paged_attention_quant_operation(), (paged_attention_quant_entry<c10::DeviceType::CUDA, run<true>>));

}  // namespace xllm_kernel::attention
