#include "src/benchmark/ab.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "src/benchmark/compare.h"
#include "src/benchmark/statistics.h"
#include "src/tools/report.h"

namespace xllm_kernel::benchmark {

using nlohmann::json;

namespace {

// (case_id | implementation) -> the median device time of that result in one report.
std::map<std::string, double> round_medians(const json& report) {
  std::map<std::string, double> out;
  for (const auto& r : report.at("results")) {
    if (r.at("status") != "timed") continue;
    const auto samples = r.at("samples").at("device").get<std::vector<double>>();
    if (samples.empty()) continue;
    out[r.at("case_id").get<std::string>() + " | " + r.at("implementation").get<std::string>()] =
        percentile(samples, 50);
  }
  return out;
}

std::string interval_text(const json& r) {
  return tools::format_number(r["point"].get<double>()) + " [" + tools::format_number(r["low"].get<double>()) + ", " +
         tools::format_number(r["high"].get<double>()) + "]";
}

// The values of a mismatch, one per report: "a0: x, a1: y, ..., b0: z".
std::string mismatch_lines(const json& mismatches, size_t rounds) {
  std::ostringstream out;
  for (const auto& m : mismatches) {
    out << "- " << m["field"].get<std::string>() << ":";
    for (size_t i = 0; i < m["values"].size(); ++i) {
      out << (i ? ", " : " ") << (i < rounds ? "baseline " : "candidate ") << (i % rounds) << " "
          << m["values"][i].dump();
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace

json compare_rounds(const std::vector<json>& baseline, const std::vector<json>& candidate) {
  if (baseline.empty() || baseline.size() != candidate.size()) {
    throw std::invalid_argument("compare_rounds: expected as many candidate rounds as baseline rounds (at least 1); given " +
                                std::to_string(baseline.size()) + " and " + std::to_string(candidate.size()));
  }
  std::vector<std::map<std::string, double>> a, b;
  for (const auto& r : baseline) a.push_back(round_medians(r));
  for (const auto& r : candidate) b.push_back(round_medians(r));
  json rows = json::array();
  int faster = 0, slower = 0, same = 0;
  for (const auto& [key, first] : a[0]) {
    std::vector<double> am, bm;
    for (size_t i = 0; i < a.size(); ++i) {
      auto ia = a[i].find(key);
      auto ib = b[i].find(key);
      if (ia == a[i].end() || ib == b[i].end()) break;
      am.push_back(ia->second);
      bm.push_back(ib->second);
    }
    if (am.size() != a.size()) continue;  // not timed in every round
    const Ratio ratio = paired_median_ratio(am, bm);
    const bool straddles = ratio.low <= 1.0 && ratio.high >= 1.0;
    const std::string verdict = straddles ? "same" : ratio.high < 1.0 ? "faster" : "slower";
    faster += verdict == "faster";
    slower += verdict == "slower";
    same += verdict == "same";
    const auto bar = key.find(" | ");
    rows.push_back({{"case_id", key.substr(0, bar)},
                    {"implementation", key.substr(bar + 3)},
                    {"baseline_round_medians", am},
                    {"candidate_round_medians", bm},
                    {"candidate_over_baseline", {{"low", ratio.low}, {"point", ratio.point}, {"high", ratio.high}}},
                    {"straddles_one", straddles},
                    {"baseline_spread", *std::max_element(am.begin(), am.end()) / *std::min_element(am.begin(), am.end())},
                    {"verdict", verdict}});
  }
  return {{"schema", "xllm-kernel/benchmark-ab/1"},
          {"rounds", baseline.size()},
          {"order", "ABBA: round i of the baseline and of the candidate ran next to each other"},
          {"statistic", "median of the candidate's round medians over the baseline's; 95% bootstrap interval over "
                        "the rounds, pairs kept"},
          {"rows", rows},
          {"compared", rows.size()},
          {"faster", faster},
          {"slower", slower},
          {"same", same}};
}

std::string ab_markdown(const json& comparison) {
  std::ostringstream md;
  md << "# A/B comparison, " << comparison["rounds"].get<size_t>() << " rounds of each build (ABBA)\n\n";
  md << "Ratio: the median of the candidate's per-round median device times over the baseline's (below 1 is "
        "faster), with a 95% bootstrap interval over the rounds (pairs of adjacent rounds kept). Baseline spread: "
        "max / min of the baseline's round medians, the machine's drift during the run.\n\n";
  md << "| case | implementation | candidate / baseline | baseline spread | verdict |\n|---|---|---|---|---|\n";
  for (const auto& row : comparison["rows"]) {
    md << "| `" << row["case_id"].get<std::string>() << "` | `" << row["implementation"].get<std::string>() << "` | "
       << interval_text(row["candidate_over_baseline"]) << " | "
       << tools::format_number(row["baseline_spread"].get<double>()) << " | " << row["verdict"].get<std::string>()
       << (row["straddles_one"].get<bool>() ? " (the interval straddles 1: no speed change shown)" : "") << " |\n";
  }
  if (const json mismatches = comparison.value("mismatches", json::array()); !mismatches.empty()) {
    md << "\nThe reports differ in configuration (compared with --allow-mismatch):\n\n"
       << mismatch_lines(mismatches, comparison["rounds"].get<size_t>());
  }
  return md.str();
}

int ab_main(const std::vector<std::string>& argv) {
  CLI::App app{"Compares benchmark reports of two builds run in alternating rounds (ABBA; scripts/ab.sh).",
               "xllm-kernel-benchmark ab"};
  std::vector<std::string> base_files, cand_files;
  std::string output, markdown, fail_on = "slower";
  size_t min_rounds = kAbMinRounds;
  bool allow_mismatch = false;
  app.add_option("--baseline", base_files, "The baseline build's reports, round 0 first")->required();
  app.add_option("--candidate", cand_files, "The candidate build's reports, as many, in the same order")->required();
  app.add_option("--output", output, "JSON comparison path (written atomically)");
  app.add_option("--markdown", markdown, "Markdown comparison path (written atomically)");
  app.add_option("--fail-on", fail_on, "slower (exit 4: a candidate slower beyond its interval) or none")
      ->check(CLI::IsMember({"slower", "none"}))
      ->capture_default_str();
  app.add_option("--min-rounds", min_rounds, "Fewest rounds of each side accepted")->capture_default_str();
  app.add_flag("--allow-mismatch", allow_mismatch,
               "Compare reports whose configuration differs (operation, device, mode, iterations, seed, dtypes, "
               "host, CPU model, torch); without it they are refused (exit 6)");
  std::vector<std::string> args(argv.rbegin(), argv.rend() - 2);  // drop program and "ab"
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (base_files.size() != cand_files.size() || base_files.size() < min_rounds) {
    std::cerr << "xllm-kernel-benchmark ab: expected as many --candidate as --baseline reports, at least "
              << min_rounds << " of each (--min-rounds); given " << base_files.size() << " and "
              << cand_files.size() << "\n";
    return 2;
  }
  std::vector<json> reports;
  if (!read_benchmark_reports(base_files, "xllm-kernel-benchmark ab", reports) ||
      !read_benchmark_reports(cand_files, "xllm-kernel-benchmark ab", reports)) {
    return 2;
  }
  const size_t rounds = base_files.size();
  const json mismatches = configuration_mismatches(reports);
  if (!mismatches.empty() && !allow_mismatch) {
    std::cerr << "xllm-kernel-benchmark ab: the reports differ in configuration, so their times are not comparable "
                 "(pass --allow-mismatch to compare them anyway):\n"
              << mismatch_lines(mismatches, rounds);
    return kCompareMismatch;
  }
  json comparison = compare_rounds(std::vector<json>(reports.begin(), reports.begin() + rounds),
                                   std::vector<json>(reports.begin() + rounds, reports.end()));
  comparison["mismatches"] = mismatches;
  comparison["fail_on"] = fail_on;
  const int code = comparison["compared"].get<size_t>() == 0                          ? kCompareNothing
                   : fail_on == "slower" && comparison["slower"].get<int>() > 0 ? kCompareSlower
                                                                                 : 0;
  comparison["exit_code"] = code;
  const std::string md = ab_markdown(comparison);
  std::cout << md;
  if (!output.empty()) tools::write_atomically(output, comparison.dump(2) + "\n");
  if (!markdown.empty()) tools::write_atomically(markdown, md);
  return code;
}

}  // namespace xllm_kernel::benchmark
