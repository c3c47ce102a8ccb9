// cpu.torch.reshape_and_cache and cuda.torch.reshape_and_cache: the paged KV-cache write composed
// from ATen ops. The tokens with a slot to write are found with nonzero() (on CUDA a
// synchronization, so the CUDA module is eager only), their rows gathered with index_select and
// written with index_copy_ on the caches viewed as [slots, kv_heads * head_size] (index_put_ on
// (block, offset) where blocks are not adjacent). On the CPU the slots were checked first; on
// CUDA an out-of-range slot is skipped like a negative one.
#include <ATen/ATen.h>

#include <limits>

#include "src/ops/common/registration.h"
#include "src/ops/kv_cache/internal.h"
#include "xllm_kernel/ops/kv_cache.h"

namespace xllm_kernel::kv_cache {
namespace {

// rows [n, ...] into the slots of `cache` [num_blocks, block_size, ...] (each block contiguous).
void write(at::Tensor& cache, const at::Tensor& rows, const at::Tensor& slots, const CacheShape& s) {
  const int64_t row = cache.numel() / (s.num_blocks * s.block_size);
  if (s.num_blocks <= 1 || cache.stride(0) == s.block_size * row) {
    at::Tensor flat = cache.as_strided({s.slots, row}, {row, 1});
    flat.index_copy_(0, slots, rows.reshape({rows.size(0), row}));
  } else {
    const at::indexing::TensorIndex index[] = {at::floor_divide(slots, s.block_size),
                                               at::remainder(slots, s.block_size)};
    cache.index_put_(index, rows);
  }
}

// The contract's quantization of rows [n, kv_heads, head_size] into `cache` (and, int8, `scale`) at
// the slots, in ATen float32 arithmetic: fp8 q = e4m3(x / scale) (the true division, clamped to
// +-448 first: ATen's conversion gives NaN past the e4m3 range); int8 per (token, head) row
// scale = amax / 127, q = rint(x * (127 / amax)) saturated, NaN to 0 (csrc/common/quantization.h).
void write_quantized(at::Tensor& cache, at::Tensor& scale, const at::Tensor& rows, const at::Tensor& slots,
                     const CacheShape& s) {
  const at::Tensor x = rows.to(at::kFloat);
  if (cache.scalar_type() == at::kFloat8_e4m3fn) {
    const at::Tensor t = x.div(scale.reshape({}));
    at::Tensor q = t.clamp(-448, 448).to(at::kFloat8_e4m3fn).view(at::kByte);
    q.masked_fill_(t.isnan(), 0x7F);  // whatever the NaN's sign
    at::Tensor bytes = cache.view(at::kByte);
    write(bytes, q, slots, s);
    return;
  }
  const at::Tensor amax = x.abs().amax(-1, /*keepdim=*/true);  // NaN where the row holds one
  at::Tensor row_scale = amax.div(127.0f);
  row_scale.masked_fill_(row_scale.isnan(), std::numeric_limits<float>::quiet_NaN());  // the canonical NaN
  const at::Tensor m = at::where(amax.eq(0), at::zeros_like(amax), at::full_like(amax, 127.0f).div_(amax));
  // NaN to 0; an infinity (where 127 / amax overflowed: amax below about 3.7e-37) saturates.
  const at::Tensor q = x.mul(m).nan_to_num_(0.0).clamp_(-128, 127).round_().to(at::kChar);
  write(cache, q, slots, s);
  write(scale, row_scale.squeeze(-1), slots, s);
}

// Either operation: the tokens with a slot to write, their rows gathered and written (quantized
// for reshape_and_cache_quant).
template <c10::DeviceType kDevice>
void run(const Call& call) {
  const at::Tensor& slot_mapping = call.slot_mapping;
  const CacheShape s = check_arguments(call);
  if constexpr (kDevice == c10::DeviceType::CPU) {
    check_fp8_scales_cpu(call);
    if (check_slots_cpu(s, slot_mapping, call_name(call)) == 0) return;
  }
  if (s.tokens == 0 || s.slots == 0) return;
  const at::Tensor valid = slot_mapping.ge(0).logical_and_(slot_mapping.lt(s.slots));
  const at::Tensor tokens = valid.nonzero().squeeze(1);
  if (tokens.size(0) == 0) return;
  const at::Tensor slots = slot_mapping.index_select(0, tokens);
  at::Tensor key_cache = call.key_cache, value_cache = call.value_cache;  // handles of the caller's caches
  if (call.key_scale == nullptr) {
    write(key_cache, call.key.index_select(0, tokens), slots, s);
    write(value_cache, call.value.index_select(0, tokens), slots, s);
    return;
  }
  at::Tensor key_scale = *call.key_scale, value_scale = *call.value_scale;
  write_quantized(key_cache, key_scale, call.key.index_select(0, tokens), slots, s);
  write_quantized(value_cache, value_scale, call.value.index_select(0, tokens), slots, s);
}

}  // namespace

XLLM_REGISTER_NAMED("cpu.torch.reshape_and_cache_quant", modules().torch_cpu, reshape_and_cache_quant_operation(),
                    (reshape_and_cache_quant_entry<c10::DeviceType::CPU, run<c10::DeviceType::CPU>>));
XLLM_REGISTER_NAMED("cuda.torch.reshape_and_cache_quant", modules().torch_cuda, reshape_and_cache_quant_operation(),
                    (reshape_and_cache_quant_entry<c10::DeviceType::CUDA, run<c10::DeviceType::CUDA>>));
XLLM_REGISTER_NAMED("cpu.torch.reshape_and_cache", modules().torch_cpu, reshape_and_cache_operation(),
                    (reshape_and_cache_entry<c10::DeviceType::CPU, run<c10::DeviceType::CPU>>));
XLLM_REGISTER_NAMED("cuda.torch.reshape_and_cache", modules().torch_cuda, reshape_and_cache_operation(),
                    (reshape_and_cache_entry<c10::DeviceType::CUDA, run<c10::DeviceType::CUDA>>));

}  // namespace xllm_kernel::kv_cache
