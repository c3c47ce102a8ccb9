// The argument checks every activation bridge shares (declared in src/ops/activation/checks.h).
#include <c10/util/Exception.h>

#include <vector>

#include "src/ops/activation/checks.h"
#include "src/ops/activation/internal.h"

namespace xllm_kernel::activation {

int64_t check_input(const char* op, const at::Tensor& input, c10::DeviceType device) {
  bridge::check_floating_tensor(op, "input", input, device);
  const int64_t width = input.size(-1);
  TORCH_CHECK(width >= 2 && width % 2 == 0, op,
              ": input's last dimension must be even and >= 2 ([..., 2d] with d >= 1: the gate and the up "
              "projection side by side), got ",
              width);
  return width / 2;
}

std::vector<int64_t> output_shape(const at::Tensor& input, bool gated) {
  std::vector<int64_t> shape(input.sizes().begin(), input.sizes().end());
  if (gated) shape.back() /= 2;
  return shape;
}

int64_t check_plain_input(const char* op, const at::Tensor& input, c10::DeviceType device) {
  bridge::check_floating_tensor(op, "input", input, device);
  TORCH_CHECK(input.size(-1) >= 1, op, ": input's last dimension must be >= 1 ([..., d] with d >= 1), got ",
              input.size(-1));
  return input.size(-1);
}

}  // namespace xllm_kernel::activation
