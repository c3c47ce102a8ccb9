// Float32 operations the CUDA kernel headers share, with one meaning on both sides: on the device
// the correctly rounded intrinsics (never contracted into an fma or approximated, whatever nvcc's
// flags), on the host (GPU-free tests running a kernel's per-thread work) the plain IEEE
// operation. exp, log and tanh are each side's math library (CUDA's precise expf, logf, tanhf: at
// most 2 ulp; the host's libm): the device's may differ from the host's in the last bits.
//
//   const float w = float_exp(float_div(float_sub(l, l_max), t));  // exp((l - l_max) / t)
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "csrc/cuda/common/macros.cuh"

namespace xllm_kernel::cuda::kernels {

// a - b, a * b, a / b: each correctly rounded to nearest even.
XLLM_CUDA_HD float float_sub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

XLLM_CUDA_HD float float_mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

XLLM_CUDA_HD float float_div(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

XLLM_CUDA_HD float float_exp(float x) {
#ifdef __CUDA_ARCH__
  return expf(x);
#else
  return std::exp(x);
#endif
}

XLLM_CUDA_HD float float_log(float x) {
#ifdef __CUDA_ARCH__
  return logf(x);
#else
  return std::log(x);
#endif
}

XLLM_CUDA_HD float float_tanh(float x) {
#ifdef __CUDA_ARCH__
  return tanhf(x);
#else
  return std::tanh(x);
#endif
}

}  // namespace xllm_kernel::cuda::kernels
