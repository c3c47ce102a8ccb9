// cpu.native.reshape_and_cache: bridge from at::Tensor to the Highway row copy in
// csrc/cpu/kv_cache/. Every argument and every slot is checked before anything is written.
#include <c10/util/Exception.h>

#include "csrc/cpu/kv_cache/kv_cache.h"
#include "src/core/cpu_stream.h"
#include "src/ops/common/cpu.h"
#include "src/ops/common/registration.h"
#include "src/ops/kv_cache/internal.h"
#include "xllm_kernel/ops/kv_cache.h"

namespace xllm_kernel::kv_cache {
namespace {

void native_reshape_and_cache(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                              at::Tensor& value_cache, const at::Tensor& slot_mapping) {
  const Call call{.key = key, .value = value, .key_cache = key_cache, .value_cache = value_cache,
                  .slot_mapping = slot_mapping, .device = c10::DeviceType::CPU};
  const CacheShape s = check_arguments(call);
  const int64_t written = check_slots_cpu(s, slot_mapping);
  if (written == 0) return;
  cpu::KvCacheParams p = kernel_params(call, s);
  // Streamed when the rows read and written together pass the threshold: both occupy the cache
  // during the call, so the destination rows (scattered, their old contents never needed) would
  // be evicted before anyone reads them again, and plain stores would first read every line.
  const int64_t row = s.kv_heads * s.head_size;
  p.stream_out = detail::stream_cpu_output(4 * written * row * key.element_size());
  bridge::run_rows(op_name(), p, s.tokens, 2 * row, cpu::reshape_and_cache);
}

// The quantized write: the same kernel, which quantizes each (token, head) row with the
// quantization family's row kernels on its way into the cache.
void native_reshape_and_cache_quant(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                                    at::Tensor& value_cache, const at::Tensor& slot_mapping, at::Tensor& key_scale,
                                    at::Tensor& value_scale) {
  const Call call{.key = key, .value = value, .key_cache = key_cache, .value_cache = value_cache,
                  .slot_mapping = slot_mapping, .device = c10::DeviceType::CPU, .key_scale = &key_scale,
                  .value_scale = &value_scale};
  const CacheShape s = check_arguments(call);
  check_fp8_scales_cpu(call);
  const int64_t written = check_slots_cpu(s, slot_mapping, call_name(call));
  if (written == 0) return;
  cpu::KvCacheParams p = kernel_params(call, s);
  const int64_t row = s.kv_heads * s.head_size;
  p.stream_out = detail::stream_cpu_output(2 * written * row * (key.element_size() + 1));
  bridge::run_rows(call_name(call), p, s.tokens, 8 * row, cpu::reshape_and_cache);
}

}  // namespace

XLLM_REGISTER_NAMED("cpu.native.reshape_and_cache_quant", modules().native_cpu, reshape_and_cache_quant_operation(),
                    native_reshape_and_cache_quant);
XLLM_REGISTER_NAMED("cpu.native.reshape_and_cache", modules().native_cpu, reshape_and_cache_operation(),
                    native_reshape_and_cache);

}  // namespace xllm_kernel::kv_cache
