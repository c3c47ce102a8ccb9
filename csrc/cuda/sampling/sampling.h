// Torch-free CUDA kernels of token sampling (sample): what csrc/common/sampling.h describes, sort-free.
// One thread block takes one row at a time (blocks loop over the rows): a pass for the largest logit,
// then, where top-k or top-p cut the row, radix selections over the 64-bit order value (logit key,
// then index) with block-wide histograms of counts and fixed-point masses, and the exponential race
// over the kept tokens. Greedy rows (temperature 0) take the first pass only. csrc/cuda/sampling/
// sampling.cuh describes the passes and the arithmetic.
//
// The at::Tensor side (a bridge) checks the tensors' shapes, dtypes, devices and layouts (not the
// per-row parameter values: that would synchronize), fills a SamplingParams, allocates
// sample_workspace_bytes(p, sm_count) bytes of device memory (0 today: the kernels need none; a size
// from the shapes alone, so the call can be captured into a CUDA graph) and passes the current
// stream. The launcher enqueues one kernel on `stream`, never synchronizes and allocates nothing.
//
// Values the host did not check are handled on the device as csrc/common/sampling.h says: a row with
// invalid parameters (sampling_parameters_valid) or without a logit above -inf gets kInvalidRow (-1);
// NaN logits count as -inf, and row_nan[r] (when row_nan is not null) is 1 where row r holds a NaN,
// else 0, for every row (also the invalid and greedy ones); +inf logits follow the limit rule.
//
//   xllm_kernel::kernels::SamplingParams p;  // the fields as in csrc/common/sampling.h
//   const int64_t bytes = xllm_kernel::cuda::sample_workspace_bytes(p, sm_count);
//   Status s = xllm_kernel::cuda::sample(p, workspace, bytes, stream);  // device pointers
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "csrc/common/rows.h"
#include "csrc/common/sampling.h"

namespace xllm_kernel::cuda {

using ::xllm_kernel::kernels::DType;
using ::xllm_kernel::kernels::SamplingParams;
using ::xllm_kernel::kernels::Status;

// Device workspace bytes a call with these shapes needs on a GPU with `sm_count` SMs (from the shapes
// only); 0 when it needs none, which is every call of this version (one block per row, nothing to
// merge across blocks).
int64_t sample_workspace_bytes(const SamplingParams& p, int sm_count);

// Enqueues the sampling of every row on `stream`; every pointer is device memory of the current
// device. Never synchronizes, allocates nothing: capture-safe. Returns kInvalidArgument with the
// reason for parameters the kernel cannot take (unknown dtype, batch < 0, vocab outside [1, 2^31),
// logits_row_stride < vocab with batch > 1, offsets beyond int64, a null pointer other than row_nan
// where rows exist, a negative workspace_bytes; the workspace itself is not used and may be null),
// ok without launching for batch 0, kDeviceError for a failing SM-count query or launch, otherwise ok.
Status sample(const SamplingParams& p, void* workspace, int64_t workspace_bytes, cudaStream_t stream);

// How a launch is shaped, from the shapes, the logits' alignment and the SM count only; exposed so
// that tests can see and host-run it. The kernel has `blocks` blocks of `threads` threads; block b
// takes the rows b, b + blocks, ... A row's logits are read in pieces of `piece` elements (one
// 16-byte load each on the vector path, else `piece` element loads), then the tail element by element.
struct SamplePlan {
  bool vector = false;     // 16-byte loads: logits 16-byte aligned, and so the row stride where batch > 1
  int piece = 0;           // elements per piece: 16 / element size on the vector path, else 4
  int threads = 0;         // per block (kernels::kSampleThreads)
  int64_t blocks = 0;      // min(batch, sm_count * blocks per SM * kMaxWaves)
  int64_t candidates = 0;  // tokens a row may gather in shared memory (<= kernels::kSampleCandidates)
  int index_bits = 0;      // bits of the index part of the order value: bit length of vocab - 1
  int mass_shift = 0;      // masses are floor(w * 2^mass_shift): 63 - index_bits
  int64_t workspace_bytes = 0;  // 0: the kernel needs none
};

// What sample checks before it launches on a GPU with `sm_count` SMs: its rejections
// (kInvalidArgument with the reason, the workspace included), else ok. Host code (tests).
Status sample_check(const SamplingParams& p, const void* workspace, int64_t workspace_bytes, int sm_count);

// The plan the launcher uses for `p` on a GPU with `sm_count` SMs; all zero for batch 0 or parameters
// the launcher rejects.
SamplePlan plan_sample(const SamplingParams& p, int sm_count);

}  // namespace xllm_kernel::cuda
