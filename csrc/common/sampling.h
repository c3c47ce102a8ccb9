// The parameters and the arithmetic of token sampling from logits (sample): one torch-free header
// for the CPU kernel (csrc/cpu/sampling/sampling.h), the CUDA launcher
// (csrc/cuda/sampling/sampling.h) and the torch implementations' generator. The bridges fill
// SamplingParams once from checked tensors (kernel_params in src/ops/sampling/internal.h).
//
// What every implementation computes for row r (its own parameters T = temperature[r], k =
// top_k[r], p = top_p[r], m = min_p[r], seed = seeds[r], offset = offsets[r]; a row's result
// never depends on another row):
//   l_i      the logit of token i in [0, vocab), as float32 (exact for bfloat16 and float16)
//   order    tokens by l descending, then by index ascending: the probability order of exact
//            arithmetic (p_i is a strictly increasing function of l_i), with every tie broken by
//            the lower index. A function of the input alone, so it is the same on every device.
//   T == 0   greedy: the first token of the order (the argmax, ties to the lowest index). k, seed
//            and offset are not used; p and m must still be in their domains (below).
//   T > 0    w_i = exp((l_i - l_max) / T), float32 (l_max = the largest logit): the unnormalized
//            softmax of l / T, w = 1 for the first token of the order. The subtraction and the
//            division are IEEE float32 operations (correctly rounded, the same on every device);
//            only exp may differ in its last bits between implementations.
//     top-k: keep the first K tokens of the order, K = k if 0 < k < vocab, else vocab.
//     top-p: (p < 1) of those, keep the shortest prefix of the order whose mass sum(w) is
//            >= p * W, W = the kept tokens' sum(w) (the renormalized mass >= p); it always holds
//            the first token. p == 1 keeps them all (no prefix test).
//     min-p: (m > 0) drop the kept tokens with w_i < m (p_i < m * p_max: w_max = 1 and
//            renormalizing leaves ratios unchanged). The first token always stays (m < 1).
//     draw:  the kept token with the largest w_i / E_i, E_i = -log(u_i), u_i =
//            sampling_uniform(seed, offset, i): an exponential race, P(token j) = w_j / sum(w)
//            over the kept set (below). Ties (equal float32 quotients) go to the lower index.
//            Tokens with w_i == 0 are never drawn: the first token's quotient is > 0.
//
// Why the race is the right distribution: E_i are independent Exp(1) variables, E_i / w_i is
// Exp(w_i), and the minimum of independent exponentials is the one of index j with probability
// w_j / sum(w); the largest w_i / E_i is that minimum. u_i takes the 2^23 values (n + 1/2) 2^-23,
// so E_i has no atom at 0 or infinity and its distribution is within 2^-24 (in CDF) of Exp(1).
// Because every quantity is a function of (row's logits, row's parameters, seed, offset, i), the
// token is the same for every batch size and every device, except where floating-point rounding
// of exp or of a sum separates two quotients or moves a mass across the top-p boundary.
//
// Non-finite logits and invalid parameters. The kernels never read or write out of bounds and
// apply these rules, which CUDA callers see; the CPU bridge rejects NaN logits (the kernels report
// them in row_nan), rows without a logit above -inf and invalid parameters as errors, and takes
// +inf as below:
//   NaN          is treated as -inf: never kept ahead of a number, w = 0.
//   -inf         w = 0; kept only when fewer than K tokens are above -inf, and never drawn.
//   +inf         when l_max == +inf, w_i = 1 for the +inf tokens and 0 for the others: the limit
//                of the softmax, so the draw is uniform among the +inf tokens that are kept.
//   a row with no logit above -inf, or with T < 0, T NaN or infinite, p outside (0, 1] or m
//   outside [0, 1): out[r] = kInvalidRow (-1).
//
//   xllm_kernel::kernels::SamplingParams s;
//   s.dtype = DType::kFloat32; s.batch = 64; s.vocab = 128256;
//   s.logits = logits; s.logits_row_stride = 128256;
//   s.temperature = t; s.top_k = k; s.top_p = p; s.min_p = m; s.seeds = seeds; s.offsets = offs;
//   s.out = tokens;
#pragma once

#include <cstdint>

#include "csrc/common/host_device.h"
#include "csrc/common/rows.h"

namespace xllm_kernel::kernels {

struct SamplingParams {
  DType dtype = DType::kFloat32;  // logits
  int64_t batch = 0;              // rows (>= 0)
  int64_t vocab = 0;              // >= 1, < 2^31
  const void* logits = nullptr;   // [batch, vocab]; row r at element r * logits_row_stride
  int64_t logits_row_stride = 0;  // elements (>= vocab unless batch <= 1); tokens are contiguous
  // Per-row parameters, each [batch], contiguous.
  const float* temperature = nullptr;  // 0: greedy; > 0 finite
  const int32_t* top_k = nullptr;      // <= 0 or >= vocab: off
  const float* top_p = nullptr;        // (0, 1]; 1: off
  const float* min_p = nullptr;        // [0, 1); 0: off
  const int64_t* seeds = nullptr;
  const int64_t* offsets = nullptr;
  int64_t* out = nullptr;  // [batch], contiguous: the token of each row, or kInvalidRow
  // Optional ([batch], contiguous, or null): row_nan[r] = 1 where row r holds a NaN logit, else 0.
  uint8_t* row_nan = nullptr;
};

// The result of a row the rules above cannot sample (see "Non-finite logits").
inline constexpr int64_t kInvalidRow = -1;

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): ten
// rounds of the counter ctr under the key, the form of Random123 and cuRAND. Its known answers
// are tested (test/csrc/sampling).
struct Philox4x32 {
  uint32_t v[4];
};

XLLM_HOST_DEVICE inline Philox4x32 philox4x32_10(Philox4x32 ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr.v[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr.v[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = Philox4x32{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

// The four 32-bit words of token group g = i / 4 of a row: counter (g, 0, offset low, offset high),
// key (seed low, seed high). Token i uses word i % 4, so one Philox call serves four tokens.
XLLM_HOST_DEVICE inline Philox4x32 sampling_words(int64_t seed, int64_t offset, int64_t group) {
  const uint64_t s = static_cast<uint64_t>(seed), o = static_cast<uint64_t>(offset);
  const Philox4x32 ctr{{static_cast<uint32_t>(group), 0u, static_cast<uint32_t>(o), static_cast<uint32_t>(o >> 32)}};
  return philox4x32_10(ctr, static_cast<uint32_t>(s), static_cast<uint32_t>(s >> 32));
}

// A word as a uniform in (0, 1): (w >> 9 + 1/2) 2^-23, exact in float32 (at most 24 significant
// bits), in [2^-24, 1 - 2^-24].
XLLM_HOST_DEVICE inline float sampling_uniform_from_word(uint32_t word) {
  return (static_cast<float>(word >> 9) + 0.5f) * (1.0f / 8388608.0f);
}

// u_i of token i of a row with this seed and offset.
XLLM_HOST_DEVICE inline float sampling_uniform(int64_t seed, int64_t offset, int64_t token) {
  const Philox4x32 w = sampling_words(seed, offset, token >> 2);
  return sampling_uniform_from_word(w.v[token & 3]);
}

// An unsigned key whose order is the logits' order (larger logit, larger key), NaN as -inf and
// -0 as +0, so selection can work on integers: the order above is key descending, then index
// ascending.
XLLM_HOST_DEVICE inline uint32_t logit_order_key(float l) {
  if (l != l) l = -__builtin_inff();
  if (l == 0.0f) l = 0.0f;
  const uint32_t b = float_bits(l);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// K of a row: the count top-k keeps.
XLLM_HOST_DEVICE inline int64_t sampling_top_k(int32_t top_k, int64_t vocab) {
  return top_k > 0 && top_k < vocab ? static_cast<int64_t>(top_k) : vocab;
}

// Whether a row's parameters are in their domains (the CPU bridge rejects the others).
XLLM_HOST_DEVICE inline bool sampling_parameters_valid(float temperature, float top_p, float min_p) {
  const bool t_ok = temperature >= 0.0f && temperature <= 3.4028234663852886e38f;
  const bool p_ok = top_p > 0.0f && top_p <= 1.0f;
  const bool m_ok = min_p >= 0.0f && min_p < 1.0f;
  return t_ok && p_ok && m_ok;
}

}  // namespace xllm_kernel::kernels
