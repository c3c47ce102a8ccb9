// Timing of prepared cases: eager samples (host enqueue, device interval, synchronized wall time)
// and graph replays. Warmup, preparation and capture are never timed; reset runs outside every
// timed interval.
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <vector>

#include "src/numerics/suite.h"
#include "xllm_kernel/device_api.h"

namespace xllm_kernel::benchmark {

using numerics::PreparedCase;

struct TimingOptions {
  int warmup = 3;
  int iterations = 20;
  int graph_calls = 64;  // calls captured per graph (1 when the case has a reset)
  // Runs before each timed sample, after its reset and outside every timed interval (a distributed
  // run aligns the ranks' samples with a barrier here).
  std::function<void()> before_sample;
};

// Seconds per call, one entry per sample.
struct Samples {
  std::vector<double> host_enqueue;
  std::vector<double> device;
  std::vector<double> wall;
  int calls_per_sample = 1;
};

// Eager: each sample calls the case once. With several `copies` (cold cache) the samples rotate
// through them, so consecutive calls touch different memory.
Samples time_eager(const DeviceApi& api, int index, std::vector<PreparedCase>& copies, const TimingOptions& options);

// Graph: captures graph_calls calls (1 with a reset), validates the replayed output first, then
// times replays. Throws if the captured output fails validation.
Samples time_graph(const DeviceApi& api, int index, PreparedCase& prepared, const TimingOptions& options);

// The device's copy bandwidth in bytes per second (read + written), measured on `bytes`-sized
// buffers; copies[i] = median of samples.
double copy_bandwidth(const DeviceApi& api, const at::Device& device, int index, int64_t bytes, int iterations);

}  // namespace xllm_kernel::benchmark
