// cpu.native.paged_attention: bridge from at::Tensor to the Highway kernels in csrc/cpu/attention/.
// Every argument and every value of block_tables, query_start_loc and seq_lens is checked before
// any compute. The kernel's plan splits the call into items (a sequence's KV head over a range of
// its query rows and keys) and merges; threads take the next unstarted item until none is left, so
// that items of unequal cost (a prefill chunk beside decodes) balance.
//
// cpu.native.paged_attention.batch_invariant: the same kernels on a plan that depends on each
// sequence alone (fixed query tiles and key chunks: PagedAttentionParams::batch_invariant),
// so that a sequence's rows have the same bits in any batch and on any thread count. Below the
// default's priority: initialize(batch_invariant=true) selects it.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <cstdint>

#include "csrc/cpu/attention/attention.h"
#include "src/ops/common/cpu.h"
#include "src/ops/attention/internal.h"
#include "src/ops/common/registration.h"
#include "xllm_kernel/ops/attention.h"

namespace xllm_kernel::attention {
namespace {

template <bool kBatchInvariant>
at::Tensor run(const Call& call) {
  const at::Tensor &query = call.query, &block_tables = call.block_tables, &query_start_loc = call.query_start_loc,
                   &seq_lens = call.seq_lens;
  const char* const name = call_name(call);
  const AttentionShape s = check_arguments(call);
  check_values_cpu(s, block_tables, query_start_loc, seq_lens, call.sliding_window, name);
  at::Tensor out = new_output(query);
  const int64_t rows = s.num_seqs == 0 ? 0 : query_start_loc.const_data_ptr<int32_t>()[s.num_seqs];
  if (rows < s.tokens) out.narrow(0, rows, s.tokens - rows).zero_();  // padding rows
  if (rows == 0) return out;
  cpu::PagedAttentionParams p = kernel_params(call, s, out);
  p.batch_invariant = kBatchInvariant;
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  const cpu::PagedAttentionPlan plan = cpu::plan_paged_attention(p, threads);
  at::Tensor workspace;
  void* ws = nullptr;
  if (plan.workspace_bytes > 0) {
    // 64 bytes of slack so that the base can be aligned.
    workspace = at::empty({plan.workspace_bytes + 64}, at::TensorOptions().dtype(at::kByte));
    const auto base = reinterpret_cast<uintptr_t>(workspace.mutable_data_ptr());
    ws = reinterpret_cast<void*>((base + 63) / 64 * 64);
  }
  bridge::run_items(name, plan.items, threads, [&](int64_t i) { return cpu::paged_attention(p, plan, ws, i, i + 1); });
  bridge::run_items(name, plan.merges, threads,
                    [&](int64_t i) { return cpu::paged_attention_merge(p, plan, ws, i, i + 1); });
  return out;
}

}  // namespace

XLLM_REGISTER_NAMED("cpu.native.paged_attention", modules().native_cpu, paged_attention_operation(),
                    (paged_attention_entry<c10::DeviceType::CPU, run<false>>));
XLLM_REGISTER_NAMED("cpu.native.paged_attention.batch_invariant", modules().native_cpu, paged_attention_operation(),
                    (paged_attention_entry<c10::DeviceType::CPU, run<true>>));

XLLM_REGISTER_NAMED("cpu.native.paged_attention_quant", modules().native_cpu, paged_attention_quant_operation(),
                    (paged_attention_quant_entry<c10::DeviceType::CPU, run<false>>));
XLLM_REGISTER_NAMED("cpu.native.paged_attention_quant.batch_invariant", modules().native_cpu,
                    paged_attention_quant_operation(), (paged_attention_quant_entry<c10::DeviceType::CPU, run<true>>));

}  // namespace xllm_kernel::attention
