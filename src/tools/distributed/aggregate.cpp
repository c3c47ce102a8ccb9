#include "src/tools/distributed/aggregate.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <stdexcept>

#include "src/tools/report.h"

namespace xllm_kernel::tools::distributed {
namespace {

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
    if (rep.contains("occupancy")) row["occupancy"] = rep["occupancy"];
    ranks.push_back(std::move(row));
  }
  return ranks;
}

// The device type the ranks share: "cuda" of "cuda:1".
std::string device_type(const json& report) {
  const std::string d = report.value("device", "");
  return d.substr(0, d.find(':'));
}

}  // namespace

json aggregate_header(const std::vector<json>& reports, const char* schema, const char* tool) {
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

std::vector<const json*> match_rows(const std::vector<const json*>& tables, const json& row, const RowKey& key) {
  const std::string wanted = key(row);
  std::vector<const json*> rows;
  for (size_t r = 0; r < tables.size(); ++r) {
    const json* found = nullptr;
    for (const auto& candidate : *tables[r]) {
      if (key(candidate) == wanted) {
        found = &candidate;
        break;
      }
    }
    if (found == nullptr) {
      throw std::runtime_error("aggregate: rank " + std::to_string(r) + " has no result for " + wanted);
    }
    rows.push_back(found);
  }
  return rows;
}

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

json Consensus::to_json() const {
  return {{"status", status()},
          {"consensus", agreed ? "agreed" : "disagreed"},
          {"majority_status", majority},
          {"statuses", statuses}};
}

Consensus consensus(const std::vector<const json*>& rows) {
  Consensus c;
  for (const json* r : rows) c.statuses.push_back(r->at("status").get<std::string>());
  c.majority = distributed::majority(c.statuses);
  c.agreed = std::all_of(c.statuses.begin(), c.statuses.end(), [&](const auto& s) { return s == c.majority; });
  return c;
}

std::string aggregate_title(const json& aggregate, const std::string& title) {
  std::ostringstream md;
  md << "# " << title << ": " << aggregate["operation"].get<std::string>() << " on " << aggregate["world_size"] << " "
     << aggregate["device"].get<std::string>() << " ranks (" << aggregate["mode"].get<std::string>() << ")\n\n";
  return md.str();
}

std::string ranks_table(const json& aggregate, const std::string& columns,
                        const std::function<std::string(const json&)>& cells) {
  std::ostringstream md;
  const auto tool_columns = 1 + std::count(columns.begin(), columns.end(), '|');
  md << "| rank | device | host | " << columns << " | report |\n|";
  for (long i = 0; i < 4 + tool_columns; ++i) md << "---|";
  md << "\n";
  for (const auto& r : aggregate["ranks"]) {
    md << "| " << r["rank"] << " | " << r["device"].get<std::string>() << " | " << r["host"].get<std::string>() << " | "
       << cells(r) << " | ";
    if (r["report"].is_null()) {
      md << "-";
    } else {
      md << "`" << r["report"].get<std::string>() << "`";
    }
    md << " |\n";
  }
  // Each rank's occupancy warnings (its report has the full block).
  for (const auto& r : aggregate["ranks"]) {
    if (!r.contains("occupancy") || r["occupancy"].value("idle", true)) continue;
    md << "\n**Warning: rank " << r["rank"] << "'s machine was not idle**: ";
    bool first = true;
    for (const auto& w : r["occupancy"]["warnings"]) {
      md << (first ? "" : "; ") << w.get<std::string>();
      first = false;
    }
    md << ".\n";
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

}  // namespace xllm_kernel::tools::distributed
