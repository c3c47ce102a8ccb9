// Torch-free CUDA kernel of scaled_mm (the linear family's GEMM on quantized activations) over
// weights packed in LinearLayout::kRows (csrc/common/linear.h), the layout cuda.native.linear_pack
// writes:
//   weights  w8a8-int8: int8 [N][K]; w8a8-fp8: e4m3fn bytes [N][K]; w4a8: [N][ceil(K / 2)] bytes,
//            k = 2i in the low and 2i + 1 in the high nibble of byte i, each as q + 8 (symmetric) or q
//            (with zeros).
//   scales   float32 [N][groups];  zeros  float32 integers in [0, 15] [N][groups] (w4a8 with zeros);
//   sums     int32 [N][groups] = sum over k in g of q (w8a8-int8: what an activation zero point
//            subtracts; w4a8: not read).
//
//   xllm_kernel::cuda::ScaledMmParams p{...};   // device pointers, sizes, strides
//   Status s = xllm_kernel::cuda::scaled_mm(p, stream);
//
// Numerics (the contract's, src/ops/linear/linear.cpp). For output [m, n] and the weight's K groups g:
//   int8 (w8a8-int8, w4a8): acc_g = sum_{k in g} (a[m, k] - azp[m]) * (q[n, k] - z[n, g]) in int32,
//     exact (K <= kScaledMmMaxK): __dp4a over 4 consecutive k (every partial sum is exact), the
//     zero point as acc_g - azp[m] * sums[n, g] modulo 2^32 (the same bits as torch's int64 form);
//   fp8 (w8a8-fp8): acc_g = ((-0 + p_0) + p_1) + ... over k in g in increasing order, p_k =
//     float(a[m, k]) * float(q[n, k]) (exact), each add rounded on its own: the order depends on K
//     alone, so a row's bits do not depend on M, its position or the launch (batch invariance);
//   t = (float(acc_0) * scale_a[m]) * s[n, 0]; t = t + (float(acc_g) * scale_a[m]) * s[n, g] for g =
//   1, 2, ...; y = t + bias[n] (no bias: y = t); out = y rounded once to out_dtype (to nearest even).
//   Every multiply and add is correctly rounded on its own (__fmul_rn, __fadd_rn: never an fma);
//   float(acc) is __int2float_rn. The int8 schemes so give the bits of every implementation.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "csrc/common/linear.h"
#include "csrc/common/rows.h"

namespace xllm_kernel::cuda {

using ::xllm_kernel::kernels::DType;
using ::xllm_kernel::kernels::LinearScheme;
using ::xllm_kernel::kernels::Status;

struct ScaledMmParams {
  LinearScheme scheme = LinearScheme::kW8A8Int8;  // kW8A8Int8, kW8A8Fp8, kW4A8
  DType out_dtype = DType::kFloat32;               // float32, bfloat16, float16
  int64_t m = 0, n = 0, k = 0;
  int64_t group = 0, groups = 0;   // as packed: K elements per scale group, ceil(K / group)
  const void* a = nullptr;         // [m] rows of k: int8 (w8a8-int8, w4a8), e4m3fn bytes (w8a8-fp8)
  int64_t a_stride = 0;            // elements between rows (any value >= 0: rows are only read)
  const float* scale_a = nullptr;  // scale_a[m * scale_a_stride]
  int64_t scale_a_stride = 1;      // 1: per token, 0: one for every row
  const int32_t* azp = nullptr;    // azp[m * azp_stride] (w8a8-int8 only), or null
  int64_t azp_stride = 1;
  void* out = nullptr;             // [m] rows of n elements of out_dtype; must not overlap the inputs
  int64_t out_stride = 0;
  const void* weights = nullptr;   // the kRows sections (above)
  const float* scales = nullptr;
  const float* zeros = nullptr;    // w4a8 with zeros, or null
  const int32_t* sums = nullptr;   // w8a8-int8 (read with azp only)
  const float* bias = nullptr;     // [n] float32, or null
};

// The tile a block computes: kScaledMmTileM rows by kScaledMmTileN columns, K in steps of
// kScaledMmTileK through shared memory, kScaledMmThreads threads of kScaledMmRowsPerThread x
// kScaledMmColsPerThread outputs each.
inline constexpr int kScaledMmTileM = 64;
inline constexpr int kScaledMmTileN = 64;
inline constexpr int kScaledMmTileK = 32;
inline constexpr int kScaledMmThreads = 256;
inline constexpr int kScaledMmRowsPerThread = 4;
inline constexpr int kScaledMmColsPerThread = 4;
// gridDim.y's limit: blocks loop over the row tiles beyond it.
inline constexpr int64_t kScaledMmMaxRowBlocks = 65535;

struct ScaledMmPlan {
  int64_t row_tiles = 0, col_tiles = 0;  // ceil(m / kScaledMmTileM), ceil(n / kScaledMmTileN)
  int64_t grid_x = 0, grid_y = 0;        // col_tiles, min(row_tiles, kScaledMmMaxRowBlocks)
};

// What the launcher rejects (ok when it would launch or when m is 0): an unknown scheme or
// out_dtype, n or k outside [1, kScaledMmMaxK] (k) or [1, 2^31) (n), a group that is not the
// scheme's (w8a8-int8: K; w8a8-fp8: K or min(K, 128); w4a8: a multiple of 8 dividing K), groups !=
// ceil(K / group), negative strides, azp other than with w8a8-int8 (or without sums), zeros other
// than with w4a8, a null pointer the kernel reads or writes with m > 0.
Status check_scaled_mm(const ScaledMmParams& p);

// The grid for `p` (all zero for m == 0 or rejected parameters).
ScaledMmPlan plan_scaled_mm(const ScaledMmParams& p);

// Enqueues the kernel on `stream` and checks the launch; never synchronizes or allocates.
// kInvalidArgument with the reason for what check_scaled_mm rejects, ok without launching for
// m == 0, kDeviceError for a failing launch.
Status scaled_mm(const ScaledMmParams& p, cudaStream_t stream);

}  // namespace xllm_kernel::cuda
