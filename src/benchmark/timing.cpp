#include "src/benchmark/timing.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "src/benchmark/statistics.h"
#include "src/core/cpu_copy.h"

namespace xllm_kernel::benchmark {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Whether the time since `start` passes --budget (never without one).
bool over_budget(const TimingOptions& o, std::chrono::steady_clock::time_point start) {
  return o.budget_seconds > 0 && seconds_since(start) > o.budget_seconds;
}

void reset_and_wait(const DeviceApi& api, int index, PreparedCase& c) {
  if (c.reset) {
    c.reset();
    api.synchronize(index);
  }
}

// What every sample of one timing loop shares, filled once before the loop: the device, its timer,
// the options and the samples appended to.
//   const Sampler at{.api = api, .index = index, .timer = *timer, .options = o, .samples = s};
struct Sampler {
  const DeviceApi& api;
  int index = 0;
  DeviceTimer& timer;
  const TimingOptions& options;
  Samples& samples;
};

// One sample of `calls` (enqueued by `run`), appended to at.samples: host enqueue and device
// interval under the timer's hold, the case's inputs reset before it (outside both); then the wall
// time. A case that resets
// (`reset` set) pays for its reset in the wall time: it is what a caller of the mutating path waits
// for, and it is measured on its own as well (Samples::reset), so a reader can subtract it.
//   device events: synchronize, [reset, synchronize], calls, synchronize, timed from the first
//                  synchronize on (the same calls again, from an idle device);
//   CPU:           the calls are synchronous, so the wall time is the device interval plus the
//                  reset's own time, measured just before the sample.
void sample(const Sampler& at, PreparedCase& c, const std::function<void()>& run, int calls) {
  const DeviceApi& api = at.api;
  const int index = at.index;
  DeviceTimer& timer = at.timer;
  Samples& s = at.samples;
  double reset = 0;
  if (c.reset) {
    const auto reset_start = std::chrono::steady_clock::now();
    reset_and_wait(api, index, c);
    reset = seconds_since(reset_start);
  }
  if (at.options.before_sample) at.options.before_sample();
  timer.start();
  const auto host_start = std::chrono::steady_clock::now();
  run();
  const double host = seconds_since(host_start);
  const double device = timer.stop();
  if (timer.hold_expired()) ++s.hold_expired;
  double wall = device + reset;
  if (api.has_device_events()) {
    api.synchronize(index);
    const auto wall_start = std::chrono::steady_clock::now();
    if (c.reset) {
      reset_and_wait(api, index, c);
      reset = seconds_since(wall_start);
    }
    run();
    api.synchronize(index);
    wall = seconds_since(wall_start);
  }
  s.host_enqueue.push_back(host / calls);
  s.device.push_back(device / calls);
  s.wall.push_back(wall / calls);
  if (c.reset) s.reset.push_back(reset);
}

}  // namespace

Samples time_eager(const DeviceApi& api, int index, std::vector<PreparedCase>& copies, const TimingOptions& o) {
  if (copies.empty()) throw std::invalid_argument("time_eager: no prepared case");
  const size_t warmup = std::max(static_cast<size_t>(std::max(o.warmup, 0)), copies.size() > 1 ? 2 * copies.size() : 0);
  size_t warmed = 0;
  const auto warmup_start = std::chrono::steady_clock::now();
  while (warmed < warmup && !(warmed > 0 && over_budget(o, warmup_start))) {
    PreparedCase& c = copies[warmed++ % copies.size()];
    reset_and_wait(api, index, c);
    c.function();
  }
  api.synchronize(index);
  const std::unique_ptr<DeviceTimer> timer = api.timer(index);
  Samples s;
  s.warmup_calls = static_cast<int>(warmed);
  const Sampler at{.api = api, .index = index, .timer = *timer, .options = o, .samples = s};
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < o.iterations && !(i >= kMinBudgetSamples && over_budget(o, start)); ++i) {
    PreparedCase& c = copies[static_cast<size_t>(i) % copies.size()];
    sample(at, c, c.function, 1);
  }
  return s;
}

Samples time_graph(const DeviceApi& api, int index, PreparedCase& c, const TimingOptions& o) {
  const int calls = c.reset ? 1 : o.graph_calls;
  for (int i = 0; i < o.warmup; ++i) {
    reset_and_wait(api, index, c);
    c.function();
  }
  api.synchronize(index);
  reset_and_wait(api, index, c);
  auto graph = api.capture(index, c.function, calls);
  // Validate what a replay produces before timing it.
  reset_and_wait(api, index, c);
  graph->replay();
  api.synchronize(index);
  const numerics::Validation v = c.validate();
  if (!v.passed) {
    throw std::runtime_error("graph replay output failed validation: " + (v.failures.empty() ? std::string("?") : v.failures[0]));
  }
  const std::unique_ptr<DeviceTimer> timer = api.timer(index);
  Samples s;
  s.calls_per_sample = calls;
  s.warmup_calls = o.warmup;
  const Sampler at{.api = api, .index = index, .timer = *timer, .options = o, .samples = s};
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < o.iterations && !(i >= kMinBudgetSamples && over_budget(o, start)); ++i) {
    sample(at, c, [&] { graph->replay(); }, calls);
  }
  return s;
}

CopyMeter::CopyMeter(const DeviceApi& api, const at::Device& device, int index, int64_t bytes)
    : api_(api), device_(device), index_(index), bytes_(bytes), timer_(api.timer(index)) {
  const auto options = at::TensorOptions().dtype(at::kByte).device(device);
  src_ = at::ones({bytes}, options);
  dst_ = at::zeros({bytes}, options);
}

CopyBandwidth CopyMeter::measure(int iterations) {
  std::vector<std::pair<std::string, std::function<void()>>> methods{{"torch copy_", [&] { dst_.copy_(src_); }}};
  if (device_.is_cpu()) methods.emplace_back("non-temporal copy", [&] { detail::cpu_stream_copy(dst_, src_); });
  for (auto& m : methods) m.second();  // warm: pages faulted in, clocks up
  api_.synchronize(index_);
  std::vector<std::vector<double>> times(methods.size());
  for (int i = 0; i < iterations; ++i) {
    for (size_t m = 0; m < methods.size(); ++m) {
      timer_->start();
      methods[m].second();
      times[m].push_back(timer_->stop());
    }
  }
  CopyBandwidth result;
  for (size_t m = 0; m < methods.size(); ++m) {
    result.methods.emplace_back(methods[m].first, 2.0 * static_cast<double>(bytes_) / percentile(times[m], 50));
  }
  return result;
}

const std::pair<std::string, double>& CopyBandwidth::best() const {
  return *std::max_element(methods.begin(), methods.end(),
                           [](const auto& a, const auto& b) { return a.second < b.second; });
}

}  // namespace xllm_kernel::benchmark
