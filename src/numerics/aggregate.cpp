#include "src/numerics/aggregate.h"

#include <algorithm>
#include <sstream>

#include "src/tools/distributed/aggregate.h"
#include "src/tools/report.h"

namespace xllm_kernel::numerics {
namespace {

using tools::format_number;
namespace distributed = tools::distributed;

constexpr const char* kErrorFields[] = {"max_abs_error", "max_rel_error", "max_ulp", "headroom"};

json numerics_case(const std::vector<const json*>& rows) {
  const json& first = *rows[0];
  const distributed::Consensus consensus = distributed::consensus(rows);
  json out = consensus.to_json();
  out["case_id"] = first.at("case_id");
  out["parameters"] = first.at("parameters");
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
  if (consensus.agreed && consensus.majority == "unsupported") out["reason"] = first.value("reason", "");
  if (consensus.agreed && consensus.majority == "failed") out["failures"] = first.value("failures", json::array());
  if (!consensus.agreed) {
    json dissent = json::array();
    for (size_t r = 0; r < rows.size(); ++r) {
      if (!consensus.dissents(r)) continue;
      const json& row = *rows[r];
      json d{{"rank", r}, {"status", consensus.statuses[r]}};
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

}  // namespace

json aggregate_numerics(const std::vector<json>& reports) {
  json out = distributed::aggregate_header(reports, "xllm-kernel/numerics-distributed-report/1", "numerics");
  out["implementations"] = json::array();
  int passed = 0, failed = 0, unsupported = 0, disagreed = 0;
  const auto name_of = [](const json& impl) { return impl.at("implementation").at("name").get<std::string>(); };
  const auto case_of = [](const json& r) { return r.at("case_id").get<std::string>(); };
  for (const auto& impl : reports[0].at("implementations")) {
    std::vector<const json*> tables;
    for (const auto& rep : reports) tables.push_back(&rep.at("implementations"));
    const auto impls = distributed::match_rows(tables, impl, name_of);
    std::vector<const json*> result_tables;
    for (const json* i : impls) result_tables.push_back(&i->at("results"));
    json results = json::array();
    int c_passed = 0, c_failed = 0, c_unsupported = 0, c_disagreed = 0;
    for (const auto& row : impl.at("results")) {
      json c = numerics_case(distributed::match_rows(result_tables, row, case_of));
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

std::string numerics_aggregate_markdown(const json& aggregate, size_t row_limit) {
  std::ostringstream md;
  md << distributed::aggregate_title(aggregate, "Numerics");
  const json& env = aggregate["ranks"][0]["environment"];
  md << "Revision `" << env["revision"].get<std::string>() << "`, torch " << env["torch"].get<std::string>()
     << ", seed " << aggregate["seed"] << ". A case passes when it passes on every rank; ranks that report "
     << "different statuses disagree.\n\n";
  md << distributed::ranks_table(aggregate, "passed | failed | unsupported", [](const json& r) {
    const json& s = r["summary"];
    return std::to_string(s.value("passed", 0)) + " | " + std::to_string(s.value("failed", 0)) + " | " +
           std::to_string(s.value("unsupported", 0));
  }) << "\n";
  md << "| implementation | cases | passed | failed | unsupported | disagreed | worst headroom | max ULP |\n";
  md << "|---|---|---|---|---|---|---|---|\n";
  for (const auto& impl : aggregate["implementations"]) {
    const json& c = impl["coverage"];
    md << "| `" << impl["implementation"]["name"].get<std::string>() << "` | " << c["cases"] << " | " << c["passed"]
       << " | " << c["failed"] << " | " << c["unsupported"] << " | " << c["disagreed"] << " | "
       << format_number(impl["worst_headroom"].get<double>()) << " | " << format_number(impl["worst_ulp"].get<double>())
       << " |\n";
  }
  md << not_passed_markdown(aggregate["implementations"], row_limit, [](const json& r) {
    std::string detail;
    if (r["status"] == "disagreed") detail = distributed::dissent_text(r);
    if (r["status"] == "unsupported") detail = r.value("reason", "");
    for (const auto& f : r.value("failures", json::array())) detail += (detail.empty() ? "" : "; ") + f.get<std::string>();
    return detail;
  });
  return md.str();
}

std::string not_passed_markdown(const json& implementations, size_t row_limit,
                                const std::function<std::string(const json& row)>& detail) {
  std::ostringstream md;
  bool table = false;
  size_t rows = 0, left_out = 0;
  for (const auto& impl : implementations) {
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
      md << "| `" << impl["implementation"]["name"].get<std::string>() << "` | `" << r["case_id"].get<std::string>()
         << "` | " << r["status"].get<std::string>() << " | " << detail(r) << " |\n";
    }
  }
  if (left_out > 0) md << "\n" << left_out << " more cases did not pass; the JSON report lists every case.\n";
  return md.str();
}

}  // namespace xllm_kernel::numerics
