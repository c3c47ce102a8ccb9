#include "src/benchmark/ceilings.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <sstream>

#include "csrc/cpu/ceilings/ceilings.h"
#include "src/benchmark/statistics.h"
#include "src/core/parallel.h"
#include "src/tools/report.h"

namespace xllm_kernel::benchmark {

using nlohmann::json;

ReadMeter::ReadMeter(const DeviceApi& api, const at::Device& device, int index, int64_t bytes)
    : api_(api), device_(device), index_(index), bytes_(bytes), timer_(api.timer(index)) {
  buffer_ = at::ones({bytes}, at::TensorOptions().dtype(at::kByte).device(device));
  if (device.is_cpu()) {
    const int threads = std::max(1, at::get_num_threads());
    for (int t : threads > 1 ? std::vector<int>{1, threads} : std::vector<int>{1}) {
      for (int s : {1, 4}) {
        for (int64_t pf : {int64_t{0}, int64_t{1024}}) {
          methods_.push_back({"read_stream: threads " + std::to_string(t) + ", cursors " + std::to_string(s) +
                                  ", prefetch " + std::to_string(pf) + " B",
                              t, s, pf});
        }
      }
    }
  } else {
    methods_.push_back({"torch sum over a float32 view", 1, 1, 0});
  }
}

double ReadMeter::time_method(const Method& m) {
  if (!device_.is_cpu()) {
    const at::Tensor view = buffer_.view(at::kFloat);
    timer_->start();
    at::Tensor s = view.sum();
    const double t = timer_->stop();
    (void)s;
    return t;
  }
  const auto* base = static_cast<const uint8_t*>(buffer_.data_ptr());
  std::atomic<uint64_t> sink{0};
  timer_->start();
  if (m.threads == 1) {
    sink ^= cpu::read_stream(base, static_cast<size_t>(bytes_), m.streams, static_cast<size_t>(m.prefetch));
  } else {
    // Thread i reads chunk i (4 KiB aligned), all at once.
    const int64_t chunk = (bytes_ / m.threads + 4095) / 4096 * 4096;
    detail::parallel_rows(m.threads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t lo = std::min(bytes_, i * chunk), hi = std::min(bytes_, lo + chunk);
        sink ^= cpu::read_stream(base + lo, static_cast<size_t>(hi - lo), m.streams, static_cast<size_t>(m.prefetch));
      }
    });
  }
  const double t = timer_->stop();
  volatile uint64_t keep = sink.load();
  (void)keep;
  return t;
}

ReadCeiling ReadMeter::measure(int iterations) {
  for (const Method& m : methods_) time_method(m);  // warm: pages and clocks
  api_.synchronize(index_);
  std::vector<std::vector<double>> times(methods_.size());
  for (int i = 0; i < iterations; ++i) {
    for (size_t m = 0; m < methods_.size(); ++m) times[m].push_back(time_method(methods_[m]));
  }
  ReadCeiling result;
  for (size_t m = 0; m < methods_.size(); ++m) {
    result.methods.emplace_back(methods_[m].name, static_cast<double>(bytes_) / percentile(times[m], 50));
  }
  best_ = static_cast<size_t>(&result.best() - result.methods.data());
  measured_ = true;
  return result;
}

double ReadMeter::measure_best(int iterations) {
  if (!measured_) return measure(iterations).best().second;
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) times.push_back(time_method(methods_[best_]));
  return static_cast<double>(bytes_) / percentile(times, 50);
}

namespace {

// One CPU class on every intra-op thread at once: iterations sized for about 20 ms from a
// one-thread calibration; the best of three runs, ops over wall time.
double cpu_class_peak(cpu::ComputeClass c) {
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  int64_t iterations = 256;
  for (;;) {  // calibrate on this thread until a run takes at least 2 ms
    const auto t0 = clock::now();
    cpu::compute_peak(c, iterations);
    const double t = seconds(t0, clock::now());
    if (t >= 2e-3 || iterations > (int64_t{1} << 40)) {
      iterations = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(iterations) * 20e-3 / std::max(t, 1e-9)));
      break;
    }
    iterations *= 4;
  }
  const int threads = std::max(1, at::get_num_threads());
  double best = 0;
  for (int run = 0; run < 3; ++run) {
    std::vector<double> ops(static_cast<size_t>(threads), 0.0);
    const auto t0 = clock::now();
    detail::parallel_rows(threads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) ops[static_cast<size_t>(i)] = cpu::compute_peak(c, iterations);
    });
    const double t = seconds(t0, clock::now());
    double total = 0;
    for (double o : ops) total += o;
    best = std::max(best, total / t);
  }
  return best;
}

// An accelerator's matrix units: square matmuls of the dtype from 512 up, doubling while one takes
// under 5 ms, to 4096 at most (a device whose matmul is slow, e.g. a stand-in on the CPU, stops
// small); the best of five at the last size after a warm-up. Sets `n` to that size.
double matrix_peak(const DeviceApi& api, const at::Device& device, int index, at::ScalarType dtype, int64_t& n) {
  const std::unique_ptr<DeviceTimer> timer = api.timer(index);
  const auto options = at::TensorOptions().dtype(dtype).device(device);
  double best = std::numeric_limits<double>::infinity();
  for (n = 512;; n *= 2) {
    const at::Tensor a = at::randn({n, n}, options), b = at::randn({n, n}, options);
    at::Tensor c = at::matmul(a, b);
    api.synchronize(index);
    best = std::numeric_limits<double>::infinity();
    for (int i = 0; i < 5; ++i) {
      timer->start();
      c = at::matmul(a, b);
      best = std::min(best, timer->stop());
    }
    if (n >= 4096 || best >= 5e-3) break;
  }
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / best;
}

}  // namespace

ComputePeaks measure_compute_peaks(const DeviceApi& api, const at::Device& device, int index) {
  ComputePeaks out;
  if (device.is_cpu()) {
    const std::string threads = std::to_string(std::max(1, at::get_num_threads()));
    for (cpu::ComputeClass c : cpu::kComputeClasses) {
      std::string detail;
      if (!cpu::compute_class_available(c, &detail)) {
        out.absent[cpu::compute_class_name(c)] = detail;
        continue;
      }
      out.peaks[cpu::compute_class_name(c)] = {cpu_class_peak(c), detail + ", on " + threads + " threads"};
    }
    return out;
  }
  for (const auto& [name, dtype] : {std::pair{"matrix_bf16", at::kBFloat16}, std::pair{"matrix_f16", at::kHalf}}) {
    try {
      int64_t n = 0;
      const double peak = matrix_peak(api, device, index, dtype, n);
      out.peaks[name] = {peak, "torch matmul " + std::to_string(n) + "^3, best of 5"};
    } catch (const std::exception& e) {
      out.absent[name] = std::string("the matmul failed: ") + e.what();
    }
  }
  return out;
}

json ceilings_json(const ReadCeiling& read, double copy_bps, const std::string& copy_method, const ComputePeaks& compute) {
  json methods = json::object();
  for (const auto& [name, bps] : read.methods) methods[name] = bps / 1e9;
  json peaks = json::object();
  for (const auto& [name, p] : compute.peaks) peaks[name] = {{"gops", p.ops_per_second / 1e9}, {"method", p.method}};
  return {{"read", {{"gbps", read.best().second / 1e9}, {"method", read.best().first}, {"methods", methods}}},
          {"copy", {{"gbps", copy_bps / 1e9}, {"method", copy_method}}},
          {"compute", peaks},
          {"compute_absent", compute.absent}};
}

std::string ceilings_markdown(const json& c) {
  std::ostringstream md;
  md << "Ceilings measured in this run (docs/reports.md, \"Roofline\"): read "
     << tools::format_number(c["read"]["gbps"].get<double>()) << " GB/s (" << c["read"]["method"].get<std::string>()
     << "), copy " << tools::format_number(c["copy"]["gbps"].get<double>()) << " GB/s";
  for (const auto& [name, p] : c["compute"].items()) {
    md << ", " << name << " " << tools::format_number(p["gops"].get<double>()) << " Gop/s ("
       << p["method"].get<std::string>() << ")";
  }
  md << ".";
  for (const auto& [name, why] : c["compute_absent"].items()) md << " No " << name << ": " << why.get<std::string>() << ".";
  md << " % of roofline: the ideal time (the largest of bytes read / read, bytes read and written / copy, and the "
        "declared work over the fastest class's peak) over the median; the bound in parentheses. Each case's read "
        "and copy ceilings are timed again just before it.\n\n";
  return md.str();
}

Roofline roofline(double bytes_read, double bytes_written, const std::map<std::string, double>& work, double read_bps,
                  double copy_bps, const std::map<std::string, ComputePeak>& peaks) {
  Roofline r;
  r.read_seconds = read_bps > 0 ? bytes_read / read_bps : 0;
  r.copy_seconds = copy_bps > 0 ? (bytes_read + bytes_written) / copy_bps : 0;
  for (const auto& [cls, ops] : work) {
    auto it = peaks.find(cls);
    if (it == peaks.end() || it->second.ops_per_second <= 0 || ops <= 0) continue;
    const double t = ops / it->second.ops_per_second;
    if (r.compute_class.empty() || t < r.compute_seconds) {
      r.compute_seconds = t;
      r.compute_class = cls;
    }
  }
  r.ideal_seconds = r.read_seconds;
  r.bound = "read";
  if (r.copy_seconds > r.ideal_seconds) {
    r.ideal_seconds = r.copy_seconds;
    r.bound = "copy";
  }
  if (!r.compute_class.empty() && r.compute_seconds > r.ideal_seconds) {
    r.ideal_seconds = r.compute_seconds;
    r.bound = r.compute_class;
  }
  return r;
}

json to_json(const Roofline& r, double measured_seconds) {
  json j{{"ideal_seconds", r.ideal_seconds},
         {"bound", r.bound},
         {"read_seconds", r.read_seconds},
         {"copy_seconds", r.copy_seconds},
         {"compute_seconds", r.compute_class.empty() ? json() : json(r.compute_seconds)},
         {"compute_class", r.compute_class.empty() ? json() : json(r.compute_class)},
         {"percent", measured_seconds > 0 ? 100.0 * r.ideal_seconds / measured_seconds : 0.0}};
  return j;
}

}  // namespace xllm_kernel::benchmark
