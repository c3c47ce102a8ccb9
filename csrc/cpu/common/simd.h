// The SIMD instruction set the CPU kernels run on: a property of this CPU (and of the targets the
// kernels were compiled for), the same for every kernel family.
//
//   report["cpu_simd_target"] = xllm_kernel::cpu::simd_target();  // e.g. "AVX2"
#pragma once

namespace xllm_kernel::cpu {

// The Highway target the runtime dispatch runs on this CPU, e.g. "AVX3", "AVX2", "SSE4".
// Every foreach_target kernel translation unit is compiled for the same targets, so this is the
// target each of them dispatches to (also under hwy::SetSupportedTargetsForTest).
const char* simd_target();

}  // namespace xllm_kernel::cpu
