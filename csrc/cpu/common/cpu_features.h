// What this CPU and its OS let the kernels use, probed once per process: the one place for the
// instruction-set questions that Highway's runtime dispatch does not answer (its targets cover
// AVX2 and AVX-512, not AVX512_BF16, VNNI or AMX). Kernels with function-level target attributes,
// the benchmark's compute ceilings and `explain` ask here.
//
//   const xllm_kernel::cpu::CpuFeatures& f = xllm_kernel::cpu::cpu_features();
//   if (f.amx_bf16 && xllm_kernel::cpu::amx_tile_data_granted()) { ... tile code ... }
#pragma once

#include <string>

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

const CpuFeatures& cpu_features();

// Linux grants the AMX tile data state per process on request (arch_prctl ARCH_REQ_XCOMP_PERM):
// asked once here; true where granted (a tile instruction before that faults), false where the
// CPU has no AMX or the OS refuses.
bool amx_tile_data_granted();

// The present features by name, e.g. "avx2_fma avx512 avx512_vnni amx_bf16 (tile data granted)".
std::string cpu_features_text();

}  // namespace xllm_kernel::cpu
