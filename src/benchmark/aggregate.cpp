#include "src/benchmark/aggregate.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "src/benchmark/ratios.h"
#include "src/benchmark/statistics.h"
#include "src/tools/distributed/aggregate.h"
#include "src/tools/report.h"

namespace xllm_kernel::benchmark {

using nlohmann::json;
using tools::format_microseconds;
using tools::format_number;
namespace distributed = tools::distributed;

namespace {

// The rows of one case and implementation, rank by rank ("case_id | implementation").
std::string row_key(const json& r) { return r.at("case_id").get<std::string>() + " | " + r.at("implementation").get<std::string>(); }

struct Counts {
  int timed = 0, failed = 0, unsupported = 0, disagreed = 0;
};

// The slowest rank's copy bandwidth, GB/s: what the aggregate's bandwidths are against.
double slowest_copy_gbps(const std::vector<json>& reports) {
  double copy_gbps = 0;
  for (const auto& rep : reports) {
    const double g = rep.at("copy_bandwidth_gbps").get<double>();
    copy_gbps = copy_gbps == 0 ? g : std::min(copy_gbps, g);
  }
  return copy_gbps;
}

// The ranks whose status is not the majority's, with their reasons.
json dissent_json(const std::vector<const json*>& rows, const distributed::Consensus& consensus) {
  json dissent = json::array();
  for (size_t r = 0; r < rows.size(); ++r) {
    if (consensus.dissents(r)) {
      dissent.push_back({{"rank", r}, {"status", consensus.statuses[r]}, {"reason", rows[r]->value("reason", "")}});
    }
  }
  return dissent;
}

// Per-sample maximum over ranks of each timer: the samples were aligned by a barrier each, so
// sample i ran at the same moment everywhere, and its slowest rank is what a collective-bound step
// would wait for. Sets the timers' statistics in `c`; returns the samples by timer, and each rank's
// device samples in `device_by_rank`.
json worst_samples(const json& row, const std::vector<const json*>& rows, json& c,
                   std::vector<std::vector<double>>& device_by_rank) {
  json samples = json::object();
  for (const char* timer : {"host_enqueue", "device", "wall", "reset"}) {
    // Reports before the reset was measured have no reset samples.
    if (!row.at("samples").contains(timer)) continue;
    std::vector<double> worst;
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto s = rows[r]->at("samples").at(timer).get<std::vector<double>>();
      if (r == 0) worst = s;
      if (s.size() != worst.size()) {
        throw std::runtime_error("aggregate: rank " + std::to_string(r) + " has " + std::to_string(s.size()) +
                                 " samples of " + row_key(row) + ", rank 0 has " + std::to_string(worst.size()));
      }
      for (size_t i = 0; i < s.size(); ++i) worst[i] = std::max(worst[i], s[i]);
      if (std::string(timer) == "device") device_by_rank.push_back(s);
    }
    if (std::string(timer) == "reset") {
      c["reset"] = worst.empty() ? json(nullptr)
                                 : json{{"included_in", row.at("reset").at("included_in")},
                                        {"excluded_from", row.at("reset").at("excluded_from")},
                                        {"seconds", to_json(summarize(worst))}};
    } else {
      c[timer] = to_json(summarize(worst));
    }
    samples[timer] = std::move(worst);
  }
  return samples;
}

// Skew of rank r: the median over samples of (its time - the fastest rank's time in that sample),
// and the share of samples in which it was the slowest; with each rank's median and the spread
// (slowest - fastest) per sample.
struct Skew {
  json per_rank = json::array();
  json medians = json::array();
  std::vector<double> spread;
};

Skew rank_skew(const std::vector<std::vector<double>>& device_by_rank) {
  const size_t n = device_by_rank[0].size();
  std::vector<double> fastest(n), slowest(n);
  Skew skew;
  skew.spread.resize(n);
  for (size_t i = 0; i < n; ++i) {
    fastest[i] = slowest[i] = device_by_rank[0][i];
    for (const auto& s : device_by_rank) {
      fastest[i] = std::min(fastest[i], s[i]);
      slowest[i] = std::max(slowest[i], s[i]);
    }
    skew.spread[i] = slowest[i] - fastest[i];
  }
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
    skew.per_rank.push_back({{"rank", r},
                             {"median_excess", n ? percentile(excess, 50) : 0.0},
                             {"slowest_fraction", n ? static_cast<double>(slowest_count) / static_cast<double>(n) : 0.0}});
    skew.medians.push_back(n ? percentile(device_by_rank[r], 50) : 0.0);
  }
  return skew;
}

// The roofline: the ranks' largest ideal time (their slowest ceilings, as the copy's smallest
// bandwidth), against the aggregated median; null when no rank has one.
json slowest_roofline(const std::vector<const json*>& rows, double median) {
  json line;
  for (const json* r : rows) {
    if (r == nullptr || !r->contains("roofline")) continue;
    const json& rl = r->at("roofline");
    if (line.is_null() || rl.at("ideal_seconds").get<double>() > line.at("ideal_seconds").get<double>()) line = rl;
  }
  if (line.is_object()) line["percent"] = median > 0 ? 100.0 * line.at("ideal_seconds").get<double>() / median : 0.0;
  return line;
}

// The fields of a case every rank timed, added to `c` (which has the consensus and the case).
void add_timed_fields(const json& row, const std::vector<const json*>& rows, double copy_gbps, json& c) {
  std::vector<std::vector<double>> device_by_rank;
  json samples = worst_samples(row, rows, c, device_by_rank);
  const Skew skew = rank_skew(device_by_rank);
  const Steadiness steady = steadiness(samples["device"].get<std::vector<double>>());
  const double median = c["device"]["median"].get<double>();
  const double bytes = static_cast<double>(row.at("bytes_read").get<int64_t>() + row.at("bytes_written").get<int64_t>());
  const double gbps = median > 0 ? bytes / median / 1e9 : 0;
  const json line = slowest_roofline(rows, median);
  if (line.is_object()) c.update({{"roofline", line}, {"percent_of_roofline", line["percent"]}});
  c.update({{"implementation_detail", row.at("implementation_detail")},
            {"bytes_read", row.at("bytes_read")},
            {"bytes_written", row.at("bytes_written")},
            {"flops", row.at("flops")},
            {"calls_per_sample", row.at("calls_per_sample")},
            {"achieved_gbps", gbps},
            {"percent_of_copy", copy_gbps > 0 ? 100.0 * gbps / copy_gbps : 0.0},
            {"warm_cache", gbps > copy_gbps},
            {"unsteady", steady.unsteady()},
            {"steadiness", to_json(steady)},
            {"rank_device_medians", skew.medians},
            {"skew", {{"per_rank", skew.per_rank}, {"spread", to_json(summarize(skew.spread))}}},
            {"samples", std::move(samples)}});
}

// One case and implementation over the ranks (`rows`, rank 0's is `row`): the consensus, then the
// dissent, the agreed reason, or the timed fields; counts its status.
json aggregate_row(const json& row, const std::vector<const json*>& rows, double copy_gbps, Counts& counts) {
  const distributed::Consensus consensus = distributed::consensus(rows);
  json c = consensus.to_json();
  c.update({{"case_id", row.at("case_id")}, {"parameters", row.at("parameters")}, {"implementation", row.at("implementation")}});
  if (!consensus.agreed) {
    ++counts.disagreed;
    c["dissent"] = dissent_json(rows, consensus);
    return c;
  }
  if (consensus.majority != "timed") {
    // Agreed but not timed: unsupported everywhere, or failed validation everywhere.
    ++(consensus.majority == "unsupported" ? counts.unsupported : counts.failed);
    c["reason"] = row.value("reason", "");
    return c;
  }
  ++counts.timed;
  add_timed_fields(row, rows, copy_gbps, c);
  return c;
}

}  // namespace

json aggregate_benchmark(const std::vector<json>& reports) {
  json out = distributed::aggregate_header(reports, "xllm-kernel/benchmark-distributed-report/1", "benchmark");
  const json& first = reports[0];
  const double copy_gbps = slowest_copy_gbps(reports);
  out.update({{"timing", first.at("timing")},
              {"device_timer", first.at("device_timer")},
              {"copy_bandwidth_gbps", copy_gbps},
              {"copy_bytes", first.at("copy_bytes")},
              {"implementations", first.at("implementations")}});
  std::vector<const json*> tables;
  for (const auto& rep : reports) tables.push_back(&rep.at("results"));
  json results = json::array();
  Counts counts;
  for (const auto& row : first.at("results")) {
    results.push_back(aggregate_row(row, distributed::match_rows(tables, row, row_key), copy_gbps, counts));
  }
  // Ratios within each case, from the aggregated medians.
  add_ratios(results, 0, results.size());
  const int code = counts.failed + counts.disagreed > 0 ? 1 : counts.timed == 0 ? 3 : 0;
  out["results"] = std::move(results);
  out["summary"] = {{"timed", counts.timed},
                    {"failed", counts.failed},
                    {"unsupported", counts.unsupported},
                    {"disagreed", counts.disagreed},
                    {"exit_code", code}};
  return out;
}

std::string benchmark_aggregate_markdown(const json& aggregate, size_t row_limit) {
  std::ostringstream md;
  md << distributed::aggregate_title(aggregate, "Benchmark");
  const json& env = aggregate["ranks"][0]["environment"];
  md << "Revision `" << env["revision"].get<std::string>() << "`, torch " << env["torch"].get<std::string>() << ". "
     << "Every sample starts at a barrier; times are the per-sample maximum over ranks (the slowest rank), "
     << "bandwidth is against the slowest rank's copy bandwidth ("
     << format_number(aggregate["copy_bandwidth_gbps"].get<double>()) << " GB/s). "
     << aggregate["device_timer"].get<std::string>() << ".\n\n";
  md << distributed::ranks_table(aggregate, "copy GB/s | timed | failed", [](const json& r) {
    const json& s = r["summary"];
    return format_number(r.value("copy_bandwidth_gbps", 0.0)) + " | " + std::to_string(s.value("timed", 0)) + " | " +
           std::to_string(s.value("failed", 0));
  }) << "\n";
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
         << (r["status"] == "disagreed" ? distributed::dissent_text(r) : r.value("reason", std::string()))
         << " | | | | | | | |\n";
      continue;
    }
    const json& d = r["device"];
    const json* most = nullptr;
    for (const auto& s : r["skew"]["per_rank"]) {
      if (most == nullptr || s["median_excess"].get<double>() > (*most)["median_excess"].get<double>()) most = &s;
    }
    md << format_microseconds(d["median"].get<double>()) << " | " << format_microseconds(d["p10"].get<double>()) << "-"
       << format_microseconds(d["p90"].get<double>()) << " | " << format_number(r["achieved_gbps"].get<double>()) << " | "
       << format_number(r["percent_of_copy"].get<double>()) << row_flags(r)
       << " | rank " << (*most)["rank"] << " +" << format_microseconds((*most)["median_excess"].get<double>())
       << " us, slowest in " << format_number(100 * (*most)["slowest_fraction"].get<double>()) << "% | "
       << format_number(r["ratio_to_fastest"].get<double>()) << " | "
       << (r["speedup_vs_torch"].is_null() ? std::string("-") : format_number(r["speedup_vs_torch"].get<double>()))
       << " |\n";
  }
  if (left_out > 0) md << "\n" << left_out << " more rows; the JSON report lists every case.\n";
  return md.str();
}

}  // namespace xllm_kernel::benchmark
