#include "src/numerics/distributed_report.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <stdexcept>

#include "src/benchmark/statistics.h"
#include "src/numerics/report.h"

namespace xllm_kernel::numerics {
namespace {

using benchmark::summarize;

// The status most ranks report; a tie goes to the status of the lowest rank among the tied.
std::string majority(const std::vector<std::string>& statuses) {
  std::map<std::string, int> counts;
  for (const auto& s : statuses) ++counts[s];
  std::string best;
  int best_count = 0;
  for (const auto& s : statuses) {  // rank order, so ties resolve to the lowest rank
    if (counts[s] > best_count) {
      best = s;
      best_count = counts[s];
    }
  }
  return best;
}

// Per rank: rank, local rank, device, host, the rank's report path and summary, its environment.
json ranks_json(const std::vector<json>& reports) {
  json ranks = json::array();
  for (size_t r = 0; r < reports.size(); ++r) {
    const json& rep = reports[r];
    const json d = rep.value("distributed", json::object());
    json row{{"rank", r},
             {"local_rank", d.value("local_rank", 0)},
             {"device", rep.at("environment").value("device", rep.value("device", ""))},
             {"host", rep.at("environment").value("host", "")},
             {"report", d.value("report", json())},
             {"summary", rep.at("summary")},
             {"environment", rep.at("environment")}};
    if (rep.contains("copy_bandwidth_gbps")) row["copy_bandwidth_gbps"] = rep["copy_bandwidth_gbps"];
    ranks.push_back(std::move(row));
  }
  return ranks;
}

// The device type the ranks share: "cuda" of "cuda:1".
std::string device_type(const json& report) {
  const std::string d = report.value("device", "");
  return d.substr(0, d.find(':'));
}

json header(const std::vector<json>& reports, const char* schema, const char* tool) {
  if (reports.empty()) throw std::invalid_argument("aggregate: no reports");
  const json& first = reports[0];
  return {{"schema", schema},
          {"tool", tool},
          {"operation", first.at("operation")},
          {"device", device_type(first)},
          {"mode", first.at("mode")},
          {"seed", first.at("seed")},
          {"world_size", reports.size()},
          {"ranks", ranks_json(reports)}};
}

// Finds rows of every rank matching rank 0's row by `key`. Ranks checked their configurations
// against each other at the start, so a missing row is a bug, not a user error.
template <class Key>
std::vector<const json*> match(const std::vector<const json*>& tables, const json& row, Key key) {
  std::vector<const json*> rows;
  for (size_t r = 0; r < tables.size(); ++r) {
    const json* found = nullptr;
    for (const auto& candidate : *tables[r]) {
      if (key(candidate) == key(row)) {
        found = &candidate;
        break;
      }
    }
    if (found == nullptr) {
      throw std::runtime_error("aggregate: rank " + std::to_string(r) + " has no result for " + key(row));
    }
    rows.push_back(found);
  }
  return rows;
}

constexpr const char* kErrorFields[] = {"max_abs_error", "max_rel_error", "max_ulp", "headroom"};

json numerics_case(const std::vector<const json*>& rows) {
  const json& first = *rows[0];
  std::vector<std::string> statuses;
  for (const json* r : rows) statuses.push_back(r->at("status").get<std::string>());
  const std::string consensus = majority(statuses);
  const bool agreed = std::all_of(statuses.begin(), statuses.end(), [&](const auto& s) { return s == consensus; });
  json out{{"case_id", first.at("case_id")},
           {"parameters", first.at("parameters")},
           {"status", agreed ? consensus : "disagreed"},
           {"consensus", agreed ? "agreed" : "disagreed"},
           {"majority_status", consensus},
           {"statuses", statuses}};
  // The worst error statistics over the ranks that validated the case.
  bool any = false, identical = true;
  json worst = json::object();
  for (const json* r : rows) {
    if (!r->contains("max_abs_error")) continue;
    for (const char* f : kErrorFields) {
      const double v = r->at(f).get<double>();
      worst[f] = any ? std::max(worst[f].get<double>(), v) : v;
    }
    any = true;
  }
  if (any) {
    // Same inputs on the same kind of device: errors that are not bitwise equal point at a
    // nondeterministic kernel or differing devices; informative, not a failure.
    const json* reference = nullptr;
    for (const json* r : rows) {
      if (!r->contains("max_abs_error")) continue;
      if (reference == nullptr) {
        reference = r;
        continue;
      }
      for (const char* f : kErrorFields) identical = identical && r->at(f) == reference->at(f);
    }
    for (const char* f : kErrorFields) out[f] = worst[f];
    out["identical_errors"] = identical;
  }
  if (agreed && consensus == "unsupported") out["reason"] = first.value("reason", "");
  if (agreed && consensus == "failed") out["failures"] = first.value("failures", json::array());
  if (!agreed) {
    json dissent = json::array();
    for (size_t r = 0; r < rows.size(); ++r) {
      if (statuses[r] == consensus) continue;
      const json& row = *rows[r];
      json d{{"rank", r}, {"status", statuses[r]}};
      if (row.contains("reason")) d["reason"] = row["reason"];
      if (row.contains("failures")) d["failures"] = row["failures"];
      for (const char* f : kErrorFields) {
        if (row.contains(f)) d[f] = row[f];
      }
      dissent.push_back(std::move(d));
    }
    out["dissent"] = std::move(dissent);
  }
  return out;
}

std::string us(double seconds) { return format_number(seconds * 1e6); }

}  // namespace

json aggregate_numerics(const std::vector<json>& reports) {
  json out = header(reports, "xllm-kernel/numerics-distributed-report/1", "numerics");
  out["implementations"] = json::array();
  int passed = 0, failed = 0, unsupported = 0, disagreed = 0;
  const auto name_of = [](const json& impl) { return impl.at("implementation").at("name").get<std::string>(); };
  for (const auto& impl : reports[0].at("implementations")) {
    std::vector<const json*> tables;
    for (const auto& rep : reports) tables.push_back(&rep.at("implementations"));
    const auto impls = match(tables, impl, name_of);
    std::vector<const json*> result_tables;
    for (const json* i : impls) result_tables.push_back(&i->at("results"));
    json results = json::array();
    int c_passed = 0, c_failed = 0, c_unsupported = 0, c_disagreed = 0;
    for (const auto& row : impl.at("results")) {
      const auto rows = match(result_tables, row, [](const json& r) { return r.at("case_id").get<std::string>(); });
      json c = numerics_case(rows);
      const std::string s = c["status"];
      (s == "passed" ? c_passed : s == "failed" ? c_failed : s == "unsupported" ? c_unsupported : c_disagreed) += 1;
      results.push_back(std::move(c));
    }
    double worst_headroom = 0, worst_ulp = 0;
    for (const json* i : impls) {
      worst_headroom = std::max(worst_headroom, i->value("worst_headroom", 0.0));
      worst_ulp = std::max(worst_ulp, i->value("worst_ulp", 0.0));
    }
    out["implementations"].push_back(
        {{"implementation", impl.at("implementation")},
         {"excluded_reason", impl.value("excluded_reason", "")},
         {"coverage",
          {{"cases", results.size()},
           {"passed", c_passed},
           {"failed", c_failed},
           {"unsupported", c_unsupported},
           {"disagreed", c_disagreed}}},
         {"worst_headroom", worst_headroom},
         {"worst_ulp", worst_ulp},
         {"results", std::move(results)}});
    passed += c_passed;
    failed += c_failed;
    unsupported += c_unsupported;
    disagreed += c_disagreed;
  }
  const int code = failed + disagreed > 0 ? 1 : passed == 0 ? 3 : 0;
  out["summary"] = {{"passed", passed},
                    {"failed", failed},
                    {"unsupported", unsupported},
                    {"disagreed", disagreed},
                    {"status", code == 0 ? "passed" : code == 1 ? "failed" : "nothing_passed"},
                    {"exit_code", code}};
  return out;
}

namespace {

std::string ranks_table(const json& aggregate, bool bandwidth) {
  std::ostringstream md;
  md << "| rank | device | host | " << (bandwidth ? "copy GB/s | timed | failed" : "passed | failed | unsupported")
     << " | report |\n|---|---|---|---|---|---|---|\n";
  for (const auto& r : aggregate["ranks"]) {
    const json& s = r["summary"];
    md << "| " << r["rank"] << " | " << r["device"].get<std::string>() << " | " << r["host"].get<std::string>() << " | ";
    if (bandwidth) {
      md << format_number(r.value("copy_bandwidth_gbps", 0.0)) << " | " << s.value("timed", 0) << " | "
         << s.value("failed", 0);
    } else {
      md << s.value("passed", 0) << " | " << s.value("failed", 0) << " | " << s.value("unsupported", 0);
    }
    md << " | " << (r["report"].is_null() ? std::string("-") : "`" + r["report"].get<std::string>() + "`") << " |\n";
  }
  return md.str();
}

std::string dissent_text(const json& c) {
  std::string out = "majority " + c["majority_status"].get<std::string>();
  for (const auto& d : c.value("dissent", json::array())) {
    out += "; rank " + std::to_string(d["rank"].get<int>()) + " " + d["status"].get<std::string>();
    if (d.contains("headroom")) out += " (headroom " + format_number(d["headroom"].get<double>()) + ")";
    if (d.contains("reason")) out += ": " + d["reason"].get<std::string>();
    for (const auto& f : d.value("failures", json::array())) out += ": " + f.get<std::string>();
  }
  return out;
}

}  // namespace

std::string numerics_aggregate_markdown(const json& aggregate, size_t row_limit) {
  std::ostringstream md;
  md << "# Numerics: " << aggregate["operation"].get<std::string>() << " on " << aggregate["world_size"] << " "
     << aggregate["device"].get<std::string>() << " ranks (" << aggregate["mode"].get<std::string>() << ")\n\n";
  const json& env = aggregate["ranks"][0]["environment"];
  md << "Revision `" << env["revision"].get<std::string>() << "`, torch " << env["torch"].get<std::string>()
     << ", seed " << aggregate["seed"] << ". A case passes when it passes on every rank; ranks that report "
     << "different statuses disagree.\n\n";
  md << ranks_table(aggregate, false) << "\n";
  md << "| implementation | cases | passed | failed | unsupported | disagreed | worst headroom | max ULP |\n";
  md << "|---|---|---|---|---|---|---|---|\n";
  for (const auto& impl : aggregate["implementations"]) {
    const json& c = impl["coverage"];
    md << "| `" << impl["implementation"]["name"].get<std::string>() << "` | " << c["cases"] << " | " << c["passed"]
       << " | " << c["failed"] << " | " << c["unsupported"] << " | " << c["disagreed"] << " | "
       << format_number(impl["worst_headroom"].get<double>()) << " | " << format_number(impl["worst_ulp"].get<double>())
       << " |\n";
  }
  bool table = false;
  size_t rows = 0, left_out = 0;
  for (const auto& impl : aggregate["implementations"]) {
    for (const auto& r : impl["results"]) {
      if (r["status"] == "passed") continue;
      if (rows++ >= row_limit) {
        ++left_out;
        continue;
      }
      if (!table) {
        md << "\n| implementation | case | status | detail |\n|---|---|---|---|\n";
        table = true;
      }
      std::string detail;
      if (r["status"] == "disagreed") detail = dissent_text(r);
      if (r["status"] == "unsupported") detail = r.value("reason", "");
      for (const auto& f : r.value("failures", json::array())) detail += (detail.empty() ? "" : "; ") + f.get<std::string>();
      md << "| `" << impl["implementation"]["name"].get<std::string>() << "` | `" << r["case_id"].get<std::string>()
         << "` | " << r["status"].get<std::string>() << " | " << detail << " |\n";
    }
  }
  if (left_out > 0) md << "\n" << left_out << " more cases did not pass; the JSON report lists every case.\n";
  return md.str();
}

json aggregate_benchmark(const std::vector<json>& reports) {
  json out = header(reports, "xllm-kernel/benchmark-distributed-report/1", "benchmark");
  const json& first = reports[0];
  double copy_gbps = 0;
  for (const auto& rep : reports) {
    const double g = rep.at("copy_bandwidth_gbps").get<double>();
    copy_gbps = copy_gbps == 0 ? g : std::min(copy_gbps, g);
  }
  out.update({{"timing", first.at("timing")},
              {"device_timer", first.at("device_timer")},
              {"copy_bandwidth_gbps", copy_gbps},
              {"copy_bytes", first.at("copy_bytes")},
              {"implementations", first.at("implementations")}});
  std::vector<const json*> tables;
  for (const auto& rep : reports) tables.push_back(&rep.at("results"));
  const auto key = [](const json& r) {
    return r.at("case_id").get<std::string>() + " | " + r.at("implementation").get<std::string>();
  };
  json results = json::array();
  int timed = 0, failed = 0, unsupported = 0, disagreed = 0;
  for (const auto& row : first.at("results")) {
    const auto rows = match(tables, row, key);
    std::vector<std::string> statuses;
    for (const json* r : rows) statuses.push_back(r->at("status").get<std::string>());
    const std::string consensus = majority(statuses);
    const bool agreed = std::all_of(statuses.begin(), statuses.end(), [&](const auto& s) { return s == consensus; });
    json c{{"case_id", row.at("case_id")},
           {"parameters", row.at("parameters")},
           {"implementation", row.at("implementation")},
           {"status", agreed ? consensus : "disagreed"},
           {"consensus", agreed ? "agreed" : "disagreed"},
           {"majority_status", consensus},
           {"statuses", statuses}};
    if (!agreed) {
      ++disagreed;
      json dissent = json::array();
      for (size_t r = 0; r < rows.size(); ++r) {
        if (statuses[r] != consensus) {
          dissent.push_back({{"rank", r}, {"status", statuses[r]}, {"reason", rows[r]->value("reason", "")}});
        }
      }
      c["dissent"] = std::move(dissent);
      results.push_back(std::move(c));
      continue;
    }
    if (consensus != "timed") {
      // Agreed but not timed: unsupported everywhere, or failed validation everywhere.
      ++(consensus == "unsupported" ? unsupported : failed);
      c["reason"] = row.value("reason", "");
      results.push_back(std::move(c));
      continue;
    }
    ++timed;
    // Per-sample maximum over ranks: the samples were aligned by a barrier each, so sample i ran at
    // the same moment everywhere, and its slowest rank is what a collective-bound step would wait for.
    json samples = json::object();
    std::vector<std::vector<double>> device_by_rank;
    for (const char* timer : {"host_enqueue", "device", "wall"}) {
      std::vector<double> worst;
      for (size_t r = 0; r < rows.size(); ++r) {
        const auto s = rows[r]->at("samples").at(timer).get<std::vector<double>>();
        if (r == 0) worst = s;
        if (s.size() != worst.size()) {
          throw std::runtime_error("aggregate: rank " + std::to_string(r) + " has " + std::to_string(s.size()) +
                                   " samples of " + key(row) + ", rank 0 has " + std::to_string(worst.size()));
        }
        for (size_t i = 0; i < s.size(); ++i) worst[i] = std::max(worst[i], s[i]);
        if (std::string(timer) == "device") device_by_rank.push_back(s);
      }
      c[timer] = benchmark::to_json(summarize(worst));
      samples[timer] = std::move(worst);
    }
    // Skew of rank r: the median over samples of (its time - the fastest rank's time in that sample),
    // and the share of samples in which it was the slowest.
    const size_t n = device_by_rank[0].size();
    std::vector<double> fastest(n), slowest(n), spread(n);
    for (size_t i = 0; i < n; ++i) {
      fastest[i] = slowest[i] = device_by_rank[0][i];
      for (const auto& s : device_by_rank) {
        fastest[i] = std::min(fastest[i], s[i]);
        slowest[i] = std::max(slowest[i], s[i]);
      }
      spread[i] = slowest[i] - fastest[i];
    }
    json skew = json::array(), medians = json::array();
    for (size_t r = 0; r < device_by_rank.size(); ++r) {
      std::vector<double> excess(n);
      int slowest_count = 0;
      for (size_t i = 0; i < n; ++i) {
        excess[i] = device_by_rank[r][i] - fastest[i];
        // The lowest rank among equals counts as the slowest, so the shares add up to 1.
        if (device_by_rank[r][i] == slowest[i]) {
          bool earlier = false;
          for (size_t q = 0; q < r; ++q) earlier = earlier || device_by_rank[q][i] == slowest[i];
          slowest_count += !earlier;
        }
      }
      skew.push_back({{"rank", r},
                      {"median_excess", n ? benchmark::percentile(excess, 50) : 0.0},
                      {"slowest_fraction", n ? static_cast<double>(slowest_count) / static_cast<double>(n) : 0.0}});
      medians.push_back(n ? benchmark::percentile(device_by_rank[r], 50) : 0.0);
    }
    const double median = c["device"]["median"].get<double>();
    const double bytes = static_cast<double>(row.at("bytes_read").get<int64_t>() + row.at("bytes_written").get<int64_t>());
    const double gbps = median > 0 ? bytes / median / 1e9 : 0;
    c.update({{"implementation_detail", row.at("implementation_detail")},
              {"bytes_read", row.at("bytes_read")},
              {"bytes_written", row.at("bytes_written")},
              {"flops", row.at("flops")},
              {"calls_per_sample", row.at("calls_per_sample")},
              {"achieved_gbps", gbps},
              {"percent_of_copy", copy_gbps > 0 ? 100.0 * gbps / copy_gbps : 0.0},
              {"warm_cache", gbps > copy_gbps},
              {"rank_device_medians", medians},
              {"skew", {{"per_rank", skew}, {"spread", benchmark::to_json(summarize(spread))}}},
              {"samples", std::move(samples)}});
    results.push_back(std::move(c));
  }
  // Ratios within each case, from the aggregated medians.
  std::map<std::string, std::pair<double, double>> per_case;  // case -> (fastest, torch)
  for (const auto& r : results) {
    if (r["status"] != "timed") continue;
    auto& [fastest, torch_time] = per_case[r["case_id"].get<std::string>()];
    const double t = r["device"]["median"].get<double>();
    if (fastest == 0 || t < fastest) fastest = t;
    if (r["implementation_detail"].value("solution", "") == "torch") torch_time = t;
  }
  for (auto& r : results) {
    if (r["status"] != "timed") continue;
    const auto& [fastest, torch_time] = per_case[r["case_id"].get<std::string>()];
    const double t = r["device"]["median"].get<double>();
    r["ratio_to_fastest"] = t / fastest;
    r["speedup_vs_torch"] = torch_time > 0 ? json(torch_time / t) : json(nullptr);
  }
  const int code = failed + disagreed > 0 ? 1 : timed == 0 ? 3 : 0;
  out["results"] = std::move(results);
  out["summary"] = {{"timed", timed},
                    {"failed", failed},
                    {"unsupported", unsupported},
                    {"disagreed", disagreed},
                    {"exit_code", code}};
  return out;
}

std::string benchmark_aggregate_markdown(const json& aggregate, size_t row_limit) {
  std::ostringstream md;
  md << "# Benchmark: " << aggregate["operation"].get<std::string>() << " on " << aggregate["world_size"] << " "
     << aggregate["device"].get<std::string>() << " ranks (" << aggregate["mode"].get<std::string>() << ")\n\n";
  const json& env = aggregate["ranks"][0]["environment"];
  md << "Revision `" << env["revision"].get<std::string>() << "`, torch " << env["torch"].get<std::string>() << ". "
     << "Every sample starts at a barrier; times are the per-sample maximum over ranks (the slowest rank), "
     << "bandwidth is against the slowest rank's copy bandwidth ("
     << format_number(aggregate["copy_bandwidth_gbps"].get<double>()) << " GB/s). "
     << aggregate["device_timer"].get<std::string>() << ".\n\n";
  md << ranks_table(aggregate, true) << "\n";
  md << "| case | implementation | median us | p10-p90 us | GB/s | % of copy | most skewed rank | x fastest | "
        "speed-up vs torch |\n|---|---|---|---|---|---|---|---|---|\n";
  size_t rows = 0, left_out = 0;
  for (const auto& r : aggregate["results"]) {
    if (rows++ >= row_limit) {
      ++left_out;
      continue;
    }
    md << "| `" << r["case_id"].get<std::string>() << "` | `" << r["implementation"].get<std::string>() << "` | ";
    if (r["status"] != "timed") {
      md << r["status"].get<std::string>() << ": "
         << (r["status"] == "disagreed" ? dissent_text(r) : r.value("reason", std::string())) << " | | | | | | | |\n";
      continue;
    }
    const json& d = r["device"];
    const json* most = nullptr;
    for (const auto& s : r["skew"]["per_rank"]) {
      if (most == nullptr || s["median_excess"].get<double>() > (*most)["median_excess"].get<double>()) most = &s;
    }
    md << us(d["median"].get<double>()) << " | " << us(d["p10"].get<double>()) << "-" << us(d["p90"].get<double>())
       << " | " << format_number(r["achieved_gbps"].get<double>()) << " | "
       << format_number(r["percent_of_copy"].get<double>()) << (r["warm_cache"].get<bool>() ? " (warm cache)" : "")
       << " | rank " << (*most)["rank"] << " +" << us((*most)["median_excess"].get<double>()) << " us, slowest in "
       << format_number(100 * (*most)["slowest_fraction"].get<double>()) << "% | "
       << format_number(r["ratio_to_fastest"].get<double>()) << " | "
       << (r["speedup_vs_torch"].is_null() ? std::string("-") : format_number(r["speedup_vs_torch"].get<double>()))
       << " |\n";
  }
  if (left_out > 0) md << "\n" << left_out << " more rows; the JSON report lists every case.\n";
  return md.str();
}

}  // namespace xllm_kernel::numerics
