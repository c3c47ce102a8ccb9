// A/B comparison of two builds over interleaved rounds (scripts/ab.sh runs them): the same
// benchmark command run alternately with a baseline and a candidate build, in ABBA order (A B, B A,
// A B, ...), so that round i of each side ran next to the other's round i.
//
//   xllm-kernel-benchmark ab --baseline a0.json a1.json ... --candidate b0.json b1.json ...
//
// Per (case, implementation) timed in every report: each round's median device time; the ratio
// median(candidate rounds) / median(baseline rounds) with a 95% bootstrap interval over the rounds,
// pairs kept (paired_median_ratio: a drift of the shared machine moves a pair together and stays
// out of the interval); "faster" (interval below 1), "slower" (above 1) or "same" (it straddles 1:
// no speed change shown).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace xllm_kernel::benchmark {

// The least rounds of each side the command accepts (the A/B rule: at least 5, ABBA).
inline constexpr size_t kAbMinRounds = 5;

// The comparison ({schema, rounds, rows, compared, faster, slower, same}); each row: case_id,
// implementation, baseline_round_medians, candidate_round_medians (seconds), candidate_over_baseline
// {low, point, high}, straddles_one, baseline_spread (max / min of the baseline's round medians),
// verdict. baseline.size() must equal candidate.size() (>= 1).
nlohmann::json compare_rounds(const std::vector<nlohmann::json>& baseline, const std::vector<nlohmann::json>& candidate);

std::string ab_markdown(const nlohmann::json& comparison);

// `xllm-kernel-benchmark ab --baseline F... --candidate F... [--output F] [--markdown F]
//  [--fail-on slower|none] [--allow-mismatch] [--min-rounds N]`. Exit codes: 0, 2 (usage, unreadable
// reports, too few or unequal rounds), kCompareNothing, kCompareSlower (--fail-on slower),
// kCompareMismatch (compare.h).
int ab_main(const std::vector<std::string>& argv);

}  // namespace xllm_kernel::benchmark
