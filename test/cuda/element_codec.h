// Element codecs of the torch-free CUDA host tests, independent of the kernels' (which decode
// through bits): a float32, bfloat16 or float16 element to float64 and back, with one rounding.
//
//   const double x = to_double(bytes + i * 2, DType::kBFloat16);
//   from_double(bytes + i * 2, DType::kBFloat16, x * 2);
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "csrc/common/rows.h"

namespace xllm_kernel::cuda {

inline double to_double(const void* p, ::xllm_kernel::kernels::DType t) {
  using ::xllm_kernel::kernels::DType;
  switch (t) {
    case DType::kFloat32: return *static_cast<const float*>(p);
    case DType::kBFloat16: return __bfloat162float(*static_cast<const __nv_bfloat16*>(p));
    case DType::kFloat16: return __half2float(*static_cast<const __half*>(p));
  }
  return NAN;
}

// Rounds to t once: a float64 value -> float32 -> t is one rounding for the exact sums the tests
// use (float32 keeps more than 2p + 2 bits of a p-bit type, so the double rounding is harmless).
inline void from_double(void* p, ::xllm_kernel::kernels::DType t, double v) {
  using ::xllm_kernel::kernels::DType;
  switch (t) {
    case DType::kFloat32: *static_cast<float*>(p) = static_cast<float>(v); break;
    case DType::kBFloat16: *static_cast<__nv_bfloat16*>(p) = __float2bfloat16_rn(static_cast<float>(v)); break;
    case DType::kFloat16: *static_cast<__half*>(p) = __float2half_rn(static_cast<float>(v)); break;
  }
}

// "f32", "bf16", "f16", for test names and traces.
inline const char* name_of(::xllm_kernel::kernels::DType t) {
  using ::xllm_kernel::kernels::DType;
  return t == DType::kFloat32 ? "f32" : t == DType::kBFloat16 ? "bf16" : "f16";
}

}  // namespace xllm_kernel::cuda
