// The distributed run's parts in one process: the store-backed Group with ranks as threads over a
// c10d HashStore, torchrun's environment, the test hook, report paths, and what both aggregates
// share. (The tools' aggregates: test/numerics/aggregate_test.cpp, test/benchmark/aggregate_test.cpp;
// the tools under torchrun: test/python/test_distributed.py.)
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <map>
#include <thread>

#include "src/tools/cli.h"
#include "src/tools/distributed/aggregate.h"
#include "src/tools/distributed/run.h"
#include "src/tools/distributed/test_fault.h"

namespace xllm_kernel::tools::distributed {
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
  const TestFault stall = TestFault::parse("stall-report-write");
  EXPECT_EQ(stall.kind, TestFault::Kind::kStallReportWrite);
  EXPECT_EQ(stall.report_write, 1);
  EXPECT_EQ(TestFault::parse("stall-report-write:2").report_write, 2);
  EXPECT_FALSE(stall.on(0, TestFault::Kind::kStallReportWrite));  // no rank: only write_atomically acts on it
  for (const char* bad : {"explode:1", "fail", "fail:", "fail:x", "fail:1x", "fail:-1", "stall-report-write:",
                          "stall-report-write:0", "stall-report-write:1x"}) {
    EXPECT_THROW(TestFault::parse(bad), UsageError) << bad;
  }
}

TEST(DistributedEnvironment, FaultInjectorActsOnlyOnItsRankAndOnce) {
  std::vector<std::string> failures{"x"};
  bool passed = true;
  FaultInjector none;  // what every run without XLLM_KERNEL_TEST_FAULT gets
  none.after_validation(passed, failures);
  none.before_case(1, 2);
  json configuration{{"cases", {{"count", 2}, {"hash", "h"}}}};
  none.on_configuration(configuration);
  EXPECT_TRUE(passed);
  EXPECT_EQ(failures.size(), 1u);
  EXPECT_EQ(configuration["cases"]["count"], 2);

  FaultInjector other(TestFault::parse("disagree:1"), 0, 1s);
  other.after_validation(passed, failures);
  EXPECT_TRUE(passed);
  FaultInjector disagree(TestFault::parse("disagree:1"), 1, 1s);
  disagree.after_validation(passed, failures);
  EXPECT_FALSE(passed);
  EXPECT_EQ(failures[0], "XLLM_KERNEL_TEST_FAULT=disagree:1: rank 1 reports this case as failed");
  passed = true;
  disagree.after_validation(passed, failures);  // once
  EXPECT_TRUE(passed);

  FaultInjector fail(TestFault::parse("fail:0"), 0, 1s);
  EXPECT_NO_THROW(fail.before_case(0, 3));  // mid-run: before the second case
  EXPECT_THROW(fail.before_case(1, 3), std::runtime_error);
  EXPECT_NO_THROW(fail.before_case(1, 3));

  FaultInjector(TestFault::parse("mismatch:0"), 0, 1s).on_configuration(configuration);
  EXPECT_EQ(configuration["cases"]["count"], 3);
}

TEST(DistributedAggregate, ConsensusIsTheMajorityWithTiesToTheLowestRank) {
  EXPECT_EQ(majority({"passed", "failed", "failed"}), "failed");
  EXPECT_EQ(majority({"failed", "passed"}), "failed");
  const json a{{"status", "passed"}}, b{{"status", "failed"}};
  const Consensus c = consensus({&a, &b, &a});
  EXPECT_FALSE(c.agreed);
  EXPECT_EQ(c.status(), "disagreed");
  EXPECT_TRUE(c.dissents(1));
  EXPECT_EQ(c.to_json(), json({{"status", "disagreed"},
                               {"consensus", "disagreed"},
                               {"majority_status", "passed"},
                               {"statuses", {"passed", "failed", "passed"}}}));
  EXPECT_EQ(consensus({&a, &a}).to_json()["status"], "passed");
  const json table0 = json::array({json{{"id", "x"}}, json{{"id", "y"}}}), table1 = json::array({json{{"id", "y"}}});
  const RowKey id = [](const json& r) { return r.at("id").get<std::string>(); };
  EXPECT_EQ(match_rows({&table0, &table1}, json{{"id", "y"}}, id)[1], &table1[0]);
  EXPECT_THROW(match_rows({&table0, &table1}, json{{"id", "x"}}, id), std::runtime_error);
}

TEST(DistributedReport, RankPaths) {
  EXPECT_EQ(insert_rank("report.json", 1), "report.rank1.json");
  EXPECT_EQ(insert_rank("out/v1.2/report.md", 0), "out/v1.2/report.rank0.md");
  EXPECT_EQ(insert_rank("out/v1.2/report", 3), "out/v1.2/report.rank3");
  EXPECT_EQ(insert_rank(".report", 1), ".report.rank1");
  EXPECT_EQ(case_list_digest({"a", "b"}), case_list_digest({"a", "b"}));
  EXPECT_NE(case_list_digest({"a", "b"})["hash"], case_list_digest({"ab"})["hash"]);
}

}  // namespace
}  // namespace xllm_kernel::tools::distributed
