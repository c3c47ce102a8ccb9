// Element types of CUDA kernels as float32: decoding (exact), rounding to the storage type
// (round to nearest even, once), loads and stores of N consecutive elements that use 16-byte
// words where N elements fill them, and a dispatch from the runtime DType to the element type.
//
//   float v[kVec<__nv_bfloat16>];
//   load<kVec<__nv_bfloat16>>(in + e, v);   // one 16-byte load (in + e must be 16-byte aligned)
//   for (float& x : v) x *= 2;
//   store<kVec<__nv_bfloat16>>(out + e, v);  // rounded once, one 16-byte store
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "csrc/common/host_device.h"
#include "csrc/common/rows.h"
#include "csrc/cuda/common/macros.cuh"
#include "csrc/cuda/common/vector.cuh"

namespace xllm_kernel::cuda::kernels {

// The float32 bit casts of the contract headers (csrc/common/host_device.h).
using ::xllm_kernel::kernels::float_bits;
using ::xllm_kernel::kernels::float_from_bits;

// Element <-> float32. Rounding to the storage type is round to nearest even.
template <class T>
struct Codec;

template <>
struct Codec<float> {
  static XLLM_CUDA_HD float to_float(float x) { return x; }
  static XLLM_CUDA_HD float from_float(float x) { return x; }
  static XLLM_CUDA_HD float decode(uint32_t bits) { return float_from_bits(bits); }
  static XLLM_CUDA_HD uint32_t encode(float x) { return float_bits(x); }
};

template <>
struct Codec<__nv_bfloat16> {
  static XLLM_CUDA_HD float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  static XLLM_CUDA_HD __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
  static XLLM_CUDA_HD float decode(uint32_t bits) { return float_from_bits(bits << 16); }  // exact
  static XLLM_CUDA_HD uint32_t encode(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
};

template <>
struct Codec<__half> {
  static XLLM_CUDA_HD float to_float(__half x) { return __half2float(x); }
  static XLLM_CUDA_HD __half from_float(float x) { return __float2half_rn(x); }
  static XLLM_CUDA_HD float decode(uint32_t bits) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  }
  static XLLM_CUDA_HD uint32_t encode(float x) { return __half_as_ushort(__float2half_rn(x)); }
};

// Loads N consecutive elements as float32: whole 16-byte words when N elements fill them (the
// caller guarantees 16-byte alignment then), single elements otherwise.
template <int N, class T>
XLLM_CUDA_HD void load(const T* p, float (&v)[N]) {
  constexpr int kBytes = N * static_cast<int>(sizeof(T));
  if constexpr (kBytes % kVectorBytes == 0) {
    constexpr int kPerU32 = 4 / static_cast<int>(sizeof(T));
    constexpr int kPerWord = kVectorBytes / static_cast<int>(sizeof(T));
XLLM_CUDA_UNROLL
    for (int w = 0; w < kBytes / kVectorBytes; ++w) {
      const uint4 q = load16(p + w * kPerWord);
      const uint32_t u[4] = {q.x, q.y, q.z, q.w};
XLLM_CUDA_UNROLL
      for (int i = 0; i < kPerWord; ++i) {
        // Little-endian: the lower half of a 32-bit word holds the earlier 16-bit element.
        const uint32_t bits = kPerU32 == 1 ? u[i] : (u[i / kPerU32] >> (16 * (i % kPerU32))) & 0xFFFFu;
        v[w * kPerWord + i] = Codec<T>::decode(bits);
      }
    }
  } else {
XLLM_CUDA_UNROLL
    for (int i = 0; i < N; ++i) v[i] = Codec<T>::to_float(p[i]);
  }
}

// Rounds N float32 values to T and stores them; same access rules as load.
template <int N, class T>
XLLM_CUDA_HD void store(T* p, const float (&v)[N]) {
  constexpr int kBytes = N * static_cast<int>(sizeof(T));
  if constexpr (kBytes % kVectorBytes == 0) {
    constexpr int kPerU32 = 4 / static_cast<int>(sizeof(T));
    constexpr int kPerWord = kVectorBytes / static_cast<int>(sizeof(T));
XLLM_CUDA_UNROLL
    for (int w = 0; w < kBytes / kVectorBytes; ++w) {
      uint32_t u[4] = {0, 0, 0, 0};
XLLM_CUDA_UNROLL
      for (int i = 0; i < kPerWord; ++i) {
        u[i / kPerU32] |= Codec<T>::encode(v[w * kPerWord + i]) << (kPerU32 == 1 ? 0 : 16 * (i % kPerU32));
      }
      store16(p + w * kPerWord, make_uint4(u[0], u[1], u[2], u[3]));
    }
  } else {
XLLM_CUDA_UNROLL
    for (int i = 0; i < N; ++i) p[i] = Codec<T>::from_float(v[i]);
#ifndef __CUDA_ARCH__
    if (host_store_observer != nullptr) host_store_observer(p, N * sizeof(T));
#endif
  }
}

template <class T>
XLLM_CUDA_HD float round_to(float x) {
  return Codec<T>::to_float(Codec<T>::from_float(x));
}

// The element type of a DType, as a value to dispatch on: f(Element<T>{}).
template <class T>
struct Element {
  using type = T;
};

// Calls f(Element<T>{}) for the element type of `t` and returns its result; `otherwise` when t
// is not a DType value (a caller's bad cast). Host code (launchers, tests).
template <class R, class F>
R dispatch_dtype(::xllm_kernel::kernels::DType t, R otherwise, F&& f) {
  using ::xllm_kernel::kernels::DType;
  switch (t) {
    case DType::kFloat32: return f(Element<float>{});
    case DType::kBFloat16: return f(Element<__nv_bfloat16>{});
    case DType::kFloat16: return f(Element<__half>{});
  }
  return otherwise;
}

}  // namespace xllm_kernel::cuda::kernels
