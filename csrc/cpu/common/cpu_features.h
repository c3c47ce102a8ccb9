// What this CPU and its OS let the kernels use, probed once per process: the one place for the
// instruction-set questions that Highway's runtime dispatch does not answer (its targets cover
// AVX2 and AVX-512, not AVX512_BF16, VNNI or AMX). Kernels with function-level target attributes,
// the benchmark's compute ceilings and `explain` ask here, at each call (never cached), so that a
// test's ScopedCpuFeatures (below) reaches every family's dispatch.
//
//   const xllm_kernel::cpu::CpuFeatures& f = xllm_kernel::cpu::cpu_features();
//   if (f.amx_bf16 && xllm_kernel::cpu::amx_tile_data_granted()) { ... tile code ... }
//
//   // A test, as if this CPU were an AVX2 one (AVX-512 and its kernels off, Highway's AVX3 target too):
//   const xllm_kernel::cpu::ScopedCpuFeatures as_avx2(xllm_kernel::cpu::cpu_class_features("avx2"));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xllm_kernel::cpu {

struct CpuFeatures {
  bool avx2_fma = false;     // AVX2 and FMA, with the OS saving the ymm state
  bool avx512 = false;       // AVX512 F, BW, VL and DQ, with the OS saving the zmm state
  bool avx512_bf16 = false;  // avx512 and AVX512_BF16 (vdpbf16ps)
  bool avx512_vnni = false;  // avx512 and AVX512_VNNI (vpdpbusd on zmm)
  bool avx512_vbmi = false;  // avx512 and AVX512_VBMI (vpermi2b)
  bool avx_vnni = false;     // avx2_fma and AVX-VNNI (vpdpbusd on ymm, VEX)
  bool amx_bf16 = false;     // AMX-TILE and AMX-BF16, the tile states enabled by the OS (XCR0)
  bool amx_int8 = false;     // AMX-TILE and AMX-INT8, the same
};

// What the kernels may use: the CPU's features, less what a ScopedCpuFeatures of a test takes away.
const CpuFeatures& cpu_features();

// What the CPU and its OS have, whatever a test takes away.
const CpuFeatures& probed_cpu_features();

// The classes of x86 CPU the kernels are written for, each as the features it has, from the fewest:
//   "sse4"             none of these (Highway's SSE4 target, the scalar kernels)
//   "avx2"             avx2_fma (Haswell .. Skylake client, Zen 1-3)
//   "avx2_vnni"        + avx_vnni (Alder Lake and later clients: vpdpbusd on ymm)
//   "avx512"           + avx512, no VNNI (Skylake-X)
//   "avx512_avx_vnni"  avx512 and avx_vnni without avx512_vnni: no CPU is, but the AVX-512 target's
//                      AVX-VNNI kernels run there (what a CPU with AVX-VNNI runs when its AVX-512
//                      dot products are off)
//   "avx512_vnni"      + avx512_vnni, avx512_vbmi (Ice Lake, Cascade Lake without VBMI)
//   "avx512_bf16"      + avx512_bf16 (Zen 4; Zen 5 adds avx_vnni)
//   "amx"              + avx_vnni, amx_bf16, amx_int8 (Sapphire Rapids and later)
const std::vector<std::string>& cpu_class_names();
CpuFeatures cpu_class_features(const std::string& name);  // throws std::invalid_argument for another name
// The features of `wanted` the CPU lacks, by name ("" when it has them all).
std::string missing_cpu_features(const CpuFeatures& wanted);

// For tests: every family's dispatch as if this CPU had only the features of `allowed` (those it
// has; a scope never adds one): cpu_features() answers the intersection, and Highway's dynamic
// dispatch keeps only the targets it leaves (no AVX3 without avx512, no AVX2 without avx2_fma).
// Scopes nest, each restricting its outer one and restoring it at its end. Not for use while
// kernels run on other threads. It replaces the per-family switches of earlier tests.
//
// `torch_brgemm_without_amx`: the library's torch brgemm paths (cpu.native's linear and
// scaled_mm, src/ops/linear/native_cpu.cpp) also where the CPU has no AMX (torch's brgemm runs on
// AVX-512 there), so that their code runs on such CPUs too.
class ScopedCpuFeatures {
 public:
  explicit ScopedCpuFeatures(const CpuFeatures& allowed, bool torch_brgemm_without_amx = false);
  ~ScopedCpuFeatures();
  ScopedCpuFeatures(const ScopedCpuFeatures&) = delete;
  ScopedCpuFeatures& operator=(const ScopedCpuFeatures&) = delete;

 private:
  CpuFeatures outer_;
  bool outer_brgemm_;
  int64_t outer_targets_;
};

// Whether a ScopedCpuFeatures asks for the torch brgemm paths without AMX.
bool torch_brgemm_without_amx();

// Linux grants the AMX tile data state per process on request (arch_prctl ARCH_REQ_XCOMP_PERM):
// asked once here; true where granted (a tile instruction before that faults), false where the
// CPU has no AMX or the OS refuses.
bool amx_tile_data_granted();

// The present features by name, e.g. "avx2_fma avx512 avx512_vnni amx_bf16 (tile data granted)".
std::string cpu_features_text();

}  // namespace xllm_kernel::cpu
