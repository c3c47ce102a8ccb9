#include "src/benchmark/timing.h"

#include <ATen/ATen.h>

#include <chrono>
#include <stdexcept>

#include "src/benchmark/statistics.h"

namespace xllm_kernel::benchmark {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void reset_and_wait(const DeviceApi& api, int index, PreparedCase& c) {
  if (c.reset) {
    c.reset();
    api.synchronize(index);
  }
}

}  // namespace

Samples time_eager(const DeviceApi& api, int index, std::vector<PreparedCase>& copies, const TimingOptions& o) {
  if (copies.empty()) throw std::invalid_argument("time_eager: no prepared case");
  for (int i = 0; i < o.warmup; ++i) {
    PreparedCase& c = copies[static_cast<size_t>(i) % copies.size()];
    reset_and_wait(api, index, c);
    c.function();
  }
  api.synchronize(index);
  Samples s;
  for (int i = 0; i < o.iterations; ++i) {
    PreparedCase& c = copies[static_cast<size_t>(i) % copies.size()];
    reset_and_wait(api, index, c);
    if (o.before_sample) o.before_sample();
    double host = 0;
    const auto wall_start = std::chrono::steady_clock::now();
    const double device = api.time_interval(index, [&] {
      const auto host_start = std::chrono::steady_clock::now();
      c.function();
      host = seconds_since(host_start);
    });
    api.synchronize(index);
    s.wall.push_back(seconds_since(wall_start));
    s.host_enqueue.push_back(host);
    s.device.push_back(device);
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
  Samples s;
  s.calls_per_sample = calls;
  for (int i = 0; i < o.iterations; ++i) {
    reset_and_wait(api, index, c);
    if (o.before_sample) o.before_sample();
    double host = 0;
    const auto wall_start = std::chrono::steady_clock::now();
    const double device = api.time_interval(index, [&] {
      const auto host_start = std::chrono::steady_clock::now();
      graph->replay();
      host = seconds_since(host_start);
    });
    api.synchronize(index);
    s.wall.push_back(seconds_since(wall_start) / calls);
    s.host_enqueue.push_back(host / calls);
    s.device.push_back(device / calls);
  }
  return s;
}

double copy_bandwidth(const DeviceApi& api, const at::Device& device, int index, int64_t bytes, int iterations) {
  const auto options = at::TensorOptions().dtype(at::kByte).device(device);
  at::Tensor src = at::ones({bytes}, options);
  at::Tensor dst = at::zeros({bytes}, options);
  dst.copy_(src);  // warm: pages faulted in, clocks up
  api.synchronize(index);
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) times.push_back(api.time_interval(index, [&] { dst.copy_(src); }));
  return 2.0 * static_cast<double>(bytes) / percentile(times, 50);
}

}  // namespace xllm_kernel::benchmark
