// TEST HOOK (see test_fault.h): XLLM_KERNEL_TEST_FAULT, for the distributed tests only.
#include "src/tools/distributed/test_fault.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "src/tools/cli.h"

namespace xllm_kernel::tools::distributed {

TestFault TestFault::parse(const char* value) {
  TestFault f;
  if (value == nullptr || *value == '\0') return f;
  const std::string s = value;
  const auto colon = s.find(':');
  const std::string kind = s.substr(0, colon);
  if (kind == "disagree") f.kind = Kind::kDisagree;
  else if (kind == "fail") f.kind = Kind::kFail;
  else if (kind == "hang") f.kind = Kind::kHang;
  else if (kind == "mismatch") f.kind = Kind::kMismatch;
  if (f.kind == Kind::kNone || colon == std::string::npos) {
    throw UsageError("XLLM_KERNEL_TEST_FAULT='" + s + "': expected KIND:RANK with KIND one of disagree, fail, hang, mismatch");
  }
  size_t used = 0;
  try {
    f.rank = std::stoi(s.substr(colon + 1), &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size() - colon - 1 || f.rank < 0) {
    throw UsageError("XLLM_KERNEL_TEST_FAULT='" + s + "': RANK must be a non-negative integer");
  }
  return f;
}

FaultInjector::FaultInjector(TestFault fault, int rank, std::chrono::milliseconds timeout)
    : fault_(fault), rank_(rank), timeout_(timeout) {}

FaultInjector FaultInjector::from_environment(int rank, std::chrono::milliseconds timeout) {
  return FaultInjector(TestFault::parse(std::getenv("XLLM_KERNEL_TEST_FAULT")), rank, timeout);
}

void FaultInjector::on_configuration(nlohmann::json& configuration) const {
  if (!fault_.on(rank_, TestFault::Kind::kMismatch) || !configuration.contains("cases")) return;
  configuration["cases"]["count"] = configuration["cases"].value("count", 0) + 1;
  configuration["cases"]["hash"] = "XLLM_KERNEL_TEST_FAULT=mismatch";
}

void FaultInjector::before_case(size_t index, size_t count) {
  // "Mid-run": before the second case (the first when there is only one).
  if (count == 0 || index != std::min<size_t>(1, count - 1) || fired_) return;
  const std::string hook = "XLLM_KERNEL_TEST_FAULT=" + std::string(fault_.kind == TestFault::Kind::kFail ? "fail:" : "hang:") +
                           std::to_string(fault_.rank);
  if (fault_.on(rank_, TestFault::Kind::kFail)) {
    fired_ = true;
    throw std::runtime_error(hook + ": injected failure on rank " + std::to_string(rank_) + " before case " +
                             std::to_string(index + 1) + " of " + std::to_string(count));
  }
  if (fault_.on(rank_, TestFault::Kind::kHang)) {
    fired_ = true;
    // Past every peer's timeout, yet bounded, so an orphaned process still ends.
    std::this_thread::sleep_for(timeout_ + std::chrono::seconds(60));
    throw std::runtime_error(hook + ": rank " + std::to_string(rank_) + " stopped hanging");
  }
}

void FaultInjector::after_validation(bool& passed, std::vector<std::string>& failures) {
  if (!fault_.on(rank_, TestFault::Kind::kDisagree) || disagreed_) return;
  disagreed_ = true;
  passed = false;
  failures.insert(failures.begin(), "XLLM_KERNEL_TEST_FAULT=disagree:" + std::to_string(rank_) + ": rank " +
                                        std::to_string(rank_) + " reports this case as failed");
}

}  // namespace xllm_kernel::tools::distributed
