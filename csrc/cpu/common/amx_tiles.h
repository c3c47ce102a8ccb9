// The AMX tile configuration the CPU kernels load (ldtilecfg, palette 1): one home for its layout.
// Callers check cpu_features() and amx_tile_data_granted() (cpu_features.h) before any tile
// instruction.
//
//   const xllm_kernel::cpu::AmxTileConfig cfg = xllm_kernel::cpu::AmxTiles16x64(8);
//   __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
#pragma once

#include <cstdint>

namespace xllm_kernel::cpu {

struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles [0, count) as 16 rows of 64 bytes each (the largest tile), the rest unused.
inline AmxTileConfig AmxTiles16x64(int count) {
  AmxTileConfig cfg;
  for (int t = 0; t < count && t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  return cfg;
}

}  // namespace xllm_kernel::cpu
