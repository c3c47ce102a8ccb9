// TEST HOOK (see test_fault.h): XLLM_KERNEL_TEST_FAULT, for the distributed and report-crash tests only.
#include "src/tools/distributed/test_fault.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iostream>
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
  if (kind == "stall-report-write") {
    f.kind = Kind::kStallReportWrite;
    f.report_write = 1;
    if (colon == std::string::npos) return f;
    size_t used = 0;
    try {
      f.report_write = std::stoi(s.substr(colon + 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != s.size() - colon - 1 || f.report_write < 1) {
      throw UsageError("XLLM_KERNEL_TEST_FAULT='" + s + "': stall-report-write takes N >= 1 (the Nth report written)");
    }
    return f;
  }
  if (kind == "disagree") f.kind = Kind::kDisagree;
  else if (kind == "fail") f.kind = Kind::kFail;
  else if (kind == "hang") f.kind = Kind::kHang;
  else if (kind == "mismatch") f.kind = Kind::kMismatch;
  if (f.kind == Kind::kNone || colon == std::string::npos) {
    throw UsageError("XLLM_KERNEL_TEST_FAULT='" + s + "': expected KIND:RANK with KIND one of disagree, fail, hang, mismatch, "
                     "or stall-report-write[:N]");
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

void report_write_stall(std::FILE* file, const std::string& temporary_path, const std::string& text) {
  // Read once. A malformed value fails every report write, so no report is written.
  struct Parsed {
    TestFault fault;
    std::string error;
  };
  static const Parsed parsed = [] {
    try {
      return Parsed{TestFault::parse(std::getenv("XLLM_KERNEL_TEST_FAULT")), {}};
    } catch (const UsageError& e) {
      return Parsed{{}, e.what()};
    }
  }();
  if (!parsed.error.empty()) throw UsageError(parsed.error);
  const TestFault& fault = parsed.fault;
  if (fault.kind != TestFault::Kind::kStallReportWrite) return;
  static std::atomic<int> writes{0};
  if (++writes != fault.report_write) return;
  const size_t half = text.size() / 2;
  if (std::fwrite(text.data(), 1, half, file) != half || std::fflush(file) != 0 || fsync(fileno(file)) != 0) {
    throw std::runtime_error("XLLM_KERNEL_TEST_FAULT=stall-report-write: cannot write " + temporary_path);
  }
  std::cerr << "XLLM_KERNEL_TEST_FAULT=stall-report-write: stalled writing " << temporary_path << std::endl;
  std::this_thread::sleep_for(std::chrono::minutes(10));
  throw std::runtime_error("XLLM_KERNEL_TEST_FAULT=stall-report-write: not killed within 10 minutes");
}

}  // namespace xllm_kernel::tools::distributed
