// cpu.torch.sample and cuda.torch.sample: the straightforward sort-and-cumsum sampler an engine
// writes without a kernel library, with the generator of csrc/common/sampling.h written in torch
// operations so that its tokens are the native kernels' wherever float rounding does not separate
// them. Every step is a tensor operation on the whole batch: no loop over rows and, on CUDA, no
// synchronization, so cuda.torch can be captured into a graph. The CPU implementation checks the
// values the contract rejects; the CUDA one applies the contract's CUDA rules instead (NaN as -inf,
// -1 for a row it cannot sample).
#include <ATen/ATen.h>

#include <cstdint>
#include <limits>
#include <utility>

#include "src/ops/common/registration.h"
#include "src/ops/sampling/internal.h"
#include "xllm_kernel/ops/sampling.h"

namespace xllm_kernel::sampling {
namespace {

constexpr int64_t kLow32 = 0xFFFFFFFFLL;

// (hi, lo) of x * m for int64 tensors holding uint32 values: x * m needs 64 unsigned bits, so the
// product is formed from m's 16-bit halves (each partial product below 2^48).
std::pair<at::Tensor, at::Tensor> mulhilo(const at::Tensor& x, uint32_t m) {
  const at::Tensor t1 = x * static_cast<int64_t>(m & 0xFFFFu);  // x * m_lo
  const at::Tensor t2 = x * static_cast<int64_t>(m >> 16);      // x * m_hi
  const at::Tensor mid = t2 + t1.bitwise_right_shift(16);       // x * m = mid * 2^16 + (t1 & 0xFFFF)
  const at::Tensor hi = mid.bitwise_right_shift(16);
  const at::Tensor lo = mid.bitwise_and(0xFFFF).bitwise_left_shift(16).bitwise_or(t1.bitwise_and(0xFFFF));
  return {hi, lo};
}

}  // namespace

at::Tensor uniforms(const at::Tensor& seeds, const at::Tensor& offsets, const at::Tensor& tokens) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr int64_t kW0 = 0x9E3779B9LL, kW1 = 0xBB67AE85LL;
  const at::Tensor seed = seeds.to(at::kLong).unsqueeze(1), offset = offsets.to(at::kLong).unsqueeze(1);
  at::Tensor k0 = seed.bitwise_and(kLow32), k1 = seed.bitwise_right_shift(32).bitwise_and(kLow32);
  at::Tensor c0 = tokens.bitwise_right_shift(2).bitwise_and(kLow32);
  at::Tensor c1 = at::zeros_like(c0);
  at::Tensor c2 = offset.bitwise_and(kLow32).expand_as(c0);
  at::Tensor c3 = offset.bitwise_right_shift(32).bitwise_and(kLow32).expand_as(c0);
  for (int round = 0; round < 10; ++round) {
    auto [hi0, lo0] = mulhilo(c0, kM0);
    auto [hi1, lo1] = mulhilo(c2, kM1);
    at::Tensor n0 = hi1.bitwise_xor(c1).bitwise_xor(k0);
    at::Tensor n2 = hi0.bitwise_xor(c3).bitwise_xor(k1);
    c0 = std::move(n0);
    c1 = std::move(lo1);
    c2 = std::move(n2);
    c3 = std::move(lo0);
    k0 = (k0 + kW0).bitwise_and(kLow32);
    k1 = (k1 + kW1).bitwise_and(kLow32);
  }
  const at::Tensor word = at::stack({c0, c1, c2, c3}, -1).gather(-1, tokens.bitwise_and(3).unsqueeze(-1)).squeeze(-1);
  return (word.bitwise_right_shift(9).to(at::kFloat) + 0.5f) * (1.0f / 8388608.0f);
}

namespace {

template <c10::DeviceType kDevice>
at::Tensor torch_sample(const at::Tensor& logits, const at::Tensor& temperature, const at::Tensor& top_k,
                        const at::Tensor& top_p, const at::Tensor& min_p, const at::Tensor& seeds,
                        const at::Tensor& offsets) {
  constexpr bool kCpu = kDevice == c10::DeviceType::CPU;
  const RowParameters r = check_arguments({.logits = logits, .temperature = temperature, .top_k = top_k,
                                           .top_p = top_p, .min_p = min_p, .seeds = seeds, .offsets = offsets,
                                           .device = kDevice});
  if constexpr (kCpu) check_parameters_cpu(r);
  const int64_t batch = logits.size(0), vocab = logits.size(1);
  if (batch == 0) return new_output(logits);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  at::Tensor l = logits.to(at::kFloat);
  if constexpr (kCpu) {
    const at::Tensor row_nan = l.isnan().any(1).to(at::kByte);
    const at::Tensor empty_row = l.amax(1).eq(-kInf);
    // The CPU's errors, in the order the native bridge reports them (a NaN row first).
    at::Tensor tokens = at::zeros({batch}, logits.options().dtype(at::kLong));
    tokens.masked_fill_(empty_row.logical_and(row_nan.logical_not()), kernels::kInvalidRow);
    check_results_cpu(tokens, row_nan);
  } else {
    l = l.nan_to_num(-kInf, kInf, -kInf);  // NaN as -inf; the infinities stay
  }

  // The order: logit descending, then index ascending (a stable sort keeps equal logits in index order).
  const auto [sorted, order] = l.sort(/*stable=*/true, /*dim=*/1, /*descending=*/true);
  const at::Tensor l_max = sorted.narrow(1, 0, 1);
  const at::Tensor t = r.temperature.unsqueeze(1);
  const at::Tensor greedy = t.eq(0);
  // w = exp((l - l_max) / T); with l_max = +inf, 1 for the +inf tokens and 0 for the others.
  const at::Tensor safe_t = at::where(greedy, at::ones_like(t), t);
  at::Tensor w = ((sorted - l_max) / safe_t).exp();
  w = at::where(l_max.eq(kInf), sorted.eq(kInf).to(at::kFloat), w);

  const auto columns = at::arange(vocab, logits.options().dtype(at::kLong)).unsqueeze(0);
  const at::Tensor k = r.top_k.to(at::kLong).unsqueeze(1);
  const at::Tensor k_eff = at::where(k.gt(0).logical_and(k.lt(vocab)), k, at::full_like(k, vocab));
  at::Tensor kept = columns.lt(k_eff);
  const at::Tensor w_k = w * kept;
  // top-p: the tokens before which the kept mass is below top_p of the total (so the shortest
  // prefix whose mass reaches it); top_p 1 keeps everything.
  const at::Tensor mass = w_k.sum(1, /*keepdim=*/true);
  const at::Tensor before = w_k.cumsum(1) - w_k;
  const at::Tensor p = r.top_p.unsqueeze(1);
  kept.logical_and_(before.lt(p * mass).logical_or(p.eq(1)));
  // min-p: w >= min_p (w_max = 1).
  kept.logical_and_(w.ge(r.min_p.unsqueeze(1)));

  // The race: the largest w / E among the kept tokens, ties to the lower token index. The kept set
  // is a prefix of the order (each rule keeps a prefix), so on the CPU only its longest prefix
  // needs uniforms; CUDA draws them for every column (no synchronization).
  int64_t n = vocab;
  if constexpr (kCpu) n = std::max<int64_t>(1, kept.logical_and(greedy.logical_not()).sum(1).max().item<int64_t>());
  const at::Tensor tokens_n = order.narrow(1, 0, n);
  const at::Tensor e = uniforms(r.seeds, r.offsets, tokens_n).log().neg();
  const at::Tensor score = at::where(kept.narrow(1, 0, n), w.narrow(1, 0, n) / e, at::full_like(e, -1.0f));
  const at::Tensor best = score.amax(1, /*keepdim=*/true);
  const at::Tensor big = at::full_like(tokens_n, std::numeric_limits<int64_t>::max());
  at::Tensor token = at::where(score.eq(best), tokens_n, big).amin(1);
  token = at::where(greedy.squeeze(1), order.select(1, 0), token);
  if constexpr (!kCpu) {
    // The rows the CPU rejects: invalid parameters, or no logit above -inf.
    const at::Tensor valid = r.temperature.ge(0)
                                 .logical_and(r.temperature.lt(kInf))
                                 .logical_and(r.top_p.gt(0))
                                 .logical_and(r.top_p.le(1))
                                 .logical_and(r.min_p.ge(0))
                                 .logical_and(r.min_p.lt(1))
                                 .logical_and(l_max.squeeze(1).gt(-kInf));
    token = at::where(valid, token, at::full_like(token, kernels::kInvalidRow));
  }
  return token;
}

}  // namespace

XLLM_REGISTER_NAMED("cpu.torch.sample", modules().torch_cpu, sample_operation(),
                    torch_sample<c10::DeviceType::CPU>);
XLLM_REGISTER_NAMED("cuda.torch.sample", modules().torch_cuda, sample_operation(),
                    torch_sample<c10::DeviceType::CUDA>);

}  // namespace xllm_kernel::sampling
