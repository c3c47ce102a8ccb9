// cuda.native.rotary_embedding: the bridge from at::Tensor to the CUDA kernel in csrc/cuda/rotary/.
// Built into the plugin libxllm_kernel_cuda.so, which initialize("cuda") loads when the
// rotary.native_cuda module's probe finds a usable device; loading it registers this. Positions are
// not checked on the host (that would synchronize): the kernel leaves an out-of-range token's rows
// unchanged.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "csrc/cuda/rotary/rotary.h"
#include "src/ops/common/cuda/launch.h"
#include "src/ops/common/registration.h"
#include "src/ops/rotary/internal.h"
#include "xllm_kernel/ops/rotary.h"

namespace xllm_kernel::rotary {
namespace {

void native_rotary(const at::Tensor& positions, at::Tensor& query, const std::optional<at::Tensor>& key,
                   int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox) {
  const char* op = op_name();
  const Call call{.positions = positions, .query = query, .key = key, .head_size = head_size,
                  .cos_sin_cache = cos_sin_cache, .is_neox = is_neox, .device = c10::DeviceType::CUDA};
  const Layout l = check_arguments(call);
  bridge::check_capability(op, query);
  if (l.tokens == 0) return;
  const c10::cuda::CUDAGuard guard(query.device());
  const cuda::RotaryParams p = kernel_params(call, l);
  bridge::check_launch(op, cuda::rotary_embedding(p, c10::cuda::getCurrentCUDAStream().stream()));
}

}  // namespace

XLLM_REGISTER_NAMED("cuda.native.rotary_embedding", modules().native_cuda, rotary_embedding_operation(),
                    native_rotary);

}  // namespace xllm_kernel::rotary
