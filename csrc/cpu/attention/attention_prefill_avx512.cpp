// The prefill tile kernel (attention_prefill_amx_kernel.h) on AVX-512 BF16 tiles (Avx512Bf16Tiles,
// csrc/cpu/common/amx_tiles.h: the tile operations on memory, tdpbf16ps by vdpbf16ps): the prefill
// kernel of CPUs with AVX512_BF16 and no AMX (AMD Zen 4 and 5), and of the tests on AMX CPUs that
// take AMX away (ScopedCpuFeatures, csrc/cpu/common/cpu_features.h).
#include "csrc/cpu/attention/attention_prefill_amx.h"
#include "csrc/cpu/attention/attention_prefill_amx_kernel.h"

namespace xllm_kernel::cpu::attention_detail {

void RunPrefillItemAvx512Bf16(const PagedAttentionParams& p, const AttentionItem& item, float* workspace) {
  amx_prefill::RunPrefillItem<Avx512Bf16Tiles>(p, item, workspace);
}

}  // namespace xllm_kernel::cpu::attention_detail
