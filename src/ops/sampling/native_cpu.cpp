// cpu.native.sample: bridge from at::Tensor to the Highway kernel in csrc/cpu/sampling/. The
// parameters' values are checked before any compute; the logits' (NaN, a row without a logit above
// -inf) from what the kernel reports, so that they cost no pass of their own. The kernel's plan
// splits the call into phases of items (rows, or pieces of rows when there are fewer rows than
// threads); threads take the next unstarted item of a phase until none is left.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>

#include "csrc/cpu/sampling/sampling.h"
#include "src/ops/common/cpu.h"
#include "src/ops/common/registration.h"
#include "src/ops/sampling/internal.h"
#include "xllm_kernel/ops/sampling.h"

namespace xllm_kernel::sampling {
namespace {

at::Tensor native_sample(const at::Tensor& logits_in, const at::Tensor& temperature, const at::Tensor& top_k,
                         const at::Tensor& top_p, const at::Tensor& min_p, const at::Tensor& seeds,
                         const at::Tensor& offsets) {
  const RowParameters r =
      check_arguments({.logits = logits_in, .temperature = temperature, .top_k = top_k, .top_p = top_p,
                       .min_p = min_p, .seeds = seeds, .offsets = offsets, .device = c10::DeviceType::CPU});
  check_parameters_cpu(r);
  at::Tensor out = new_output(logits_in);
  if (logits_in.size(0) == 0) return out;
  // Rows closer than a row apart (an expanded tensor) are read from a compact copy.
  const at::Tensor logits =
      logits_in.size(0) > 1 && logits_in.stride(0) < logits_in.size(1) ? logits_in.contiguous() : logits_in;
  at::Tensor row_nan = at::empty({logits.size(0)}, at::TensorOptions().dtype(at::kByte));
  const kernels::SamplingParams p = kernel_params(logits, r, out, row_nan.mutable_data_ptr<uint8_t>());
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  const cpu::SamplePlan plan = cpu::plan_sample(p, static_cast<int>(threads));
  at::Tensor workspace;
  void* ws = nullptr;
  if (plan.workspace_bytes > 0) {
    // 64 bytes of slack so that the base can be aligned.
    workspace = at::empty({plan.workspace_bytes + 64}, at::TensorOptions().dtype(at::kByte));
    const auto base = reinterpret_cast<uintptr_t>(workspace.mutable_data_ptr());
    ws = reinterpret_cast<void*>((base + 63) / 64 * 64);
  }
  for (size_t phase = 0; phase < plan.phase_items.size(); ++phase) {
    bridge::run_items(op_name(), plan.phase_items[phase], threads, [&](int64_t i) {
      return cpu::sample(p, plan, ws, static_cast<int>(phase), i, i + 1);
    });
  }
  check_results_cpu(out, row_nan);
  return out;
}

}  // namespace

XLLM_REGISTER_NAMED("cpu.native.sample", modules().native_cpu, sample_operation(), native_sample);

}  // namespace xllm_kernel::sampling
