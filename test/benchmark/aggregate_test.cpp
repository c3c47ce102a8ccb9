// The benchmark aggregate of a distributed run, from synthetic per-rank reports.
#include <gtest/gtest.h>

#include "src/benchmark/aggregate.h"

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

}  // namespace
}  // namespace xllm_kernel::benchmark
