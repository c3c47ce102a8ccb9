// What the offline tools need from a device beyond tensors: synchronization, device-time intervals
// and graph capture. The CPU's is built in; a device plugin (CUDA) registers its own when loaded.
//
//   const DeviceApi* api = device_api(Device::kCuda);   // null until the plugin registered one
//   if (auto reason = api->graph_unsupported_reason()) ... else { auto g = api->capture(0, fn, 64); g->replay(); }
//   auto timer = api->timer(0);                          // events made once, for every sample
//   timer->start(); fn(); const double seconds = timer->stop();
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "xllm_kernel/contract.h"

namespace xllm_kernel {

class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  virtual void replay() = 0;  // enqueues the captured calls on the current stream
};

// Device time of enqueued work, for many samples: a device's timer makes its events once.
class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  // Records the start event. Where the device's API can (DeviceApi::timer_holds_device: CUDA), it
  // first holds the current stream (work enqueued from now on waits) and records the event behind
  // the hold; the host enqueues the timed calls meanwhile, so the interval holds the device's work
  // only, also where a call takes less device time than the host needs to enqueue it. Without a
  // hold (NPU) the interval starts when the device reaches the event, so the host's gaps between
  // enqueued calls count.
  virtual void start() = 0;
  // Records the end event, releases the hold and waits for the end event; the seconds between the
  // two events (on the CPU, the wall time since start()).
  virtual double stop() = 0;
  // Whether the last sample's hold ran out before stop() released it (a call waited for the device
  // while enqueueing): that interval includes host time.
  virtual bool hold_expired() const { return false; }
};

class DeviceApi {
 public:
  virtual ~DeviceApi() = default;
  // For reports, e.g. "NVIDIA H200 (sm_90), driver 13.0, 132 SMs".
  virtual std::string description(int index) const = 0;
  virtual void synchronize(int index) const = 0;
  // Whether time_interval measures device time with events (false on the CPU, where a call is
  // synchronous and the interval is the call's wall time).
  virtual bool has_device_events() const = 0;
  // Whether the timer holds the stream while the host enqueues the timed calls (see DeviceTimer).
  virtual bool timer_holds_device() const { return false; }
  // Seconds between events recorded before and after `enqueue` (synchronizes on the second).
  virtual double time_interval(int index, const std::function<void()>& enqueue) const = 0;
  // A timer on device `index` (the default: wall time, for devices whose calls are synchronous).
  virtual std::unique_ptr<DeviceTimer> timer(int index) const;
  // Why graphs cannot be captured on this device, or nothing when they can.
  virtual std::optional<std::string> graph_unsupported_reason() const = 0;
  // Captures `calls` invocations of `enqueue` into one graph (warm up before capturing).
  virtual std::unique_ptr<DeviceGraph> capture(int index, const std::function<void()>& enqueue, int calls) const = 0;
  // Bytes of the last-level cache in front of the device's memory (L3 on a CPU, L2 on a GPU), or
  // -1 when unknown; the benchmark's cold-cache rotation sizes itself by it.
  virtual int64_t last_level_cache_bytes(int index) const { return -1; }
};

// The registered API of a device, or null.
const DeviceApi* device_api(Device device);
void register_device_api(Device device, std::shared_ptr<const DeviceApi> api);

}  // namespace xllm_kernel
