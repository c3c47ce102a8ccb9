#include "src/benchmark/ratios.h"

#include <map>
#include <string>
#include <utility>

namespace xllm_kernel::benchmark {

void add_ratios(nlohmann::json& results, size_t first, size_t last) {
  using nlohmann::json;
  std::map<std::string, std::pair<double, double>> per_case;  // case -> (fastest, torch)
  for (size_t i = first; i < last; ++i) {
    const json& r = results[i];
    if (r["status"] != "timed") continue;
    auto& [fastest, torch_time] = per_case[r["case_id"].get<std::string>()];
    const double t = r["device"]["median"].get<double>();
    if (fastest == 0 || t < fastest) fastest = t;
    if (r["implementation_detail"].value("solution", "") == "torch") torch_time = t;
  }
  for (size_t i = first; i < last; ++i) {
    json& r = results[i];
    if (r["status"] != "timed") continue;
    const auto& [fastest, torch_time] = per_case[r["case_id"].get<std::string>()];
    const double t = r["device"]["median"].get<double>();
    r["ratio_to_fastest"] = t / fastest;
    r["speedup_vs_torch"] = torch_time > 0 ? json(torch_time / t) : json(nullptr);
  }
}

std::string row_flags(const nlohmann::json& row) {
  std::string out;
  if (row.value("warm_cache", false)) out += " (warm cache)";
  if (row.value("unsteady", false)) {
    out += " (unsteady:";
    const char* sep = " ";
    for (const auto& reason : row.at("steadiness").at("reasons")) {
      out += sep + reason.get<std::string>();
      sep = ", ";
    }
    out += ")";
  }
  return out;
}

}  // namespace xllm_kernel::benchmark
