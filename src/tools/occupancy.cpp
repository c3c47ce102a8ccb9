#include "src/tools/occupancy.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <vector>

#include "src/tools/report.h"

namespace xllm_kernel::tools {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string unavailable(const std::string& why) { return "unavailable: " + why; }

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

// ---- NVML, by the types and values of nvml.h (never included: NVML is not a build dependency).
namespace nvml {
using Device = void*;
struct Memory {
  unsigned long long total, free, used;
};
struct ProcessInfo {  // nvmlProcessInfo_t, as the _v3 process queries fill it
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id, compute_instance_id;
};
struct Utilization {
  unsigned int gpu, memory;
};
using Init = int (*)();
using Shutdown = int (*)();
using ErrorString = const char* (*)(int);
using ByBusId = int (*)(const char*, Device*);
using ByIndex = int (*)(unsigned int, Device*);
using MemoryInfo = int (*)(Device, Memory*);
using Processes = int (*)(Device, unsigned int*, ProcessInfo*);
using ClockInfo = int (*)(Device, int, unsigned int*);
using UtilizationRates = int (*)(Device, Utilization*);
constexpr int kSuccess = 0, kInsufficientSize = 7;
constexpr int kClockSm = 1, kClockMem = 2;
constexpr unsigned long long kValueNotAvailable = ~0ull;  // NVML_VALUE_NOT_AVAILABLE
}  // namespace nvml

// The PCI bus id of CUDA ordinal `index` through the driver ("0000:3B:00.0"), or why not.
std::string cuda_pci_bus_id(int index, std::string& why) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    why = "libcuda.so.1 not found";
    return {};
  }
  using Init = int (*)(unsigned int);
  using DeviceGet = int (*)(int*, int);
  using BusId = int (*)(char*, int, int);
  auto init = reinterpret_cast<Init>(dlsym(lib, "cuInit"));
  auto get = reinterpret_cast<DeviceGet>(dlsym(lib, "cuDeviceGet"));
  auto bus = reinterpret_cast<BusId>(dlsym(lib, "cuDeviceGetPCIBusId"));
  int device = 0;
  char id[64] = {};
  if (!init || !get || !bus || init(0) != 0 || get(&device, index) != 0 || bus(id, sizeof id, device) != 0) {
    why = "the CUDA driver gave no PCI bus id for cuda:" + std::to_string(index);
    return {};
  }
  return id;
}

// The version in `<torch_npu>/version.py` next to the loaded `<torch_npu>/lib/libtorch_npu.so`.
std::string torch_npu_version() {
  std::string library;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const std::string name = info->dlpi_name ? info->dlpi_name : "";
        if (name.find("libtorch_npu.so") == std::string::npos) return 0;
        *static_cast<std::string*>(out) = name;
        return 1;
      },
      &library);
  if (library.empty()) return unavailable("libtorch_npu.so is not loaded in this process");
  const auto slash = library.rfind('/');
  const std::string lib_dir = slash == std::string::npos ? "." : library.substr(0, slash);
  const std::string version_py = lib_dir + "/../version.py";
  std::istringstream in(read_text(version_py));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("__version__", 0) != 0) continue;
    const auto q = line.find_first_of("'\"");
    const auto e = q == std::string::npos ? q : line.find(line[q], q + 1);
    if (e != std::string::npos) return line.substr(q + 1, e - q - 1);
  }
  return unavailable("no __version__ in " + version_py);
}

// version= of <toolkit>/<arch>-linux/ascend_toolkit_install.info.
std::string cann_version() {
  std::vector<std::string> homes;
  for (const char* var : {"ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"}) {
    if (const char* v = std::getenv(var); v != nullptr && *v) homes.emplace_back(v);
  }
  homes.emplace_back("/usr/local/Ascend/ascend-toolkit/latest");
  homes.emplace_back("/usr/local/Ascend/cann");
  utsname u{};
  uname(&u);
  std::string tried;
  for (const auto& home : homes) {
    const std::string path = home + "/" + u.machine + "-linux/ascend_toolkit_install.info";
    std::istringstream in(read_text(path));
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("version=", 0) == 0) return line.substr(8);
    }
    tried += (tried.empty() ? "" : ", ") + path;
  }
  return unavailable("no CANN toolkit version file (" + tried + ")");
}

}  // namespace

HostSnapshot parse_host_snapshot(const std::string& loadavg, const std::string& proc_stat, const std::string& self_stat) {
  HostSnapshot s;
  s.at = std::chrono::steady_clock::now();
  {
    std::istringstream in(loadavg);
    std::array<double, 3> load{};
    if (in >> load[0] >> load[1] >> load[2]) s.load = load;
  }
  std::istringstream stat(proc_stat);
  std::string line;
  bool first = true;
  while (std::getline(stat, line)) {
    std::istringstream fields(line);
    std::string name;
    fields >> name;
    if (name.rfind("cpu", 0) != 0) continue;
    if (first && name == "cpu") {
      std::vector<uint64_t> v;
      for (uint64_t x; v.size() < 8 && fields >> x;) v.push_back(x);
      if (v.size() >= 5) {
        v.resize(8, 0);  // user nice system idle iowait irq softirq steal (guest is within user)
        uint64_t total = 0;
        for (uint64_t x : v) total += x;
        s.total_ticks = total;
        s.busy_ticks = total - v[3] - v[4];
      }
    } else if (name.size() > 3) {
      ++s.cpus;
    }
    first = false;
  }
  // /proc/self/stat: "pid (comm) state ..." with utime and stime the 14th and 15th fields; comm
  // may hold spaces and parentheses, so fields count from the last ')'.
  const auto close = self_stat.rfind(')');
  if (close != std::string::npos) {
    std::istringstream rest(self_stat.substr(close + 1));
    std::vector<std::string> f;
    for (std::string x; f.size() < 13 && rest >> x;) f.push_back(x);
    if (f.size() == 13) {
      try {
        s.self_ticks = std::stoull(f[11]) + std::stoull(f[12]);
      } catch (const std::exception&) {
      }
    }
  }
  if (!s.total_ticks) s.unavailable = "/proc/stat unreadable";
  else if (!s.self_ticks) s.unavailable = "/proc/self/stat unreadable";
  return s;
}

HostSnapshot host_snapshot() {
  return parse_host_snapshot(read_text("/proc/loadavg"), read_text("/proc/stat"), read_text("/proc/self/stat"));
}

json host_occupancy(const HostSnapshot& before, const HostSnapshot& after) {
  auto load = [](const HostSnapshot& s) {
    return s.load ? json{(*s.load)[0], (*s.load)[1], (*s.load)[2]} : json(unavailable("/proc/loadavg unreadable"));
  };
  json host{{"load_average_before", load(before)},
            {"load_average_after", load(after)},
            {"cpus", before.cpus},
            {"seconds", std::chrono::duration<double>(after.at - before.at).count()}};
  const bool readable = before.unavailable.empty() && after.unavailable.empty();
  const uint64_t total = readable ? *after.total_ticks - *before.total_ticks : 0;
  if (!readable || total == 0 || before.cpus == 0) {
    const std::string why = unavailable(!readable ? (before.unavailable.empty() ? after.unavailable : before.unavailable)
                                                  : "no CPU time passed between the two readings of /proc/stat");
    host["other_processes_cpu_cores"] = why;
    host["this_process_cpu_cores"] = why;
    return host;
  }
  // Busy ticks of all CPUs, less this process's (all its threads): what the others used, as a
  // share of all CPUs' time, times the CPUs: the average number of cores they kept busy.
  const double busy = static_cast<double>(*after.busy_ticks - *before.busy_ticks);
  const double self = static_cast<double>(*after.self_ticks - *before.self_ticks);
  const double cores = static_cast<double>(before.cpus) / static_cast<double>(total);
  host["other_processes_cpu_cores"] = std::max(0.0, busy - self) * cores;
  host["this_process_cpu_cores"] = self * cores;
  return host;
}

json nvml_snapshot(int cuda_index, const char* library) {
  json out;
  auto all_unavailable = [&](const std::string& why) {
    for (const char* k : {"memory_used_bytes", "memory_total_bytes", "other_processes", "sm_clock_mhz", "memory_clock_mhz",
                          "utilization_percent"}) {
      out[k] = unavailable(why);
    }
    return out;
  };
  void* lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    return all_unavailable(std::string("NVML not loadable (") + library + (e ? std::string(": ") + e : "") + ")");
  }
  auto sym = [&](const char* name) { return dlsym(lib, name); };
  auto init = reinterpret_cast<nvml::Init>(sym("nvmlInit_v2"));
  auto shutdown = reinterpret_cast<nvml::Shutdown>(sym("nvmlShutdown"));
  auto error_string = reinterpret_cast<nvml::ErrorString>(sym("nvmlErrorString"));
  auto name_of = [&](int e) { return error_string ? std::string(error_string(e)) : "NVML error " + std::to_string(e); };
  if (init == nullptr || shutdown == nullptr) return all_unavailable(std::string(library) + " lacks nvmlInit_v2");
  if (const int e = init(); e != nvml::kSuccess) return all_unavailable("nvmlInit_v2: " + name_of(e));
  nvml::Device device = nullptr;
  std::string why;
  const std::string bus_id = cuda_pci_bus_id(cuda_index, why);
  auto by_bus = reinterpret_cast<nvml::ByBusId>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
  int e = -1;
  if (!bus_id.empty() && by_bus != nullptr) {
    e = by_bus(bus_id.c_str(), &device);
    if (e != nvml::kSuccess) why = "nvmlDeviceGetHandleByPciBusId_v2(" + bus_id + "): " + name_of(e);
  } else if (why.empty()) {
    why = std::string(library) + " lacks nvmlDeviceGetHandleByPciBusId_v2";
  }
  if (e != nvml::kSuccess) {
    shutdown();
    return all_unavailable("cuda:" + std::to_string(cuda_index) + " not found in NVML: " + why);
  }
  out["pci_bus_id"] = bus_id;
  nvml::Memory memory{};
  auto memory_info = reinterpret_cast<nvml::MemoryInfo>(sym("nvmlDeviceGetMemoryInfo"));
  if (memory_info && (e = memory_info(device, &memory)) == nvml::kSuccess) {
    out["memory_used_bytes"] = memory.used;
    out["memory_total_bytes"] = memory.total;
  } else {
    out["memory_used_bytes"] = out["memory_total_bytes"] =
        unavailable(memory_info ? "nvmlDeviceGetMemoryInfo: " + name_of(e) : "no nvmlDeviceGetMemoryInfo");
  }
  auto processes = reinterpret_cast<nvml::Processes>(sym("nvmlDeviceGetComputeRunningProcesses_v3"));
  if (processes == nullptr) {
    out["other_processes"] = unavailable("no nvmlDeviceGetComputeRunningProcesses_v3");
  } else {
    std::vector<nvml::ProcessInfo> infos(64);
    unsigned int count = static_cast<unsigned int>(infos.size());
    e = processes(device, &count, infos.data());
    if (e == nvml::kInsufficientSize) {
      infos.resize(count + 16);
      count = static_cast<unsigned int>(infos.size());
      e = processes(device, &count, infos.data());
    }
    if (e != nvml::kSuccess) {
      out["other_processes"] = unavailable("nvmlDeviceGetComputeRunningProcesses_v3: " + name_of(e));
    } else {
      json others = json::array();
      for (unsigned int i = 0; i < count; ++i) {
        if (infos[i].pid == static_cast<unsigned int>(getpid())) continue;
        others.push_back({{"pid", infos[i].pid},
                          {"used_memory_bytes", infos[i].used_gpu_memory == nvml::kValueNotAvailable
                                                    ? json(nullptr)
                                                    : json(infos[i].used_gpu_memory)}});
      }
      out["other_processes"] = std::move(others);
    }
  }
  auto clock = reinterpret_cast<nvml::ClockInfo>(sym("nvmlDeviceGetClockInfo"));
  for (const auto& [key, type] : {std::pair{"sm_clock_mhz", nvml::kClockSm}, std::pair{"memory_clock_mhz", nvml::kClockMem}}) {
    unsigned int mhz = 0;
    if (clock && (e = clock(device, type, &mhz)) == nvml::kSuccess) out[key] = mhz;
    else out[key] = unavailable(clock ? "nvmlDeviceGetClockInfo: " + name_of(e) : "no nvmlDeviceGetClockInfo");
  }
  auto rates = reinterpret_cast<nvml::UtilizationRates>(sym("nvmlDeviceGetUtilizationRates"));
  nvml::Utilization u{};
  if (rates && (e = rates(device, &u)) == nvml::kSuccess) out["utilization_percent"] = u.gpu;
  else out["utilization_percent"] = unavailable(rates ? "nvmlDeviceGetUtilizationRates: " + name_of(e) : "no nvmlDeviceGetUtilizationRates");
  shutdown();
  return out;
}

json npu_snapshot(int index) {
  json out;
  // The ACL runtime torch_npu loaded; looked up in the process, never loaded here.
  using MemInfo = int (*)(int, size_t*, size_t*);
  using SocName = const char* (*)();
  constexpr int kAclHbmMem = 1;  // aclrtMemAttr ACL_HBM_MEM
  const std::string no_acl = unavailable("the ACL runtime (libascendcl.so) is not loaded in this process");
  auto mem_info = reinterpret_cast<MemInfo>(dlsym(RTLD_DEFAULT, "aclrtGetMemInfo"));
  size_t free = 0, total = 0;
  int e = -1;
  if (mem_info && (e = mem_info(kAclHbmMem, &free, &total)) == 0) {
    out["memory_used_bytes"] = total - free;
    out["memory_total_bytes"] = total;
  } else {
    out["memory_used_bytes"] = out["memory_total_bytes"] =
        mem_info ? unavailable("aclrtGetMemInfo(ACL_HBM_MEM) returned " + std::to_string(e)) : no_acl;
  }
  auto soc = reinterpret_cast<SocName>(dlsym(RTLD_DEFAULT, "aclrtGetSocName"));
  const char* chip = soc ? soc() : nullptr;
  out["chip"] = chip ? json(chip) : json(soc ? unavailable("aclrtGetSocName returned nothing") : no_acl);
  out["torch_npu"] = torch_npu_version();
  out["cann"] = cann_version();
  out["other_processes"] = unavailable("the ACL runtime has no per-process query of npu:" + std::to_string(index) +
                                       " (npu-smi info shows them)");
  return out;
}

json occupancy_verdict(const json& host, const json& before, const json& after) {
  json warnings = json::array();
  if (host["other_processes_cpu_cores"].is_number() &&
      host["other_processes_cpu_cores"].get<double>() > kBusyOtherCores) {
    warnings.push_back("other processes kept " + fixed(host["other_processes_cpu_cores"].get<double>(), 2) +
                       " CPU cores busy on average during the run");
  }
  if (host["load_average_before"].is_array() && host["load_average_before"][0].get<double>() >= kBusyLoadBefore) {
    warnings.push_back("the 1-minute load average was " + fixed(host["load_average_before"][0].get<double>(), 2) +
                       " before the run");
  }
  std::vector<unsigned> pids;
  for (const json* d : {&before, &after}) {
    if (!d->contains("other_processes") || !(*d)["other_processes"].is_array()) continue;
    for (const auto& p : (*d)["other_processes"]) {
      const auto pid = p["pid"].get<unsigned>();
      if (std::find(pids.begin(), pids.end(), pid) == pids.end()) pids.push_back(pid);
    }
  }
  if (!pids.empty()) {
    std::string list;
    for (unsigned p : pids) list += (list.empty() ? "" : ", ") + std::to_string(p);
    warnings.push_back(std::to_string(pids.size()) + " other process(es) on the device (pid " + list + ")");
  }
  if (before.contains("utilization_percent") && before["utilization_percent"].is_number() &&
      before["utilization_percent"].get<double>() > 5) {
    warnings.push_back("the device was " + std::to_string(before["utilization_percent"].get<int>()) +
                       "% busy before the run");
  }
  return {{"idle", warnings.empty()}, {"warnings", warnings}};
}

namespace {

json device_snapshot(Device device, int index) {
  switch (device) {
    case Device::kCuda:
      return nvml_snapshot(index);
    case Device::kNpu:
      return npu_snapshot(index);
    default:
      return json::object();  // the CPU: the host block is the device's
  }
}

}  // namespace

OccupancyProbe::OccupancyProbe(Device device, int index)
    : device_(device), index_(index), host_(host_snapshot()), device_before_(device_snapshot(device, index)) {}

json OccupancyProbe::finish() const {
  const json host = host_occupancy(host_, host_snapshot());
  const json after = device_snapshot(device_, index_);
  json out = occupancy_verdict(host, device_before_, after);
  out["host"] = host;
  out["device"] = {{"kind", to_string(device_)}, {"before", device_before_}, {"after", after}};
  return out;
}

std::string occupancy_markdown(const json& o) {
  std::ostringstream md;
  const json& h = o["host"];
  md << "Occupancy: load average " << (h["load_average_before"].is_array() ? fixed(h["load_average_before"][0].get<double>(), 2) : "?")
     << " before, " << (h["load_average_after"].is_array() ? fixed(h["load_average_after"][0].get<double>(), 2) : "?")
     << " after; other processes "
     << (h["other_processes_cpu_cores"].is_number() ? fixed(h["other_processes_cpu_cores"].get<double>(), 2) + " CPU cores"
                                                     : h["other_processes_cpu_cores"].get<std::string>())
     << " on average over " << format_number(h["seconds"].get<double>()) << " s";
  const json& d = o["device"];
  if (d["kind"] != "cpu") {
    const json& a = d["after"];
    auto text = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    md << "; " << d["kind"].get<std::string>() << " memory in use "
       << (a["memory_used_bytes"].is_number()
               ? fixed(a["memory_used_bytes"].get<double>() / (1 << 30), 2) + " of " +
                     fixed(a["memory_total_bytes"].get<double>() / (1 << 30), 2) + " GiB"
               : text(a["memory_used_bytes"]))
       << " at the end";
    if (a.contains("other_processes")) {
      md << ", other processes "
         << (a["other_processes"].is_array() ? std::to_string(a["other_processes"].size()) : text(a["other_processes"]));
    }
    if (a.contains("sm_clock_mhz")) md << ", SM clock " << text(a["sm_clock_mhz"]) << " MHz";
    if (a.contains("chip")) md << ", chip " << text(a["chip"]);
    if (a.contains("torch_npu")) md << ", torch_npu " << text(a["torch_npu"]);
    if (a.contains("cann")) md << ", CANN " << text(a["cann"]);
  }
  md << ".\n\n";
  if (!o["idle"].get<bool>()) {
    md << "**Warning: the machine was not idle during this run** (its timings include the neighbours' load): ";
    bool first = true;
    for (const auto& w : o["warnings"]) {
      md << (first ? "" : "; ") << w.get<std::string>();
      first = false;
    }
    md << ".\n\n";
  }
  return md.str();
}

}  // namespace xllm_kernel::tools
