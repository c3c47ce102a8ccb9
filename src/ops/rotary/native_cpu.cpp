// cpu.native.rotary_embedding: the bridge from at::Tensor to the Highway kernel in csrc/cpu/rotary/.
// Every position is checked before any token is rotated, so a bad one leaves query and key as they
// were.
#include <c10/util/Exception.h>

#include "csrc/cpu/rotary/rotary.h"
#include "src/ops/common/cpu.h"
#include "src/ops/rotary/internal.h"
#include "xllm_kernel/ops/rotary.h"

namespace xllm_kernel::rotary {
namespace {

void native_rotary(const at::Tensor& positions, at::Tensor& query, const std::optional<at::Tensor>& key,
                   int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox) {
  const char* op = "rotary_embedding";
  const Layout l = check_arguments(positions, query, key, head_size, cos_sin_cache, c10::DeviceType::CPU);
  if (l.tokens == 0) return;
  check_positions_in_range(positions, l.max_position);
  cpu::RotaryParams p;
  p.dtype = bridge::kernel_dtype(query.scalar_type());
  p.cache_dtype = bridge::kernel_dtype(cos_sin_cache.scalar_type());
  p.tokens = l.tokens;
  p.head_size = l.head_size;
  p.rot_dim = l.rot_dim;
  p.is_neox = is_neox;
  p.positions = positions.const_data_ptr<int64_t>();
  p.position_stride = positions.stride(0);
  p.cos_sin_cache = cos_sin_cache.const_data_ptr();
  p.cache_stride = cos_sin_cache.stride(0);
  p.max_position = l.max_position;
  p.query = query.mutable_data_ptr();
  p.query_heads = l.query.heads;
  p.query_token_stride = l.query.token_stride;
  p.query_head_stride = l.query.head_stride;
  if (l.key.heads > 0) {
    p.key = key->mutable_data_ptr();
    p.key_heads = l.key.heads;
    p.key_token_stride = l.key.token_stride;
    p.key_head_stride = l.key.head_stride;
  }
  bridge::run_rows(op, p, l.tokens, (l.query.heads + l.key.heads) * l.rot_dim, cpu::rotary_embedding);
}

}  // namespace

XLLM_REGISTER_IMPLEMENTATION(cpu_native_rotary_embedding, native_cpu_module(), rotary_embedding_operation(),
                             native_rotary);

}  // namespace xllm_kernel::rotary
