// Torch-free CUDA kernels of paged attention over the KV cache: what csrc/common/attention.h
// describes, float32 accumulation, the softmax with a running maximum, one rounding of each output
// element. Decode rows take the query heads of a KV head's group in one thread block and read each
// KV row once for all of them; long contexts are split over blocks and merged by a second kernel;
// query rows of prefill and chunked prefill go through the same kernels in tiles.
//
// The at::Tensor side (a bridge) checks every argument's shape, dtype, device and layout (not the
// values of block_tables, query_start_loc and seq_lens: that would synchronize), fills a
// PagedAttentionParams, allocates paged_attention_workspace_bytes(p, sm_count) bytes of device
// memory (a size from the shapes alone, so the call can be captured into a CUDA graph) and passes
// the current stream. The launcher enqueues its kernels on `stream` and never synchronizes.
//
// Values the host did not check, handled on the device without reading or writing outside the
// arguments: a query row that would read a block whose id is outside [0, num_blocks) gets NaN in
// every element of its output (its other rows are unaffected); a sequence whose query_start_loc
// entries are decreasing or past query_tokens, or whose query rows outnumber seq_lens[s] or whose
// seq_lens[s] exceeds max_blocks_per_seq * block_size, writes NaN to the output rows of
// [query_start_loc[s], query_start_loc[s + 1]) that lie within [0, query_tokens) (nothing when
// there are none).
//
//   xllm_kernel::cuda::PagedAttentionParams p;  // the fields as in csrc/common/attention.h
//   const int64_t bytes = xllm_kernel::cuda::paged_attention_workspace_bytes(p, sm_count);
//   Status s = xllm_kernel::cuda::paged_attention(p, workspace, bytes, stream);  // device pointers
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "csrc/common/attention.h"
#include "csrc/common/rows.h"

namespace xllm_kernel::cuda {

using ::xllm_kernel::kernels::DType;
using ::xllm_kernel::kernels::Status;

// The parameters, shared with the CPU kernel (csrc/common/attention.h).
using ::xllm_kernel::kernels::AttentionRowStrides;
using ::xllm_kernel::kernels::CacheStrides;
using ::xllm_kernel::kernels::PagedAttentionParams;

// Device workspace bytes a call with these shapes needs on a GPU with `sm_count` SMs (from the
// shapes only, never from the values of seq_lens); 0 when it needs none.
int64_t paged_attention_workspace_bytes(const PagedAttentionParams& p, int sm_count);

// Enqueues the attention on `stream`; every pointer is device memory of the current device, and
// workspace holds at least paged_attention_workspace_bytes(p, the device's SM count) bytes (256-byte
// aligned). Returns kInvalidArgument with the reason for parameters the kernels cannot handle (unknown
// dtype, sizes < 1, q_heads not a multiple of kv_heads, negative strides, a null pointer where rows
// exist, a workspace too small), ok without launching for zero query rows, kDeviceError for a
// failing SM-count query or launch, otherwise ok.
Status paged_attention(const PagedAttentionParams& p, void* workspace, int64_t workspace_bytes, cudaStream_t stream);

}  // namespace xllm_kernel::cuda
