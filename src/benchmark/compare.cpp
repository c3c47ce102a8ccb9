#include "src/benchmark/compare.h"

#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "src/benchmark/statistics.h"
#include "src/tools/report.h"

namespace xllm_kernel::benchmark {

using nlohmann::json;

namespace {

// (case_id | implementation) -> device samples of that result.
std::map<std::string, std::vector<double>> samples_of(const json& report) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& r : report.at("results")) {
    if (r.at("status") != "timed") continue;
    out[r.at("case_id").get<std::string>() + " | " + r.at("implementation").get<std::string>()] =
        r.at("samples").at("device").get<std::vector<double>>();
  }
  return out;
}

json ratio_json(const Ratio& r) { return {{"low", r.low}, {"point", r.point}, {"high", r.high}}; }

}  // namespace

json compare_reports(const json& baseline, const json& candidate, const json& baseline2, double tolerance) {
  const auto a = samples_of(baseline), b = samples_of(candidate), c = samples_of(baseline2);
  json rows = json::array();
  int drift = 0;
  for (const auto& [key, base] : a) {
    auto cand = b.find(key);
    auto base2 = c.find(key);
    if (cand == b.end() || base2 == c.end()) continue;
    // The baselines' two runs are pooled as the reference for the candidate.
    std::vector<double> pooled = base;
    pooled.insert(pooled.end(), base2->second.begin(), base2->second.end());
    const Ratio vs = median_ratio(pooled, cand->second);
    const Ratio noise = median_ratio(base, base2->second);
    const bool drifted = noise.low > 1 + tolerance || noise.high < 1 - tolerance;
    std::string verdict = drifted ? "drift" : vs.high < 1 ? "faster" : vs.low > 1 ? "slower" : "same";
    drift += drifted;
    const auto bar = key.find(" | ");
    rows.push_back({{"case_id", key.substr(0, bar)},
                    {"implementation", key.substr(bar + 3)},
                    {"candidate_over_baseline", ratio_json(vs)},
                    {"baseline2_over_baseline", ratio_json(noise)},
                    {"verdict", verdict}});
  }
  return {{"schema", "xllm-kernel/benchmark-comparison/1"},
          {"tolerance", tolerance},
          {"rows", rows},
          {"drift", drift > 0},
          {"compared", rows.size()}};
}

std::string compare_markdown(const json& comparison) {
  std::ostringstream md;
  md << "# Benchmark comparison (baseline / candidate / baseline)\n\n";
  md << "Ratios are median device time, candidate over both baselines (below 1 is faster), with 95% bootstrap "
        "intervals.\n\n";
  md << "| case | implementation | candidate / baseline | baseline2 / baseline | verdict |\n|---|---|---|---|---|\n";
  auto fmt = [](const json& r) {
    return tools::format_number(r["point"].get<double>()) + " [" + tools::format_number(r["low"].get<double>()) +
           ", " + tools::format_number(r["high"].get<double>()) + "]";
  };
  for (const auto& row : comparison["rows"]) {
    md << "| `" << row["case_id"].get<std::string>() << "` | `" << row["implementation"].get<std::string>() << "` | "
       << fmt(row["candidate_over_baseline"]) << " | " << fmt(row["baseline2_over_baseline"]) << " | "
       << row["verdict"].get<std::string>() << " |\n";
  }
  if (comparison["drift"].get<bool>()) {
    md << "\nThe two baseline runs disagree beyond their noise (drift): the machine changed during the comparison; "
          "rerun before trusting the candidate's ratios.\n";
  }
  return md.str();
}

int compare_main(const std::vector<std::string>& argv) {
  CLI::App app{"Compares benchmark reports taken as baseline, candidate, baseline again.",
               "xllm-kernel-benchmark compare"};
  std::vector<std::string> files;
  std::string output, markdown;
  double tolerance = 0.02;
  app.add_option("reports", files, "BASELINE CANDIDATE BASELINE2 (benchmark JSON reports)")->required()->expected(3);
  app.add_option("--output", output, "JSON comparison path (written atomically)");
  app.add_option("--markdown", markdown, "Markdown comparison path (written atomically)");
  app.add_option("--tolerance", tolerance, "Relative baseline disagreement tolerated before calling drift")
      ->capture_default_str();
  std::vector<std::string> args(argv.rbegin(), argv.rend() - 2);  // drop program and "compare"
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  std::vector<json> reports;
  for (const auto& f : files) {
    std::ifstream in(f);
    if (!in) {
      std::cerr << "xllm-kernel-benchmark compare: cannot read " << f << "\n";
      return 2;
    }
    try {
      reports.push_back(json::parse(in));
      reports.back().at("results");
    } catch (const std::exception& e) {
      std::cerr << "xllm-kernel-benchmark compare: " << f << " is not a benchmark report: " << e.what() << "\n";
      return 2;
    }
  }
  const json comparison = compare_reports(reports[0], reports[1], reports[2], tolerance);
  const std::string md = compare_markdown(comparison);
  std::cout << md;
  if (!output.empty()) tools::write_atomically(output, comparison.dump(2) + "\n");
  if (!markdown.empty()) tools::write_atomically(markdown, md);
  return comparison["compared"].get<size_t>() == 0 ? 3 : 0;
}

}  // namespace xllm_kernel::benchmark
