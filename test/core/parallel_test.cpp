// parallel_rows must really spread ranges over torch's threads: built without OpenMP against an
// OpenMP torch, at::parallel_for silently runs on one thread.
#include "src/core/parallel.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace xllm_kernel::detail {
namespace {

class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(at::get_num_threads()) { at::set_num_threads(n); }
  ~ThreadCount() { at::set_num_threads(saved_); }

 private:
  int saved_;
};

struct Calls {
  std::mutex mutex;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  std::set<std::thread::id> threads;
  void record(int64_t begin, int64_t end) {
    std::lock_guard<std::mutex> lock(mutex);
    ranges.emplace_back(begin, end);
    threads.insert(std::this_thread::get_id());
  }
  // The ranges, sorted, tile [0, n) exactly.
  bool tile(int64_t n) {
    std::sort(ranges.begin(), ranges.end());
    int64_t next = 0;
    for (const auto& [b, e] : ranges) {
      if (b != next || e <= b) return false;
      next = e;
    }
    return next == n;
  }
};

TEST(ParallelRows, UsesEveryThreadTorchIsSetTo) {
  ThreadCount threads(2);
  Calls calls;
  parallel_rows(1000, 1, [&](int64_t b, int64_t e) { calls.record(b, e); });
  EXPECT_TRUE(calls.tile(1000));
  EXPECT_EQ(calls.threads.size(), 2u) << "ranges ran on " << calls.threads.size()
                                      << " thread(s); src/core/parallel.cpp needs OpenMP like torch";
}

TEST(ParallelRows, RunsInlineBelowTheGrainAndWithOneThread) {
  {
    ThreadCount threads(2);
    Calls calls;
    parallel_rows(10, 64, [&](int64_t b, int64_t e) { calls.record(b, e); });
    ASSERT_EQ(calls.ranges.size(), 1u);
    EXPECT_TRUE(calls.tile(10));
    EXPECT_EQ(*calls.threads.begin(), std::this_thread::get_id());
  }
  {
    ThreadCount threads(1);
    Calls calls;
    parallel_rows(1000, 1, [&](int64_t b, int64_t e) { calls.record(b, e); });
    EXPECT_TRUE(calls.tile(1000));
    EXPECT_EQ(calls.threads.size(), 1u);
  }
}

TEST(ParallelRows, EmptyRangeCallsNothing) {
  int called = 0;
  parallel_rows(0, 1, [&](int64_t, int64_t) { ++called; });
  EXPECT_EQ(called, 0);
}

TEST(ParallelRows, RethrowsAnExceptionFromARange) {
  ThreadCount threads(2);
  EXPECT_THROW(parallel_rows(1000, 1,
                             [&](int64_t b, int64_t) {
                               if (b > 0) throw std::runtime_error("range failed");
                             }),
               std::runtime_error);
}

}  // namespace
}  // namespace xllm_kernel::detail
