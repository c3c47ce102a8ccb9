// Torch-free CUDA quantization kernels. The operations, their float32 arithmetic and the non-finite
// rules are those of csrc/common/quantization.h, bit for bit; the fused operations equal the CUDA
// rms_norm, fused_add_rms_norm and silu_and_mul kernels (csrc/cuda/normalization,
// csrc/cuda/activation) followed by quant, bit for bit (see "Fused = composition" below).
//
// The at::Tensor side (src/ops/quantization/cuda/native_cuda.cpp) checks every argument, fills a
// QuantParams and passes the current stream. The launchers validate only what they rely on, enqueue
// one kernel on `stream`, check the launch, and never synchronize or allocate (capture-safe):
// static_scale, static_azp and scale_ub are device pointers the kernel reads.
//
//   xllm_kernel::cuda::QuantParams p;  // the fields as in csrc/common/quantization.h
//   p.scheme = QuantScheme::kPerToken; p.qdtype = QuantDType::kFloat8E4M3;
//   Status s = xllm_kernel::cuda::quant(p, stream);            // per_token_quant
//   Status s = xllm_kernel::cuda::rms_norm_quant(p, stream);   // rms_norm_per_token_quant
//
// Which operation is which call (scheme in p.scheme, the quantized type in p.qdtype):
//   per_token_quant, per_token_quant_int8_azp, static_quant      quant
//   rms_norm_per_token_quant, rms_norm_static_quant              rms_norm_quant
//   fused_add_rms_norm_{per_token,static}_quant                  fused_add_rms_norm_quant
//   silu_and_mul_per_token_quant                                 silu_and_mul_quant
// Every launcher takes every scheme, as the CPU kernels do.
//
// Fused = composition. rms_norm_quant uses the rms_norm kernel's launch shape (plan_launch of
// csrc/cuda/normalization for the same rows, hidden and SM count), its element partition and its
// sum of squares (the same device functions, whose order does not depend on the tensors'
// alignment), so its normalized row has the bits that rms_norm writes, which quant then reads.
// fused_add_rms_norm_quant does the same with fused_add_rms_norm. The bits do not depend on the
// layout of any tensor.
// silu_and_mul_quant computes each element as silu_and_mul does (no reduction: any partition).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "csrc/common/quantization.h"
#include "csrc/common/rows.h"

namespace xllm_kernel::cuda {

using ::xllm_kernel::kernels::DType;
using ::xllm_kernel::kernels::QuantDType;
using ::xllm_kernel::kernels::QuantParams;
using ::xllm_kernel::kernels::QuantScheme;
using ::xllm_kernel::kernels::RowShape;
using ::xllm_kernel::kernels::RowStrides;
using ::xllm_kernel::kernels::Status;

// The launchers. Every pointer is device memory of the current device; out must not overlap
// another tensor. Returns kInvalidArgument with the reason for parameters the kernels cannot
// handle (unknown dtype, quantized dtype or scheme, hidden outside [1, 2^60), an invalid row shape,
// a null pointer the operation reads or writes with rows > 0, scale_ub other than with per-token
// fp8, static_azp other than with static int8, weight_dtype neither float32 nor dtype, eps not
// finite or negative, rows * 2 * hidden beyond int64), ok without launching for zero rows,
// kDeviceError for a failing SM-count query or launch, otherwise ok.
Status quant(const QuantParams& p, cudaStream_t stream);                     // input -> out
Status rms_norm_quant(const QuantParams& p, cudaStream_t stream);            // rms_norm(input) -> out
Status fused_add_rms_norm_quant(const QuantParams& p, cudaStream_t stream);  // residual updated
Status silu_and_mul_quant(const QuantParams& p, cudaStream_t stream);        // input rows of 2 * hidden

// Which producer runs before the quantization (csrc/common/quantization.h: the CPU's, the bridges'
// and the suites' enum too).
using ::xllm_kernel::kernels::QuantProducer;

// How a launch is shaped; exposed so that tests and benchmarks can see (and host-check) it.
// A row belongs to a group of `width` threads: one warp (warp_per_row, threads / 32 rows per block)
// or the whole block. Groups loop over rows beyond the grid.
//   pass 1 (norms): the sum of squares, partitioned as the normalization kernel partitions it;
//   pass 2 (per-token schemes): amax, or min and max, of the produced row;
//   pass 3: the produced row quantized, in pieces of 16 elements (one 16-byte store of out) where
//           `vector`, else element by element; a thread's pieces are lane, lane + width, ...
// The produced row is recomputed in passes 2 and 3 from the input (and weight, residual) with the
// same arithmetic, so the bits do not depend on the pass.
struct QuantPlan {
  bool warp_per_row = false;  // true: each warp owns rows; false: each block owns rows
  int threads = 0;            // per block, a multiple of 32, <= 1024
  int width = 0;              // threads per row: 32 or threads
  int64_t blocks = 0;         // grid size
  size_t shared_bytes = 0;    // dynamic shared memory (group reduction scratch)
  bool vector = false;        // 16-element pieces: every row of every tensor the passes touch aligned
};

// Elements per vector piece of pass 3 (16 bytes of out).
inline constexpr int kQuantPiece = 16;

// The plan a launcher uses for `p` on a GPU with `sm_count` SMs; all zero for zero rows or
// parameters the launchers reject.
QuantPlan plan_quant(const QuantParams& p, QuantProducer op, int sm_count);

// Whether 16-element pieces are safe for every row of `p`: input (both halves for silu_and_mul),
// out, residual (fused_add_rms_norm) and weight (norms) 16-byte aligned, and so is every stride of
// a dimension of size > 1.
bool quant_vector_access(const QuantParams& p, QuantProducer op);

// What the launcher rejects (ok when it would launch or when there are zero rows).
Status check_quant(const QuantParams& p, QuantProducer op);

}  // namespace xllm_kernel::cuda
