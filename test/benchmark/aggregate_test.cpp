// The benchmark aggregate of a distributed run, from synthetic per-rank reports, and the speed
// ratios it shares with a rank's own report.
#include <gtest/gtest.h>

#include "src/benchmark/aggregate.h"
#include "src/benchmark/ratios.h"

namespace xllm_kernel::benchmark {
namespace {

using nlohmann::json;

json benchmark_report(int rank, std::vector<double> device, double copy_gbps, const std::string& status = "timed") {
  json r{{"case_id", "c"}, {"parameters", json::object()}, {"implementation", "cpu.native.rms_norm"}, {"status", status}};
  if (status == "timed") {
    r.update({{"implementation_detail", {{"solution", "native"}}},
              {"bytes_read", 1000},
              {"bytes_written", 1000},
              {"flops", 0.0},
              {"calls_per_sample", 1},
              {"samples", {{"device", device}, {"host_enqueue", device}, {"wall", device}}}});
  } else {
    r["reason"] = "validation failed: x";
  }
  return {{"operation", "rms_norm"},
          {"device", "cpu"},
          {"mode", "eager"},
          {"seed", 0},
          {"environment", {{"host", "h"}, {"device", "cpu"}, {"revision", "r"}, {"torch", "t"}}},
          {"distributed", {{"rank", rank}, {"local_rank", rank}, {"report", nullptr}}},
          {"timing", {{"iterations", device.size()}}},
          {"device_timer", "t"},
          {"copy_bandwidth_gbps", copy_gbps},
          {"copy_bytes", 1},
          {"implementations", {"cpu.native.rms_norm"}},
          {"results", {r}},
          {"summary", {{"timed", 1}, {"failed", 0}}}};
}

TEST(BenchmarkAggregate, TakesTheSlowestRankPerSampleAndMeasuresSkew) {
  const json a = aggregate_benchmark({benchmark_report(0, {1e-6, 5e-6, 2e-6, 2e-6}, 100),
                                      benchmark_report(1, {3e-6, 1e-6, 2e-6, 6e-6}, 80)});
  const json& r = a["results"][0];
  EXPECT_EQ(r["status"], "timed");
  EXPECT_EQ(r["samples"]["device"], json({3e-6, 5e-6, 2e-6, 6e-6}));
  EXPECT_DOUBLE_EQ(r["device"]["median"].get<double>(), 4e-6);
  EXPECT_DOUBLE_EQ(r["device"]["max"].get<double>(), 6e-6);
  EXPECT_DOUBLE_EQ(a["copy_bandwidth_gbps"].get<double>(), 80);  // the slowest rank's
  EXPECT_DOUBLE_EQ(r["achieved_gbps"].get<double>(), 2000 / 4e-6 / 1e9);
  // Excess over the per-sample minimum: rank 0 {0, 4, 0, 0} us, rank 1 {2, 0, 0, 4} us.
  EXPECT_DOUBLE_EQ(r["skew"]["per_rank"][0]["median_excess"].get<double>(), 0);
  EXPECT_NEAR(r["skew"]["per_rank"][1]["median_excess"].get<double>(), 1e-6, 1e-15);
  // Slowest: sample 1 rank 0, samples 0 and 3 rank 1, the tie in sample 2 counts for rank 0.
  EXPECT_DOUBLE_EQ(r["skew"]["per_rank"][0]["slowest_fraction"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(r["skew"]["per_rank"][1]["slowest_fraction"].get<double>(), 0.5);
  EXPECT_EQ(r["rank_device_medians"].size(), 2u);
  EXPECT_EQ(a["summary"]["exit_code"], 0);
  EXPECT_NE(benchmark_aggregate_markdown(a, 20).find("| `c` | `cpu.native.rms_norm` | 4 |"), std::string::npos)
      << benchmark_aggregate_markdown(a, 20);

  const json d = aggregate_benchmark({benchmark_report(0, {}, 100, "not_timed"), benchmark_report(1, {}, 100, "failed")});
  EXPECT_EQ(d["results"][0]["status"], "disagreed");
  EXPECT_EQ(d["results"][0]["dissent"][0]["rank"], 1);
  EXPECT_EQ(d["summary"]["disagreed"], 1);
  EXPECT_EQ(d["summary"]["exit_code"], 1);
}

// A mutating case's reset samples aggregate like the others (per-sample maximum), with the
// intervals that hold them; a rank whose machine was busy is named in the Markdown.
TEST(BenchmarkAggregate, ResetSamplesAndOccupancyWarnings) {
  std::vector<json> reports{benchmark_report(0, {1e-6, 2e-6}, 100), benchmark_report(1, {2e-6, 1e-6}, 100)};
  const json reset{{"included_in", {"wall"}}, {"excluded_from", {"host_enqueue", "device"}}};
  reports[0]["results"][0]["samples"]["reset"] = {4e-6, 1e-6};
  reports[1]["results"][0]["samples"]["reset"] = {3e-6, 5e-6};
  for (auto& r : reports) r["results"][0]["reset"] = reset;
  reports[0]["occupancy"] = {{"idle", true}, {"warnings", json::array()}};
  reports[1]["occupancy"] = {{"idle", false}, {"warnings", {"other processes kept 1.50 CPU cores busy"}}};
  const json a = aggregate_benchmark(reports);
  const json& r = a["results"][0];
  EXPECT_EQ(r["samples"]["reset"], json({4e-6, 5e-6}));
  EXPECT_EQ(r["reset"]["included_in"], json({"wall"}));
  EXPECT_DOUBLE_EQ(r["reset"]["seconds"]["max"].get<double>(), 5e-6);
  const std::string md = benchmark_aggregate_markdown(a, 20);
  EXPECT_NE(md.find("**Warning: rank 1's machine was not idle**: other processes kept 1.50 CPU cores busy."),
            std::string::npos)
      << md;
  EXPECT_EQ(md.find("rank 0's machine"), std::string::npos) << md;
  // Rows without reset samples (no reset, or reports from before it was measured): no reset.
  const json plain = aggregate_benchmark({benchmark_report(0, {1e-6}, 100), benchmark_report(1, {1e-6}, 100)});
  EXPECT_FALSE(plain["results"][0].contains("reset"));
}

json timed_row(const std::string& case_id, const std::string& solution, double median) {
  return {{"case_id", case_id},
          {"status", "timed"},
          {"implementation_detail", {{"solution", solution}}},
          {"device", {{"median", median}}}};
}

TEST(BenchmarkRatios, PerCaseToTheFastestAndToTorch) {
  json results = json::array({timed_row("a", "native", 1.0), timed_row("a", "torch", 4.0),
                              json{{"case_id", "a"}, {"status", "failed"}}, timed_row("b", "native", 2.0),
                              timed_row("b", "other", 3.0)});
  add_ratios(results, 0, results.size());
  EXPECT_DOUBLE_EQ(results[0]["ratio_to_fastest"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(results[0]["speedup_vs_torch"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(results[1]["ratio_to_fastest"].get<double>(), 4.0);
  EXPECT_FALSE(results[2].contains("ratio_to_fastest"));
  EXPECT_DOUBLE_EQ(results[4]["ratio_to_fastest"].get<double>(), 1.5);
  EXPECT_TRUE(results[4]["speedup_vs_torch"].is_null());  // no torch row in case b
  // A range: only its rows.
  json part = json::array({timed_row("c", "native", 2.0), timed_row("c", "torch", 1.0)});
  add_ratios(part, 1, 2);
  EXPECT_FALSE(part[0].contains("ratio_to_fastest"));
  EXPECT_DOUBLE_EQ(part[1]["ratio_to_fastest"].get<double>(), 1.0);
}

}  // namespace
}  // namespace xllm_kernel::benchmark
