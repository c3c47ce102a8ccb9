// cuda.native.reshape_and_cache: bridge from at::Tensor to the CUDA kernel in csrc/cuda/kv_cache/.
// Built into the plugin libxllm_kernel_cuda.so, which initialize("cuda") loads when the
// kv_cache.native_cuda module's probe finds a usable device; loading it registers this. Slots are
// not checked here (that would synchronize): the kernel skips out-of-range ones.
//
// cuda.native.reshape_and_cache_quant: the same kernel's quantized rows (csrc/cuda/kv_cache), into
// float8_e4m3fn or int8 caches. An fp8 scale stays on the device (reading it would synchronize):
// 0, negative or NaN scales follow IEEE arithmetic there, as the contract says.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "csrc/cuda/kv_cache/kv_cache.h"
#include "src/ops/common/cuda/launch.h"
#include "src/ops/common/registration.h"
#include "src/ops/kv_cache/internal.h"
#include "xllm_kernel/ops/kv_cache.h"

namespace xllm_kernel::kv_cache {
namespace {

void run(const Call& call) {
  const char* const name = call_name(call);
  const CacheShape s = check_arguments(call);
  bridge::check_capability(name, call.key);
  if (s.tokens == 0 || s.slots == 0) return;
  const c10::cuda::CUDAGuard guard(call.key.device());
  const cuda::KvCacheParams p = kernel_params(call, s);
  bridge::check_launch(name, cuda::reshape_and_cache(p, c10::cuda::getCurrentCUDAStream().stream()));
}

}  // namespace

XLLM_REGISTER_NAMED("cuda.native.reshape_and_cache_quant", modules().native_cuda, reshape_and_cache_quant_operation(),
                    (reshape_and_cache_quant_entry<c10::DeviceType::CUDA, run>));
XLLM_REGISTER_NAMED("cuda.native.reshape_and_cache", modules().native_cuda, reshape_and_cache_operation(),
                    (reshape_and_cache_entry<c10::DeviceType::CUDA, run>));

}  // namespace xllm_kernel::kv_cache
