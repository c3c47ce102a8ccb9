// The distributed run's parts in one process: the store-backed Group with ranks as threads over a
// c10d HashStore, torchrun's environment, the test fault syntax, report paths, and the aggregates
// built from synthetic per-rank reports. (The tools under torchrun: test/python/test_distributed.py.)
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <map>
#include <thread>

#include "src/numerics/arguments.h"
#include "src/numerics/distributed.h"
#include "src/numerics/distributed_report.h"

namespace xllm_kernel::numerics {
namespace {

using namespace std::chrono_literals;

// Runs body(group) on `world` threads sharing one store; returns each rank's error ("" if none).
std::vector<std::string> on_ranks(int world, std::chrono::milliseconds timeout,
                                  const std::function<void(Group&)>& body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      Group g(store, r, world, timeout);
      try {
        body(g);
      } catch (const PeerFailure& e) {
        errors[r] = std::string("peer: ") + e.what();
        g.leave(0ms);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        g.fail(e.what(), 2s);
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST(DistributedGroup, GathersInRankOrderEverywhere) {
  std::vector<std::vector<std::string>> all(3), gathered(3);
  std::vector<std::string> broadcast(3);
  const auto errors = on_ranks(3, 10s, [&](Group& g) {
    g.barrier("start");
    for (int round = 0; round < 20; ++round) {  // repeated collectives keep their keys apart
      all[g.rank()] = g.all_gather("x", "v" + std::to_string(g.rank()) + "." + std::to_string(round));
      g.barrier("sample");
    }
    gathered[g.rank()] = g.gather("reports", "r" + std::to_string(g.rank()));
    broadcast[g.rank()] = g.broadcast("code", g.rank() == 0 ? "7" : "ignored");
    g.leave(5s);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(errors[r], "") << r;
    EXPECT_EQ(all[r], (std::vector<std::string>{"v0.19", "v1.19", "v2.19"}));
    EXPECT_EQ(broadcast[r], "7");
  }
  EXPECT_EQ(gathered[0], (std::vector<std::string>{"r0", "r1", "r2"}));
  EXPECT_TRUE(gathered[1].empty() && gathered[2].empty());
}

TEST(DistributedGroup, AFailedRankStopsTheOthersWithItsError) {
  const auto start = std::chrono::steady_clock::now();
  const auto errors = on_ranks(3, 60s, [&](Group& g) {
    g.barrier("start");
    if (g.rank() == 2) throw std::runtime_error("boom on two");
    g.barrier("never completes");
  });
  EXPECT_EQ(errors[2], "boom on two");
  EXPECT_EQ(errors[0], "peer: rank 2 failed: boom on two");
  EXPECT_EQ(errors[1], "peer: rank 2 failed: boom on two");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);  // noticed by polling, not by the 60 s timeout
}

TEST(DistributedGroup, EveryWaitTimesOutNamingWhoIsMissing) {
  const auto errors = on_ranks(2, 300ms, [&](Group& g) {
    if (g.rank() == 1) {
      std::this_thread::sleep_for(1500ms);  // arrives after rank 0 gave up
      g.barrier("late");
      return;
    }
    g.all_gather("configuration", "x");
  });
  EXPECT_NE(errors[0].find("timed out after 0.3 s waiting for all_gather 'configuration' (not arrived: rank 1)"),
            std::string::npos)
      << errors[0];
  // Rank 1 then finds rank 0's published error instead of waiting for it.
  EXPECT_NE(errors[1].find("peer: rank 0 failed: rank 0 timed out"), std::string::npos) << errors[1];
}

TEST(DistributedEnvironment, NeedsTorchrunsVariablesAndTwoRanks) {
  std::map<std::string, std::string> vars{{"RANK", "1"},        {"WORLD_SIZE", "2"},    {"LOCAL_RANK", "1"},
                                          {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
  auto env = [&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  const RankEnvironment e = rank_environment(env);
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_TRUE(e.agent_store);
  EXPECT_EQ(e.run_id, "none");
  vars["WORLD_SIZE"] = "1";
  vars["RANK"] = "0";
  EXPECT_THROW(
      {
        try {
          rank_environment(env);
        } catch (const UsageError& u) {
          EXPECT_NE(std::string(u.what()).find("at least 2 ranks"), std::string::npos);
          throw;
        }
      },
      UsageError);
  vars.erase("MASTER_PORT");
  vars.erase("RANK");
  try {
    rank_environment(env);
    FAIL() << "no error";
  } catch (const UsageError& u) {
    EXPECT_NE(std::string(u.what()).find("not set here: RANK, MASTER_PORT"), std::string::npos) << u.what();
  }
}

TEST(DistributedEnvironment, TestFaultSyntax) {
  EXPECT_EQ(TestFault::parse(nullptr).kind, TestFault::Kind::kNone);
  EXPECT_EQ(TestFault::parse("").kind, TestFault::Kind::kNone);
  const TestFault f = TestFault::parse("disagree:1");
  EXPECT_TRUE(f.on(1, TestFault::Kind::kDisagree));
  EXPECT_FALSE(f.on(0, TestFault::Kind::kDisagree));
  EXPECT_TRUE(TestFault::parse("hang:0").on(0, TestFault::Kind::kHang));
  for (const char* bad : {"explode:1", "fail", "fail:", "fail:x", "fail:1x", "fail:-1"}) {
    EXPECT_THROW(TestFault::parse(bad), UsageError) << bad;
  }
}

TEST(DistributedReport, RankPaths) {
  EXPECT_EQ(insert_rank("report.json", 1), "report.rank1.json");
  EXPECT_EQ(insert_rank("out/v1.2/report.md", 0), "out/v1.2/report.rank0.md");
  EXPECT_EQ(insert_rank("out/v1.2/report", 3), "out/v1.2/report.rank3");
  EXPECT_EQ(insert_rank(".report", 1), ".report.rank1");
  EXPECT_EQ(case_list_digest({"a", "b"}), case_list_digest({"a", "b"}));
  EXPECT_NE(case_list_digest({"a", "b"})["hash"], case_list_digest({"ab"})["hash"]);
}

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

TEST(DistributedReport, NumericsConsensusNamesTheDissentingRank) {
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

TEST(DistributedReport, BenchmarkTakesTheSlowestRankPerSampleAndMeasuresSkew) {
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
}  // namespace xllm_kernel::numerics
