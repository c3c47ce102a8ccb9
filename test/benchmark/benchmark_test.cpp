// The benchmark tool: statistics, timing protocol (reset outside the enqueue and device intervals and
// inside the wall time, only validated
// cases timed, device intervals under a hold with events made once, wall time apart), side-by-side
// ratios, cold-cache rotation, the baseline/candidate/baseline comparison, the A/B comparison over
// rounds, the ceilings and the roofline. No test asserts a speed.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "csrc/cpu/ceilings/ceilings.h"
#include "src/benchmark/ab.h"
#include "src/benchmark/ceilings.h"
#include "src/benchmark/compare.h"
#include "src/benchmark/ratios.h"
#include "src/benchmark/statistics.h"
#include "src/benchmark/timing.h"
#include "xllm_kernel/tools.h"

namespace xllm_kernel::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using namespace xllm_kernel::benchmark;

TEST(Statistics, KnownSamples) {
  const Summary s = summarize({3, 1, 2, 10, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(s.count, 10u);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 10);
  EXPECT_DOUBLE_EQ(s.median, 5.5);
  EXPECT_DOUBLE_EQ(s.mean, 5.5);
  EXPECT_NEAR(s.p10, 1.9, 1e-12);
  EXPECT_NEAR(s.p90, 9.1, 1e-12);
  EXPECT_NEAR(s.stddev, 3.0276503540974917, 1e-12);
  const Summary one = summarize({4});
  EXPECT_DOUBLE_EQ(one.median, 4);
  EXPECT_DOUBLE_EQ(one.stddev, 0);
  EXPECT_THROW(percentile({}, 50), std::invalid_argument);
}

TEST(Statistics, MedianRatioInterval) {
  std::mt19937 rng(1);
  std::normal_distribution<double> noise(0, 1);
  std::vector<double> a, b;
  for (int i = 0; i < 50; ++i) {
    a.push_back(100 + noise(rng));
    b.push_back(2 * (100 + noise(rng)));
  }
  const Ratio same = median_ratio(a, a);
  EXPECT_DOUBLE_EQ(same.point, 1);
  EXPECT_LE(same.low, 1);
  EXPECT_GE(same.high, 1);
  const Ratio twice = median_ratio(a, b);
  EXPECT_NEAR(twice.point, 2, 0.05);
  EXPECT_GT(twice.low, 1.9);
  EXPECT_LT(twice.high, 2.1);
}

TEST(Statistics, SteadinessFlagsSpreadTrendAndTwoModes) {
  // Cold-cache samples whose rotation copies were first touched inside the timed samples (ms).
  const Steadiness first_touch = steadiness({132.7, 3.8, 3.8, 3.8, 159.6, 131.0, 132.2, 4.5, 4.1, 3.9, 3.8, 131.5});
  EXPECT_TRUE(first_touch.unsteady());
  // The touches fell early: the later half is faster too.
  EXPECT_EQ(first_touch.reasons, (std::vector<std::string>{"spread", "trend", "two modes"}));
  EXPECT_NEAR(first_touch.late_over_early, ((4.1 + 4.5) / 2) / ((3.8 + 131.0) / 2), 1e-9);
  EXPECT_NEAR(first_touch.max_over_min, 159.6 / 3.8, 1e-9);
  EXPECT_GT(first_touch.p90_over_p10, 30);
  EXPECT_NEAR(first_touch.widest_gap, 131.0 / 4.5, 1e-9);
  // The same case warmed up: 3.7-4.0 ms.
  const Steadiness warm = steadiness({3.8, 3.7, 3.9, 4.0, 3.8, 3.8, 3.7, 3.9, 4.0, 3.8});
  EXPECT_FALSE(warm.unsteady());
  EXPECT_TRUE(warm.reasons.empty());
  EXPECT_NEAR(warm.max_over_min, 4.0 / 3.7, 1e-9);
  // A machine slowing down: 1.0 to 1.9 in even steps is no spread and no gap, but a trend.
  std::vector<double> rising;
  for (int i = 0; i < 10; ++i) rising.push_back(1.0 + 0.1 * i);
  const Steadiness trend = steadiness(rising);
  EXPECT_EQ(trend.reasons, std::vector<std::string>{"trend"});
  EXPECT_NEAR(trend.late_over_early, 1.7 / 1.2, 1e-9);
  std::reverse(rising.begin(), rising.end());
  EXPECT_EQ(steadiness(rising).reasons, std::vector<std::string>{"trend"});  // either way
  // Two interleaved modes 1.6x apart: within the spread bound, no trend.
  const Steadiness modes = steadiness({1.0, 1.6, 1.0, 1.6, 1.0, 1.6, 1.0, 1.6, 1.0, 1.6, 1.0, 1.6});
  EXPECT_EQ(modes.reasons, std::vector<std::string>{"two modes"});
  // Preempted samples (here 2 of 20, 3.9x) are neither a spread (p90 / p10) nor a mode (fewer
  // than 15% beyond the gap): the median stands. Measured so on this VM: 114-142 ms and one 456 ms.
  std::vector<double> preempted(18, 1.0);
  preempted[3] = 1.1;
  preempted.insert(preempted.begin() + 9, 3.9);
  preempted.push_back(2.5);
  const Steadiness outliers = steadiness(preempted);
  EXPECT_FALSE(outliers.unsteady()) << outliers.p90_over_p10 << " " << outliers.widest_gap;
  EXPECT_NEAR(outliers.max_over_min, 3.9, 1e-9);
  // Too few samples for a trend or modes; the spread still counts.
  EXPECT_FALSE(steadiness({1.0}).unsteady());
  EXPECT_EQ(steadiness({1.0, 3.0}).reasons, std::vector<std::string>{"spread"});
  const json j = to_json(first_touch);
  EXPECT_TRUE(j["unsteady"].get<bool>());
  EXPECT_EQ(j["reasons"].size(), 3u);
  EXPECT_EQ(steadiness_bounds()["p90_over_p10"].get<double>(), kSteadinessSpread);
}

TEST(Statistics, RowFlagsNameWarmCacheAndUnsteadyReasons) {
  EXPECT_EQ(row_flags(json{{"warm_cache", false}, {"unsteady", false}}), "");
  EXPECT_EQ(row_flags(json{{"warm_cache", true}}), " (warm cache)");
  EXPECT_EQ(row_flags(json{{"warm_cache", true}, {"unsteady", true}, {"steadiness", {{"reasons", {"spread", "two modes"}}}}}),
            " (warm cache) (unsteady: spread, two modes)");
}

// A case whose first call on each rotation copy is slow, as a first touch of its memory is on a VM:
// the warm-up makes every first call (and each copy's second, which replaces its first output)
// before the first timed sample, whatever --warmup says.
TEST(Timing, ColdCacheWarmupTouchesEveryCopyBeforeTiming) {
  constexpr int kCopies = 6;
  std::vector<int> calls(kCopies, 0);
  bool timing = false;
  int first_calls_timed = 0;
  std::vector<numerics::PreparedCase> copies(kCopies);
  for (int k = 0; k < kCopies; ++k) {
    copies[k].function = [&, k] {
      if (calls[k]++ == 0) {
        first_calls_timed += timing;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the first touch
      }
    };
  }
  std::vector<int> at_first_sample;
  TimingOptions o;
  o.warmup = 3;  // fewer than the copies: before, copies 3-5 were first touched in timed samples
  o.iterations = 12;
  o.before_sample = [&] {
    if (!timing) at_first_sample = calls;
    timing = true;
  };
  const Samples s = time_eager(*device_api(Device::kCpu), 0, copies, o);
  EXPECT_EQ(first_calls_timed, 0);
  EXPECT_EQ(at_first_sample, std::vector<int>(kCopies, 2)) << "two rounds through every copy";
  EXPECT_EQ(s.warmup_calls, 2 * kCopies);
  ASSERT_EQ(s.device.size(), 12u);
  for (int k = 0; k < kCopies; ++k) EXPECT_EQ(calls[k], 2 + 2) << k;  // warm-up, then 12 samples in rotation
  // One copy: the warm-up is --warmup's.
  std::vector<numerics::PreparedCase> one(1);
  int n = 0;
  one[0].function = [&] { ++n; };
  o.before_sample = nullptr;
  EXPECT_EQ(time_eager(*device_api(Device::kCpu), 0, one, o).warmup_calls, 3);
  EXPECT_EQ(n, 3 + 12);
}

// --budget: a slow call takes the fewest samples (3) and one warm-up call; a fast one every sample.
TEST(Timing, BudgetStopsASlowCaseAfterThreeSamples) {
  int calls = 0;
  std::vector<numerics::PreparedCase> slow(1);
  slow[0].function = [&] {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  };
  TimingOptions o;
  o.warmup = 10;
  o.iterations = 20;
  o.budget_seconds = 0.075;  // 2.5 calls: a late wake-up from a sleep only ends the warm-up sooner
  const Samples s = time_eager(*device_api(Device::kCpu), 0, slow, o);
  EXPECT_GE(s.warmup_calls, 1);
  EXPECT_LE(s.warmup_calls, 3) << "the warm-up stops after the call that passes the budget";
  EXPECT_EQ(s.device.size(), static_cast<size_t>(kMinBudgetSamples));
  EXPECT_EQ(calls, s.warmup_calls + kMinBudgetSamples);
  std::vector<numerics::PreparedCase> fast(1);
  fast[0].function = [] {};
  const Samples f = time_eager(*device_api(Device::kCpu), 0, fast, o);
  EXPECT_EQ(f.warmup_calls, 10);
  EXPECT_EQ(f.device.size(), 20u) << "a budget the samples stay under takes every one";
  o.budget_seconds = 0;
  EXPECT_EQ(time_eager(*device_api(Device::kCpu), 0, slow, o).device.size(), 20u) << "0: no budget";
}

// The mutating path: the reset stays out of the host enqueue and device intervals, but the wall time
// (what a caller of a mutating call waits for) includes it, and the reset's own time is recorded.
TEST(Timing, ResetIsOutsideEnqueueAndDeviceButInsideWall) {
  int calls = 0, resets = 0;
  numerics::PreparedCase c;
  c.function = [&] { ++calls; };
  c.reset = [&] {
    ++resets;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  };
  std::vector<numerics::PreparedCase> copies{c};
  TimingOptions o;
  o.warmup = 2;
  o.iterations = 5;
  const Samples s = time_eager(*device_api(Device::kCpu), 0, copies, o);
  EXPECT_EQ(calls, 7);
  EXPECT_EQ(resets, 7);  // before every call, warmup included
  ASSERT_EQ(s.device.size(), 5u);
  ASSERT_EQ(s.reset.size(), 5u);
  for (size_t i = 0; i < s.device.size(); ++i) {
    // A 20 ms reset inside these intervals would show; the call itself takes nanoseconds.
    EXPECT_LT(s.device[i], 0.010);
    EXPECT_LT(s.host_enqueue[i], 0.010);
    EXPECT_GE(s.reset[i], 0.020);
    EXPECT_GE(s.wall[i], s.reset[i]);  // the wall time includes the reset
    EXPECT_LT(s.wall[i] - s.reset[i], 0.010);
  }
  // A case without a reset records none.
  numerics::PreparedCase plain;
  plain.function = [] {};
  std::vector<numerics::PreparedCase> one{plain};
  EXPECT_TRUE(time_eager(*device_api(Device::kCpu), 0, one, o).reset.empty());
}

// A device with events, in software: its timer's "device" interval is a fixed 1 us whatever the
// host does, so what each figure measures shows.
struct FakeEventDevice final : DeviceApi {
  struct Timer final : DeviceTimer {
    explicit Timer(const FakeEventDevice& d) : device(d) {}
    void start() override { device.held = true; }
    double stop() override {
      device.held = false;
      return 1e-6;
    }
    bool hold_expired() const override { return device.expire; }
    const FakeEventDevice& device;
  };
  struct Graph final : DeviceGraph {
    void replay() override {
      for (int i = 0; i < calls; ++i) fn();
    }
    std::function<void()> fn;
    int calls = 0;
  };
  std::string description(int) const override { return "fake"; }
  void synchronize(int) const override { ++synchronizations; }
  bool has_device_events() const override { return true; }
  bool timer_holds_device() const override { return true; }
  double time_interval(int, const std::function<void()>& enqueue) const override {
    enqueue();
    return 1e-6;
  }
  std::unique_ptr<DeviceTimer> timer(int) const override {
    ++timers;
    return std::make_unique<Timer>(*this);
  }
  std::optional<std::string> graph_unsupported_reason() const override { return std::nullopt; }
  std::unique_ptr<DeviceGraph> capture(int, const std::function<void()>& enqueue, int calls) const override {
    auto g = std::make_unique<Graph>();
    g->fn = enqueue;
    g->calls = calls;
    return g;
  }
  mutable bool held = false;
  mutable int timers = 0, synchronizations = 0;
  bool expire = false;
};

TEST(Timing, EagerDeviceIntervalIsHeldAndWallIsTimedApart) {
  FakeEventDevice device;
  int calls = 0, held_calls = 0;
  numerics::PreparedCase c;
  c.function = [&] {
    ++calls;
    held_calls += device.held;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a host-bound call
  };
  std::vector<numerics::PreparedCase> copies{c};
  TimingOptions o;
  o.warmup = 1;
  o.iterations = 4;
  const Samples s = time_eager(device, 0, copies, o);
  EXPECT_EQ(device.timers, 1);  // events made once, not per sample
  EXPECT_EQ(calls, 1 + 2 * 4);  // warmup, then per sample one held call and one for the wall time
  EXPECT_EQ(held_calls, 4);
  EXPECT_EQ(s.calls_per_sample, 1);
  EXPECT_EQ(s.hold_expired, 0);
  ASSERT_EQ(s.device.size(), 4u);
  for (size_t i = 0; i < s.device.size(); ++i) {
    EXPECT_DOUBLE_EQ(s.device[i], 1e-6);  // the device's figure, not the host's 2 ms
    EXPECT_GE(s.host_enqueue[i], 0.002);
    EXPECT_GE(s.wall[i], 0.002);
  }
  EXPECT_GE(device.synchronizations, 2 * 4);  // the wall time runs from and to an idle device
}

TEST(Timing, GraphReplaysAreHeldAndCountedPerCall) {
  FakeEventDevice device;
  device.expire = true;
  int calls = 0, held_calls = 0;
  numerics::PreparedCase c;
  c.function = [&] {
    ++calls;
    held_calls += device.held;
  };
  c.validate = [] { return numerics::Validation{}; };
  TimingOptions o;
  o.warmup = 2;
  o.iterations = 3;
  o.graph_calls = 8;
  const Samples s = time_graph(device, 0, c, o);
  EXPECT_EQ(device.timers, 1);
  EXPECT_EQ(s.calls_per_sample, 8);
  EXPECT_EQ(calls, 2 + 8 + 3 * 2 * 8);  // warmup, the validated replay, then held and wall replays
  EXPECT_EQ(held_calls, 3 * 8);
  EXPECT_EQ(s.hold_expired, 3);  // reported, not hidden
  for (double d : s.device) EXPECT_DOUBLE_EQ(d, 1e-6 / 8);
}

// Graph mode with a reset captures one call per graph; each sample's reset runs outside the held
// replay (the reset is not captured) and inside the wall time, between synchronizations.
TEST(Timing, GraphWithResetCapturesOneCallAndPutsTheResetInTheWallTime) {
  FakeEventDevice device;
  int calls = 0, held_calls = 0, resets = 0, held_resets = 0;
  numerics::PreparedCase c;
  c.function = [&] {
    ++calls;
    held_calls += device.held;
  };
  c.reset = [&] {
    ++resets;
    held_resets += device.held;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  };
  c.validate = [] { return numerics::Validation{}; };
  TimingOptions o;
  o.warmup = 2;
  o.iterations = 4;
  o.graph_calls = 8;
  const Samples s = time_graph(device, 0, c, o);
  EXPECT_EQ(s.calls_per_sample, 1);  // 1 with reset, whatever graph_calls says
  EXPECT_EQ(calls, 2 + 1 + 4 * 2);   // warmup, the validated replay, then held and wall replays
  EXPECT_EQ(held_calls, 4);
  EXPECT_EQ(held_resets, 0);
  // warmup, before capture, before the validated replay, then two per sample (held, wall)
  EXPECT_EQ(resets, 2 + 1 + 1 + 4 * 2);
  ASSERT_EQ(s.reset.size(), 4u);
  for (size_t i = 0; i < s.reset.size(); ++i) {
    EXPECT_DOUBLE_EQ(s.device[i], 1e-6);
    EXPECT_LT(s.host_enqueue[i], 0.004);
    EXPECT_GE(s.reset[i], 0.005);
    EXPECT_GE(s.wall[i], s.reset[i]);
  }
}

TEST(Timing, CpuHasNoGraphs) {
  EXPECT_EQ(device_api(Device::kCpu)->graph_unsupported_reason().value(), "device cpu has no graph API");
  EXPECT_FALSE(device_api(Device::kCpu)->has_device_events());
}

struct BenchRun {
  int code;
  json report;
};

BenchRun bench(std::vector<std::string> args, const std::string& tag) {
  const fs::path out = fs::temp_directory_path() / ("xk_bench_" + tag + "_" + std::to_string(::getpid()) + ".json");
  fs::remove(out);
  args.insert(args.begin(), "xllm-kernel-benchmark");
  for (const char* a : {"--iterations", "3", "--warmup", "1", "--copy-bytes", "4194304", "--output"}) args.push_back(a);
  args.push_back(out.string());
  BenchRun r{tools::benchmark_main(args), json()};
  if (fs::exists(out)) {
    std::ifstream in(out);
    r.report = json::parse(in);
    fs::remove(out);
  }
  return r;
}

TEST(Benchmark, SideBySideOnSameInputsWithRatios) {
  BenchRun r = bench({"--operation", "rms_norm", "--implementation", "cpu.native.rms_norm", "--tokens", "4,32", "--hidden",
                      "64", "--dtype", "bfloat16"},
                     "single");
  ASSERT_EQ(r.code, 0);
  r = bench({"--operation", "layer_norm", "--implementation", "all", "--tokens", "4,32", "--hidden", "64", "--dtype",
             "bfloat16"},
            "all");
  // This test binary registers a deliberately aliasing layer_norm: it fails validation, untimed.
  ASSERT_EQ(r.code, 1);
  bool aliasing_failed = false;
  for (const auto& row : r.report["results"]) {
    if (row["implementation"] == "cpu.test_aliasing.layer_norm") aliasing_failed = row["status"] == "failed";
  }
  EXPECT_TRUE(aliasing_failed);
  EXPECT_GT(r.report["copy_bandwidth_gbps"].get<double>(), 0);
  // Both CPU copy methods measured; the reference is the faster one.
  const json& methods = r.report["copy_methods"];
  ASSERT_TRUE(methods.contains("torch copy_") && methods.contains("non-temporal copy")) << methods.dump();
  const std::string best = r.report["copy_method"];
  EXPECT_DOUBLE_EQ(methods[best].get<double>(), r.report["copy_bandwidth_gbps"].get<double>());
  for (const auto& [name, gbps] : methods.items()) EXPECT_LE(gbps.get<double>(), methods[best].get<double>()) << name;
  std::map<std::string, int> timed_per_case;
  for (const auto& row : r.report["results"]) {
    if (row["status"] != "timed") continue;  // the test binary's wrong kernels fail validation
    ++timed_per_case[row["case_id"]];
    // % of copy is against the copy timed next to this case.
    EXPECT_GT(row["copy_gbps"].get<double>(), 0);
    EXPECT_NEAR(row["percent_of_copy"].get<double>(),
                100.0 * row["achieved_gbps"].get<double>() / row["copy_gbps"].get<double>(), 1e-9);
    EXPECT_EQ(row["samples"]["device"].size(), 3u);
    EXPECT_EQ(row["hold_expired"], 0);
    EXPECT_EQ(row["device"]["count"], 3);
    EXPECT_GE(row["ratio_to_fastest"].get<double>(), 1.0);
    EXPECT_GT(row["achieved_gbps"].get<double>(), 0);
    EXPECT_EQ(row["warm_cache"].get<bool>(), row["percent_of_copy"].get<double>() > 100);
    EXPECT_EQ(row["warmup_calls"], r.report["timing"]["warmup"]);  // --warmup's; no rotation
    EXPECT_EQ(row["unsteady"].get<bool>(), !row["steadiness"]["reasons"].empty());
    EXPECT_EQ(row["steadiness"], to_json(steadiness(row["samples"]["device"].get<std::vector<double>>())));
    if (row["implementation"] == "cpu.torch.layer_norm") EXPECT_DOUBLE_EQ(row["speedup_vs_torch"].get<double>(), 1.0);
    EXPECT_EQ(row["bytes_written"].get<int64_t>(), row["parameters"]["tokens"].get<int64_t>() * 64 * 2);
  }
  ASSERT_EQ(timed_per_case.size(), 2u);
  for (const auto& [id, n] : timed_per_case) EXPECT_EQ(n, 2) << id;  // native and torch, interleaved
  for (const auto& [id, n] : timed_per_case) {
    double best = 1e9;
    for (const auto& row : r.report["results"])
      if (row["case_id"] == id && row["status"] == "timed") best = std::min(best, row["ratio_to_fastest"].get<double>());
    EXPECT_DOUBLE_EQ(best, 1.0);
  }
}

// A mutating case (rotary_embedding rotates query and key in place) resets before each sample: the
// report says which intervals hold the reset and gives its own time; a case that does not reset
// says null. Every report carries the run's occupancy.
TEST(Benchmark, ReportStatesTheResetAndTheOccupancy) {
  BenchRun r = bench({"--operation", "rotary_embedding", "--implementation", "cpu.native.rotary_embedding", "--tokens",
                      "16", "--head-size", "64", "--rot", "full", "--heads", "8/1", "--is-neox", "true", "--dtype",
                      "float32", "--cache-dtype", "float32", "--layout", "contiguous"},
                     "reset");
  ASSERT_EQ(r.code, 0) << r.report.dump().substr(0, 2000);
  EXPECT_NE(r.report["timing"]["reset"].get<std::string>().find("inside the wall time"), std::string::npos);
  int timed = 0;
  for (const auto& row : r.report["results"]) {
    if (row["status"] != "timed") continue;
    ++timed;
    ASSERT_TRUE(row["reset"].is_object()) << row.dump();
    EXPECT_EQ(row["reset"]["included_in"], json({"wall"}));
    EXPECT_EQ(row["reset"]["excluded_from"], json({"host_enqueue", "device"}));
    EXPECT_EQ(row["reset"]["seconds"]["count"], 3);
    const auto walls = row["samples"]["wall"].get<std::vector<double>>();
    const auto resets = row["samples"]["reset"].get<std::vector<double>>();
    const auto devices = row["samples"]["device"].get<std::vector<double>>();
    ASSERT_EQ(resets.size(), walls.size());
    // On the CPU the wall time is the call's interval plus its reset.
    for (size_t i = 0; i < walls.size(); ++i) EXPECT_NEAR(walls[i], devices[i] + resets[i], 1e-12);
  }
  EXPECT_GT(timed, 0);
  const json& o = r.report["occupancy"];
  EXPECT_TRUE(o["idle"].is_boolean());
  EXPECT_EQ(o["idle"].get<bool>(), o["warnings"].empty());
  EXPECT_TRUE(o["host"]["load_average_before"].is_array());
  EXPECT_EQ(o["device"]["kind"], "cpu");
  // rms_norm does not mutate: no reset.
  r = bench({"--operation", "rms_norm", "--implementation", "cpu.native.rms_norm", "--tokens", "4", "--hidden", "64",
             "--dtype", "bfloat16"},
            "noreset");
  ASSERT_EQ(r.code, 0);
  for (const auto& row : r.report["results"]) {
    EXPECT_TRUE(row["reset"].is_null());
    EXPECT_TRUE(row["samples"]["reset"].empty());
  }
}

TEST(Benchmark, OnlyValidatedCasesAreTimed) {
  BenchRun r = bench({"--operation", "rms_norm", "--implementation", "cpu.test_wrong_value.rms_norm", "--tokens", "4",
                      "--hidden", "64"},
                     "wrong");
  EXPECT_EQ(r.code, 1);
  ASSERT_FALSE(r.report["results"].empty());
  for (const auto& row : r.report["results"]) {
    EXPECT_EQ(row["status"], "failed");
    EXPECT_FALSE(row.contains("samples"));
    EXPECT_NE(row["reason"].get<std::string>().find("validation failed"), std::string::npos);
  }
}

TEST(Benchmark, ColdCacheRotationReportsWhetherItExceededTheCache) {
  BenchRun r = bench({"--operation", "rms_norm", "--implementation", "cpu.native.rms_norm", "--tokens", "1024", "--hidden",
                      "4096", "--dtype", "float32", "--cold-cache"},
                     "cold");
  ASSERT_EQ(r.code, 0);
  const json& rot = r.report["results"][0]["rotation"];
  EXPECT_TRUE(rot["enabled"].get<bool>());
  EXPECT_GE(rot["copies"].get<int>(), 2);
  EXPECT_EQ(r.report["results"][0]["warmup_calls"].get<int>(), 2 * rot["copies"].get<int>());
  EXPECT_TRUE(r.report["timing"].contains("steadiness_bounds"));
  const int64_t case_bytes = 1024 * 4096 * 4 * 2 + 4096 * 4;
  EXPECT_EQ(rot["working_set_bytes"].get<int64_t>(), case_bytes * rot["copies"].get<int64_t>());
  // What the copies hold: inputs, pristine copies and expected values of each, within 8 GiB.
  EXPECT_GE(rot["held_bytes"].get<int64_t>(), 2 * case_bytes * rot["copies"].get<int64_t>());
  EXPECT_LE(rot["held_bytes"].get<int64_t>(), int64_t{8} << 30);
  if (rot["last_level_cache_bytes"].get<int64_t>() > 0) {
    EXPECT_EQ(rot["exceeds_cache"].get<bool>(), rot["working_set_bytes"].get<int64_t>() > rot["last_level_cache_bytes"].get<int64_t>());
    EXPECT_TRUE(rot["exceeds_cache"].get<bool>());
  }
}

TEST(Benchmark, GraphModeOnCpuTimesNothing) {
  BenchRun r = bench({"--operation", "rms_norm", "--mode", "graph", "--tokens", "4", "--hidden", "64"}, "graph");
  EXPECT_EQ(r.code, 3);
  for (const auto& row : r.report["results"]) EXPECT_EQ(row["status"], "unsupported");
}

TEST(Benchmark, UsageErrors) {
  EXPECT_EQ(tools::benchmark_main({"xllm-kernel-benchmark", "--operation", "rms_norm", "--iterations", "0"}), 2);
  EXPECT_EQ(tools::benchmark_main({"xllm-kernel-benchmark", "--operation", "nope"}), 2);
  EXPECT_EQ(tools::benchmark_main({"xllm-kernel-benchmark"}), 2);
  EXPECT_EQ(tools::benchmark_main({"xllm-kernel-benchmark", "compare", "only-one.json"}), 2);
}

// Synthetic reports: one case whose candidate is faster, one the same, one slower; then a second
// baseline that drifted.
json synthetic(double fast, double same, double slow, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0, 0.005);
  auto samples = [&](double center) {
    std::vector<double> s;
    for (int i = 0; i < 40; ++i) s.push_back(center * (1 + noise(rng)));
    return s;
  };
  json results = json::array();
  for (auto [id, t] : {std::pair{"a", fast}, std::pair{"b", same}, std::pair{"c", slow}}) {
    results.push_back({{"case_id", id}, {"implementation", "cpu.native.rms_norm"}, {"status", "timed"},
                       {"parameters", {{"dtype", "bfloat16"}}}, {"samples", {{"device", samples(t)}}}});
  }
  return {{"operation", "rms_norm"}, {"device", "cpu"}, {"mode", "eager"}, {"seed", 0},
          {"timing", {{"iterations", 40}}}, {"environment", {{"host", "vm"}, {"cpu_model", "x"}, {"torch", "2.14.1"}}},
          {"results", results}};
}

TEST(Compare, VerdictsAndDrift) {
  const json base = synthetic(1.0, 1.0, 1.0, 1), base2 = synthetic(1.0, 1.0, 1.0, 2);
  const json cand = synthetic(0.8, 1.0, 1.25, 3);
  const json c = compare_reports(base, cand, base2);
  ASSERT_EQ(c["rows"].size(), 3u);
  EXPECT_EQ(c["rows"][0]["verdict"], "faster");
  EXPECT_EQ(c["rows"][1]["verdict"], "same");
  EXPECT_EQ(c["rows"][2]["verdict"], "slower");
  EXPECT_FALSE(c["drift"].get<bool>());
  EXPECT_NEAR(c["rows"][0]["candidate_over_baseline"]["point"].get<double>(), 0.8, 0.01);

  const json drifted = synthetic(1.1, 1.1, 1.1, 4);  // the machine got 10% slower between baselines
  const json d = compare_reports(base, cand, drifted);
  EXPECT_TRUE(d["drift"].get<bool>());
  for (const auto& row : d["rows"]) EXPECT_EQ(row["verdict"], "drift");
  EXPECT_NE(compare_markdown(d).find("drift"), std::string::npos);
}

TEST(Compare, CommandLine) {
  const fs::path dir = fs::temp_directory_path() / ("xk_compare_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const json base = synthetic(1.0, 1.0, 1.0, 1), cand = synthetic(0.8, 1.0, 1.25, 3), base2 = synthetic(1.0, 1.0, 1.0, 2);
  std::ofstream(dir / "a.json") << base.dump();
  std::ofstream(dir / "b.json") << cand.dump();
  std::ofstream(dir / "c.json") << base2.dump();
  auto compare = [&](const std::string& b, const std::string& c, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{"xllm-kernel-benchmark", "compare", (dir / "a.json").string(), (dir / b).string(),
                                  (dir / c).string(), "--output", (dir / "cmp.json").string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return tools::benchmark_main(argv);
  };
  // A candidate slower on one case fails by default (a regression gate), and passes with none.
  EXPECT_EQ(compare("b.json", "c.json"), kCompareSlower);
  json c = json::parse(std::ifstream(dir / "cmp.json"));
  EXPECT_EQ(c["rows"][0]["verdict"], "faster");
  EXPECT_EQ(c["slower"], 1);
  EXPECT_EQ(c["exit_code"], kCompareSlower);
  EXPECT_EQ(c["fail_on"], (json{"slower", "drift"}));
  EXPECT_TRUE(c["mismatches"].empty());
  EXPECT_EQ(compare("b.json", "c.json", {"--fail-on", "none"}), 0);
  EXPECT_EQ(compare("b.json", "c.json", {"--fail-on", "drift"}), 0);
  // Baselines that drifted apart: exit 5 (every row is "drift", none "slower").
  std::ofstream(dir / "d.json") << synthetic(1.1, 1.1, 1.1, 4).dump();
  EXPECT_EQ(compare("b.json", "d.json"), kCompareDrift);
  EXPECT_EQ(compare("b.json", "d.json", {"--fail-on", "slower"}), 0);
  EXPECT_EQ(compare("a.json", "c.json"), 0);  // the baseline against itself: same
  // Another configuration is refused, its differences listed, unless --allow-mismatch.
  json other = synthetic(1.0, 1.0, 1.0, 5);
  other["environment"]["torch"] = "2.11.0";
  other["results"][0]["parameters"]["dtype"] = "float16";
  std::ofstream(dir / "e.json") << other.dump();
  fs::remove(dir / "cmp.json");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(compare("e.json", "c.json"), kCompareMismatch);
  const std::string refused = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(refused.find("- torch: baseline \"2.14.1\", candidate \"2.11.0\", baseline2 \"2.14.1\""), std::string::npos)
      << refused;
  EXPECT_NE(refused.find("- dtypes: baseline [\"bfloat16\"], candidate [\"bfloat16\",\"float16\"]"), std::string::npos)
      << refused;
  EXPECT_FALSE(fs::exists(dir / "cmp.json"));
  EXPECT_EQ(compare("e.json", "c.json", {"--allow-mismatch", "--fail-on", "none"}), 0);
  c = json::parse(std::ifstream(dir / "cmp.json"));
  ASSERT_EQ(c["mismatches"].size(), 2u);
  EXPECT_EQ(c["mismatches"][0]["field"], "torch");
  EXPECT_NE(compare_markdown(c).find("differ in configuration"), std::string::npos);
  // Usage errors.
  EXPECT_EQ(compare("b.json", "c.json", {"--fail-on", "none,slower"}), 2);
  EXPECT_EQ(compare("b.json", "c.json", {"--fail-on", "faster"}), 2);
  EXPECT_EQ(tools::benchmark_main({"xllm-kernel-benchmark", "compare", (dir / "a.json").string(), (dir / "missing.json").string(),
                                   (dir / "c.json").string()}),
            2);
  fs::remove_all(dir);
}

// The roofline of made-up cases, one of each bound (ceilings.h): compute peaks of 100 Gop/s of
// float32 FMA and 1 Top/s of AMX bf16, read and copy ceilings per case.
TEST(Roofline, EachBound) {
  const std::map<std::string, ComputePeak> peaks{{"f32_fma", {100e9, "loop"}}, {"amx_bf16", {1000e9, "tiles"}}};
  // Read: 1 GB read, nothing written: 0.1 s at the read ceiling, 0.05 s through a 20 GB/s copy.
  Roofline r = roofline(1e9, 0, {}, 10e9, 20e9, peaks);
  EXPECT_EQ(r.bound, "read");
  EXPECT_DOUBLE_EQ(r.ideal_seconds, 0.1);
  EXPECT_DOUBLE_EQ(r.copy_seconds, 0.05);
  EXPECT_TRUE(r.compute_class.empty());
  // Copy: 1 GB read and 1 GB written through an 8 GB/s copy (0.25 s) beat the read (0.1 s).
  r = roofline(1e9, 1e9, {}, 10e9, 8e9, peaks);
  EXPECT_EQ(r.bound, "copy");
  EXPECT_DOUBLE_EQ(r.ideal_seconds, 0.25);
  // Compute: 1e12 float32 operations (10 s) over the bytes' 0.1 s.
  r = roofline(1e9, 0, {{"f32_fma", 1e12}}, 10e9, 20e9, peaks);
  EXPECT_EQ(r.bound, "f32_fma");
  EXPECT_DOUBLE_EQ(r.ideal_seconds, 10.0);
  // Alternatives: the fastest class the machine has sets the compute time (AMX: 1 s); a class it
  // lacks is ignored, and with none of them left the bytes bound the case.
  r = roofline(1e9, 0, {{"f32_fma", 1e12}, {"amx_bf16", 1e12}, {"bf16_dot", 1e12}}, 10e9, 20e9, peaks);
  EXPECT_EQ(r.bound, "amx_bf16");
  EXPECT_DOUBLE_EQ(r.ideal_seconds, 1.0);
  EXPECT_EQ(r.compute_class, "amx_bf16");
  r = roofline(1e9, 0, {{"int8_dot", 1e15}}, 10e9, 20e9, peaks);
  EXPECT_EQ(r.bound, "read");
  EXPECT_TRUE(r.compute_class.empty());
  // Ties go to read, then copy.
  EXPECT_EQ(roofline(1e9, 1e9, {}, 10e9, 20e9, peaks).bound, "read");
  EXPECT_EQ(roofline(1e9, 1e9, {{"f32_fma", 1e10}}, 20e9, 20e9, peaks).bound, "copy");
  // The report's fields: a run at twice the ideal time is at 50%.
  const json j = to_json(roofline(1e9, 0, {{"f32_fma", 1e12}}, 10e9, 20e9, peaks), 20.0);
  EXPECT_DOUBLE_EQ(j["percent"].get<double>(), 50.0);
  EXPECT_EQ(j["bound"], "f32_fma");
  EXPECT_EQ(j["compute_class"], "f32_fma");
  EXPECT_TRUE(to_json(roofline(1e9, 0, {}, 10e9, 20e9, peaks), 0.2)["compute_class"].is_null());
}

// The CPU's ceilings: every read method measured (threads x cursors x prefetch), the best
// remembered; every compute class either measured or absent with the reason the CPU probe gives.
TEST(Ceilings, CpuReadMethodsAndComputeClasses) {
  const DeviceApi& api = *device_api(Device::kCpu);
  ReadMeter meter(api, at::Device(at::kCPU), 0, int64_t{8} << 20);
  const ReadCeiling read = meter.measure(2);
  EXPECT_EQ(read.methods.size(), at::get_num_threads() > 1 ? 8u : 4u);
  for (const auto& [name, bps] : read.methods) {
    EXPECT_NE(name.find("read_stream: threads "), std::string::npos);
    EXPECT_GT(bps, 0.0) << name;
  }
  EXPECT_GT(meter.measure_best(2), 0.0);
  const ComputePeaks peaks = measure_compute_peaks(api, at::Device(at::kCPU), 0);
  ASSERT_TRUE(peaks.peaks.count("f32_fma"));
  EXPECT_GT(peaks.peaks.at("f32_fma").ops_per_second, 0.0);
  EXPECT_EQ(peaks.peaks.size() + peaks.absent.size(), std::size(cpu::kComputeClasses));
  for (cpu::ComputeClass c : cpu::kComputeClasses) {
    std::string detail;
    const bool available = cpu::compute_class_available(c, &detail);
    EXPECT_EQ(peaks.peaks.count(cpu::compute_class_name(c)), available ? 1u : 0u) << cpu::compute_class_name(c);
    if (!available) EXPECT_EQ(peaks.absent.at(cpu::compute_class_name(c)), detail);
  }
  const json j = ceilings_json(read, 1e10, "torch copy_", peaks);
  EXPECT_DOUBLE_EQ(j["read"]["gbps"].get<double>(), read.best().second / 1e9);
  EXPECT_EQ(j["read"]["methods"].size(), read.methods.size());
  EXPECT_EQ(j["compute"].size(), peaks.peaks.size());
  EXPECT_NE(ceilings_markdown(j).find("f32_fma"), std::string::npos);
}

// Rounds of an A/B run: round i of the baseline has center base[i] (the machine's speed then), the
// candidate's the same times `factor`; each round's 20 samples carry 1% noise.
std::vector<json> rounds_of(const std::vector<double>& base, double factor, uint32_t seed) {
  std::vector<json> out;
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0, 0.01);
  for (double center : base) {
    std::vector<double> s;
    for (int i = 0; i < 20; ++i) s.push_back(center * factor * (1 + noise(rng)));
    json report = synthetic(1, 1, 1, seed);
    report["results"] = json::array({{{"case_id", "a"}, {"implementation", "cpu.native.rms_norm"}, {"status", "timed"},
                                      {"parameters", {{"dtype", "bfloat16"}}}, {"samples", {{"device", s}}}}});
    out.push_back(report);
  }
  return out;
}

TEST(Ab, PairedRoundsSeeThroughDrift) {
  // The machine slows down by 40% during the run, the same for both builds in each pair: a 7% faster
  // candidate is still shown faster (its interval below 1), its point near 0.93.
  const std::vector<double> drifting = {1.0, 1.08, 1.16, 1.24, 1.32, 1.4};
  json c = compare_rounds(rounds_of(drifting, 1.0, 1), rounds_of(drifting, 0.93, 2));
  ASSERT_EQ(c["rows"].size(), 1u);
  EXPECT_EQ(c["rounds"], 6);
  EXPECT_EQ(c["rows"][0]["verdict"], "faster");
  EXPECT_FALSE(c["rows"][0]["straddles_one"].get<bool>());
  EXPECT_NEAR(c["rows"][0]["candidate_over_baseline"]["point"].get<double>(), 0.93, 0.02);
  EXPECT_LT(c["rows"][0]["candidate_over_baseline"]["high"].get<double>(), 1.0);
  EXPECT_NEAR(c["rows"][0]["baseline_spread"].get<double>(), 1.4, 0.05);
  EXPECT_EQ(c["rows"][0]["baseline_round_medians"].size(), 6u);
  EXPECT_EQ(c["faster"], 1);
  // The same build on both sides: the interval straddles 1, and the Markdown says so.
  c = compare_rounds(rounds_of(drifting, 1.0, 3), rounds_of(drifting, 1.0, 4));
  EXPECT_EQ(c["rows"][0]["verdict"], "same");
  EXPECT_TRUE(c["rows"][0]["straddles_one"].get<bool>());
  EXPECT_NE(ab_markdown(c).find("straddles 1"), std::string::npos);
  // Slower.
  c = compare_rounds(rounds_of(drifting, 1.0, 5), rounds_of(drifting, 1.1, 6));
  EXPECT_EQ(c["rows"][0]["verdict"], "slower");
  EXPECT_EQ(c["slower"], 1);
  // A pair's ratio that the machine's drift would hide without the pairing: unpaired, the same
  // values give an interval that straddles 1.
  std::vector<double> a, b;
  for (size_t i = 0; i < drifting.size(); ++i) {
    a.push_back(drifting[i]);
    b.push_back(drifting[i] * 0.93);
  }
  EXPECT_LT(paired_median_ratio(a, b).high, 1.0);
  EXPECT_GT(median_ratio(a, b).high, 1.0);
  EXPECT_THROW(compare_rounds(rounds_of({1, 1}, 1, 7), rounds_of({1}, 1, 8)), std::invalid_argument);
  EXPECT_THROW(paired_median_ratio({1, 2}, {1}), std::invalid_argument);
}

TEST(Ab, CommandLine) {
  const fs::path dir = fs::temp_directory_path() / ("xk_ab_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::vector<double> centers = {1.0, 1.02, 0.98, 1.01, 0.99};
  const std::vector<json> base = rounds_of(centers, 1.0, 11), cand = rounds_of(centers, 1.25, 12);
  std::vector<std::string> a, b;
  for (size_t i = 0; i < centers.size(); ++i) {
    a.push_back((dir / ("a-" + std::to_string(i) + ".json")).string());
    b.push_back((dir / ("b-" + std::to_string(i) + ".json")).string());
    std::ofstream(a.back()) << base[i].dump();
    std::ofstream(b.back()) << cand[i].dump();
  }
  auto ab = [&](const std::vector<std::string>& base_files, const std::vector<std::string>& cand_files,
                std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{"xllm-kernel-benchmark", "ab", "--baseline"};
    argv.insert(argv.end(), base_files.begin(), base_files.end());
    argv.push_back("--candidate");
    argv.insert(argv.end(), cand_files.begin(), cand_files.end());
    argv.insert(argv.end(), {"--output", (dir / "ab.json").string()});
    argv.insert(argv.end(), extra.begin(), extra.end());
    return tools::benchmark_main(argv);
  };
  // A slower candidate fails by default, and passes with --fail-on none.
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(ab(a, b), kCompareSlower);
  EXPECT_NE(::testing::internal::GetCapturedStdout().find("5 rounds of each build"), std::string::npos);
  json c = json::parse(std::ifstream(dir / "ab.json"));
  EXPECT_EQ(c["rows"][0]["verdict"], "slower");
  EXPECT_EQ(c["exit_code"], kCompareSlower);
  EXPECT_EQ(ab(a, b, {"--fail-on", "none"}), 0);
  EXPECT_EQ(ab(a, a), 0);  // the baseline against itself
  // Too few rounds, or unequal sides: usage errors naming the counts.
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(ab({a[0], a[1]}, {b[0], b[1]}), 2);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("at least 5 of each (--min-rounds); given 2 and 2"),
            std::string::npos);
  EXPECT_EQ(ab({a[0], a[1]}, {b[0], b[1]}, {"--min-rounds", "2", "--fail-on", "none"}), 0);
  EXPECT_EQ(ab(a, {b[0], b[1], b[2], b[3]}), 2);
  EXPECT_EQ(ab(a, {b[0], b[1], b[2], b[3], (dir / "missing.json").string()}), 2);
  // Another configuration in one round is refused, naming the round.
  json other = cand[3];
  other["environment"]["torch"] = "2.11.0";
  std::ofstream(dir / "other.json") << other.dump();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(ab(a, {b[0], b[1], b[2], (dir / "other.json").string(), b[4]}), kCompareMismatch);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("candidate 3 \"2.11.0\""), std::string::npos);
  EXPECT_EQ(ab(a, {b[0], b[1], b[2], (dir / "other.json").string(), b[4]}, {"--allow-mismatch", "--fail-on", "none"}),
            0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace xllm_kernel::testing
