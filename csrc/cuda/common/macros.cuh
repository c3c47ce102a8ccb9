// Macros the CUDA kernel headers share: functions compiled for both sides (the device, and the
// host so that GPU-free tests can run a kernel's per-thread work lane by lane), and unrolling
// hints that only the device pass sees.
//
//   XLLM_CUDA_HD float twice(float x) { return 2 * x; }
//   XLLM_CUDA_UNROLL
//   for (int i = 0; i < 8; ++i) ...
#pragma once

#include <cuda_runtime.h>

#include "csrc/common/host_device.h"

// XLLM_HOST_DEVICE (the contract headers' qualifier, csrc/common/host_device.h), always inlined.
#define XLLM_CUDA_HD XLLM_HOST_DEVICE __forceinline__
// Unrolling hints for the device pass only (host compilers warn about the pragma).
#ifdef __CUDA_ARCH__
#define XLLM_CUDA_UNROLL _Pragma("unroll")
#define XLLM_CUDA_UNROLL_4 _Pragma("unroll 4")
#else
#define XLLM_CUDA_UNROLL
#define XLLM_CUDA_UNROLL_4
#endif
