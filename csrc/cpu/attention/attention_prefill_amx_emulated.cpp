// The AMX BF16 prefill kernel (attention_prefill_amx_kernel.h) on emulated tiles (EmulatedAmxTiles,
// csrc/cpu/common/amx_tiles.h): the same code on any CPU with AVX512_BF16, for the tests
// (set_amx_tile_emulation_for_test, attention.h).
#include "csrc/cpu/attention/attention_prefill_amx.h"
#include "csrc/cpu/attention/attention_prefill_amx_kernel.h"

namespace xllm_kernel::cpu::attention_detail {

void RunPrefillItemAmxEmulated(const PagedAttentionParams& p, const AttentionItem& item, float* workspace) {
  amx_prefill::RunPrefillItem<EmulatedAmxTiles>(p, item, workspace);
}

}  // namespace xllm_kernel::cpu::attention_detail
