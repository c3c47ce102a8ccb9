// Torch-free CPU normalization kernels (Highway, runtime ISA dispatch).
//
// The at::Tensor side lives in src/ops/normalization/native_cpu.cpp: it checks every argument,
// fills a NormParams (csrc/common/normalization.h) and splits the rows over threads. Kernels
// assume valid arguments.
//
//   xllm_kernel::cpu::NormParams p;  // the fields as in csrc/common/normalization.h
//   xllm_kernel::cpu::rms_norm(p, 0, p.rows);
#pragma once

#include <cstdint>

#include "csrc/common/normalization.h"
#include "csrc/common/rows.h"

namespace xllm_kernel::cpu {

using kernels::DType;
using kernels::kMaxRowDims;
using kernels::Status;

// The parameters, shared with the CUDA launchers (csrc/common/normalization.h).
using kernels::NormParams;

// Each processes rows [row_begin, row_end) and may run concurrently on disjoint ranges. A status
// other than ok (invalid parameters, with the reason) means the bridge has a bug.
//   rms_norm:            out = input * rsqrt(mean(input^2) + eps) * weight
//   fused_add_rms_norm:  residual = round(input + residual); input = rms_norm(residual)
//   layer_norm:          out = (input - mean) * rsqrt(biased var + eps) * weight (+ bias)
// All arithmetic in float32; one rounding to the output dtype (round to nearest even).
Status rms_norm(const NormParams& p, int64_t row_begin, int64_t row_end);
Status fused_add_rms_norm(const NormParams& p, int64_t row_begin, int64_t row_end);
Status layer_norm(const NormParams& p, int64_t row_begin, int64_t row_end);

}  // namespace xllm_kernel::cpu
