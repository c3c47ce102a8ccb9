// Small string helpers shared by the core (not part of the public API).
#pragma once

#include <string>
#include <vector>

namespace xllm_kernel::detail {

std::string join(const std::vector<std::string>& items, const std::string& separator);
std::string upper(std::string text);
std::string lower(std::string text);
// The candidates closest to `name` by edit distance (at most `limit`, best first).
std::vector<std::string> closest(const std::string& name, const std::vector<std::string>& candidates,
                                 size_t limit = 3);

}  // namespace xllm_kernel::detail
