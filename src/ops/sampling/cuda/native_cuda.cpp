// cuda.native.sample: bridge from at::Tensor to the CUDA kernels in csrc/cuda/sampling/. Built
// into the plugin libxllm_kernel_cuda.so, which initialize("cuda") loads when the
// sampling.native_cuda module's probe finds a usable device; loading it registers this. No value is
// checked here (that would synchronize): the kernels apply the contract's CUDA rules (NaN as -inf,
// -1 for a row with invalid parameters or no logit above -inf). The workspace's size comes from the
// shapes alone and the caching allocator provides it, so the call can be captured into a graph.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>

#include "csrc/cuda/common/device.h"
#include "csrc/cuda/sampling/sampling.h"
#include "src/ops/common/cuda/launch.h"
#include "src/ops/common/registration.h"
#include "src/ops/sampling/internal.h"
#include "xllm_kernel/ops/sampling.h"

namespace xllm_kernel::sampling {
namespace {

at::Tensor native_sample(const at::Tensor& logits_in, const at::Tensor& temperature, const at::Tensor& top_k,
                         const at::Tensor& top_p, const at::Tensor& min_p, const at::Tensor& seeds,
                         const at::Tensor& offsets) {
  const RowParameters r =
      check_arguments({.logits = logits_in, .temperature = temperature, .top_k = top_k, .top_p = top_p,
                       .min_p = min_p, .seeds = seeds, .offsets = offsets, .device = c10::DeviceType::CUDA});
  bridge::check_capability(op_name(), logits_in);
  const c10::cuda::CUDAGuard guard(logits_in.device());
  at::Tensor out = new_output(logits_in);
  if (logits_in.size(0) == 0) return out;
  const at::Tensor logits =
      logits_in.size(0) > 1 && logits_in.stride(0) < logits_in.size(1) ? logits_in.contiguous() : logits_in;
  const kernels::SamplingParams p = kernel_params(logits, r, out, nullptr);
  int sm_count = 0;
  bridge::check_launch(op_name(), cuda::cuda_status(cuda::current_sm_count(&sm_count), "cudaDeviceGetAttribute"));
  const int64_t bytes = cuda::sample_workspace_bytes(p, sm_count);
  const at::Tensor workspace = at::empty({std::max<int64_t>(bytes, 1)}, logits.options().dtype(at::kByte));
  bridge::check_launch(op_name(), cuda::sample(p, workspace.mutable_data_ptr(), bytes,
                                               c10::cuda::getCurrentCUDAStream().stream()));
  return out;
}

}  // namespace

XLLM_REGISTER_NAMED("cuda.native.sample", modules().native_cuda, sample_operation(), native_sample);

}  // namespace xllm_kernel::sampling
