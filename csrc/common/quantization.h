// The parameters and the arithmetic of the quantization kernels: one torch-free header for the CPU
// kernels (csrc/cpu/quantization/quantization.h), the CUDA kernels and the torch implementations.
// The functions below are the contract's arithmetic, element by element, usable on the host and
// (under nvcc) on the device; the CPU kernels compute the same bits with SIMD, and their tests
// (test/csrc/quantization) check both against an independent float64 reference.
//
// Operations (input float32, bfloat16 or float16; out int8 or float8_e4m3fn, the shape of input;
// scale float32 [tokens, 1]; azp int32 [tokens, 1]). All arithmetic is IEEE float32 (correctly
// rounded division, no fused multiply-add), in the order written. vLLM's kernels, whose order
// each follows (read in vllm-project/vllm: csrc/quantization/w8a8/fp8/common.cu and common.cuh,
// csrc/quantization/w8a8/int8/scaled_quant.cu):
//
//   per_token_quant(input, float8_e4m3fn, scale_ub?)   dynamic_per_token_scaled_fp8_quant
//     scale = max(min(amax, scale_ub) / 448, 1 / (448 * 512))   amax = max |x| over the row; no
//                                                              scale_ub: min(amax, scale_ub) = amax
//     q     = e4m3(x / scale)                                  a true division (scaled_fp8_conversion
//                                                              <false>)
//   per_token_quant(input, int8)                       dynamic_scaled_int8_quant
//     scale = amax / 127
//     m     = amax == 0 ? 0 : 127 / amax                       once per row
//     q     = int8(x * m)
//   per_token_quant_int8_azp(input)                    dynamic_scaled_int8_quant with azp
//     scale = (max - min) / 255                                max, min of x over the row
//     azp   = int32(-128 - min / scale)                        int32 zero point
//     m     = 1 / scale                                        once per row
//     q     = int8(int32(x * m) + azp)                         the sum in exact integer arithmetic
//   static_quant(input, scale, float8_e4m3fn)          static_scaled_fp8_quant
//     q     = e4m3(x * (1 / scale))                            vLLM multiplies by the reciprocal
//                                                              (scaled_fp8_conversion<true>)
//   static_quant(input, scale, int8)                   static_scaled_int8_quant
//     q     = int8(x / scale)                                  a true division
//   static_quant(input, scale, int8, azp)              static_scaled_int8_quant with azp
//     q     = int8(int32(x * (1 / scale)) + azp)               the reciprocal, as vLLM
// (vLLM's older csrc/quantization/compressed_tensors/int8_quant_kernels.cu divided by the scale
// in both azp kernels and started the row max at FLT_MIN, so an all-negative row's max was
// 1.2e-38; the current kernels, followed here, multiply by 1 / scale and start at -FLT_MAX.)
// where
//   e4m3(v)  float8_e4m3fn bits of v rounded to nearest, ties to even (float8_e4m3fn_from_float)
//   int8(v)  v rounded to nearest, ties to even, saturated to [-128, 127] (int8_from_float)
//   int32(v) v rounded to nearest, ties to even, saturated to [-2^31, 2^31 - 1] (int32_from_float)
// Dequantization: x ~ q * scale (symmetric), x ~ (q - azp) * scale (asymmetric).
//
// The fused operations equal their composition bit for bit: the normalized (or activated) row is
// rounded to the input dtype exactly as the rms_norm, fused_add_rms_norm and silu_and_mul kernels
// round it (csrc/cpu/normalization, csrc/cpu/activation: same float32 arithmetic, same bits), and
// that rounded row is quantized as above:
//   rms_norm_per_token_quant(x, w, eps, dtype, scale_ub?)      = per_token_quant(rms_norm(x, w, eps), ...)
//   fused_add_rms_norm_per_token_quant(x, residual!, w, ...)   residual = round(x + residual) (updated
//                                                              in place, as fused_add_rms_norm), then
//                                                              per_token_quant(rms_norm(residual, w, eps))
//   rms_norm_static_quant, fused_add_rms_norm_static_quant     the same with static_quant
//   silu_and_mul_per_token_quant(x [.., 2d], dtype)            = per_token_quant(silu_and_mul(x)), out [.., d]
//
// Non-finite values. vLLM's kernels drop NaN in fmaxf/fminf (a NaN never reaches the scale) and
// clamp before converting, which turns a NaN element into +448 (fminf(NaN, 448) is 448). Here a
// NaN is never hidden:
//   - A NaN anywhere in a row (or a NaN scale_ub) makes the row's amax, min and max NaN: the row's
//     scale is NaN (the canonical quiet NaN 0x7FC00000), every fp8 q of the row is the e4m3 NaN
//     0x7F (x / NaN is NaN), every int8 q is 0 and the row's azp is 0. A dequantized row is NaN.
//   - e4m3(NaN) = 0x7F whatever the NaN's sign (a CUDA kernel using a hardware conversion must
//     not pass a negative NaN's 0xFF through). e4m3 has no infinity: e4m3(+-inf) = +-448
//     (0x7E / 0xFE), as every |v| >= 448.
//   - int8(NaN) = int32(NaN) = 0; +-inf and out-of-range values saturate.
//   - Infinities otherwise follow IEEE arithmetic: a row holding +-inf has amax = inf, so without
//     scale_ub its fp8 scale is inf, its finite elements give +-0 and its infinities inf / inf =
//     NaN (0x7F); with a finite scale_ub they saturate to +-448. int8: scale inf, m = 0, q = 0.
//     static_quant with scale 0: 1 / 0 = inf, x * inf = +-inf saturates, 0 * inf = NaN.
//   - Zero rows: fp8 scale = 1 / (448 * 512), q = 0; int8 scale 0, m 0, q 0. A row of int8_azp
//     with max == min (zero range) has scale 0 and m = 1 / 0 = inf, and the formulas give (as
//     vLLM's CUDA kernel, whose conversions saturate the same way): a row of zeros azp 0 and q 0
//     (0 / 0 and 0 * inf are NaN); a row of c > 0 azp = int32(-inf) = -2^31 and
//     q = int8((2^31 - 1) - 2^31) = -1; a row of c < 0 azp = 2^31 - 1 and q = -1. With scale 0 no
//     q dequantizes to c != 0 anyway. The sum int32(x * m) + azp is exact (a static azp may be any
//     int32) before it saturates.
// -0 quantizes to fp8 0x80 and int8 0; min and max order -0 below +0.
//
//   xllm_kernel::kernels::QuantParams p;
//   p.dtype = DType::kBFloat16; p.qdtype = QuantDType::kFloat8E4M3; p.scheme = QuantScheme::kPerToken;
//   p.hidden = 4096; p.shape.rows = tokens; p.shape.ndim = 1; p.shape.sizes[0] = tokens;
//   p.input = x; p.input_strides.s[0] = 4096; p.out = q; p.out_strides.s[0] = 4096;
//   p.scale_out = scales; p.scale_strides.s[0] = 1;
//   xllm_kernel::cpu::quant(p, 0, tokens);
#pragma once

#include <cmath>
#include <cstdint>

#include "csrc/common/host_device.h"
#include "csrc/common/rows.h"

namespace xllm_kernel::kernels {

// The quantized element type.
enum class QuantDType : int {
  kInt8 = 0,         // int8_t
  kFloat8E4M3 = 1,   // float8_e4m3fn bits (uint8_t): 1 sign, 4 exponent (bias 7), 3 mantissa
                     // bits, no infinity, 0x7F / 0xFF NaN, largest finite 448
};

// How the scale (and zero point) are found.
enum class QuantScheme : int {
  kPerToken = 0,     // dynamic, one scale per row: float8_e4m3fn or int8 (symmetric)
  kPerTokenAzp = 1,  // dynamic, one scale and one int32 zero point per row: int8 only
  kStatic = 2,       // one given scale for the whole tensor (and, int8 only, an optional zero point)
};

constexpr bool valid_quant_dtype(QuantDType t) { return t == QuantDType::kInt8 || t == QuantDType::kFloat8E4M3; }

// Whether the scheme exists and fits the quantized type (kPerTokenAzp is int8 only).
constexpr bool valid_quant_scheme(QuantScheme s, QuantDType t) {
  return s == QuantScheme::kPerToken || s == QuantScheme::kStatic || (s == QuantScheme::kPerTokenAzp && t == QuantDType::kInt8);
}

// Rows are the leading dimensions (shape), flattened in row-major order; every tensor has its own
// strides over them, in elements (any values, also beyond 2^31). The last dimension is contiguous.
// One struct for every operation; each kernel reads the fields its operation names.
struct QuantParams {
  DType dtype = DType::kFloat32;            // input, residual
  QuantDType qdtype = QuantDType::kInt8;    // out
  QuantScheme scheme = QuantScheme::kPerToken;
  int64_t hidden = 0;                       // >= 1: elements per out row (silu_and_mul: input rows hold 2 * hidden)
  RowShape shape;                           // the rows, shared by every tensor; 0 rows: nothing to do

  const void* input = nullptr;  // [..., hidden] ([..., 2 * hidden] for silu_and_mul); read only
  RowStrides input_strides;
  void* out = nullptr;          // [..., hidden] int8_t or float8_e4m3fn bits; must not overlap another tensor
  RowStrides out_strides;

  // kPerToken, kPerTokenAzp: written, one element per row (a [..., 1] tensor).
  float* scale_out = nullptr;
  RowStrides scale_strides;
  int32_t* azp_out = nullptr;   // kPerTokenAzp only
  RowStrides azp_strides;
  // kPerToken with kFloat8E4M3 only: an optional upper bound on amax (null: none). One float32.
  const float* scale_ub = nullptr;

  // kStatic: the scale (one float32) and, int8 only, an optional zero point (one int32, or null).
  // Pointers so that CUDA kernels read them from device memory without a synchronization.
  const float* static_scale = nullptr;
  const int32_t* static_azp = nullptr;
  // kStatic with kFloat8E4M3 only: q = e4m3(x / scale), the true division of the fp8 KV cache
  // (csrc/common/kv_cache.h, vLLM's cache write), instead of static_quant's x * (1 / scale).
  bool static_divide = false;

  // The normalizations (rms_norm and fused_add_rms_norm, as csrc/common/normalization.h).
  const void* weight = nullptr;          // [hidden], contiguous
  DType weight_dtype = DType::kFloat32;  // kFloat32 or dtype
  double eps = 0.0;                      // finite, >= 0
  void* residual = nullptr;              // fused_add_rms_norm only: read, then written (round(input + residual))
  RowStrides residual_strides;

  // CPU kernels only (CUDA ignores it). Write out with non-temporal stores (the part of each row
  // aligned to the SIMD width): for outputs much larger than the last-level cache.
  bool stream_out = false;
};

// ---------------------------------------------------------------- the operations

// What produces the rows that are quantized: the one spelling of the CPU and CUDA kernels, the
// bridges and the suites.
enum class QuantProducer : int {
  kInput = 0,            // the input rows themselves
  kRmsNorm = 1,          // rms_norm(input, weight, eps)
  kFusedAddRmsNorm = 2,  // residual <- round(input + residual); rms_norm(residual, weight, eps)
  kSiluAndMul = 3,       // silu(input[..., :hidden]) * input[..., hidden:]
};

constexpr bool producer_normalizes(QuantProducer p) {
  return p == QuantProducer::kRmsNorm || p == QuantProducer::kFusedAddRmsNorm;
}

// The family's operations: each is a producer and a scheme, in one list (an X-macro: X(name,
// producer, scheme)) from which come the table below and the CPU and CUDA entry points by
// operation (csrc/{cpu,cuda}/quantization/operations.h); the bridges and the suites read the table.
#define XLLM_QUANT_OPERATIONS(X)                               \
  X(per_token_quant, kInput, kPerToken)                        \
  X(per_token_quant_int8_azp, kInput, kPerTokenAzp)            \
  X(static_quant, kInput, kStatic)                             \
  X(rms_norm_per_token_quant, kRmsNorm, kPerToken)             \
  X(fused_add_rms_norm_per_token_quant, kFusedAddRmsNorm, kPerToken) \
  X(rms_norm_static_quant, kRmsNorm, kStatic)                  \
  X(fused_add_rms_norm_static_quant, kFusedAddRmsNorm, kStatic) \
  X(silu_and_mul_per_token_quant, kSiluAndMul, kPerToken)

struct QuantOperation {
  const char* name;
  QuantProducer producer;
  QuantScheme scheme;
  const char* wrong_scheme;  // the entry points' error for another scheme
};
inline constexpr QuantOperation kQuantOperations[] = {
#define XLLM_QUANT_ROW(NAME, PRODUCER, SCHEME) \
  {#NAME, QuantProducer::PRODUCER, QuantScheme::SCHEME, #NAME ": scheme must be " #SCHEME},
    XLLM_QUANT_OPERATIONS(XLLM_QUANT_ROW)
#undef XLLM_QUANT_ROW
};

// The table's index of an operation, by name, at compile time (-1 for a name not in it: an entry
// point of such a name does not compile).
constexpr int quant_operation_index(const char* name) {
  for (int i = 0; i < static_cast<int>(sizeof(kQuantOperations) / sizeof(kQuantOperations[0])); ++i) {
    const char *a = kQuantOperations[i].name, *b = name;
    while (*a != '\0' && *a == *b) ++a, ++b;
    if (*a == *b) return i;
  }
  return -1;
}

// The kernels' check of p for `producer` on rows [row_begin, row_end), the CPU's and CUDA's alike
// (defence only: the bridges validate dtypes, shapes and pointers before calling): null where p is
// valid, else the reason. Pointers are checked only where a row is to be computed.
inline const char* invalid_quant_params(const QuantParams& p, QuantProducer producer, int64_t row_begin, int64_t row_end) {
  if (!valid_dtype(p.dtype)) return "quantization: unknown dtype";
  if (!valid_quant_dtype(p.qdtype)) return "quantization: unknown quantized dtype";
  if (!valid_quant_scheme(p.scheme, p.qdtype)) return "quantization: unknown scheme, or kPerTokenAzp with float8_e4m3fn";
  // 2 * hidden elements per input row (silu_and_mul), and the row buffer's bytes, must be addressable.
  if (p.hidden < 1 || p.hidden > (INT64_MAX >> 3)) return "quantization: hidden must be in [1, 2^60)";
  if (const char* why = invalid_rows(p.shape, row_begin, row_end)) return why;
  if (producer_normalizes(producer)) {
    if (p.weight_dtype != DType::kFloat32 && p.weight_dtype != p.dtype) {
      return "quantization: weight_dtype must be float32 or dtype";
    }
    if (!(std::isfinite(p.eps) && p.eps >= 0.0)) return "quantization: eps must be finite and >= 0";
  }
  if (p.scale_ub != nullptr && !(p.scheme == QuantScheme::kPerToken && p.qdtype == QuantDType::kFloat8E4M3)) {
    return "quantization: scale_ub is for per-token float8_e4m3fn only";
  }
  if (p.static_divide && !(p.scheme == QuantScheme::kStatic && p.qdtype == QuantDType::kFloat8E4M3)) {
    return "quantization: static_divide is for static float8_e4m3fn only";
  }
  if (p.static_azp != nullptr && !(p.scheme == QuantScheme::kStatic && p.qdtype == QuantDType::kInt8)) {
    return "quantization: static_azp is for static int8 only";
  }
  if (row_begin == row_end) return nullptr;
  if (p.input == nullptr || p.out == nullptr) return "quantization: null input or out";
  if (p.scheme != QuantScheme::kStatic && p.scale_out == nullptr) return "quantization: null scale_out";
  if (p.scheme == QuantScheme::kPerTokenAzp && p.azp_out == nullptr) return "quantization: null azp_out";
  if (p.scheme == QuantScheme::kStatic && p.static_scale == nullptr) return "quantization: null static_scale";
  if (producer_normalizes(producer) && p.weight == nullptr) return "quantization: null weight";
  if (producer == QuantProducer::kFusedAddRmsNorm && p.residual == nullptr) return "quantization: null residual";
  return nullptr;
}

// ---------------------------------------------------------------- the arithmetic

inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr float kInt8Max = 127.0f;

// The canonical quiet NaN 0x7FC00000: the scale of a row with a NaN.
XLLM_HOST_DEVICE inline float quant_nan() { return float_from_bits(0x7FC00000u); }

// The smallest fp8 scale, 1 / (448 * 512) in float32 (vLLM's min_scaling_factor).
XLLM_HOST_DEVICE inline float fp8_min_scale() { return 1.0f / (kFp8E4M3Max * 512.0f); }

// v rounded to an integer, ties to even (the default rounding mode).
XLLM_HOST_DEVICE inline float quant_rint(float v) {
#ifdef __CUDA_ARCH__
  return rintf(v);
#else
  return __builtin_rintf(v);
#endif
}

// float8_e4m3fn bits of v: rounded to nearest, ties to even; |v| >= 448 (and +-inf) saturates to
// +-448 (0x7E / 0xFE): with ties to even, 464 (the midpoint of 448 and the missing 480) rounds to
// 448 too; NaN gives 0x7F. Below 2^-6 the subnormals m * 2^-9 (m = 0..7); 2^-10 and less round to
// +-0. Integer arithmetic only: exact whatever the rounding mode and flush-to-zero settings.
XLLM_HOST_DEVICE inline uint8_t float8_e4m3fn_from_float(float v) {
  const uint32_t bits = float_bits(v);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return 0x7F;
  const uint32_t sign = (bits >> 24) & 0x80u;
  uint32_t mag;
  if (abs >= 0x43E00000u) {  // >= 448
    mag = 0x7E;
  } else if (abs >= 0x3C800000u) {  // >= 2^-6: normal; rebias the exponent (127 -> 7), round 20 bits
    mag = (abs - 0x3C000000u + 0x7FFFFu + ((abs >> 20) & 1u)) >> 20;
  } else {  // subnormal: round(|v| * 2^9), 8 (2^-6) being the smallest normal's encoding
    const uint32_t e = abs >> 23;  // |v| = m * 2^(e - 150), m with the implicit bit
    const uint32_t shift = 141u - e;  // |v| * 2^9 = m / 2^shift, shift >= 21
    if (e == 0 || shift > 24) {
      mag = 0;  // below 2^-10 (float32 subnormals included)
    } else {
      const uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
      const uint32_t half = 1u << (shift - 1);
      const uint32_t rest = m & ((half << 1) - 1u);
      mag = m >> shift;
      mag += (rest > half || (rest == half && (mag & 1u))) ? 1u : 0u;
    }
  }
  return static_cast<uint8_t>(sign | mag);
}

// The value of float8_e4m3fn bits (0x7F and 0xFF are NaN).
XLLM_HOST_DEVICE inline float float_from_float8_e4m3fn(uint8_t q) {
  const uint32_t sign = static_cast<uint32_t>(q & 0x80u) << 24;
  const uint32_t e = (q >> 3) & 0xFu, m = q & 7u;
  if (e == 15 && m == 7) return float_from_bits(sign | 0x7FC00000u);
  if (e == 0) {
    const float sub = static_cast<float>(m) * 0.001953125f;  // m * 2^-9, exact
    return (q & 0x80u) ? -sub : sub;
  }
  return float_from_bits(sign | ((e + 120u) << 23) | (m << 20));
}

// v rounded to nearest, ties to even, saturated to [-128, 127]; NaN gives 0.
XLLM_HOST_DEVICE inline int8_t int8_from_float(float v) {
  if (!(v == v)) return 0;
  if (v >= 127.0f) return 127;
  if (v <= -128.0f) return -128;
  return static_cast<int8_t>(quant_rint(v));
}

// v rounded to nearest, ties to even, saturated to [-2^31, 2^31 - 1]; NaN gives 0.
XLLM_HOST_DEVICE inline int32_t int32_from_float(float v) {
  if (!(v == v)) return 0;
  if (v >= 2147483648.0f) return 2147483647;
  if (v <= -2147483648.0f) return -2147483647 - 1;
  return static_cast<int32_t>(quant_rint(v));  // |v| < 2^31: the rounded value fits
}

// int8(int32(v) + azp): the sum saturated to [-128, 127].
XLLM_HOST_DEVICE inline int8_t int8_from_float_azp(float v, int32_t azp) {
  const int64_t s = static_cast<int64_t>(int32_from_float(v)) + azp;
  return static_cast<int8_t>(s < -128 ? -128 : s > 127 ? 127 : s);
}

// max and min that return NaN when either operand is NaN (unlike fmaxf and fminf).
XLLM_HOST_DEVICE inline float quant_max(float a, float b) { return (a != a || b != b) ? quant_nan() : (a > b ? a : b); }
XLLM_HOST_DEVICE inline float quant_min(float a, float b) { return (a != a || b != b) ? quant_nan() : (a < b ? a : b); }

// The fp8 per-token scale of a row with this amax (NaN if the row holds a NaN); scale_ub: the
// upper bound on amax, or null.
XLLM_HOST_DEVICE inline float fp8_per_token_scale(float amax, const float* scale_ub) {
  const float bounded = scale_ub != nullptr ? quant_min(amax, *scale_ub) : amax;
  if (bounded != bounded) return quant_nan();
  const float s = bounded / kFp8E4M3Max;
  return s > fp8_min_scale() ? s : fp8_min_scale();
}

// The int8 per-token scale and multiplier of a row with this amax.
XLLM_HOST_DEVICE inline float int8_per_token_scale(float amax) { return amax != amax ? quant_nan() : amax / kInt8Max; }
XLLM_HOST_DEVICE inline float int8_per_token_multiplier(float amax) {
  return amax != amax ? quant_nan() : amax == 0.0f ? 0.0f : kInt8Max / amax;
}

// The asymmetric int8 parameters of a row with this min and max.
struct Int8AzpParams {
  float scale;       // (max - min) / 255
  float multiplier;  // 1 / scale
  int32_t azp;       // int32(-128 - min / scale)
};

XLLM_HOST_DEVICE inline Int8AzpParams int8_azp_params(float min, float max) {
  if (min != min || max != max) return Int8AzpParams{quant_nan(), quant_nan(), 0};
  const float scale = (max - min) / 255.0f;
  return Int8AzpParams{scale, 1.0f / scale, int32_from_float(-128.0f - min / scale)};
}

// One element. Per token: fp8 q = e4m3(x / scale); int8 q = int8(x * multiplier); int8 azp
// q = int8(int32(x * multiplier) + azp). Static: fp8 q = e4m3(x * (1 / scale)); int8
// q = int8(x / scale); int8 azp q = int8(int32(x * (1 / scale)) + azp).
XLLM_HOST_DEVICE inline uint8_t quantize_fp8_per_token(float x, float scale) { return float8_e4m3fn_from_float(x / scale); }
XLLM_HOST_DEVICE inline int8_t quantize_int8_per_token(float x, float multiplier) { return int8_from_float(x * multiplier); }
XLLM_HOST_DEVICE inline int8_t quantize_int8_azp(float x, float multiplier, int32_t azp) {
  return int8_from_float_azp(x * multiplier, azp);
}
XLLM_HOST_DEVICE inline uint8_t quantize_fp8_static(float x, float inv_scale) { return float8_e4m3fn_from_float(x * inv_scale); }
XLLM_HOST_DEVICE inline int8_t quantize_int8_static(float x, float scale) { return int8_from_float(x / scale); }

}  // namespace xllm_kernel::kernels
