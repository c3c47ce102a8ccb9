#include "src/numerics/options.h"

#include <algorithm>

namespace xllm_kernel::numerics::options {

bool given(const SuiteOptions& o, const std::string& key) {
  auto it = o.find(key);
  return it != o.end() && !it->second.empty();
}

std::vector<json> integers(const SuiteOptions& o, const std::string& key, std::vector<int64_t> defaults, int64_t min) {
  std::vector<json> out;
  if (!given(o, key)) {
    for (int64_t d : defaults) out.push_back(d);
    return out;
  }
  for (const auto& s : o.at(key)) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != s.size() || v < min) {
      throw CLI::ValidationError("--" + key, "expected integers >= " + std::to_string(min) + ", got '" + s + "'");
    }
    out.push_back(v);
  }
  return out;
}

std::vector<json> choices(const SuiteOptions& o, const std::string& key, const std::vector<std::string>& allowed,
                          std::vector<std::string> defaults) {
  const auto& values = given(o, key) ? o.at(key) : defaults;
  std::vector<json> out;
  for (const auto& v : values) {
    if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      throw CLI::ValidationError("--" + key, "expected one of " + list + ", got '" + v + "'");
    }
    out.push_back(v);
  }
  return out;
}

at::ScalarType parse_dtype(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  throw CLI::ValidationError("--dtype", "expected float32, bfloat16 or float16, got '" + name + "'");
}

const char* dtype_name(at::ScalarType dtype) {
  return dtype == at::kFloat ? "float32" : dtype == at::kBFloat16 ? "bfloat16" : "float16";
}

}  // namespace xllm_kernel::numerics::options
