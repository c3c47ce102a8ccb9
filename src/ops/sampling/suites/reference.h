// The float64 reference of sample (never an implementation): for each row, the tokens a correct
// implementation may return, for the suite and the bridge checks (test/ops/sampling/bridge_checks.h).
//
// The kept set is computed in float64 from the contract's definition (csrc/common/sampling.h): the
// order by logit then index, top-k, the top-p prefix, min-p. The implementations compute in float32
// and sum in their own orders, so a token whose top-p or min-p test lies within a small margin of
// its threshold may be kept or not ("maybe"): kMassMargin of the kept mass for top-p, kWeightMargin
// (relative) of min_p. The race uses the contract's uniforms (the generator is part of the
// contract); a token may be returned when it is kept or maybe kept and its quotient w / E is within
// kScoreMargin (relative) of the largest quotient among the surely kept tokens. Everything else is
// exact: greedy is the first token of the order, top_k = 1 the argmax, and a token outside the
// kept set (beyond every margin) is always a failure.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "csrc/common/sampling.h"

namespace xllm_kernel::sampling {

inline constexpr double kMassMargin = 1e-4;    // of the kept mass W: float32 sums in any order
inline constexpr double kWeightMargin = 1e-4;  // of min_p: float32 exp of a float32 argument
inline constexpr double kScoreMargin = 1e-5;   // of the largest quotient: float32 w / E

// One row's verdict.
struct ReferenceRow {
  std::vector<int64_t> allowed;  // the tokens a correct implementation may return (kInvalidRow for
                                 // a row the rules cannot sample)
  int64_t sure_kept = 0;         // tokens kept whatever the rounding
  int64_t maybe_kept = 0;        // tokens within a margin of a threshold
  bool exact = true;             // one allowed token
};

// Float64 verdicts for every row. Inputs of any device; the logits of any float dtype (NaN counts
// as -inf, as the kernels treat it).
inline std::vector<ReferenceRow> reference_sample(const at::Tensor& logits, const at::Tensor& temperature,
                                                  const at::Tensor& top_k, const at::Tensor& top_p,
                                                  const at::Tensor& min_p, const at::Tensor& seeds,
                                                  const at::Tensor& offsets) {
  const at::Tensor l_all = logits.to(at::kCPU, at::kDouble).contiguous();
  const at::Tensor t_all = temperature.to(at::kCPU, at::kFloat).contiguous();
  const at::Tensor k_all = top_k.to(at::kCPU, at::kInt).contiguous();
  const at::Tensor p_all = top_p.to(at::kCPU, at::kFloat).contiguous();
  const at::Tensor m_all = min_p.to(at::kCPU, at::kFloat).contiguous();
  const at::Tensor s_all = seeds.to(at::kCPU, at::kLong).contiguous();
  const at::Tensor o_all = offsets.to(at::kCPU, at::kLong).contiguous();
  const int64_t batch = logits.size(0), vocab = logits.size(1);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<ReferenceRow> rows(static_cast<size_t>(batch));
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  std::vector<double> l(static_cast<size_t>(vocab));
  for (int64_t r = 0; r < batch; ++r) {
    ReferenceRow& row = rows[static_cast<size_t>(r)];
    const double* src = l_all.const_data_ptr<double>() + r * vocab;
    for (int64_t i = 0; i < vocab; ++i) l[i] = std::isnan(src[i]) ? -kInf : src[i];
    const float t = t_all.const_data_ptr<float>()[r], p = p_all.const_data_ptr<float>()[r];
    const float m = m_all.const_data_ptr<float>()[r];
    const int64_t seed = s_all.const_data_ptr<int64_t>()[r], offset = o_all.const_data_ptr<int64_t>()[r];
    const double l_max = *std::max_element(l.begin(), l.end());
    if (!kernels::sampling_parameters_valid(t, p, m) || l_max == -kInf) {
      row.allowed = {kernels::kInvalidRow};
      continue;
    }
    // The order: logit descending, then index ascending.
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return l[a] > l[b]; });
    if (t == 0) {
      row.allowed = {order[0]};
      row.sure_kept = 1;
      continue;
    }
    const int64_t k = kernels::sampling_top_k(k_all.const_data_ptr<int32_t>()[r], vocab);
    std::vector<double> w(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) {
      const double x = l[order[j]];
      w[j] = l_max == kInf ? (x == kInf ? 1.0 : 0.0) : std::exp((x - l_max) / t);
    }
    const double mass = std::accumulate(w.begin(), w.end(), 0.0);
    // Each position's status: 2 kept, 1 maybe, 0 dropped (the first token is always kept).
    std::vector<int> status(static_cast<size_t>(k), 2);
    double before = 0;
    for (int64_t j = 0; j < k; ++j) {
      if (j > 0 && p < 1) {
        const double threshold = p * mass, margin = kMassMargin * mass;
        if (before > threshold + margin) {
          status[j] = 0;
        } else if (before >= threshold - margin) {
          status[j] = std::min(status[j], 1);
        }
      }
      if (j > 0 && m > 0) {
        if (w[j] < m * (1 - kWeightMargin)) {
          status[j] = 0;
        } else if (w[j] < m * (1 + kWeightMargin)) {
          status[j] = std::min(status[j], 1);
        }
      }
      before += w[j];
    }
    // The race over the kept and maybe kept tokens.
    std::vector<double> score(static_cast<size_t>(k), -1.0);
    double best_sure = 0;
    for (int64_t j = 0; j < k; ++j) {
      if (status[j] == 0) continue;
      const double e = -std::log(static_cast<double>(kernels::sampling_uniform(seed, offset, order[j])));
      score[j] = w[j] / e;
      if (status[j] == 2) {
        best_sure = std::max(best_sure, score[j]);
        ++row.sure_kept;
      } else {
        ++row.maybe_kept;
      }
    }
    for (int64_t j = 0; j < k; ++j) {
      if (status[j] != 0 && score[j] > 0 && score[j] >= best_sure * (1 - kScoreMargin)) row.allowed.push_back(order[j]);
    }
    std::sort(row.allowed.begin(), row.allowed.end());
    row.exact = row.allowed.size() == 1;
  }
  return rows;
}

}  // namespace xllm_kernel::sampling
