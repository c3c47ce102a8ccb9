// Torch-free CUDA kernels of the activations. Gated (silu_and_mul, gelu_and_mul,
// gelu_tanh_and_mul): each row of the input holds 2d elements, [gate | up]; the output row holds d:
//   out[..., i] = act(input[..., i]) * input[..., d + i]        for 0 <= i < d
// Without the gate (gelu, gelu_tanh, quick_gelu): input and output rows hold d elements:
//   out[..., i] = act(input[..., i])
//
// The at::Tensor side (a bridge) checks every argument, fills an ActivationParams and passes the
// current stream. The launchers validate only what they rely on, enqueue one kernel on `stream`,
// check the launch, and never synchronize.
//
//   xllm_kernel::cuda::ActivationParams p;
//   p.dtype = DType::kBFloat16;
//   p.d = 14336;
//   p.shape.rows = tokens; p.shape.ndim = 1; p.shape.sizes[0] = tokens;
//   p.input = x; p.input_strides.s[0] = 2 * 14336;  // [tokens, 2d]
//   p.out = y; p.out_strides.s[0] = 14336;          // [tokens, d]
//   Status s = xllm_kernel::cuda::silu_and_mul(p, stream);  // device pointers, current device
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "csrc/common/activation.h"
#include "csrc/common/rows.h"

namespace xllm_kernel::cuda {

using ::xllm_kernel::kernels::DType;
using ::xllm_kernel::kernels::kMaxRowDims;
using ::xllm_kernel::kernels::RowShape;
using ::xllm_kernel::kernels::RowStrides;
using ::xllm_kernel::kernels::Status;

// The parameters, shared with the CPU kernels (csrc/common/activation.h; stream_out is ignored).
using ::xllm_kernel::kernels::ActivationParams;

// The launchers. Every pointer is device memory of the current device. Arithmetic in float32 and
// one rounding to the dtype (round to nearest even):
//   silu_and_mul:       act(a) = a / (1 + exp(-a))
//   gelu_and_mul:       act(a) = a/2 * (1 + erf(a / sqrt(2)))                     (exact GELU)
//   gelu_tanh_and_mul:  act(a) = a/2 * (1 + tanh(sqrt(2/pi) * (a + 0.044715 a^3)))
// using CUDA's precise expf, erff, tanhf (at most 2 ulp each, CUDA C++ Programming Guide,
// "Mathematical Functions") and IEEE division; the float32 result is within 8 * 2^-24 * |a * up|
// of the exact value (cancellation in 1 + erf, 1 + tanh for negative a is absolute, not relative),
// plus half an ulp of the dtype for the final rounding.
// Returns kInvalidArgument with the reason for parameters the kernels cannot handle (unknown dtype,
// d < 1, an invalid row shape, a null pointer with rows > 0, rows * 2d beyond int64), ok without
// launching for zero rows, kDeviceError for a failing SM-count query or launch, otherwise ok.
Status silu_and_mul(const ActivationParams& p, cudaStream_t stream);
Status gelu_and_mul(const ActivationParams& p, cudaStream_t stream);
Status gelu_tanh_and_mul(const ActivationParams& p, cudaStream_t stream);
// Without the gate, the same math with up = 1:
//   gelu: act(a) = gelu(a); gelu_tanh: act(a) = gelu_tanh(a); quick_gelu: act(a) = a / (1 + exp(-1.702 a))
Status gelu(const ActivationParams& p, cudaStream_t stream);
Status gelu_tanh(const ActivationParams& p, cudaStream_t stream);
Status quick_gelu(const ActivationParams& p, cudaStream_t stream);

// How a launch is shaped; exposed so that tests and benchmarks can see (and host-check) it.
// A work item is `rows_per_block` rows times one column chunk of `chunk` output elements; block b
// does items b, b + blocks, ... A block has threads_per_row * rows_per_block threads; a thread
// does up to `per_thread` pieces of `piece` consecutive elements of one row, the pieces of a
// row's threads interleaved so that a warp's accesses are contiguous.
struct ActivationPlan {
  bool vector = false;      // pieces are 16-byte accesses (every row's gate, up and out aligned)
  int piece = 0;            // elements per piece: 16 / element size (vector) or 1
  int per_thread = 0;       // pieces per thread per item: 1, 2 (vector) or 4 (scalar only)
  int threads_per_row = 0;  // a power of two <= 32, or a multiple of 32 <= 256 (one row per block)
  int rows_per_block = 0;   // a power of two
  int threads = 0;          // threads_per_row * rows_per_block, <= 256
  int64_t chunk = 0;        // piece * per_thread * threads_per_row
  int64_t chunks = 0;       // column chunks per row: ceil(d / chunk)
  int64_t items = 0;        // ceil(rows / rows_per_block) * chunks
  int64_t blocks = 0;       // grid size: min(items, a few waves of the GPU)
};

// The plan a launcher uses for `p` on a GPU with `sm_count` SMs; all zero for zero rows or
// parameters the launchers reject.
ActivationPlan plan_activation(const ActivationParams& p, int sm_count);

// Whether 16-byte accesses are safe for every row of `p`: d * element size is a multiple of 16,
// input and out are 16-byte aligned, and so is every stride of a dimension of size > 1.
bool vector_access(const ActivationParams& p);

}  // namespace xllm_kernel::cuda
