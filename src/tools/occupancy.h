// How busy the machine was while a tool ran, for the reports' `occupancy` block and the Markdown
// header: a benchmark of a busy host or device measures the neighbours as much as the kernel.
//
//   tools::OccupancyProbe probe(device, index);   // snapshots the host and the device now
//   ... validate / time ...
//   report["occupancy"] = probe.finish();          // snapshots again; {"idle", "warnings", "host", "device"}
//
// Host: the load average before and after (/proc/loadavg), and the CPU time other processes used
// during the run (/proc/stat's busy time minus this process's, /proc/self/stat), in cores.
// CUDA: NVML, dlopen()ed at run time (never a build dependency): memory in use, other compute
// processes, clocks, utilization. NPU: the ACL runtime torch_npu loaded (memory, chip name), the
// torch_npu and CANN versions. Whatever cannot be read says "unavailable: <reason>".
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "xllm_kernel/contract.h"

namespace xllm_kernel::tools {

using nlohmann::json;

// Other processes' CPU use above this many cores on average during the run, or a 1-minute load
// average of at least this much before it, marks the host as not idle.
inline constexpr double kBusyOtherCores = 0.25;
inline constexpr double kBusyLoadBefore = 1.0;

struct HostSnapshot {
  std::optional<std::array<double, 3>> load;  // /proc/loadavg
  // /proc/stat's first line, summed over CPUs, in clock ticks: all time and busy time (not idle or
  // iowait); this process's user + system ticks (/proc/self/stat). Unset when unreadable.
  std::optional<uint64_t> total_ticks, busy_ticks, self_ticks;
  int cpus = 0;  // cpuN lines of /proc/stat
  std::chrono::steady_clock::time_point at;
  std::string unavailable;  // why the CPU times are unset
};

// Parses the texts of /proc/loadavg, /proc/stat and /proc/self/stat (tests give their own).
HostSnapshot parse_host_snapshot(const std::string& loadavg, const std::string& proc_stat, const std::string& self_stat);
HostSnapshot host_snapshot();

// The `host` block from two snapshots: load_average_before/after, other_processes_cpu_cores,
// this_process_cpu_cores, cpus, seconds (or "unavailable: ..." strings where unreadable).
json host_occupancy(const HostSnapshot& before, const HostSnapshot& after);

// One reading of a CUDA device through NVML loaded from `library` (the CUDA ordinal is mapped to
// NVML's device through its PCI bus id): memory_used_bytes, memory_total_bytes,
// other_processes ([{pid, used_memory_bytes}], this process left out), sm_clock_mhz,
// memory_clock_mhz, utilization_percent; each "unavailable: <reason>" where it cannot be read.
json nvml_snapshot(int cuda_index, const char* library = "libnvidia-ml.so.1");
// One reading of an NPU: memory_used_bytes, memory_total_bytes (the ACL runtime's aclrtGetMemInfo),
// chip (aclrtGetSocName), torch_npu (the version of the loaded libtorch_npu.so's package), cann
// (the toolkit's version file under ASCEND_TOOLKIT_HOME or ASCEND_HOME_PATH), other_processes.
json npu_snapshot(int index);

// The block's warnings and idleness from its host and device readings.
json occupancy_verdict(const json& host, const json& device_before, const json& device_after);

class OccupancyProbe {
 public:
  OccupancyProbe(Device device, int index);
  // {"idle", "warnings", "host", "device": {"kind", "before", "after"}}.
  json finish() const;

 private:
  Device device_;
  int index_;
  HostSnapshot host_;
  json device_before_;
};

// One Markdown paragraph for the tools' headers: the occupancy and, where not idle, a warning.
std::string occupancy_markdown(const json& occupancy);

}  // namespace xllm_kernel::tools
