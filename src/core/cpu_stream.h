// When the native CPU kernels write an output with non-temporal (streaming) stores.
//
// A streamed output skips the read of every destination line that a normal store costs, but it
// lands in memory, not in cache: worth it only when the output could not stay in cache for the
// next operation anyway. The last-level cache that sysfs reports is the wrong measure on a slice
// of a large shared server (a 2-core slice of a Xeon lists its whole 300 MB L3, shared with other
// tenants, and a 64 MiB output never streamed there), so the threshold is the cache a run can
// count on: the reported last-level cache, but at most 16 MiB per intra-op thread (no current
// server core has a larger share of L3 to itself).
//
//   if (detail::stream_cpu_output(out.nbytes())) params.stream_out = true;
//
// XLLM_KERNEL_CPU_STREAM_BYTES=<bytes> replaces the threshold (0: stream every eligible output;
// a huge value: never stream). The reports record cpu_stream_policy().
#pragma once

#include <cstdint>
#include <string>

namespace xllm_kernel::detail {

// The threshold in bytes for the current number of intra-op threads.
int64_t cpu_stream_threshold_bytes();

// Whether an output of `bytes` is streamed.
inline bool stream_cpu_output(int64_t bytes) { return bytes >= cpu_stream_threshold_bytes(); }

// The policy in force, for people and reports: "outputs >= 32 MiB streamed (last-level cache
// 32 MiB, at most 16 MiB x 2 threads)".
std::string cpu_stream_policy();

}  // namespace xllm_kernel::detail
