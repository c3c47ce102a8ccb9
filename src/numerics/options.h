// Parsing a suite's own options (SuiteOptions) into dimension values: what every family's suites
// share. Bad values throw CLI::ValidationError naming the option, so the tools exit 2.
#pragma once

#include <ATen/ATen.h>

#include "src/numerics/suite.h"

namespace xllm_kernel::numerics::options {

// The values of --<key> as integers >= min, or `defaults` when the option was not given.
std::vector<json> integers(const SuiteOptions& o, const std::string& key, std::vector<int64_t> defaults, int64_t min);

// The values of --<key>, each one of `allowed`, or `defaults` when the option was not given.
std::vector<json> choices(const SuiteOptions& o, const std::string& key, const std::vector<std::string>& allowed,
                          std::vector<std::string> defaults);

// Whether the user gave --<key>.
bool given(const SuiteOptions& o, const std::string& key);

// "float32" | "bfloat16" | "float16" <-> the ScalarType.
at::ScalarType parse_dtype(const std::string& name);
const char* dtype_name(at::ScalarType dtype);

}  // namespace xllm_kernel::numerics::options
