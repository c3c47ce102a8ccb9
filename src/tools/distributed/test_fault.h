// TEST HOOK, not a feature. XLLM_KERNEL_TEST_FAULT=KIND:RANK makes rank RANK of a distributed tool
// run misbehave so that the tests (test/python/test_distributed.py) can check how the other ranks
// react; docs/distributed.md lists the kinds. Nothing else in the tools reads that variable or
// knows the kinds: the shipped code path only calls a FaultInjector, which does nothing unless the
// variable names this rank.
//
//   FaultInjector faults = FaultInjector::from_environment(rank, timeout);  // read only with --distributed
//   faults.before_case(i, cases.size());                  // fail, hang
//   faults.after_validation(v.passed, v.failures);        // disagree
//
// One kind applies to any run, distributed or not: XLLM_KERNEL_TEST_FAULT=stall-report-write[:N]
// stops the process in the middle of writing its Nth report file (default the first), so that
// test/python/test_report_crash.py can kill it there (report_write_stall below).
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace xllm_kernel::tools::distributed {

// The parsed variable. Kinds: disagree (the first case it validates reports failed), fail (throws
// before its second case), hang (sleeps before its second case, past the timeout), mismatch
// (claims a different case list); stall-report-write (no rank; `report_write` is N).
struct TestFault {
  enum class Kind { kNone, kDisagree, kFail, kHang, kMismatch, kStallReportWrite };
  Kind kind = Kind::kNone;
  int rank = -1;
  int report_write = 0;  // stall-report-write: which report write of the process stalls (1: the first)
  // Null or empty: no fault. Throws UsageError on anything else that is not KIND:RANK or
  // stall-report-write[:N] (N >= 1).
  static TestFault parse(const char* value);
  bool on(int this_rank, Kind k) const { return kind == k && rank == this_rank; }
};

// Where the tools call the hook. Every method is a no-op unless the fault names this rank; each
// fault fires at most once.
class FaultInjector {
 public:
  FaultInjector() = default;  // no fault
  // `timeout`: the run's --distributed-timeout, which a hang outlasts.
  FaultInjector(TestFault fault, int rank, std::chrono::milliseconds timeout);
  // Reads XLLM_KERNEL_TEST_FAULT; throws UsageError when it is malformed.
  static FaultInjector from_environment(int rank, std::chrono::milliseconds timeout);

  // mismatch: alters the case list this rank claims in the configuration check.
  void on_configuration(nlohmann::json& configuration) const;
  // fail, hang: before case `index` of `count` (the second, or the first when there is only one).
  void before_case(size_t index, size_t count);
  // disagree: turns the first validation this rank makes into a failure.
  void after_validation(bool& passed, std::vector<std::string>& failures);

 private:
  TestFault fault_;
  int rank_ = -1;
  std::chrono::milliseconds timeout_{0};
  bool fired_ = false;
  bool disagreed_ = false;
};

// stall-report-write[:N], for write_atomically (src/tools/report.cpp), which calls it once per file
// with the temporary file open and nothing written yet. Returns at once unless the variable asks
// for this write (it is read on the first call only; a malformed value throws UsageError). On the
// Nth call: writes the first half of `text` into `file`, flushes and fsyncs it, says so on stderr
// ("XLLM_KERNEL_TEST_FAULT=stall-report-write: stalled writing TMP"), and sleeps until the
// process is killed (at most 10 minutes, then throws, so an orphan still ends).
void report_write_stall(std::FILE* file, const std::string& temporary_path, const std::string& text);

}  // namespace xllm_kernel::tools::distributed
