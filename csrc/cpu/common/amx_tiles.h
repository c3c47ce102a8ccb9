// The AMX tile configuration the CPU kernels load (ldtilecfg, palette 1): one home for its layout.
// Callers check cpu_features() and amx_tile_data_granted() (cpu_features.h) before any tile
// instruction.
//
//   const xllm_kernel::cpu::AmxTileConfig cfg = xllm_kernel::cpu::AmxTiles16x64(8);
//   __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
//
// And two implementations of the BF16 tile instructions over eight tiles of 16 rows of 64 bytes, for
// kernels written once as a template over them (attention_prefill_amx_kernel.h):
//   AmxTiles         the instructions themselves (only where the CPU has AMX-BF16 and the OS
//                    granted the tile data);
//   Avx512Bf16Tiles  the same operations on the eight tiles held in the object, tdpbf16ps by
//                    vdpbf16ps (the same pair products and float32 sums, subnormals flushed; the order
//                    of the sums within a tile row may differ from the hardware's): for CPUs with
//                    AVX512_BF16 and no AMX, where it runs such a kernel at about twice the speed of
//                    float32 FMA tiles (docs/performance-notes.md), and for testing a kernel's code there.
//
//   Tiles tiles;                         // one per thread, alive while the tiles are configured
//   tiles.Configure();                   // every tile 16 x 64 bytes
//   tiles.Zero<0>();
//   tiles.Load<4>(base, stride_bytes);   // 16 rows of 64 bytes, stride_bytes apart
//   tiles.Dot<0, 2, 4>();                // tmm0 (16 x 16 float32) += tmm2 (16 x 32 bf16) tmm4 (16 pairs x 16 x 2 bf16)
//   tiles.Store<0>(base, stride_bytes);
//   tiles.Release();
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

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

#define XLLM_AMX_TILES_INLINE inline __attribute__((always_inline, target("avx512f,avx512bw,avx512bf16,amx-tile,amx-bf16")))

// The tile instructions, with the memory they touch made visible to the compiler (the loads as much
// as the stores: scratch written by vector stores just before a tile load).
struct AmxTiles {
  XLLM_AMX_TILES_INLINE static void Configure() {
    const AmxTileConfig cfg = AmxTiles16x64(8);
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
  }
  XLLM_AMX_TILES_INLINE static void Release() { __asm__ volatile("tilerelease" ::); }
  template <int T>
  XLLM_AMX_TILES_INLINE static void Zero() {
    __asm__ volatile("tilezero %%tmm%c0" ::"i"(T));
  }
  template <int T>
  XLLM_AMX_TILES_INLINE static void Load(const void* base, int64_t stride) {
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(base), "r"(static_cast<long>(stride)), "i"(T) : "memory");
  }
  template <int T>
  XLLM_AMX_TILES_INLINE static void Store(void* base, int64_t stride) {
    __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(base), "r"(static_cast<long>(stride)), "i"(T) : "memory");
  }
  // C += A B
  template <int C, int A, int B>
  XLLM_AMX_TILES_INLINE static void Dot() {
    __asm__ volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
  }
};

#define XLLM_AVX512_BF16_TILES_INLINE inline __attribute__((always_inline, target("avx512f,avx512bw,avx512bf16")))

struct Avx512Bf16Tiles {
  alignas(64) uint8_t tile[8][16][64];

  void Configure() {}
  void Release() {}
  template <int T>
  void Zero() {
    std::memset(tile[T], 0, sizeof(tile[T]));
  }
  template <int T>
  void Load(const void* base, int64_t stride) {
    for (int r = 0; r < 16; ++r) std::memcpy(tile[T][r], static_cast<const uint8_t*>(base) + r * stride, 64);
  }
  template <int T>
  void Store(void* base, int64_t stride) {
    for (int r = 0; r < 16; ++r) std::memcpy(static_cast<uint8_t*>(base) + r * stride, tile[T][r], 64);
  }
  // Row m of C: its 16 float32 += the sum over k of A's pair k of row m (broadcast) times row k of B
  // (16 pairs), pair by pair as vdpbf16ps does; B's rows held in registers, four rows of C at a time.
  template <int C, int A, int B>
  XLLM_AVX512_BF16_TILES_INLINE void Dot() {
    __m512bh b[16];
    for (int k = 0; k < 16; ++k) b[k] = (__m512bh)_mm512_load_si512(tile[B][k]);
    for (int m = 0; m < 16; m += 4) {
      float* c = reinterpret_cast<float*>(tile[C][m]);
      const int32_t* a = reinterpret_cast<const int32_t*>(tile[A][m]);
      __m512 acc0 = _mm512_load_ps(c), acc1 = _mm512_load_ps(c + 16), acc2 = _mm512_load_ps(c + 32);
      __m512 acc3 = _mm512_load_ps(c + 48);
      for (int k = 0; k < 16; ++k) {
        acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)_mm512_set1_epi32(a[k]), b[k]);
        acc1 = _mm512_dpbf16_ps(acc1, (__m512bh)_mm512_set1_epi32(a[16 + k]), b[k]);
        acc2 = _mm512_dpbf16_ps(acc2, (__m512bh)_mm512_set1_epi32(a[32 + k]), b[k]);
        acc3 = _mm512_dpbf16_ps(acc3, (__m512bh)_mm512_set1_epi32(a[48 + k]), b[k]);
      }
      _mm512_store_ps(c, acc0);
      _mm512_store_ps(c + 16, acc1);
      _mm512_store_ps(c + 32, acc2);
      _mm512_store_ps(c + 48, acc3);
    }
  }
};

}  // namespace xllm_kernel::cpu
