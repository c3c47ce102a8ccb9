// The reference of the quantized KV cache (reshape_and_cache_quant, and the pages paged_attention_quant
// reads), shared by the suites (reshape_and_cache_quant.cpp here, paged_attention_quant.cpp in the
// attention family) and the tests (test/ops/kv_cache/kv_cache_quant_test.cpp,
// test/ops/attention/attention_quant_test.cpp). Element by element on the CPU with the scalar host
// functions of csrc/common/quantization.h, the contract's arithmetic (csrc/common/kv_cache.h):
//   float8_e4m3fn  q = e4m3(x / scale), the true float32 division, one given scale per cache;
//   int8           per (slot, KV head) row: amax = max |x| with a NaN propagating (quant_max),
//                  scale = int8_per_token_scale(amax), q = int8(x * int8_per_token_multiplier(amax));
// and dequantized, x = float(q) * scale in float32. No kernel, no ATen arithmetic on the values:
// nothing an implementation shares.
//
//   at::Tensor want_cache = key_cache.clone(), want_scale = key_scale.clone();
//   reference_reshape_and_cache_quant(want_cache, want_scale, key, slot_mapping);
//   const at::Tensor pages = dequantized_cache(want_cache, want_scale);  // float32, for attention
#pragma once

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "csrc/common/quantization.h"

namespace xllm_kernel::numerics::kv_cache {

// fp8: the cache's division form; static_quant's reciprocal form, which it must not be.
inline uint8_t fp8_division_form(float x, float scale) { return kernels::float8_e4m3fn_from_float(x / scale); }
inline uint8_t fp8_reciprocal_form(float x, float scale) {
  return kernels::float8_e4m3fn_from_float(x * (1.0f / scale));
}

// A per-tensor fp8 scale calibrated on values x (any dtype): amax / 448 over the finite values, in
// float32; `if_zero` where there are none or all are zero.
inline float calibrated_fp8_scale(const at::Tensor& x, float if_zero) {
  const at::Tensor f = x.to(at::kFloat);
  const float amax = f.numel() == 0 ? 0.0f : f.nan_to_num(0, 0, 0).abs().max().item<float>();
  return amax > 0 ? amax / kernels::kFp8E4M3Max : if_zero;
}

// int8: one row of n float32 values into q; returns the row's scale (the canonical NaN when the row
// holds a NaN: then every q is 0).
inline float quantize_int8_row(const float* x, int64_t n, int8_t* q) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = kernels::quant_max(amax, std::fabs(x[i]));
  const float multiplier = kernels::int8_per_token_multiplier(amax);
  for (int64_t i = 0; i < n; ++i) q[i] = kernels::quantize_int8_per_token(x[i], multiplier);
  return kernels::int8_per_token_scale(amax);
}

// Writes each token's rows of `rows` ([tokens, kv_heads, head_size], any dtype and device)
// quantized into `cache` ([num_blocks, block_size, kv_heads, head_size] float8_e4m3fn or int8 on the
// CPU, any strides, written in place) at its slot. fp8: `scale` holds the one per-tensor scale
// (read); int8: `scale` is [num_blocks, block_size, kv_heads] float32 on the CPU (any strides),
// each written row's scale written. Tokens whose slot is outside [0, num_blocks * block_size) are
// skipped, as reference_reshape_and_cache skips them.
inline void reference_reshape_and_cache_quant(at::Tensor cache, at::Tensor scale, const at::Tensor& rows,
                                              const at::Tensor& slot_mapping) {
  const at::Tensor x = rows.to(at::kCPU).to(at::kFloat).contiguous();
  const at::Tensor slots = slot_mapping.to(at::kCPU).to(at::kLong).contiguous();
  const int64_t block_size = cache.size(1), num_slots = cache.size(0) * block_size;
  const int64_t heads = cache.size(2), head_size = cache.size(3);
  const int64_t* slot = slots.const_data_ptr<int64_t>();
  const float* values = x.const_data_ptr<float>();
  const bool fp8 = cache.scalar_type() == at::kFloat8_e4m3fn;
  std::vector<int8_t> q(head_size);
  if (fp8) {
    const float s = scale.to(at::kCPU).reshape({}).item<float>();
    const at::Tensor byte_view = cache.view(at::kByte);  // the same storage and strides
    auto bytes = byte_view.accessor<uint8_t, 4>();
    for (int64_t t = 0; t < x.size(0); ++t) {
      if (slot[t] < 0 || slot[t] >= num_slots) continue;
      const int64_t b = slot[t] / block_size, r = slot[t] % block_size;
      for (int64_t h = 0; h < heads; ++h) {
        const float* row = values + (t * heads + h) * head_size;
        for (int64_t i = 0; i < head_size; ++i) bytes[b][r][h][i] = fp8_division_form(row[i], s);
      }
    }
    return;
  }
  auto out = cache.accessor<int8_t, 4>();
  auto scales = scale.accessor<float, 3>();
  for (int64_t t = 0; t < x.size(0); ++t) {
    if (slot[t] < 0 || slot[t] >= num_slots) continue;
    const int64_t b = slot[t] / block_size, r = slot[t] % block_size;
    for (int64_t h = 0; h < heads; ++h) {
      scales[b][r][h] = quantize_int8_row(values + (t * heads + h) * head_size, head_size, q.data());
      for (int64_t i = 0; i < head_size; ++i) out[b][r][h][i] = q[i];
    }
  }
}

// Every row of a float cache `values` ([num_blocks, block_size, kv_heads, head_size], any dtype)
// quantized into `cache` (same shape, float8_e4m3fn or int8, any strides) as reshape_and_cache_quant
// would write it, with `scale` as there: how the attention suite and tests build their pages.
inline void quantize_cache(at::Tensor cache, at::Tensor scale, const at::Tensor& values) {
  const int64_t slots = values.size(0) * values.size(1);
  reference_reshape_and_cache_quant(cache, scale, values.reshape({slots, values.size(2), values.size(3)}),
                                    at::arange(slots, at::kLong));
}

// The values a quantized cache holds: float(q) * scale in float32 (the contract's dequantization),
// [num_blocks, block_size, kv_heads, head_size] float32 on the CPU. An fp8 NaN (0x7F, 0xFF) or a NaN
// int8 scale reads as NaN.
inline at::Tensor dequantized_cache(const at::Tensor& cache, const at::Tensor& scale) {
  const at::Tensor c = cache.to(at::kCPU);
  at::Tensor out = at::empty(c.sizes(), at::TensorOptions().dtype(at::kFloat));
  auto o = out.accessor<float, 4>();
  if (c.scalar_type() == at::kFloat8_e4m3fn) {
    const float s = scale.to(at::kCPU).reshape({}).item<float>();
    const at::Tensor byte_view = c.view(at::kByte);
    const auto q = byte_view.accessor<uint8_t, 4>();
    for (int64_t b = 0; b < c.size(0); ++b) {
      for (int64_t r = 0; r < c.size(1); ++r) {
        for (int64_t h = 0; h < c.size(2); ++h) {
          for (int64_t i = 0; i < c.size(3); ++i) o[b][r][h][i] = kernels::float_from_float8_e4m3fn(q[b][r][h][i]) * s;
        }
      }
    }
    return out;
  }
  const at::Tensor sc = scale.to(at::kCPU);
  const auto q = c.accessor<int8_t, 4>();
  const auto s = sc.accessor<float, 3>();
  for (int64_t b = 0; b < c.size(0); ++b) {
    for (int64_t r = 0; r < c.size(1); ++r) {
      for (int64_t h = 0; h < c.size(2); ++h) {
        const float row_scale = s[b][r][h];
        for (int64_t i = 0; i < c.size(3); ++i) o[b][r][h][i] = static_cast<float>(q[b][r][h][i]) * row_scale;
      }
    }
  }
  return out;
}

// Values of `dtype` (float32, bfloat16 or float16) for which the division and the reciprocal forms
// give different fp8 bits with this scale (at most `count`, positive and negative; float32 has
// them, the half types in practice none: their few mantissa bits keep x / scale clear of e4m3's
// rounding boundaries by more than a float32 rounding): x / scale lands on one side of an e4m3 rounding boundary
// and x * (1 / scale) on the other. Searched near each boundary m * scale (m the midpoint of two
// adjacent e4m3 values), a few of the dtype's values either side.
inline std::vector<float> division_sensitive_values(float scale, at::ScalarType dtype, size_t count) {
  std::vector<float> out;
  auto neighbours = [dtype](float v) {  // v rounded to the dtype, and its neighbours
    std::vector<float> n;
    if (dtype == at::kBFloat16) {
      const uint16_t bits = c10::BFloat16(v).x;
      for (int d = -3; d <= 3; ++d) {
        n.push_back(c10::BFloat16(static_cast<uint16_t>(bits + d), c10::BFloat16::from_bits()));
      }
    } else if (dtype == at::kHalf) {
      const uint16_t bits = c10::Half(v).x;
      for (int d = -3; d <= 3; ++d) n.push_back(c10::Half(static_cast<uint16_t>(bits + d), c10::Half::from_bits()));
    } else {
      const uint32_t bits = kernels::float_bits(v);
      for (int d = -3; d <= 3; ++d) n.push_back(kernels::float_from_bits(bits + static_cast<uint32_t>(d)));
    }
    return n;
  };
  for (uint8_t b = 0x01; b < 0x7E && out.size() < count; ++b) {
    const double m = (double{kernels::float_from_float8_e4m3fn(b)} + kernels::float_from_float8_e4m3fn(b + 1)) / 2;
    for (const float x : neighbours(static_cast<float>(m * scale))) {
      if (out.size() >= count || !std::isfinite(x) || x <= 0) continue;
      if (fp8_division_form(x, scale) != fp8_reciprocal_form(x, scale)) {
        out.push_back(x);
        if (out.size() < count) out.push_back(-x);
        break;
      }
    }
  }
  return out;
}

}  // namespace xllm_kernel::numerics::kv_cache
