// cuda.native.reshape_and_cache: bridge from at::Tensor to the CUDA kernel in csrc/cuda/kv_cache/.
// Built into the plugin libxllm_kernel_cuda.so, which initialize("cuda") loads when the
// kv_cache.native_cuda module's probe finds a usable device; loading it registers this. Slots are
// not checked here (that would synchronize): the kernel skips out-of-range ones.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "csrc/cuda/kv_cache/kv_cache.h"
#include "src/ops/common/cuda/launch.h"
#include "src/ops/kv_cache/internal.h"
#include "xllm_kernel/ops/kv_cache.h"

namespace xllm_kernel::kv_cache {
namespace {

void native_reshape_and_cache(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                              at::Tensor& value_cache, const at::Tensor& slot_mapping) {
  const CacheShape s = check_arguments(key, value, key_cache, value_cache, slot_mapping, c10::DeviceType::CUDA);
  bridge::check_capability(kOp, key);
  if (s.tokens == 0 || s.slots == 0) return;
  const c10::cuda::CUDAGuard guard(key.device());
  cuda::KvCacheParams p;
  p.dtype = bridge::kernel_dtype(key.scalar_type());
  p.tokens = s.tokens;
  p.kv_heads = s.kv_heads;
  p.head_size = s.head_size;
  p.block_size = s.block_size;
  p.num_slots = s.slots;
  p.key = key.const_data_ptr();
  p.key_strides = {key.stride(0), key.stride(1)};
  p.value = value.const_data_ptr();
  p.value_strides = {value.stride(0), value.stride(1)};
  p.key_cache = key_cache.mutable_data_ptr();
  p.key_cache_block_stride = key_cache.stride(0);
  p.value_cache = value_cache.mutable_data_ptr();
  p.value_cache_block_stride = value_cache.stride(0);
  p.slot_mapping = slot_mapping.const_data_ptr<int64_t>();
  p.slot_stride = slot_mapping.stride(0);
  bridge::check_launch(kOp, cuda::reshape_and_cache(p, c10::cuda::getCurrentCUDAStream().stream()));
}

}  // namespace

XLLM_REGISTER_IMPLEMENTATION(cuda_native_reshape_and_cache, native_cuda_module(), reshape_and_cache_operation(),
                             native_reshape_and_cache);

}  // namespace xllm_kernel::kv_cache
