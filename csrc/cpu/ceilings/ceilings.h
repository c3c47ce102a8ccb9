// Torch-free loops that measure what this CPU can do at best, for the benchmark's roofline
// (src/benchmark/ceilings.h times them, on every intra-op thread at once):
//   read_stream      a read-only pass over memory (decode attention, a GEMM's weights only read);
//   compute_peak     a register-only loop of one instruction class: independent chains of its
//                    widest form, enough of them to cover the latency, nothing read or written.
// Each returns what it did, so the caller's timing gives bytes or operations per second.
//
//   uint64_t sink = xllm_kernel::cpu::read_stream(buf, bytes, 4, 1024);   // 4 interleaved cursors
//   double ops = xllm_kernel::cpu::compute_peak(ComputeClass::kF32Fma, 100000);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace xllm_kernel::cpu {

// Reads every byte of [p, p + bytes) once, in vectors of the dispatched Highway target: the range
// split into `streams` (>= 1) equal parts walked in step (several hardware prefetch streams), with
// a software prefetch `prefetch_bytes` ahead of each cursor (0: none). Returns a value that
// depends on every byte, so the loads cannot be dropped. p needs no alignment.
uint64_t read_stream(const void* p, size_t bytes, int streams, size_t prefetch_bytes);

// The instruction classes of the roofline. Operations count a multiply-add as 2, so each class's
// peak is comparable with the flops a case declares (2 M N K for a GEMM).
enum class ComputeClass {
  kF32Fma,   // float32 fused multiply-add, Highway's widest vectors (every CPU)
  kBf16Dot,  // bf16 pair dot products into float32 (AVX512_BF16 vdpbf16ps)
  kInt8Dot,  // u8 x s8 dot products into int32 (AVX512_VNNI, else AVX-VNNI, else AVX2 vpmaddubsw)
  kAmxBf16,  // AMX bf16 tiles (tdpbf16ps)
  kAmxInt8,  // AMX int8 tiles (tdpbssd)
};
inline constexpr ComputeClass kComputeClasses[] = {ComputeClass::kF32Fma, ComputeClass::kBf16Dot,
                                                   ComputeClass::kInt8Dot, ComputeClass::kAmxBf16,
                                                   ComputeClass::kAmxInt8};

// "f32_fma", "bf16_dot", "int8_dot", "amx_bf16", "amx_int8": the keys of a case's declared work
// and of the report's ceilings.
const char* compute_class_name(ComputeClass c);

// Whether this CPU (and, for AMX, the OS) runs the class; `detail` gets the instruction form that
// compute_peak uses, or why the class is absent.
bool compute_class_available(ComputeClass c, std::string* detail = nullptr);

// Runs `iterations` rounds of the class's loop on the calling thread; returns the operations done
// (0 where the class is not available). A round is a few hundred operations per vector lane.
double compute_peak(ComputeClass c, int64_t iterations);

}  // namespace xllm_kernel::cpu
