// The reports' occupancy block: host CPU use by other processes from /proc, the load average, the
// device readings (NVML on CUDA, the ACL runtime on NPU) with a reason wherever one is unavailable,
// and the not-idle warning.
#include "src/tools/occupancy.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>

extern char** environ;

namespace xllm_kernel::testing {
namespace {

using nlohmann::json;
using namespace xllm_kernel::tools;

// /proc/stat with 2 CPUs: `busy` and `idle` ticks summed over them; this process used `self`.
HostSnapshot snapshot(uint64_t busy, uint64_t idle, uint64_t self, double load1) {
  const std::string stat = "cpu  " + std::to_string(busy) + " 0 0 " + std::to_string(idle) +
                           " 0 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\ncpu1 1 0 0 1 0 0 0 0 0 0\nintr 1\n";
  // comm with a space and a parenthesis: fields count from the last ')'.
  const std::string self_stat = "4242 (a (b) c) S 1 1 1 0 -1 0 0 0 0 0 " + std::to_string(self) + " 0 0 0 20 0";
  return parse_host_snapshot(std::to_string(load1) + " 0.5 0.25 1/100 4242\n", stat, self_stat);
}

TEST(Occupancy, OtherProcessesCpuIsBusyTimeLessThisProcess) {
  // 200 ticks of 2 CPUs pass (1 s at 100 Hz); 120 busy, 100 of them this process's.
  json host = host_occupancy(snapshot(1000, 5000, 300, 0.1), snapshot(1120, 5080, 400, 0.2));
  EXPECT_EQ(host["cpus"], 2);
  EXPECT_NEAR(host["other_processes_cpu_cores"].get<double>(), 20.0 / 200 * 2, 1e-12);
  EXPECT_NEAR(host["this_process_cpu_cores"].get<double>(), 100.0 / 200 * 2, 1e-12);
  EXPECT_DOUBLE_EQ(host["load_average_before"][0].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(host["load_average_after"][0].get<double>(), 0.2);
  json verdict = occupancy_verdict(host, json::object(), json::object());
  EXPECT_TRUE(verdict["idle"].get<bool>()) << verdict.dump();
  // Others kept 1.5 cores busy, and the load was 2 before: not idle, both said.
  host = host_occupancy(snapshot(1000, 5000, 300, 2.0), snapshot(1170, 5030, 320, 2.0));
  EXPECT_NEAR(host["other_processes_cpu_cores"].get<double>(), 1.5, 1e-12);
  verdict = occupancy_verdict(host, json::object(), json::object());
  EXPECT_FALSE(verdict["idle"].get<bool>());
  ASSERT_EQ(verdict["warnings"].size(), 2u) << verdict.dump();
  EXPECT_NE(verdict["warnings"][0].get<std::string>().find("1.50 CPU cores"), std::string::npos);
  EXPECT_NE(verdict["warnings"][1].get<std::string>().find("load average was 2.00"), std::string::npos);
  // Unreadable /proc: a reason, no number.
  host = host_occupancy(parse_host_snapshot("", "", ""), parse_host_snapshot("", "", ""));
  EXPECT_EQ(host["other_processes_cpu_cores"], "unavailable: /proc/stat unreadable");
  EXPECT_EQ(host["load_average_before"], "unavailable: /proc/loadavg unreadable");
}

TEST(Occupancy, DeviceProcessesAndUtilizationWarn) {
  const json host = host_occupancy(snapshot(1000, 5000, 300, 0), snapshot(1000, 5200, 300, 0));
  const json before{{"other_processes", {{{"pid", 77}, {"used_memory_bytes", 1 << 20}}}}, {"utilization_percent", 40}};
  const json after{{"other_processes", json::array()}, {"utilization_percent", 100}};
  const json verdict = occupancy_verdict(host, before, after);
  EXPECT_FALSE(verdict["idle"].get<bool>());
  ASSERT_EQ(verdict["warnings"].size(), 2u) << verdict.dump();
  EXPECT_NE(verdict["warnings"][0].get<std::string>().find("pid 77"), std::string::npos);
  EXPECT_NE(verdict["warnings"][1].get<std::string>().find("40% busy before the run"), std::string::npos);
}

// A spinning child process during a short run shows as other processes' CPU use, and warns.
TEST(Occupancy, BusyHostWarns) {
  const OccupancyProbe probe(Device::kCpu, 0);
  pid_t child = 0;
  const char* argv[] = {"/bin/sh", "-c", "while :; do :; done", nullptr};
  ASSERT_EQ(posix_spawn(&child, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const json o = probe.finish();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(o["host"]["other_processes_cpu_cores"].is_number()) << o.dump();
  EXPECT_GT(o["host"]["other_processes_cpu_cores"].get<double>(), kBusyOtherCores) << o.dump();
  EXPECT_FALSE(o["idle"].get<bool>());
  EXPECT_EQ(o["device"]["kind"], "cpu");
  const std::string md = occupancy_markdown(o);
  EXPECT_NE(md.find("Occupancy: load average"), std::string::npos) << md;
  EXPECT_NE(md.find("Warning: the machine was not idle"), std::string::npos) << md;
  EXPECT_NE(md.find("CPU cores busy on average"), std::string::npos) << md;
}

// Every device field is a reading or "unavailable: <reason>".
void expect_readings_or_reasons(const json& d, const std::vector<std::string>& keys) {
  for (const auto& k : keys) {
    ASSERT_TRUE(d.contains(k)) << k << " in " << d.dump();
    if (d[k].is_string()) {
      if (k == "chip" || k == "torch_npu" || k == "cann") continue;  // a name or version, or the reason
      EXPECT_EQ(d[k].get<std::string>().rfind("unavailable: ", 0), 0u) << k << ": " << d[k];
    } else {
      EXPECT_TRUE(d[k].is_number() || d[k].is_array()) << k << ": " << d[k];
    }
  }
}

TEST(Occupancy, NvmlAbsentSaysWhy) {
  const json d = nvml_snapshot(0, "libnvidia-ml-absent-for-test.so.1");
  for (const char* k : {"memory_used_bytes", "memory_total_bytes", "other_processes", "sm_clock_mhz", "memory_clock_mhz",
                        "utilization_percent"}) {
    ASSERT_TRUE(d[k].is_string()) << k;
    EXPECT_EQ(d[k].get<std::string>().rfind("unavailable: NVML not loadable (libnvidia-ml-absent-for-test.so.1", 0), 0u)
        << d[k];
  }
  // The real library: readings where there is a GPU, reasons where not.
  expect_readings_or_reasons(nvml_snapshot(0), {"memory_used_bytes", "memory_total_bytes", "other_processes",
                                                "sm_clock_mhz", "memory_clock_mhz", "utilization_percent"});
}

TEST(Occupancy, NpuReadingsOrReasons) {
  const json d = npu_snapshot(0);
  expect_readings_or_reasons(d, {"memory_used_bytes", "memory_total_bytes", "chip", "torch_npu", "cann", "other_processes"});
  // This test process loads neither torch_npu nor the ACL runtime.
  EXPECT_EQ(d["torch_npu"], "unavailable: libtorch_npu.so is not loaded in this process");
  EXPECT_EQ(d["memory_used_bytes"], "unavailable: the ACL runtime (libascendcl.so) is not loaded in this process");
  EXPECT_FALSE(d["cann"].get<std::string>().empty());
}

}  // namespace
}  // namespace xllm_kernel::testing
