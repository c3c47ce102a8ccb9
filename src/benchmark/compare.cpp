#include "src/benchmark/compare.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
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

// The value at a JSON pointer, null where a report lacks it.
json value_at(const json& report, const char* pointer) {
  const json::json_pointer p(pointer);
  return report.is_object() && report.contains(p) ? report.at(p) : json();
}

// The dtypes a report's cases cover, sorted.
json dtype_grid(const json& report) {
  std::set<std::string> dtypes;
  const json results = value_at(report, "/results");
  if (results.is_array()) {
    for (const auto& r : results) {
      const json d = value_at(r, "/parameters/dtype");
      if (d.is_string()) dtypes.insert(d.get<std::string>());
    }
  }
  return json(std::vector<std::string>(dtypes.begin(), dtypes.end()));
}

// What runs must share for their times to be comparable: name -> where it is (the dtypes of the
// cases besides, dtype_grid).
const std::vector<std::pair<const char*, const char*>>& comparable_fields() {
  static const std::vector<std::pair<const char*, const char*>> kFields{
      {"operation", "/operation"}, {"device", "/device"}, {"mode", "/mode"},
      {"iterations", "/timing/iterations"}, {"seed", "/seed"}, {"host", "/environment/host"},
      {"cpu_model", "/environment/cpu_model"}, {"torch", "/environment/torch"}};
  return kFields;
}

}  // namespace

json configuration_mismatches(const json& baseline, const json& candidate, const json& baseline2) {
  json out = json::array();
  for (const auto& m : configuration_mismatches(std::vector<json>{baseline, candidate, baseline2})) {
    out.push_back({{"field", m["field"]}, {"baseline", m["values"][0]}, {"candidate", m["values"][1]},
                   {"baseline2", m["values"][2]}});
  }
  return out;
}

json configuration_mismatches(const std::vector<json>& reports) {
  json out = json::array();
  auto add = [&](const std::string& field, const json& values) {
    for (const auto& v : values) {
      if (v != values[0]) {
        out.push_back({{"field", field}, {"values", values}});
        return;
      }
    }
  };
  for (const auto& [field, pointer] : comparable_fields()) {
    json values = json::array();
    for (const auto& r : reports) values.push_back(value_at(r, pointer));
    add(field, values);
  }
  json dtypes = json::array();
  for (const auto& r : reports) dtypes.push_back(dtype_grid(r));
  add("dtypes", dtypes);
  return out;
}

json compare_reports(const json& baseline, const json& candidate, const json& baseline2, double tolerance) {
  const auto a = samples_of(baseline), b = samples_of(candidate), c = samples_of(baseline2);
  json rows = json::array();
  int drift = 0, slower = 0;
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
    slower += verdict == "slower";
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
          {"slower", slower},
          {"compared", rows.size()}};
}

bool read_benchmark_reports(const std::vector<std::string>& files, const std::string& who, std::vector<json>& out) {
  for (const auto& f : files) {
    std::ifstream in(f);
    if (!in) {
      std::cerr << who << ": cannot read " << f << "\n";
      return false;
    }
    try {
      out.push_back(json::parse(in));
      out.back().at("results");
    } catch (const std::exception& e) {
      std::cerr << who << ": " << f << " is not a benchmark report: " << e.what() << "\n";
      return false;
    }
  }
  return true;
}

int comparison_exit_code(const json& comparison, bool fail_on_slower, bool fail_on_drift) {
  if (comparison.at("compared").get<size_t>() == 0) return kCompareNothing;
  if (fail_on_slower && comparison.at("slower").get<int>() > 0) return kCompareSlower;
  if (fail_on_drift && comparison.at("drift").get<bool>()) return kCompareDrift;
  return 0;
}

std::string mismatch_text(const json& mismatches) {
  std::ostringstream out;
  for (const auto& m : mismatches) {
    out << "- " << m["field"].get<std::string>() << ": baseline " << m["baseline"].dump() << ", candidate "
        << m["candidate"].dump() << ", baseline2 " << m["baseline2"].dump() << "\n";
  }
  return out.str();
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
  if (const json mismatches = comparison.value("mismatches", json::array()); !mismatches.empty()) {
    md << "\nThe reports differ in configuration (compared with --allow-mismatch):\n\n" << mismatch_text(mismatches);
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
  std::vector<std::string> fail_on{"slower", "drift"};
  app.add_option("--fail-on", fail_on,
                 "What fails the comparison: slower (exit 4: a candidate slower beyond its interval), drift (exit 5: "
                 "the baselines disagree), or none")
      ->delimiter(',')
      ->check(CLI::IsMember({"slower", "drift", "none"}))
      ->capture_default_str();
  bool allow_mismatch = false;
  app.add_flag("--allow-mismatch", allow_mismatch,
               "Compare reports whose configuration differs (operation, device, mode, iterations, seed, dtypes, "
               "host, CPU model, torch); without it they are refused (exit 6)");
  std::vector<std::string> args(argv.rbegin(), argv.rend() - 2);  // drop program and "compare"
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  std::vector<json> reports;
  if (!read_benchmark_reports(files, "xllm-kernel-benchmark compare", reports)) return 2;
  const bool none = std::find(fail_on.begin(), fail_on.end(), "none") != fail_on.end();
  if (none && fail_on.size() > 1) {
    std::cerr << "xllm-kernel-benchmark compare: --fail-on: expected none alone, or slower and/or drift; given "
              << CLI::detail::join(fail_on, ",") << "\n";
    return 2;
  }
  const bool on_slower = std::find(fail_on.begin(), fail_on.end(), "slower") != fail_on.end();
  const bool on_drift = std::find(fail_on.begin(), fail_on.end(), "drift") != fail_on.end();
  const json mismatches = configuration_mismatches(reports[0], reports[1], reports[2]);
  if (!mismatches.empty() && !allow_mismatch) {
    std::cerr << "xllm-kernel-benchmark compare: the reports differ in configuration, so their times are not "
                 "comparable (pass --allow-mismatch to compare them anyway):\n"
              << mismatch_text(mismatches);
    return kCompareMismatch;
  }
  json comparison = compare_reports(reports[0], reports[1], reports[2], tolerance);
  comparison["mismatches"] = mismatches;
  comparison["fail_on"] = none ? std::vector<std::string>{} : fail_on;
  comparison["exit_code"] = comparison_exit_code(comparison, on_slower, on_drift);
  const std::string md = compare_markdown(comparison);
  std::cout << md;
  if (!output.empty()) tools::write_atomically(output, comparison.dump(2) + "\n");
  if (!markdown.empty()) tools::write_atomically(markdown, md);
  return comparison["exit_code"].get<int>();
}

}  // namespace xllm_kernel::benchmark
