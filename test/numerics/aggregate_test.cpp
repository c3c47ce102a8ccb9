// The numerics aggregate of a distributed run, from synthetic per-rank reports.
#include <gtest/gtest.h>

#include "src/numerics/aggregate.h"

namespace xllm_kernel::numerics {
namespace {

json numerics_report(int rank, const std::string& status, double headroom) {
  json result{{"case_id", "c1"}, {"parameters", {{"hidden", 64}}}, {"status", status}};
  if (status != "unsupported") {
    result.update({{"max_abs_error", headroom / 10}, {"max_rel_error", headroom / 100}, {"max_ulp", 1.0}, {"headroom", headroom}});
  }
  if (status == "failed") result["failures"] = {"output out0: too far"};
  json ok{{"case_id", "c2"}, {"parameters", {{"hidden", 7}}}, {"status", "passed"}, {"max_abs_error", 0.0},
          {"max_rel_error", 0.0}, {"max_ulp", 0.0}, {"headroom", 0.0}};
  return {{"operation", "rms_norm"},
          {"device", "cuda:" + std::to_string(rank)},
          {"mode", "eager"},
          {"seed", 0},
          {"environment", {{"host", "h"}, {"device", "cuda:" + std::to_string(rank)}, {"revision", "r"}, {"torch", "t"}}},
          {"distributed", {{"rank", rank}, {"local_rank", rank}, {"report", "n.rank" + std::to_string(rank) + ".json"}}},
          {"implementations",
           {{{"implementation", {{"name", "cuda.native.rms_norm"}}},
             {"worst_headroom", headroom},
             {"worst_ulp", 1.0},
             {"results", {result, ok}}}}},
          {"summary", {{"passed", 1}, {"failed", 0}, {"unsupported", 0}}}};
}

TEST(NumericsAggregate, ConsensusNamesTheDissentingRank) {
  const json a = aggregate_numerics({numerics_report(0, "passed", 0.25), numerics_report(1, "passed", 0.5),
                                     numerics_report(2, "failed", 3.0)});
  EXPECT_EQ(a["device"], "cuda");
  EXPECT_EQ(a["world_size"], 3);
  EXPECT_EQ(a["ranks"][2]["device"], "cuda:2");
  const json& c = a["implementations"][0]["results"][0];
  EXPECT_EQ(c["status"], "disagreed");
  EXPECT_EQ(c["majority_status"], "passed");
  EXPECT_EQ(c["statuses"], json({"passed", "passed", "failed"}));
  EXPECT_DOUBLE_EQ(c["headroom"].get<double>(), 3.0);  // the worst over ranks
  EXPECT_FALSE(c["identical_errors"].get<bool>());
  ASSERT_EQ(c["dissent"].size(), 1u);
  EXPECT_EQ(c["dissent"][0]["rank"], 2);
  EXPECT_EQ(c["dissent"][0]["failures"][0], "output out0: too far");
  EXPECT_EQ(a["implementations"][0]["results"][1]["status"], "passed");
  EXPECT_EQ(a["summary"]["disagreed"], 1);
  EXPECT_EQ(a["summary"]["exit_code"], 1);
  EXPECT_DOUBLE_EQ(a["implementations"][0]["worst_headroom"].get<double>(), 3.0);
  const std::string md = numerics_aggregate_markdown(a, 20);
  EXPECT_NE(md.find("rank 2 failed (headroom 3): output out0: too far"), std::string::npos) << md;

  const json agreed = aggregate_numerics({numerics_report(0, "passed", 0.5), numerics_report(1, "passed", 0.5)});
  EXPECT_EQ(agreed["implementations"][0]["results"][0]["consensus"], "agreed");
  EXPECT_TRUE(agreed["implementations"][0]["results"][0]["identical_errors"].get<bool>());
  EXPECT_EQ(agreed["summary"]["exit_code"], 0);
  // Two ranks, one each way: the tie goes to rank 0, so rank 1 is the one named.
  const json tie = aggregate_numerics({numerics_report(0, "failed", 2.0), numerics_report(1, "passed", 0.5)});
  EXPECT_EQ(tie["implementations"][0]["results"][0]["dissent"][0]["rank"], 1);
}

}  // namespace
}  // namespace xllm_kernel::numerics
