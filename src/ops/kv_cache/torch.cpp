// cpu.torch.reshape_and_cache and cuda.torch.reshape_and_cache: the paged KV-cache write composed
// from ATen ops. The tokens with a slot to write are found with nonzero() (on CUDA a
// synchronization, so the CUDA module is eager only), their rows gathered with index_select and
// written with index_copy_ on the caches viewed as [slots, kv_heads * head_size] (index_put_ on
// (block, offset) where blocks are not adjacent). On the CPU the slots were checked first; on
// CUDA an out-of-range slot is skipped like a negative one.
#include <ATen/ATen.h>

#include "src/ops/common/registration.h"
#include "src/ops/kv_cache/internal.h"
#include "xllm_kernel/ops/kv_cache.h"

namespace xllm_kernel::kv_cache {
namespace {

void write(at::Tensor& cache, const at::Tensor& rows, const at::Tensor& slots, const CacheShape& s) {
  const int64_t row = s.kv_heads * s.head_size;
  if (s.num_blocks <= 1 || cache.stride(0) == s.block_size * row) {
    at::Tensor flat = cache.as_strided({s.slots, row}, {row, 1});
    flat.index_copy_(0, slots, rows.reshape({rows.size(0), row}));
  } else {
    const at::indexing::TensorIndex index[] = {at::floor_divide(slots, s.block_size),
                                               at::remainder(slots, s.block_size)};
    cache.index_put_(index, rows);
  }
}

template <c10::DeviceType kDevice>
void torch_reshape_and_cache(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                             at::Tensor& value_cache, const at::Tensor& slot_mapping) {
  const CacheShape s = check_arguments({.key = key, .value = value, .key_cache = key_cache,
                                        .value_cache = value_cache, .slot_mapping = slot_mapping, .device = kDevice});
  if constexpr (kDevice == c10::DeviceType::CPU) {
    if (check_slots_cpu(s, slot_mapping) == 0) return;
  }
  if (s.tokens == 0 || s.slots == 0) return;
  const at::Tensor valid = slot_mapping.ge(0).logical_and_(slot_mapping.lt(s.slots));
  const at::Tensor tokens = valid.nonzero().squeeze(1);
  if (tokens.size(0) == 0) return;
  const at::Tensor slots = slot_mapping.index_select(0, tokens);
  write(key_cache, key.index_select(0, tokens), slots, s);
  write(value_cache, value.index_select(0, tokens), slots, s);
}

}  // namespace

XLLM_REGISTER_NAMED("cpu.torch.reshape_and_cache", modules().torch_cpu, reshape_and_cache_operation(),
                    torch_reshape_and_cache<c10::DeviceType::CPU>);
XLLM_REGISTER_NAMED("cuda.torch.reshape_and_cache", modules().torch_cuda, reshape_and_cache_operation(),
                    torch_reshape_and_cache<c10::DeviceType::CUDA>);

}  // namespace xllm_kernel::kv_cache
