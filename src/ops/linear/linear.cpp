// The linear group: contracts, declared operations (with their fake kernels), the module table and
// the public API. torch.ops.xllm_kernel.* reaches the prepared bindings through the declared
// operations (src/ops/common/family.h).
#include "xllm_kernel/ops/linear.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include "src/ops/common/bridge.h"
#include "src/ops/common/dependencies.h"
#include "src/ops/linear/internal.h"

namespace xllm_kernel {

namespace {

constexpr const char* kSemantics =
    "W[n, k] = (q[n, k] - z[n, g]) * s[n, g] with g = k / group, formed in float32: (q - z) exactly, one rounding of "
    "the product (bf16, f16, f32 weights: their value; fp8: the e4m3fn value times its scale). y[m, n] = sum_k x[m, k] "
    "* W[n, k] + bias[n]: x taken exactly in float32, products and sums in float32, bias added in float32, one "
    "rounding to the input's dtype. Non-finite scales or weights propagate as IEEE arithmetic does (a NaN scale makes "
    "its channel's outputs NaN). The native CPU implementation sums each output as one float32 fma chain over k in "
    "order, except bf16 input with bf16 weights (K even) on a CPU with AVX512_BF16 or AMX-BF16: bf16 dot products "
    "(vdpbf16ps: k in pairs, acc + x[k+1] W[k+1] then + x[k] W[k], each step rounded, the products exact) or "
    "oneDNN's AMX brgemm (float32 sums in its order), where subnormal inputs and partial sums are flushed to zero. "
    "In every case a row's bits do not depend on the other rows, their number, its position or the thread count.";

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
          "[N, K / g], group_size g >= 1 dividing K (-1: g = K), W = (q - z) * s. For scaled_mm (quantized activations): 'w8a8-int8': weight int8 [N, K] in [-127, 127] "
          "(symmetric), scales [N], group_size 0; 'w8a8-fp8': weight float8_e4m3fn [N, K], scales as 'fp8', "
          "group_size 0; 'w4a8': as 'int4' with group_size g a multiple of 8 dividing K (-1: g = K, a multiple of 8). "
          "group_size is 0 for the float and fp8 schemes. Scales and zeros float32, bfloat16 or float16 (taken exactly); zeros integers in [0, 15]. The "
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

namespace {

constexpr const char* kScaledMmSemantics =
    "For output [m, n] and the weight's K groups g (one for w8a8-int8 and per-tensor or per-channel w8a8-fp8; "
    "128-wide for 128 x 128 blocks; w4a8's groups), with s[n, g] the weight's scales: int8 a (w8a8-int8, w4a8): "
    "acc_g = sum over k in g of (a[m, k] - azp[m]) * (q[n, k] - z[n, g]) in int32, exact for K <= 65535 (the "
    "bound is checked; azp 0 without, z 0 but for w4a8 with zeros); float8_e4m3fn a (w8a8-fp8): acc_g = the "
    "float32 sum of the exact products float(a[m, k]) * float(q[n, k]) over k in g, in an order each "
    "implementation fixes (tolerance: the float32 accumulation's, 2^-24 K sum |a q| s scale_a, plus the output's "
    "rounding). Then in float32, each multiply and add rounded on its own (no fused multiply-add), in this "
    "order: t = (float(acc_0) * scale_a[m]) * s[n, 0]; t = t + (float(acc_g) * scale_a[m]) * s[n, g] for g = 1, 2, "
    "...; y = t + bias[n] (no bias: y = t); out = y rounded once to out_dtype (to nearest even); float(acc) rounds "
    "to nearest even. (vLLM's CUDA epilogue computes scale_a * (scale_b * acc) + bias with a fused multiply-add: "
    "this fixes one order instead.) The int8 schemes so give the same bits in every implementation. Non-finite "
    "scales, fp8 NaN bytes and bias propagate as IEEE arithmetic does. Every implementation's row is independent "
    "of the other rows; the native CPU implementation's bits also do not depend on their number, its position or "
    "the thread count (batch invariance).";

}  // namespace

const OpContract& scaled_mm_contract() {
  static const OpContract contract{
      .operation = "scaled_mm",
      .version = 1,
      .schema = "scaled_mm(Tensor a, Tensor packed, Tensor scale_a, Tensor? azp, Tensor? bias, ScalarType out_dtype) "
                "-> Tensor",
      .numerical_mode = NumericalMode::kExact,
      .semantics = std::string("out = the GEMM of quantized activations with a weight linear_pack packed with scheme "
                               "w8a8-int8, w8a8-fp8 or w4a8. a is [..., K] with any leading strides and a contiguous "
                               "last dimension: int8 for w8a8-int8 and w4a8, float8_e4m3fn for w8a8-fp8 (what "
                               "per_token_quant, per_token_quant_int8_azp and static_quant produce); scale_a float32 "
                               "[..., 1] (per token) or one element (per tensor); azp int32 of scale_a's shape "
                               "(w8a8-int8 only: a ~ (q - azp) * scale_a), or None; bias [N] of out_dtype or "
                               "float32, or None; out_dtype float32, bfloat16 or float16. out is a new contiguous "
                               "[..., N] tensor; zero rows allowed. ") +
                   kScaledMmSemantics,
      .dtypes = "a int8 or float8_e4m3fn (by scheme); scale_a float32; azp int32; out float32, bfloat16, float16"};
  return contract;
}

const OpContract& linear_dynamic_quant_contract() {
  static const OpContract contract{
      .operation = "linear_dynamic_quant",
      .version = 1,
      .schema = "linear_dynamic_quant(Tensor input, Tensor packed, Tensor? bias) -> Tensor",
      .numerical_mode = NumericalMode::kExact,
      .semantics = "scaled_mm(q, packed, scale, None, bias, input's dtype) with (q, scale) = per_token_quant(input, "
                   "dtype, None), dtype int8 for w8a8-int8 and w4a8, float8_e4m3fn for w8a8-fp8: equal to that "
                   "composition bit for bit (the quantization family's arithmetic, then scaled_mm's). input [..., "
                   "K] float32, bfloat16 or float16 with any leading strides and a contiguous last dimension; bias "
                   "[N] of input's dtype or float32, or None; out a new contiguous [..., N] tensor of input's dtype.",
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

at::Tensor scaled_mm_fake(const at::Tensor& a, const at::Tensor& packed, const at::Tensor&,
                          const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, at::ScalarType out_dtype) {
  TORCH_CHECK(a.dim() >= 1, "scaled_mm: a must have at least 1 dimension [..., K], got a 0-D tensor");
  TORCH_CHECK(packed.dim() == 2, "scaled_mm: packed must be 2-D [N, row_bytes] (what linear_pack returned), got ",
              packed.dim(), " dimensions");
  std::vector<int64_t> shape(a.sizes().begin(), a.sizes().end());
  shape.back() = packed.size(0);
  return at::empty(shape, a.options().dtype(out_dtype));
}

const family::DeclaredOperation<LinearPackFn>& pack_declared() {
  static const family::DeclaredOperation<LinearPackFn> operation(linear_pack_contract(), &pack_fake);
  return operation;
}

const family::DeclaredOperation<LinearFn>& linear_declared() {
  static const family::DeclaredOperation<LinearFn> operation(linear_contract(), &linear_fake);
  return operation;
}

const family::DeclaredOperation<ScaledMmFn>& scaled_mm_declared() {
  static const family::DeclaredOperation<ScaledMmFn> operation(scaled_mm_contract(), &scaled_mm_fake);
  return operation;
}

const family::DeclaredOperation<LinearDynamicQuantFn>& dynamic_quant_declared() {
  static const family::DeclaredOperation<LinearDynamicQuantFn> operation(linear_dynamic_quant_contract(),
                                                                         &linear_fake);
  return operation;
}

}  // namespace

const family::StandardModules& modules() {
  // torch_npu 2.14.0's schema (torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml).
  static constexpr const char* kNpuQuantMatmulSchema =
      "npu::npu_quant_matmul(Tensor x1, Tensor x2, Tensor scale, *, Tensor? offset=None, Tensor? pertoken_scale=None, "
      "Tensor? bias=None, int? output_dtype=None, int? x1_dtype=None, int? x2_dtype=None, int? "
      "pertoken_scale_dtype=None, int? scale_dtype=None, int[]? group_sizes=None, Tensor? y_scale=None) -> Tensor";
  static const family::StandardModules modules = [] {
    family::StandardModules m = family::standard_modules(
        {.family = "linear",
         .operations = {&pack_declared(), &linear_declared(), &scaled_mm_declared(), &dynamic_quant_declared()},
         .domain = "weights f32/bf16/f16, int8 per channel or in groups, fp8 per tensor/channel/128x128 block, int4 in groups; "
                   "input float32/bfloat16/float16 [..., K], contiguous last dim, any leading strides; scaled_mm: "
                   "w8a8-int8, w8a8-fp8, w4a8 weights, int8 or e4m3 activations with per-token or per-tensor scales",
         // The header is read on the host: a copy and a synchronization per call, no graph capture.
         .torch_cuda_modes = {ExecutionMode::kEager},
         .torch_cuda_note = "eager only: the packed header is read on the host",
         // npu.torch (src/ops/linear/npu/): ATen on npu tensors and torch_npu's npu_quant_matmul for
         // the exact int32 accumulation, in the plugin libxllm_kernel_npu.so.
         .npu_implementations =
             {{.operation = &pack_declared(),
               .input_domain = "npu tensors, the canonical rows (packed on the host, copied to the weight's device)",
               .priority = family::kNativePriority},
              {.operation = &linear_declared(),
               .input_domain = "npu tensors (eager only: the packed header is read on the host), ATen linear on npu; "
                               "quantized weights dequantized in float32 (torch_npu.npu_weight_quant_batchmatmul "
                               "forms W in the input's dtype: not used)",
               .priority = family::kNativePriority},
              {.operation = &scaled_mm_declared(),
               .input_domain = "npu tensors (eager only), w8a8-int8 and w4a8: int32 acc from torch_npu."
                               "npu_quant_matmul (output_dtype int32, scale 1), the contract's epilogue in ATen "
                               "float32; w8a8-fp8: float32 matmul of the e4m3 values",
               .priority = family::kNativePriority,
               .supports = bridge::vendor_operator("npu::npu_quant_matmul", kNpuQuantMatmulSchema)},
              {.operation = &dynamic_quant_declared(),
               .input_domain = "npu tensors (eager only), rows quantized by cpu.torch.per_token_quant on a host "
                               "copy, then as scaled_mm",
               .priority = family::kNativePriority,
               .supports = bridge::vendor_operator("npu::npu_quant_matmul", kNpuQuantMatmulSchema)}},
         .batch_invariant = {.native_cpu = true}});
    // cpu.native hands its GEMM tiles to torch's oneDNN brgemm on AMX CPUs (native_cpu.cpp): explain says
    // so, in the candidate's detail, where it does.
    for (Implementation& i : m.native_cpu.implementations) {
      if (i.operation == &pack_declared()) continue;
      const bool scaled = i.operation != &linear_declared();
      i.supports = [scaled] {
        const std::string paths = native_brgemm_paths(scaled);
        return ProbeResult::ok(paths.empty() ? "" : "oneDNN via torch: " + paths);
      };
    }
    // cuda.native (src/ops/linear/cuda/native_cuda.cpp): the scaled_mm kernel; linear_pack packs every
    // scheme in the canonical rows, and its linear is the ATen path of cuda.torch (no CUDA kernel of
    // its own yet), so that a pack and its linear always come from one solution.
    for (Implementation& i : m.native_cuda.implementations) {
      i.input_domain =
          i.operation == &pack_declared()
              ? "cuda tensors (sm_80+), every scheme, in the canonical rows (packed on the host, copied to the "
                "weight's device)"
          : i.operation == &linear_declared()
              ? "cuda tensors (eager only: the packed header is read on the host); ATen, as cuda.torch (no CUDA "
                "kernel of its own)"
          : i.operation == &scaled_mm_declared()
              ? "cuda tensors (sm_80+, eager only: the packed header is read on the host), w8a8-int8, w8a8-fp8, w4a8 "
                "weights, int8 or e4m3 activations with per-token or per-tensor scales"
              : "cuda tensors (sm_80+, eager only: the packed header is read on the host), input float32/bfloat16/"
                "float16 [..., K] quantized by cuda.native.per_token_quant, w8a8-int8, w8a8-fp8, w4a8 weights";
    }
    m.native_cuda.execution_modes = {ExecutionMode::kEager};  // the header is read on the host
    m.torch_npu->execution_modes = {ExecutionMode::kEager};  // the header is read on the host
    return m;
  }();
  return modules;
}

}  // namespace linear

const TypedOperation<LinearPackFn>& linear_pack_operation() { return linear::pack_declared(); }
const TypedOperation<LinearFn>& linear_operation() { return linear::linear_declared(); }
const TypedOperation<ScaledMmFn>& scaled_mm_operation() { return linear::scaled_mm_declared(); }
const TypedOperation<LinearDynamicQuantFn>& linear_dynamic_quant_operation() {
  return linear::dynamic_quant_declared();
}

const Group& linear_group() {
  static const Group group = linear::modules().group();
  return group;
}
XLLM_REGISTER_GROUP(linear_group);
// linear_dynamic_quant quantizes its input with the quantization family's per_token_quant.
XLLM_FAMILY_BUILDS_ON(linear, "quantization");

namespace ops {

at::Tensor linear_pack(const at::Tensor& weight, const std::optional<at::Tensor>& scales,
                       const std::optional<at::Tensor>& zeros, const std::string& scheme, int64_t group_size) {
  return linear::pack_declared()(weight, scales, zeros, scheme, group_size);
}

at::Tensor linear(const at::Tensor& input, const at::Tensor& packed, const std::optional<at::Tensor>& bias) {
  return linear::linear_declared()(input, packed, bias);
}

at::Tensor scaled_mm(const at::Tensor& a, const at::Tensor& packed, const at::Tensor& scale_a,
                     const std::optional<at::Tensor>& azp, const std::optional<at::Tensor>& bias,
                     at::ScalarType out_dtype) {
  return linear::scaled_mm_declared()(a, packed, scale_a, azp, bias, out_dtype);
}

at::Tensor linear_dynamic_quant(const at::Tensor& input, const at::Tensor& packed,
                                const std::optional<at::Tensor>& bias) {
  return linear::dynamic_quant_declared()(input, packed, bias);
}

}  // namespace ops
}  // namespace xllm_kernel
