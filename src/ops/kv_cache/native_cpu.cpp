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

// Either operation: reshape_and_cache_quant's kernel quantizes each (token, head) row with the
// quantization family's row kernels on its way into the cache.
void run(const Call& call) {
  const char* const name = call_name(call);
  const CacheShape s = check_arguments(call);
  check_fp8_scales_cpu(call);
  const int64_t written = check_slots_cpu(s, call.slot_mapping, name);
  if (written == 0) return;
  cpu::KvCacheParams p = kernel_params(call, s);
  // Streamed when the rows read and written together pass the threshold: both occupy the cache
  // during the call, so the destination rows (scattered, their old contents never needed) would
  // be evicted before anyone reads them again, and plain stores would first read every line.
  const int64_t row = s.kv_heads * s.head_size;
  p.stream_out = detail::stream_cpu_output(2 * written * row * (call.key.element_size() + call.key_cache.element_size()));
  // A quantized row costs about four copies of it (its amax pass, then the conversion).
  const bool quant = call.key_scale != nullptr;
  bridge::run_rows(name, p, s.tokens, (quant ? 8 : 2) * row, cpu::reshape_and_cache);
}

}  // namespace

XLLM_REGISTER_NAMED("cpu.native.reshape_and_cache_quant", modules().native_cpu, reshape_and_cache_quant_operation(),
                    (reshape_and_cache_quant_entry<c10::DeviceType::CPU, run>));
XLLM_REGISTER_NAMED("cpu.native.reshape_and_cache", modules().native_cpu, reshape_and_cache_operation(),
                    (reshape_and_cache_entry<c10::DeviceType::CPU, run>));

}  // namespace xllm_kernel::kv_cache
