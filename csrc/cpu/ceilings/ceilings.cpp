// The read stream and the float32 FMA loop are compiled for every Highway target (runtime
// dispatch, like the kernels: they measure what the kernels' own vectors reach). The other classes
// are single x86 forms with function-level target attributes, run only where cpu_features() has
// them.
#include "csrc/cpu/ceilings/ceilings.h"

#include "csrc/cpu/common/amx_tiles.h"
#include "csrc/cpu/common/cpu_features.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "csrc/cpu/ceilings/ceilings.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace xllm_kernel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Bytes each cursor reads per step (four vectors of the widest target, more of narrower ones).
constexpr size_t kStep = 256;

uint64_t ReadStream(const void* p, size_t bytes, int streams, size_t prefetch_bytes) {
  const hn::ScalableTag<uint64_t> d;
  const size_t vb = hn::Lanes(d) * 8;  // bytes a vector
  // Unaligned 8-byte lanes (LoadU needs no alignment of its pointer's type).
  auto load = [&](const uint8_t* at) { return hn::LoadU(d, reinterpret_cast<const uint64_t*>(at)); };
  const auto* base = static_cast<const uint8_t*>(p);
  const size_t cursors = static_cast<size_t>(streams < 1 ? 1 : streams);
  const size_t part = bytes / cursors / kStep * kStep;  // each cursor's bytes
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  for (size_t off = 0; off < part; off += kStep) {
    for (size_t s = 0; s < cursors; ++s) {
      const uint8_t* q = base + s * part + off;
      if (prefetch_bytes != 0) {
        for (size_t line = 0; line < kStep; line += 64) hwy::Prefetch(q + prefetch_bytes + line);
      }
      for (size_t k = 0; k + 4 * vb <= kStep; k += 4 * vb) {
        a0 = hn::Xor(a0, load(q + k));
        a1 = hn::Xor(a1, load(q + k + vb));
        a2 = hn::Xor(a2, load(q + k + 2 * vb));
        a3 = hn::Xor(a3, load(q + k + 3 * vb));
      }
    }
  }
  // The rest (bytes not a multiple of cursors x kStep): whole vectors, then bytes.
  size_t i = cursors * part;
  for (; i + vb <= bytes; i += vb) a0 = hn::Xor(a0, load(base + i));
  uint64_t tail = 0;
  for (; i < bytes; ++i) tail ^= static_cast<uint64_t>(base[i]) << (8 * (i % 8));
  const auto all = hn::Xor(hn::Xor(a0, a1), hn::Xor(a2, a3));
  return hn::GetLane(hn::SumOfLanes(d, all)) ^ tail;
}

// Twelve independent chains a = a m + c (a fixed point near 0.1: no overflow, no subnormals),
// eight rounds unrolled: enough chains to cover the FMA latency on two ports.
double F32Fma(int64_t iterations) {
  const hn::ScalableTag<float> d;
  auto a0 = hn::Set(d, 0.10f), a1 = hn::Set(d, 0.11f), a2 = hn::Set(d, 0.12f), a3 = hn::Set(d, 0.13f);
  auto a4 = hn::Set(d, 0.14f), a5 = hn::Set(d, 0.15f), a6 = hn::Set(d, 0.16f), a7 = hn::Set(d, 0.17f);
  auto a8 = hn::Set(d, 0.18f), a9 = hn::Set(d, 0.19f), a10 = hn::Set(d, 0.20f), a11 = hn::Set(d, 0.21f);
  const auto m = hn::Set(d, 0.999f), c = hn::Set(d, 1e-4f);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int r = 0; r < 8; ++r) {
      a0 = hn::MulAdd(a0, m, c);
      a1 = hn::MulAdd(a1, m, c);
      a2 = hn::MulAdd(a2, m, c);
      a3 = hn::MulAdd(a3, m, c);
      a4 = hn::MulAdd(a4, m, c);
      a5 = hn::MulAdd(a5, m, c);
      a6 = hn::MulAdd(a6, m, c);
      a7 = hn::MulAdd(a7, m, c);
      a8 = hn::MulAdd(a8, m, c);
      a9 = hn::MulAdd(a9, m, c);
      a10 = hn::MulAdd(a10, m, c);
      a11 = hn::MulAdd(a11, m, c);
    }
  }
  const auto sum = hn::Add(hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), hn::Add(a6, a7))),
                           hn::Add(hn::Add(a8, a9), hn::Add(a10, a11)));
  volatile float sink = hn::GetLane(hn::SumOfLanes(d, sum));
  (void)sink;
  return static_cast<double>(iterations) * 8 * 12 * 2 * static_cast<double>(hn::Lanes(d));
}

const char* PeakTargetName() { return hwy::TargetName(HWY_TARGET); }
size_t FloatLanes() { return hn::Lanes(hn::ScalableTag<float>()); }

}  // namespace HWY_NAMESPACE
}  // namespace xllm_kernel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace xllm_kernel::cpu {

HWY_EXPORT(ReadStream);
HWY_EXPORT(F32Fma);
HWY_EXPORT(PeakTargetName);
HWY_EXPORT(FloatLanes);

uint64_t read_stream(const void* p, size_t bytes, int streams, size_t prefetch_bytes) {
  return HWY_DYNAMIC_DISPATCH(ReadStream)(p, bytes, streams, prefetch_bytes);
}

namespace {

#if defined(__x86_64__)
// Twelve independent accumulator chains (named variables c0..c11, so they stay in registers), four
// rounds unrolled; the inputs are either opaque to the compiler (the dot-product builtins) or taken
// from the chain itself (AVX2), so nothing is hoisted out of the loop. XLLM_PEAK_FN(name, target,
// vector type, zero, scalar of s, products an instruction) defines `double name(int64_t iterations)`
// returning the operations done, from XLLM_PEAK_INIT_name(k) (chain k's start), XLLM_PEAK_STEP_name(k)
// (one step of chain k) and XLLM_PEAK_FOLD_name(k) (chain k folded into s).
#define XLLM_REP12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define XLLM_PEAK_FN(NAME, TARGET, V, ZERO, SCALAR, PRODUCTS)                               \
  __attribute__((target(TARGET))) double NAME(int64_t iterations) {                     \
    XLLM_REP12(XLLM_PEAK_INIT_##NAME)                                                       \
    for (int64_t i = 0; i < iterations; ++i) {                                          \
      XLLM_REP12(XLLM_PEAK_STEP_##NAME) XLLM_REP12(XLLM_PEAK_STEP_##NAME)                       \
      XLLM_REP12(XLLM_PEAK_STEP_##NAME) XLLM_REP12(XLLM_PEAK_STEP_##NAME)                       \
    }                                                                                   \
    V s = ZERO;                                                                         \
    XLLM_REP12(XLLM_PEAK_FOLD_##NAME)                                                       \
    volatile auto sink = SCALAR;                                                        \
    (void)sink;                                                                         \
    return static_cast<double>(iterations) * 4 * 12 * (PRODUCTS) * 2;                   \
  }

#define XLLM_PEAK_INIT_Int8Avx512Vnni(k) __m512i c##k = _mm512_set1_epi32(k);
#define XLLM_PEAK_STEP_Int8Avx512Vnni(k) c##k = _mm512_dpbusd_epi32(c##k, _mm512_set1_epi8(1), _mm512_set1_epi8(3));
#define XLLM_PEAK_FOLD_Int8Avx512Vnni(k) s = _mm512_xor_si512(s, c##k);
XLLM_PEAK_FN(Int8Avx512Vnni, "avx512f,avx512bw,avx512vnni", __m512i, _mm512_setzero_si512(),
           _mm512_reduce_add_epi32(s), 64)

#define XLLM_PEAK_INIT_Int8AvxVnni(k) __m256i c##k = _mm256_set1_epi32(k);
#define XLLM_PEAK_STEP_Int8AvxVnni(k) c##k = _mm256_dpbusd_avx_epi32(c##k, _mm256_set1_epi8(1), _mm256_set1_epi8(3));
#define XLLM_PEAK_FOLD_Int8AvxVnni(k) s = _mm256_xor_si256(s, c##k);
XLLM_PEAK_FN(Int8AvxVnni, "avx2,fma,avxvnni", __m256i, _mm256_setzero_si256(), _mm256_extract_epi32(s, 0), 32)

// u8 x s8 pairs summed to int16 (vpmaddubsw), pairs of those to int32 (vpmaddwd), accumulated
// (vpaddd): 32 products per three instructions.
#define XLLM_PEAK_INIT_Int8Avx2(k) __m256i c##k = _mm256_set1_epi32(k);
#define XLLM_PEAK_STEP_Int8Avx2(k) \
  c##k = _mm256_add_epi32(c##k, _mm256_madd_epi16(_mm256_maddubs_epi16(c##k, _mm256_set1_epi8(3)), _mm256_set1_epi16(1)));
#define XLLM_PEAK_FOLD_Int8Avx2(k) s = _mm256_xor_si256(s, c##k);
XLLM_PEAK_FN(Int8Avx2, "avx2,fma", __m256i, _mm256_setzero_si256(), _mm256_extract_epi32(s, 0), 32)

// bf16 pairs of 1.0 and 2^-20: the sums grow slowly, never overflow.
#define XLLM_PEAK_INIT_Bf16Avx512(k) __m512 c##k = _mm512_set1_ps(static_cast<float>(k));
#define XLLM_PEAK_STEP_Bf16Avx512(k) \
  c##k = _mm512_dpbf16_ps(c##k, (__m512bh)_mm512_set1_epi16(0x3F80), (__m512bh)_mm512_set1_epi16(0x3580));
#define XLLM_PEAK_FOLD_Bf16Avx512(k) s = _mm512_add_ps(s, c##k);
XLLM_PEAK_FN(Bf16Avx512, "avx512f,avx512bw,avx512bf16", __m512, _mm512_setzero_ps(), _mm512_reduce_add_ps(s), 32)
#undef XLLM_PEAK_FN
#undef XLLM_REP12

// Tiles 0-3 accumulate, 4-5 are A, 6-7 are B, every one 16 rows of 64 bytes (zeros: the tile
// units take no shortcut on values). Inline assembly, as in the AMX attention kernel.
template <bool kInt8>
__attribute__((target("amx-tile,amx-bf16,amx-int8"))) double Amx(int64_t iterations) {
  const AmxTileConfig cfg = AmxTiles16x64(8);
  alignas(64) static const uint8_t zeros[16 * 64] = {};
  __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
  const long stride = 64;
  __asm__ volatile("tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3" ::);
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm4\n\ttileloadd (%0,%1,1), %%tmm5\n\t"
                   "tileloadd (%0,%1,1), %%tmm6\n\ttileloadd (%0,%1,1), %%tmm7" ::"r"(zeros),
                   "r"(stride)
                   : "memory");
  for (int64_t i = 0; i < iterations; ++i) {
    if constexpr (kInt8) {
      __asm__ volatile(
          "tdpbssd %%tmm6, %%tmm4, %%tmm0\n\ttdpbssd %%tmm7, %%tmm4, %%tmm1\n\t"
          "tdpbssd %%tmm6, %%tmm5, %%tmm2\n\ttdpbssd %%tmm7, %%tmm5, %%tmm3" ::);
    } else {
      __asm__ volatile(
          "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\ttdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\t"
          "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\ttdpbf16ps %%tmm7, %%tmm5, %%tmm3" ::);
    }
  }
  alignas(64) uint8_t out[16 * 64];
  __asm__ volatile("tilestored %%tmm0, (%0,%1,1)" ::"r"(out), "r"(stride) : "memory");
  __asm__ volatile("tilerelease" ::);
  volatile uint8_t sink = out[0];
  (void)sink;
  // A tile product: 16 x 16 results, each a dot of 64 int8 or 32 bf16 pairs.
  return static_cast<double>(iterations) * 4 * 16 * 16 * (kInt8 ? 64 : 32) * 2;
}
#endif  // __x86_64__

}  // namespace

const char* compute_class_name(ComputeClass c) {
  switch (c) {
    case ComputeClass::kF32Fma: return "f32_fma";
    case ComputeClass::kBf16Dot: return "bf16_dot";
    case ComputeClass::kInt8Dot: return "int8_dot";
    case ComputeClass::kAmxBf16: return "amx_bf16";
    case ComputeClass::kAmxInt8: return "amx_int8";
  }
  return "?";
}

bool compute_class_available(ComputeClass c, std::string* detail) {
  const CpuFeatures& f = cpu_features();
  auto say = [&](bool ok, const std::string& text) {
    if (detail != nullptr) *detail = text;
    return ok;
  };
  switch (c) {
    case ComputeClass::kF32Fma:
      return say(true, std::string("MulAdd of ") + HWY_DYNAMIC_DISPATCH(PeakTargetName)() + " vectors (" +
                           std::to_string(HWY_DYNAMIC_DISPATCH(FloatLanes)()) + " float lanes), 12 chains");
#if defined(__x86_64__)
    case ComputeClass::kBf16Dot:
      return f.avx512_bf16 ? say(true, "vdpbf16ps zmm, 12 chains") : say(false, "no AVX512_BF16 on this CPU");
    case ComputeClass::kInt8Dot:
      if (f.avx512_vnni) return say(true, "vpdpbusd zmm (AVX512_VNNI), 12 chains");
      if (f.avx_vnni) return say(true, "vpdpbusd ymm (AVX-VNNI), 12 chains");
      if (f.avx2_fma) return say(true, "vpmaddubsw + vpmaddwd + vpaddd ymm (AVX2, no VNNI), 12 chains");
      return say(false, "no AVX2 on this CPU");
    case ComputeClass::kAmxBf16:
    case ComputeClass::kAmxInt8: {
      const bool int8 = c == ComputeClass::kAmxInt8;
      if (!(int8 ? f.amx_int8 : f.amx_bf16)) return say(false, int8 ? "no AMX-INT8 on this CPU" : "no AMX-BF16 on this CPU");
      if (!amx_tile_data_granted()) return say(false, "the OS refused the AMX tile data (arch_prctl)");
      return say(true, int8 ? "tdpbssd, 4 accumulator tiles" : "tdpbf16ps, 4 accumulator tiles");
    }
#else
    default: return say(false, "not an x86-64 CPU");
#endif
  }
  return say(false, "unknown class");
}

double compute_peak(ComputeClass c, int64_t iterations) {
  if (!compute_class_available(c)) return 0;
  switch (c) {
    case ComputeClass::kF32Fma: return HWY_DYNAMIC_DISPATCH(F32Fma)(iterations);
#if defined(__x86_64__)
    case ComputeClass::kBf16Dot: return Bf16Avx512(iterations);
    case ComputeClass::kInt8Dot: {
      const CpuFeatures& f = cpu_features();
      return f.avx512_vnni ? Int8Avx512Vnni(iterations) : f.avx_vnni ? Int8AvxVnni(iterations) : Int8Avx2(iterations);
    }
    case ComputeClass::kAmxBf16: return Amx<false>(iterations);
    case ComputeClass::kAmxInt8: return Amx<true>(iterations);
#else
    default: return 0;
#endif
  }
  return 0;
}

}  // namespace xllm_kernel::cpu
#endif  // HWY_ONCE
