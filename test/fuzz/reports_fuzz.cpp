// Fuzzes what `xllm-kernel-benchmark compare` reads: three reports (NUL-separated JSON texts) are
// parsed and compared, and the comparison rendered. Malformed JSON is rejected by the parser;
// well-formed JSON of any shape either compares or throws an exception with a message; never a
// crash, an out-of-bounds access or undefined behaviour.
#include <nlohmann/json.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "src/benchmark/compare.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::array<std::string, 3> texts;
  size_t part = 0;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0 && part < 2) {
      ++part;
    } else {
      texts[part].push_back(static_cast<char>(data[i]));
    }
  }
  std::array<nlohmann::json, 3> reports;
  for (size_t i = 0; i < 3; ++i) {
    reports[i] = nlohmann::json::parse(texts[i], nullptr, /*allow_exceptions=*/false);
    if (reports[i].is_discarded()) return 0;
  }
  try {
    const nlohmann::json comparison = xllm_kernel::benchmark::compare_reports(reports[0], reports[1], reports[2]);
    (void)xllm_kernel::benchmark::compare_markdown(comparison);
  } catch (const std::exception& e) {
    if (std::string(e.what()).empty()) __builtin_trap();
  }
  return 0;
}
