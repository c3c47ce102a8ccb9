// Torch-free CPU quantization kernels (Highway, runtime ISA dispatch). The operations, their
// arithmetic and the non-finite rules are in csrc/common/quantization.h; each kernel here computes
// exactly those bits (tolerance 0) on every SIMD target.
//
// A bridge checks every argument, fills a QuantParams and splits the rows over threads. Kernels
// assume valid arguments; a status other than ok names what a buggy bridge got wrong.
//
//   xllm_kernel::cpu::QuantParams p;  // the fields as in csrc/common/quantization.h
//   p.scheme = QuantScheme::kPerToken; p.qdtype = QuantDType::kFloat8E4M3;
//   xllm_kernel::cpu::quant(p, 0, p.shape.rows);               // per_token_quant
//   xllm_kernel::cpu::rms_norm_quant(p, 0, p.shape.rows);      // rms_norm_per_token_quant
//
// Which operation is which call (scheme in p.scheme, the quantized type in p.qdtype):
//   per_token_quant                      quant                      kPerToken     int8 or fp8 (+ scale_ub)
//   per_token_quant_int8_azp             quant                      kPerTokenAzp  int8
//   static_quant                         quant                      kStatic       int8 (+ azp) or fp8
//   rms_norm_per_token_quant             rms_norm_quant             kPerToken
//   rms_norm_static_quant                rms_norm_quant             kStatic
//   fused_add_rms_norm_per_token_quant   fused_add_rms_norm_quant   kPerToken
//   fused_add_rms_norm_static_quant      fused_add_rms_norm_quant   kStatic
//   silu_and_mul_per_token_quant         silu_and_mul_quant         kPerToken
// Every kernel takes every scheme (kPerTokenAzp after a normalization or silu_and_mul, and static
// silu_and_mul, are there for free).
//
// How they run. Rows [row_begin, row_end) in order; per row, at most:
//   1. the producer (rms_norm, fused_add_rms_norm, silu_and_mul: the same row passes as those
//      kernels, csrc/cpu/normalization/normalization-inl.h and csrc/cpu/activation/activation-inl.h)
//      writes the row rounded to dtype into a per-call buffer of hidden elements, which stays in L1
//      or L2 (8 KiB for a 4096-wide bfloat16 row); quant reads the input row instead;
//   2. per-token schemes: one pass over that row for amax (or min and max), on the raw bits;
//   3. one pass that quantizes it, 4 vectors (a full vector of bytes) at a time; with stream_out
//      the part of the out row aligned to the vector size is written with non-temporal stores.
// quant, rms_norm_quant and fused_add_rms_norm_quant prefetch the next row (input, residual)
// while they quantize this one, the longest pass with fp8; the row itself is in L1
// by then.
//
// On targets with fma (AVX2, AVX-512) a row whose scale is a normal float with amax <= scale_ub
// (every row but those holding an infinity or clipped by scale_ub) replaces x / scale by
// x * RN(1 / scale) and two fma corrections, which give the correctly rounded quotient for every x
// (quantization.cpp, DivideByScale); the other rows, and targets without fma, keep the division.
// The fp8 pass is then bound by the vector ALU ports (the e4m3 rounding takes a table of the
// exponent and bf16 rows are widened by unpacking), not the divider; int8 per-token is bound by
// memory. Measured costs per element, with their dates and CPUs: docs/performance-notes.md.
#pragma once

#include <cstdint>

#include "csrc/common/quantization.h"
#include "csrc/common/rows.h"

namespace xllm_kernel::cpu {

using kernels::DType;
using kernels::QuantDType;
using kernels::QuantParams;
using kernels::QuantScheme;
using kernels::RowShape;
using kernels::RowStrides;
using kernels::Status;

// Each processes rows [row_begin, row_end) and may run concurrently on disjoint ranges. Pointers
// may be null when the range is empty. Besides a bridge's bugs, the one failure is an allocation
// of the row buffer (hidden elements of dtype, once per call) that fails: kInvalidArgument with
// the reason "quantization: cannot allocate the row buffer", nothing written.
Status quant(const QuantParams& p, int64_t row_begin, int64_t row_end);
Status rms_norm_quant(const QuantParams& p, int64_t row_begin, int64_t row_end);
Status fused_add_rms_norm_quant(const QuantParams& p, int64_t row_begin, int64_t row_end);
Status silu_and_mul_quant(const QuantParams& p, int64_t row_begin, int64_t row_end);

// Per-token fp8 of bfloat16 rows takes a 128-byte table per row where cpu_features() has
// AVX512_VBMI (the same bits as the quotient; see quantization.cpp), read when a call starts:
// tests take the feature away (ScopedCpuFeatures) to run the quotient path on such CPUs too.

}  // namespace xllm_kernel::cpu
