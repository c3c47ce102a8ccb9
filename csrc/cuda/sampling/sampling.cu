// Launcher of sample (csrc/cuda/sampling/sampling.cuh): validate what the kernel relies on, plan the
// launch from the shapes, enqueue on the caller's stream, check the launch.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "csrc/cuda/common/device.h"
#include "csrc/cuda/sampling/sampling.cuh"
#include "csrc/cuda/sampling/sampling.h"

namespace xllm_kernel::cuda {
namespace {

using ::xllm_kernel::kernels::element_size;
using ::xllm_kernel::kernels::valid_dtype;
using kernels::SampleArgs;

constexpr int64_t kMaxVocab = int64_t{1} << 31;
// Element offsets times the element size stay inside int64.
constexpr int64_t kMaxOffset = std::numeric_limits<int64_t>::max() / 8;

// What the kernel assumes (a bridge checked the tensors; this guards the torch-free API).
Status check(const SamplingParams& p) {
  if (!valid_dtype(p.dtype)) return Status::invalid("sample: unknown dtype");
  if (p.batch < 0) return Status::invalid("sample: batch must be >= 0");
  if (p.vocab < 1 || p.vocab >= kMaxVocab) return Status::invalid("sample: vocab must be in [1, 2^31)");
  if (p.batch > 1 && p.logits_row_stride < p.vocab) {
    return Status::invalid("sample: logits_row_stride must be >= vocab where batch > 1");
  }
  if (p.batch > 1) {
    int64_t last = 0, end = 0;
    if (__builtin_mul_overflow(p.batch - 1, p.logits_row_stride, &last) ||
        __builtin_add_overflow(last, p.vocab, &end) || end > kMaxOffset) {
      return Status::invalid("sample: offsets beyond int64");
    }
  }
  if (p.batch == 0) return Status::ok();
  if (p.logits == nullptr || p.out == nullptr) return Status::invalid("sample: null logits or out");
  if (p.temperature == nullptr || p.top_k == nullptr || p.top_p == nullptr || p.min_p == nullptr) {
    return Status::invalid("sample: null temperature, top_k, top_p or min_p");
  }
  if (p.seeds == nullptr || p.offsets == nullptr) return Status::invalid("sample: null seeds or offsets");
  return Status::ok();
}

// Bits of vocab - 1 (0 for a vocabulary of one token).
int bit_length(int64_t v) {
  int bits = 0;
  while (v > 0) {
    ++bits;
    v >>= 1;
  }
  return bits;
}

template <class T, bool kVector>
Status launch_typed(const SampleArgs& args, cudaStream_t stream) {
  kernels::sample_kernel<T, kVector>
      <<<static_cast<unsigned>(args.plan.blocks), static_cast<unsigned>(args.plan.threads), 0, stream>>>(args);
  return cuda_status(cudaGetLastError(), "launching the sampling kernel");
}

}  // namespace

// Plan rules: 16-byte loads where the logits are 16-byte aligned and so is every row (the stride in
// bytes a multiple of 16, where batch > 1); else pieces of 4 element loads. Blocks of 512 threads,
// one row at a time; the grid holds min(batch, 16 waves of 2 blocks per SM) blocks.
SamplePlan plan_sample(const SamplingParams& p, int sm_count) {
  SamplePlan plan;
  if (!check(p).is_ok() || p.batch == 0) return plan;
  const int64_t sms = std::clamp(sm_count, 1, 1 << 16);
  const int64_t es = element_size(p.dtype);
  plan.vector = kernels::aligned16(p.logits) &&
                (p.batch <= 1 || (p.logits_row_stride * es) % kernels::kVectorBytes == 0);
  plan.piece = plan.vector ? static_cast<int>(kernels::kVectorBytes / es) : 4;
  plan.threads = kernels::kSampleThreads;
  plan.blocks = std::min(p.batch, sms * kernels::kSampleMinBlocksPerSm * kMaxWaves);
  plan.candidates = kernels::kSampleCandidates;
  plan.index_bits = bit_length(p.vocab - 1);
  plan.mass_shift = 63 - plan.index_bits;
  plan.workspace_bytes = 0;
  return plan;
}

int64_t sample_workspace_bytes(const SamplingParams& p, int sm_count) { return plan_sample(p, sm_count).workspace_bytes; }

Status sample_check(const SamplingParams& p, const void* workspace, int64_t workspace_bytes, int sm_count) {
  if (const Status s = check(p); !s.is_ok()) return s;
  // The kernel needs no workspace (sample_workspace_bytes is 0): any pointer, null included, will do.
  if (workspace_bytes < 0) return Status::invalid("sample: workspace_bytes must be >= 0");
  (void)workspace;
  (void)sm_count;
  return Status::ok();
}

Status sample(const SamplingParams& p, void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
  if (const Status s = check(p); !s.is_ok()) return s;
  if (workspace_bytes < 0) return Status::invalid("sample: workspace_bytes must be >= 0");
  if (p.batch == 0) return Status::ok();
  int sm_count = 0;
  if (cudaError_t e = current_sm_count(&sm_count); e != cudaSuccess) {
    return cuda_status(e, "querying the device's SM count");
  }
  if (const Status s = sample_check(p, workspace, workspace_bytes, sm_count); !s.is_ok()) return s;
  SampleArgs args;
  args.p = p;
  args.plan = plan_sample(p, sm_count);
  const Status no_variant = Status::invalid("sample: unknown dtype");
  return kernels::dispatch_dtype(p.dtype, no_variant, [&](auto element) {
    using T = typename decltype(element)::type;
    return args.plan.vector ? launch_typed<T, true>(args, stream) : launch_typed<T, false>(args, stream);
  });
}

}  // namespace xllm_kernel::cuda
