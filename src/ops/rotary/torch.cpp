// cpu.torch.rotary_embedding and cuda.torch.rotary_embedding: the rotation composed from ATen ops in
// float32, written back with one rounding (copy_). ATen dispatches on the tensors' device; on CUDA
// it runs on the current stream without a synchronization, so the op is also capturable into a
// CUDA graph. Out-of-range positions: an error on the CPU (checked before anything is written); on
// CUDA the token reads cache row 0 and its rows are written back unchanged, as cuda.native does.
#include <ATen/ATen.h>

#include "src/ops/common/registration.h"
#include "src/ops/rotary/internal.h"
#include "xllm_kernel/ops/rotary.h"

namespace xllm_kernel::rotary {
namespace {

template <c10::DeviceType kDevice>
void torch_rotary(const at::Tensor& positions, at::Tensor& query, const std::optional<at::Tensor>& key,
                  int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox) {
  const Layout l = check_arguments({.positions = positions, .query = query, .key = key, .head_size = head_size,
                                    .cos_sin_cache = cos_sin_cache, .is_neox = is_neox, .device = kDevice});
  if (l.tokens == 0) return;
  at::Tensor rows_of = positions;
  at::Tensor valid;  // [tokens, 1, 1] on CUDA
  if constexpr (kDevice == c10::DeviceType::CPU) {
    check_positions_in_range(positions, l.max_position);
  } else {
    if (l.max_position == 0) return;  // every position is out of range: nothing changes
    const at::Tensor in_range = positions.ge(0).logical_and_(positions.lt(l.max_position));
    rows_of = at::where(in_range, positions, at::zeros_like(positions));
    valid = in_range.view({-1, 1, 1});
  }
  const int64_t half = l.rot_dim / 2;
  const at::Tensor rows = cos_sin_cache.index_select(0, rows_of).to(at::kFloat);  // [tokens, rot_dim]
  const at::Tensor cos = rows.narrow(1, 0, half).unsqueeze(1);                    // [tokens, 1, half]
  const at::Tensor sin = rows.narrow(1, half, half).unsqueeze(1);

  auto rotate = [&](const at::Tensor& t, const Heads& heads) {
    at::Tensor x = as_heads(t, l, heads).narrow(-1, 0, l.rot_dim);  // [tokens, heads, rot_dim], a view
    const at::Tensor xf = x.to(at::kFloat);
    at::Tensor x1, x2;
    if (is_neox) {
      x1 = xf.narrow(-1, 0, half);
      x2 = xf.narrow(-1, half, half);
    } else {
      const at::Tensor pairs = xf.unflatten(-1, {half, 2});
      x1 = pairs.select(-1, 0);
      x2 = pairs.select(-1, 1);
    }
    const at::Tensor o1 = x1 * cos - x2 * sin;
    const at::Tensor o2 = x2 * cos + x1 * sin;
    at::Tensor out = is_neox ? at::cat({o1, o2}, -1) : at::stack({o1, o2}, -1).flatten(-2);
    if (valid.defined()) out = at::where(valid, out, xf);
    x.copy_(out);
  };
  rotate(query, l.query);
  if (l.key.heads > 0) rotate(*key, l.key);
}

}  // namespace

XLLM_REGISTER_NAMED("cpu.torch.rotary_embedding", modules().torch_cpu, rotary_embedding_operation(),
                    torch_rotary<c10::DeviceType::CPU>);
XLLM_REGISTER_NAMED("cuda.torch.rotary_embedding", modules().torch_cuda, rotary_embedding_operation(),
                    torch_rotary<c10::DeviceType::CUDA>);

}  // namespace xllm_kernel::rotary
