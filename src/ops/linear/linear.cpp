// The linear group: contracts, declared operations (with their fake kernels), the module table and
// the public API. torch.ops.xllm_kernel.* reaches the prepared bindings through the declared
// operations (src/ops/common/family.h).
#include "xllm_kernel/ops/linear.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include "src/ops/linear/internal.h"

namespace xllm_kernel {

namespace {

constexpr const char* kSemantics =
    "W[n, k] = (q[n, k] - z[n, g]) * s[n, g] with g = k / group, formed in float32: (q - z) exactly, one rounding of "
    "the product (bf16, f16, f32 weights: their value; fp8: the e4m3fn value times its scale). y[m, n] = sum_k x[m, k] "
    "* W[n, k] + bias[n]: x taken exactly in float32, products and sums in float32, bias added in float32, one "
    "rounding to the input's dtype. Non-finite scales or weights propagate as IEEE arithmetic does (a NaN scale makes "
    "its channel's outputs NaN). The native CPU implementation sums each output as one float32 fma chain over k in "
    "order: a row's bits do not depend on the other rows, their number, its position or the thread count.";

}  // namespace

const OpContract& linear_pack_contract() {
  static const OpContract contract{
      .operation = "linear_pack",
      .version = 1,
      .schema = "linear_pack(Tensor weight, Tensor? scales, Tensor? zeros, str scheme, int group_size) -> Tensor",
      .numerical_mode = NumericalMode::kExact,
      .semantics =
          "Packs a weight once, at load, for linear. Schemes and their canonical form: 'f32', 'bf16', 'f16': weight "
          "[N, K] of that dtype; 'int8': weight int8 [N, K], scales [N] (group_size 0: one per channel) or [N, K / g] (group_size g >= 1 dividing K, -1: g = K), W = q * s; 'fp8': weight float8_e4m3fn [N, K], "
          "scales [] or [1] (per tensor), [N] (per channel) or [ceil(N / 128), ceil(K / 128)] (per 128 x 128 block), "
          "W = q * s; 'int4': weight int8 [N, K] holding [-8, 7] (symmetric) or [0, 15] with zeros [N, K / g], scales "
          "[N, K / g], group_size g >= 1 dividing K (-1: g = K), W = (q - z) * s. group_size is 0 for the float and fp8 "
          "schemes. Scales and zeros float32, bfloat16 or float16 (taken exactly); zeros integers in [0, 15]. The "
          "result is a uint8 tensor [N, row_bytes] on weight's device whose size follows from the scheme, N, K and "
          "the groups alone; its header records them, the layout and the implementation that packed it. Only the "
          "linear of the same device and solution accepts it (any other: an error).",
      .dtypes = "weight: float32, bfloat16, float16, int8, float8_e4m3fn (by scheme); result uint8"};
  return contract;
}

const OpContract& linear_contract() {
  static const OpContract contract{
      .operation = "linear",
      .version = 1,
      .schema = "linear(Tensor input, Tensor packed, Tensor? bias) -> Tensor",
      .numerical_mode = NumericalMode::kFp32Accumulate,
      .semantics = std::string("out = input W^T + bias for the weight linear_pack packed. input is [..., K] with any "
                               "strides for the leading dimensions and a contiguous last dimension; out is a new "
                               "contiguous [..., N] tensor of input's dtype; zero rows allowed. bias: [N] of input's "
                               "dtype or float32, or None. ") +
                   kSemantics,
      .dtypes = "float32, bfloat16, float16 (output in the input's dtype)"};
  return contract;
}

namespace linear {
namespace {

at::Tensor pack_fake(const at::Tensor& weight, const std::optional<at::Tensor>& scales,
                     const std::optional<at::Tensor>& zeros, std::string scheme, int64_t group_size) {
  const PackShape s = pack_shape("linear_pack", weight, scales, zeros, scheme, group_size);
  const kernels::LinearSizes z = kernels::linear_sizes(s.scheme, s.n, s.k, s.groups, s.zeros);
  return at::empty({s.n, z.row_bytes}, weight.options().dtype(at::kByte));
}

// N is the packed tensor's first dimension: the fake needs no header.
at::Tensor linear_fake(const at::Tensor& input, const at::Tensor& packed, const std::optional<at::Tensor>&) {
  TORCH_CHECK(input.dim() >= 1, "linear: input must have at least 1 dimension [..., K], got a 0-D tensor");
  TORCH_CHECK(packed.dim() == 2, "linear: packed must be 2-D [N, row_bytes] (what linear_pack returned), got ",
              packed.dim(), " dimensions");
  std::vector<int64_t> shape(input.sizes().begin(), input.sizes().end());
  shape.back() = packed.size(0);
  return at::empty(shape, input.options());
}

const family::DeclaredOperation<LinearPackFn>& pack_declared() {
  static const family::DeclaredOperation<LinearPackFn> operation(linear_pack_contract(), &pack_fake);
  return operation;
}

const family::DeclaredOperation<LinearFn>& linear_declared() {
  static const family::DeclaredOperation<LinearFn> operation(linear_contract(), &linear_fake);
  return operation;
}

}  // namespace

const family::StandardModules& modules() {
  static const family::StandardModules modules = [] {
    family::StandardModules m = family::standard_modules(
        {.family = "linear",
         .operations = {&pack_declared(), &linear_declared()},
         .domain = "weights f32/bf16/f16, int8 per channel or in groups, fp8 per tensor/channel/128x128 block, int4 in groups; "
                   "input float32/bfloat16/float16 [..., K], contiguous last dim, any leading strides",
         // The header is read on the host: a copy and a synchronization per call, no graph capture.
         .torch_cuda_modes = {ExecutionMode::kEager},
         .torch_cuda_note = "eager only: the packed header is read on the host",
         .batch_invariant = {.native_cpu = true}});
    m.native_cuda.implementations.clear();  // no CUDA kernel yet
    return m;
  }();
  return modules;
}

}  // namespace linear

const TypedOperation<LinearPackFn>& linear_pack_operation() { return linear::pack_declared(); }
const TypedOperation<LinearFn>& linear_operation() { return linear::linear_declared(); }

const Group& linear_group() {
  static const Group group = linear::modules().group();
  return group;
}
XLLM_REGISTER_GROUP(linear_group);

namespace ops {

at::Tensor linear_pack(const at::Tensor& weight, const std::optional<at::Tensor>& scales,
                       const std::optional<at::Tensor>& zeros, const std::string& scheme, int64_t group_size) {
  return linear::pack_declared()(weight, scales, zeros, scheme, group_size);
}

at::Tensor linear(const at::Tensor& input, const at::Tensor& packed, const std::optional<at::Tensor>& bias) {
  return linear::linear_declared()(input, packed, bias);
}

}  // namespace ops
}  // namespace xllm_kernel
