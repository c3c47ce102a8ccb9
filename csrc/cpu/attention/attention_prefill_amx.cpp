// The AMX BF16 prefill kernel (attention_prefill_amx_kernel.h) on the tile instructions. The tile
// data state is enabled once per process (arch_prctl ARCH_REQ_XCOMP_PERM, cpu_features.h).
#include "csrc/cpu/attention/attention_prefill_amx.h"

#include "csrc/cpu/attention/attention_prefill_amx_kernel.h"
#include "csrc/cpu/common/cpu_features.h"

namespace xllm_kernel::cpu::attention_detail {

bool PrefillAmxBf16Supported() {
  // AVX-512 with AVX512_BF16 (the softmax's conversions), AMX-BF16 with the tile states enabled by
  // the OS, and the tile data granted to this process (without it the first tile instruction
  // faults): csrc/cpu/common/cpu_features.h. Read at each call: a test may take AMX away.
  const CpuFeatures& f = cpu_features();
  return f.avx512_bf16 && f.amx_bf16 && amx_tile_data_granted();
}

void RunPrefillItemAmxBf16(const PagedAttentionParams& p, const AttentionItem& item, float* workspace) {
  amx_prefill::RunPrefillItem<AmxTiles>(p, item, workspace);
}

}  // namespace xllm_kernel::cpu::attention_detail
