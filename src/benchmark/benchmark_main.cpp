// xllm-kernel-benchmark: times the validated cases of a suite, side by side, against the device's
// copy bandwidth measured in the same run.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <unistd.h>

#include <cmath>
#include <iostream>
#include <sstream>

#include "src/benchmark/aggregate.h"
#include "src/benchmark/ab.h"
#include "src/benchmark/ceilings.h"
#include "src/benchmark/compare.h"
#include "src/benchmark/ratios.h"
#include "src/benchmark/statistics.h"
#include "src/benchmark/timing.h"
#include "src/numerics/suite_run.h"
#include "src/numerics/tensor_case.h"
#include "src/tools/cli.h"
#include "src/tools/distributed/run.h"
#include "src/tools/occupancy.h"
#include "src/tools/report.h"
#include "src/tools/run_tool.h"
#include "xllm_kernel/tools.h"

namespace xllm_kernel {
namespace benchmark {
namespace {

using numerics::json;
using tools::CommonOptions;
using tools::format_microseconds;
using tools::format_number;
using tools::UsageError;
using tools::distributed::DistributedRun;

struct BenchmarkOptions {
  TimingOptions timing;
  int threads = 0;
  bool cold_cache = false;
  int64_t copy_bytes = 0;
};

// Copies of a case so the rotation's working set (the bytes a call moves) exceeds the
// last-level cache: at most 64, and at most 8 GiB held in all (held_bytes: what one prepared
// copy holds, which can be far more than a call moves: a 1-token KV write holds 256 MiB caches,
// their pristine copies and float64 expected values; 0 unknown: the bytes moved instead).
json plan_rotation(const BenchmarkOptions& o, const DeviceApi& api, int index, int64_t case_bytes, int64_t held_bytes,
                   int& copies) {
  copies = 1;
  const int64_t cache = api.last_level_cache_bytes(index);
  if (o.cold_cache && case_bytes > 0) {
    const int64_t target = cache > 0 ? 2 * cache : int64_t{256} << 20;
    const int64_t per_copy = std::max(case_bytes, held_bytes);
    copies = static_cast<int>(std::min<int64_t>({64, (target + case_bytes - 1) / case_bytes + 1,
                                                 std::max<int64_t>(2, (int64_t{8} << 30) / per_copy)}));
    copies = std::max(copies, 2);
  }
  const int64_t working_set = case_bytes * copies;
  return {{"enabled", o.cold_cache},
          {"copies", copies},
          {"working_set_bytes", working_set},
          {"held_bytes", held_bytes * copies},
          {"last_level_cache_bytes", cache},
          {"exceeds_cache", cache > 0 ? json(working_set > cache) : json(nullptr)}};
}

// How the device interval was measured, as it is on this device.
std::string device_timer_text(const DeviceApi& api, ExecutionMode mode) {
  if (!api.has_device_events()) return "on the CPU a call is synchronous: the device interval is the call's wall time";
  if (api.timer_holds_device()) {
    return "device intervals between two device events, the device held while the calls are enqueued; wall: the same "
           "calls again, synchronized, from an idle device";
  }
  return std::string("device intervals between two device events, without a hold: the interval starts when the device "
                     "reaches the start event, so ") +
         (mode == ExecutionMode::kGraph ? "a replay's launch counts once per sample (its calls then run back to back)"
                                        : "eager intervals include the host's submission gaps (the launch after the start event: a call "
                                          "shorter than its launch is timed at the host's launch rate)") +
         "; wall: the same calls again, synchronized, from an idle device";
}

// Where a case resets its mutated inputs before each sample: which intervals hold the reset and its
// own time (seconds per sample, a sample being one call when the case resets), so a reader can take
// it off the wall time. Null when the case does not reset.
json reset_json(const Samples& s) {
  if (s.reset.empty()) return nullptr;
  return {{"included_in", {"wall"}}, {"excluded_from", {"host_enqueue", "device"}}, {"seconds", to_json(summarize(s.reset))}};
}

// "CPU memory on huge pages" or "... on 4 KiB pages", from the environment's cpu_pages probe
// (reports written before it existed: nothing).
std::string cpu_pages_text(const json& env) {
  if (!env.contains("cpu_pages")) return "CPU pages not recorded";
  const json& p = env["cpu_pages"];
  const int64_t kb = p.value("huge_page_kb_of_8_mib_tensor", int64_t{-1});
  std::string text = kb > 0 ? "CPU tensors on huge pages" : kb == 0 ? "CPU tensors on 4 KiB pages" : "CPU pages unknown";
  const bool set = p.contains("thp_mem_alloc_enable") && p["thp_mem_alloc_enable"].is_string();
  text += " (THP_MEM_ALLOC_ENABLE=" + (set ? p["thp_mem_alloc_enable"].get<std::string>() : std::string("unset")) +
          ", system THP " + p.value("system_thp", std::string("unknown")) + ")";
  return text;
}

std::string markdown(const json& report) {
  std::ostringstream md;
  md << "# Benchmark: " << report["operation"].get<std::string>() << " on " << report["device"].get<std::string>()
     << " (" << report["mode"].get<std::string>() << ", " << report.value("grid", "default") << " grid)\n\n";
  const json& env = report["environment"];
  md << "Revision `" << env["revision"].get<std::string>() << "`, torch " << env["torch"].get<std::string>() << ", "
     << env["cpu_model"].get<std::string>() << " (" << env["cpu_simd_target"].get<std::string>() << "), "
     << env["threads"] << " threads, load " << env["load_average"][0] << ", " << cpu_pages_text(env)
     << ". Copy bandwidth at the start of this run: "
     << format_number(report["copy_bandwidth_gbps"].get<double>()) << " GB/s ("
     << report["copy_method"].get<std::string>();
  for (const auto& [name, gbps] : report["copy_methods"].items()) {
    if (name != report["copy_method"].get<std::string>()) md << "; " << name << " " << format_number(gbps.get<double>()) << " GB/s";
  }
  md << "); each case's % of copy is against the faster copy timed again just before the case. "
     << report["device_timer"].get<std::string>() << ".\n\n";
  if (env.contains("ceilings")) md << ceilings_markdown(env["ceilings"]);
  if (report.contains("occupancy")) md << tools::occupancy_markdown(report["occupancy"]);
  md << "Device and host enqueue intervals exclude the reset of a mutating case; its wall time includes it (the "
        "reset's own median in parentheses, to subtract).\n\n";
  md << "| case | implementation | median us | p10-p90 us | wall us | GB/s | % of copy | % of roofline (bound) | x fastest "
        "| speed-up vs torch |\n";
  md << "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : report["results"]) {
    md << "| `" << r["case_id"].get<std::string>() << "` | `" << r["implementation"].get<std::string>() << "` | ";
    if (r["status"] != "timed") {
      md << r["status"].get<std::string>() << ": " << r.value("reason", std::string()) << " | | | | | | | |\n";
      continue;
    }
    const json& d = r["device"];
    md << format_microseconds(d["median"].get<double>()) << " | " << format_microseconds(d["p10"].get<double>()) << "-"
       << format_microseconds(d["p90"].get<double>()) << " | " << format_microseconds(r["wall"]["median"].get<double>())
       << (r.contains("reset") && r["reset"].is_object()
               ? " (reset " + format_microseconds(r["reset"]["seconds"]["median"].get<double>()) + ")"
               : std::string())
       << " | " << format_number(r["achieved_gbps"].get<double>()) << " | "
       << format_number(r["percent_of_copy"].get<double>()) << row_flags(r) << " | "
       << (r.contains("roofline") ? format_number(r["percent_of_roofline"].get<double>()) + " (" +
                                        r["roofline"]["bound"].get<std::string>() + ")"
                                  : std::string("-"))
       << " | " << format_number(r["ratio_to_fastest"].get<double>()) << " | "
       << (r["speedup_vs_torch"].is_null() ? std::string("-") : format_number(r["speedup_vs_torch"].get<double>()))
       << " |\n";
  }
  return md.str();
}

void add_benchmark_arguments(CLI::App& app, BenchmarkOptions& bo) {
  app.add_option("--iterations", bo.timing.iterations, "Timed samples per case")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--warmup", bo.timing.warmup, "Untimed calls before sampling")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--budget", bo.timing.budget_seconds,
                 "Seconds one implementation's samples of a case may take (0: no limit): sampling stops after the "
                 "sample that passes it, with at least 3 taken (the warm-up after its first call that does); the "
                 "samples arrays say how many were taken. Not with --distributed")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--graph-calls", bo.timing.graph_calls, "Calls captured per graph (1 when the case resets)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--threads", bo.threads, "CPU threads (0: torch's default)")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_flag("--cold-cache", bo.cold_cache, "Rotate copies of the inputs so the working set exceeds the last-level cache");
  app.add_option("--copy-bytes", bo.copy_bytes, "Buffer size of the copy-bandwidth measurement [default: 256 MiB]");
}

// The device's API; without one nothing can run, and the error says why for each target.
const DeviceApi& require_device_api(const numerics::SuiteRun& setup) {
  const DeviceApi* api = device_api(setup.device);
  if (api == nullptr) {
    std::string why;
    for (const auto& t : setup.targets) why += (why.empty() ? "" : "; ") + t.name + ": " + t.excluded_reason;
    throw std::runtime_error(std::string("device ") + to_string(setup.device) + ": nothing can run here (" + why + ")");
  }
  return *api;
}

// Distributed: checks that every rank runs the same configuration (the suite's and the timing
// flags), makes every timed sample start on every rank together, and aligns the copy measurement.
void align_ranks(DistributedRun& dist, const numerics::OperationSuite& suite, const CommonOptions& common,
                 const numerics::SuiteRun& setup, BenchmarkOptions& bo) {
  json configuration = numerics::run_configuration(suite, common, setup);
  configuration.update(
      {{"timing", {{"warmup", bo.timing.warmup}, {"iterations", bo.timing.iterations}, {"graph_calls", bo.timing.graph_calls}}},
       {"cold_cache", bo.cold_cache},
       {"copy_bytes", bo.copy_bytes}});
  dist.check_same_configuration(configuration);
  bo.timing.before_sample = [&dist] { dist.group().barrier("sample"); };
  dist.group().barrier("copy_bandwidth");
}

// The run's ceilings (ceilings.h): the copy bandwidth, a read-only stream on a buffer of the same
// size, and the compute peaks of the device's instruction classes. The meters stay, to measure the
// copy and the read again next to each case.
struct Ceilings {
  int64_t copy_bytes = 0;
  std::unique_ptr<CopyMeter> copy_meter;
  CopyBandwidth copy;
  std::unique_ptr<ReadMeter> read_meter;
  ReadCeiling read;
  ComputePeaks peaks;
};

Ceilings measure_ceilings(const DeviceApi& api, const at::Device& torch_device, int index, int64_t copy_bytes_flag,
                          bool progress) {
  Ceilings c;
  if (progress) std::cerr << "measuring copy bandwidth...\r" << std::flush;
  c.copy_bytes = copy_bytes_flag > 0 ? copy_bytes_flag : int64_t{256} << 20;
  c.copy_meter = std::make_unique<CopyMeter>(api, torch_device, index, c.copy_bytes);
  c.copy = c.copy_meter->measure(10);
  if (progress) std::cerr << "\r\033[Kmeasuring read and compute ceilings...\r" << std::flush;
  c.read_meter = std::make_unique<ReadMeter>(api, torch_device, index, c.copy_bytes);
  c.read = c.read_meter->measure(5);
  c.peaks = measure_compute_peaks(api, torch_device, index);
  return c;
}

// What timing one case needs besides the case: the run, its flags, and the meters.
struct TimingRun {
  const numerics::SuiteRun& setup;
  const BenchmarkOptions& options;
  const DeviceApi& api;
  uint64_t seed = 0;
  Ceilings& ceilings;
  // Per target: why the suite's prepare hook rejected it, if it did.
  std::vector<std::optional<std::string>> prepared_reasons;
  DistributedRun* dist = nullptr;
  bool progress = false;
  int timed = 0, failed = 0;
};

// The ceilings next to one case, measured just before its first timing (shared by its targets).
struct CaseCeilings {
  std::optional<double> copy;  // the copy's best method, bytes per second
  std::optional<double> read;  // the read ceiling's best method, the same
};

// The fields of a timed row: the samples' statistics, bandwidth against the case's ceilings, the roofline.
json timed_fields(const TimingRun& run, const tools::Target& target, const numerics::CaseMetadata& meta, const Samples& s,
                  const CaseCeilings& next_to) {
  const Summary device_summary = summarize(s.device);
  const Steadiness steady = steadiness(s.device);
  const double bytes = static_cast<double>(meta.bytes_read + meta.bytes_written);
  const double gbps = bytes / device_summary.median / 1e9;
  std::map<std::string, double> work = meta.work;
  if (work.empty() && meta.flops > 0) work["f32_fma"] = meta.flops;
  const Roofline line = roofline(static_cast<double>(meta.bytes_read), static_cast<double>(meta.bytes_written), work,
                                 *next_to.read, *next_to.copy, run.ceilings.peaks.peaks);
  const json roofline_json = to_json(line, device_summary.median);
  return {{"status", "timed"},
          {"implementation_detail", tools::implementation_json(*target.kernel)},
          {"bytes_read", meta.bytes_read},
          {"bytes_written", meta.bytes_written},
          {"flops", meta.flops},
          {"work", work},
          {"calls_per_sample", s.calls_per_sample},
          {"hold_expired", s.hold_expired},
          {"host_enqueue", to_json(summarize(s.host_enqueue))},
          {"device", to_json(device_summary)},
          {"wall", to_json(summarize(s.wall))},
          {"reset", reset_json(s)},
          {"achieved_gbps", gbps},
          {"copy_gbps", *next_to.copy / 1e9},
          {"percent_of_copy", 100.0 * gbps * 1e9 / *next_to.copy},
          {"warm_cache", gbps * 1e9 > *next_to.copy},
          {"read_gbps", *next_to.read / 1e9},
          {"roofline", roofline_json},
          {"percent_of_roofline", roofline_json["percent"]},
          {"warmup_calls", s.warmup_calls},
          {"unsteady", steady.unsteady()},
          {"steadiness", to_json(steady)},
          {"samples", {{"host_enqueue", s.host_enqueue}, {"device", s.device}, {"wall", s.wall}, {"reset", s.reset}}}};
}

// One implementation on one case: unsupported, failed validation, not timed (another rank could
// not time it), or timed. Only validated cases are timed (eager validation here; graph mode
// validates its replay). Distributed: a case is timed only where every rank can time it (each
// sample is a barrier).
json time_target(TimingRun& run, const numerics::KernelCase& c, size_t ti, CaseCeilings& next_to) {
  const tools::Target& target = run.setup.targets[ti];
  const numerics::SuiteRun& setup = run.setup;
  numerics::Plan plan{setup.device, setup.index, setup.mode, target.kernel, run.seed};
  json r{{"case_id", c.case_id()}, {"parameters", c.parameters()}, {"implementation", target.name}};
  const std::string label = c.case_id() + " " + target.name;
  if (const auto reason = numerics::case_unsupported_reason(c, plan, target, run.prepared_reasons[ti])) {
    r["status"] = "unsupported";
    r["reason"] = *reason;
    if (run.dist) run.dist->agree_to_time(label, "unsupported: " + *reason);
    return r;
  }
  std::vector<PreparedCase> copies;
  copies.push_back(c.prepare(plan));
  int n = 1;
  // A copy: the vector grows below (--cold-cache), which would leave a reference dangling.
  const numerics::CaseMetadata meta = copies[0].metadata;
  r["rotation"] = plan_rotation(run.options, run.api, setup.index, meta.bytes_read + meta.bytes_written,
                                copies[0].held_bytes, n);
  copies[0].function();
  run.api.synchronize(setup.index);
  numerics::Validation v = copies[0].validate();
  if (run.dist) run.dist->test_fault().after_validation(v.passed, v.failures);
  if (!v.passed) {
    ++run.failed;
    r["status"] = "failed";
    r["reason"] = "validation failed: " + (v.failures.empty() ? std::string() : v.failures[0]);
    if (run.dist) run.dist->agree_to_time(label, r["reason"].get<std::string>());
    return r;
  }
  if (run.dist) {
    if (auto other = run.dist->agree_to_time(label, std::nullopt)) {
      r["status"] = "not_timed";
      r["reason"] = "validated here, but not timed: " + *other;
      return r;
    }
  }
  for (int k = 1; k < n; ++k) copies.push_back(c.prepare(plan));
  if (!next_to.copy) next_to.copy = run.ceilings.copy_meter->measure(5).best().second;
  if (!next_to.read) next_to.read = run.ceilings.read_meter->measure_best(5);
  const Samples s = setup.mode == ExecutionMode::kGraph ? time_graph(run.api, setup.index, copies[0], run.options.timing)
                                                        : time_eager(run.api, setup.index, copies, run.options.timing);
  ++run.timed;
  r.update(timed_fields(run, target, meta, s, next_to));
  return r;
}

// Every case, each with every implementation before the next case (interleaved), and the ratios
// within each case: to the fastest implementation and to the torch solution.
json time_cases(TimingRun& run) {
  const auto& cases = run.setup.cases;
  const auto& targets = run.setup.targets;
  json results = json::array();
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const auto& c = *cases[ci];
    if (run.dist) run.dist->test_fault().before_case(ci, cases.size());
    const size_t row_start = results.size();
    CaseCeilings next_to;
    for (size_t ti = 0; ti < targets.size(); ++ti) {
      if (run.progress) {
        std::cerr << "\r\033[K" << c.case_id() << "  " << targets[ti].name << " (" << ci + 1 << "/" << cases.size() << ")"
                  << std::flush;
      }
      results.push_back(time_target(run, c, ti, next_to));
    }
    add_ratios(results, row_start, results.size());
  }
  if (run.progress) std::cerr << "\r\033[K";
  return results;
}

json make_report(const numerics::OperationSuite& suite, const CommonOptions& common, const TimingRun& run,
                 const tools::OccupancyProbe& occupancy, json results) {
  const numerics::SuiteRun& setup = run.setup;
  const Ceilings& ceilings = run.ceilings;
  const BenchmarkOptions& bo = run.options;
  const int code = run.failed > 0 ? tools::kCaseFailed : run.timed == 0 ? tools::kNothingPassed : tools::kPassed;
  json env = tools::environment(setup.device, setup.index, common.revision);
  env["ceilings"] = ceilings_json(ceilings.read, ceilings.copy.best().second, ceilings.copy.best().first, ceilings.peaks);
  json methods = json::object();
  for (const auto& [name, bw] : ceilings.copy.methods) methods[name] = bw / 1e9;
  json names = json::array();
  for (const auto& t : setup.targets) names.push_back(t.name);
  return {{"schema", "xllm-kernel/benchmark-report/1"},
          {"tool", "benchmark"},
          {"operation", suite.operation},
          {"device", setup.report_device},
          {"mode", common.mode},
          {"seed", common.seed},
          {"grid", setup.grid},
          {"environment", std::move(env)},
          {"occupancy", occupancy.finish()},
          {"timing", {{"warmup", bo.timing.warmup}, {"iterations", bo.timing.iterations}, {"graph_calls", bo.timing.graph_calls},
                      {"budget_seconds", bo.timing.budget_seconds},
                      {"steadiness_bounds", steadiness_bounds()},
                      {"reset", "a mutating case resets its inputs before each sample: outside the host_enqueue and "
                                "device intervals, inside the wall time (results[].reset gives its own time)"}}},
          {"device_timer", device_timer_text(run.api, setup.mode)},
          {"copy_bandwidth_gbps", ceilings.copy.best().second / 1e9},
          {"copy_method", ceilings.copy.best().first},
          {"copy_methods", std::move(methods)},
          {"copy_bytes", ceilings.copy_bytes},
          {"implementations", std::move(names)},
          {"results", std::move(results)},
          {"summary", {{"timed", run.timed}, {"failed", run.failed}, {"exit_code", code}}}};
}

int run(const std::vector<std::string>& argv, std::unique_ptr<DistributedRun>& dist) {
  if (argv.size() >= 2 && argv[1] == "compare") return compare_main(argv);
  if (argv.size() >= 2 && argv[1] == "ab") return ab_main(argv);
  CLI::App app{"xllm-kernel-benchmark: time validated cases against the in-run copy bandwidth.\n"
               "Subcommands: `compare BASELINE CANDIDATE BASELINE2`; `ab` (rounds of two builds, scripts/ab.sh; "
               "see `ab --help`). Exit codes: 0 timed, 1 a case failed "
               "validation (or an execution error), 2 usage error, 3 nothing timed.",
               "xllm-kernel-benchmark"};
  CommonOptions common;
  numerics::SuiteOptions suite_options;
  BenchmarkOptions bo;
  tools::add_common_arguments(app, common);
  const numerics::OperationSuite* suite = numerics::add_suite_arguments(app, suite_options, argv);
  add_benchmark_arguments(app, bo);
  if (auto code = tools::parse(app, argv)) return *code;
  if (common.list) {
    std::cout << numerics::list_text();
    return 0;
  }
  if (common.operation.empty()) throw UsageError("--operation is required (or --list, or compare); see --help");
  if (common.distributed && bo.timing.budget_seconds > 0) {
    throw UsageError("--budget: not with --distributed (every rank takes the same samples, each at a barrier)");
  }
  if (suite == nullptr) throw UsageError("--operation: unknown operation '" + common.operation + "'");
  const numerics::SuiteRun setup = numerics::start_suite_run(
      common, *suite, suite_options, app.get_option("--implementation")->count() > 0, "benchmark", dist);
  const DeviceApi& api = require_device_api(setup);
  if (bo.threads > 0) at::set_num_threads(bo.threads);
  const at::Device torch_device = numerics::torch_device(numerics::Plan{setup.device, setup.index});
  if (dist) align_ranks(*dist, *suite, common, setup, bo);

  const tools::OccupancyProbe occupancy(setup.device, setup.index);
  const bool progress = isatty(STDERR_FILENO);
  Ceilings ceilings = measure_ceilings(api, torch_device, setup.index, bo.copy_bytes, progress);
  TimingRun timing{setup, bo, api, common.seed, ceilings, {}, dist.get(), progress};
  for (const auto& target : setup.targets) {
    timing.prepared_reasons.push_back(numerics::prepare_suite(
        *suite, numerics::Plan{setup.device, setup.index, setup.mode, target.kernel, common.seed}, target));
  }
  json results = time_cases(timing);
  return tools::publish({make_report(*suite, common, timing, occupancy, std::move(results)), common.output, common.markdown,
                         [](const json& r, size_t) { return markdown(r); }, SIZE_MAX,
                         "xllm-kernel-benchmark: nothing was timed; that is a failure\n", aggregate_benchmark,
                         benchmark_aggregate_markdown},
                        dist.get());
}

}  // namespace
}  // namespace benchmark

namespace tools {

int benchmark_main(const std::vector<std::string>& argv) {
  return run_tool("xllm-kernel-benchmark",
                  [&](std::unique_ptr<distributed::DistributedRun>& dist) { return benchmark::run(argv, dist); });
}

}  // namespace tools
}  // namespace xllm_kernel
