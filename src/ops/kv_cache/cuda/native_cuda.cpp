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

void native_reshape_and_cache(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                              at::Tensor& value_cache, const at::Tensor& slot_mapping) {
  const Call call{.key = key, .value = value, .key_cache = key_cache, .value_cache = value_cache,
                  .slot_mapping = slot_mapping, .device = c10::DeviceType::CUDA};
  const CacheShape s = check_arguments(call);
  bridge::check_capability(op_name(), key);
  if (s.tokens == 0 || s.slots == 0) return;
  const c10::cuda::CUDAGuard guard(key.device());
  const cuda::KvCacheParams p = kernel_params(call, s);
  bridge::check_launch(op_name(), cuda::reshape_and_cache(p, c10::cuda::getCurrentCUDAStream().stream()));
}

void native_reshape_and_cache_quant(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                                    at::Tensor& value_cache, const at::Tensor& slot_mapping, at::Tensor& key_scale,
                                    at::Tensor& value_scale) {
  const Call call{.key = key, .value = value, .key_cache = key_cache, .value_cache = value_cache,
                  .slot_mapping = slot_mapping, .device = c10::DeviceType::CUDA, .key_scale = &key_scale,
                  .value_scale = &value_scale};
  const CacheShape s = check_arguments(call);
  bridge::check_capability(call_name(call), key);
  if (s.tokens == 0 || s.slots == 0) return;
  const c10::cuda::CUDAGuard guard(key.device());
  const cuda::KvCacheParams p = kernel_params(call, s);
  bridge::check_launch(call_name(call), cuda::reshape_and_cache(p, c10::cuda::getCurrentCUDAStream().stream()));
}

}  // namespace

XLLM_REGISTER_NAMED("cuda.native.reshape_and_cache_quant", modules().native_cuda, reshape_and_cache_quant_operation(),
                    native_reshape_and_cache_quant);
XLLM_REGISTER_NAMED("cuda.native.reshape_and_cache", modules().native_cuda, reshape_and_cache_operation(),
                    native_reshape_and_cache);

}  // namespace xllm_kernel::kv_cache
