// Timing of prepared cases: eager samples and graph replays, three figures each:
//   device        the calls' device time: between two events of a timer made once. On CUDA the
//                 device is held while the host enqueues the calls (DeviceTimer), so a call shorter
//                 than its launch is still measured on the device, not at the host's launch rate;
//                 the NPU's timer has no hold, so its eager intervals include the host's
//                 submission gaps (DeviceApi::timer_holds_device says which);
//   host_enqueue  the host's time to enqueue the calls (during that hold, where there is one);
//   wall          the synchronized wall time of the same calls from an idle device (synchronize,
//                 calls, synchronize), timed separately; on the CPU, where calls are synchronous,
//                 the device interval's own. A case that resets its mutated inputs pays for the
//                 reset here (synchronize, reset, synchronize, calls, synchronize): the mutating
//                 path's wall time includes its reset, whose own time is recorded (Samples::reset).
// Warmup, preparation and capture are never timed; reset runs outside the host enqueue and device
// intervals.
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/numerics/suite.h"
#include "xllm_kernel/device_api.h"

namespace xllm_kernel::benchmark {

using numerics::PreparedCase;

struct TimingOptions {
  int warmup = 3;
  int iterations = 20;
  int graph_calls = 64;  // calls captured per graph (1 when the case has a reset)
  // The seconds one implementation's samples of a case may take (0: no limit): sampling stops after
  // the sample that passes it, with at least kMinBudgetSamples taken, and the warm-up after the call
  // that passes it (one call at least). For a first answer (scripts/main.sh), where a slow baseline
  // would otherwise take `iterations` long calls.
  double budget_seconds = 0;
  // Runs before each timed sample, after its reset and outside the host and device intervals (a distributed
  // run aligns the ranks' samples with a barrier here).
  std::function<void()> before_sample;
};

// The fewest samples a --budget leaves a case.
inline constexpr int kMinBudgetSamples = 3;

// Seconds per call, one entry per sample.
struct Samples {
  std::vector<double> host_enqueue;
  std::vector<double> device;
  std::vector<double> wall;   // includes the reset, where the case has one
  std::vector<double> reset;  // seconds of each sample's reset, inside its wall time (empty: no reset)
  int calls_per_sample = 1;
  int warmup_calls = 0;  // untimed calls before the first sample
  int hold_expired = 0;  // samples whose device hold ran out (their device interval includes host time)
};

// Eager: each sample calls the case once. With several `copies` (cold cache) the samples rotate
// through them, so consecutive calls touch different memory. The warm-up makes at least
// options.warmup calls and, with several copies, two rounds through all of them: the first touches
// every copy (a copy's first touch costs tens of calls on a VM), the second replaces each copy's
// first output, so that what the implementation allocates has reached its steady state.
Samples time_eager(const DeviceApi& api, int index, std::vector<PreparedCase>& copies, const TimingOptions& options);

// Graph: captures graph_calls calls (1 with a reset), validates the replayed output first, then
// times replays. Throws if the captured output fails validation.
Samples time_graph(const DeviceApi& api, int index, PreparedCase& prepared, const TimingOptions& options);

// The device's copy bandwidth in bytes per second (read + written), measured on `bytes`-sized
// buffers with every copy method the device has, their samples interleaved: torch's copy_
// everywhere, and on the CPU also a copy with non-temporal stores (a plain copy also reads each
// destination line before writing it, so kernels that avoid that read can beat it).
struct CopyBandwidth {
  std::vector<std::pair<std::string, double>> methods;  // every method's median, bytes per second
  // The fastest method: the reference for "% of copy".
  const std::pair<std::string, double>& best() const;
};

// Holds the two buffers, so the bandwidth can be measured again next to each case: the memory
// bandwidth a shared machine gives drifts over seconds.
class CopyMeter {
 public:
  CopyMeter(const DeviceApi& api, const at::Device& device, int index, int64_t bytes);
  CopyBandwidth measure(int iterations);

 private:
  const DeviceApi& api_;
  at::Device device_;
  int index_;
  int64_t bytes_;
  at::Tensor src_, dst_;
  std::unique_ptr<DeviceTimer> timer_;
};

}  // namespace xllm_kernel::benchmark
