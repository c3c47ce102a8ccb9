// cpu.native.rotary_embedding: the bridge from at::Tensor to the Highway kernel in csrc/cpu/rotary/.
// Every position is checked before any token is rotated, so a bad one leaves query and key as they
// were.
#include <c10/util/Exception.h>

#include "csrc/cpu/rotary/rotary.h"
#include "src/ops/common/cpu.h"
#include "src/ops/common/registration.h"
#include "src/ops/rotary/internal.h"
#include "xllm_kernel/ops/rotary.h"

namespace xllm_kernel::rotary {
namespace {

void native_rotary(const at::Tensor& positions, at::Tensor& query, const std::optional<at::Tensor>& key,
                   int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox) {
  const char* op = op_name();
  const Call call{.positions = positions, .query = query, .key = key, .head_size = head_size,
                  .cos_sin_cache = cos_sin_cache, .is_neox = is_neox, .device = c10::DeviceType::CPU};
  const Layout l = check_arguments(call);
  if (l.tokens == 0) return;
  check_positions_in_range(positions, l.max_position);
  const cpu::RotaryParams p = kernel_params(call, l);
  bridge::run_rows(op, p, l.tokens, (l.query.heads + l.key.heads) * l.rot_dim, cpu::rotary_embedding);
}

}  // namespace

XLLM_REGISTER_NAMED("cpu.native.rotary_embedding", modules().native_cpu, rotary_embedding_operation(),
                    native_rotary);

}  // namespace xllm_kernel::rotary
