// The ceilings a case is judged against, measured in the benchmark's own run (docs/reports.md,
// "Roofline"), and the roofline of one case:
//   read     a read-only stream: on the CPU the best of threads x interleaved cursors x software
//            prefetch distance (csrc/cpu/ceilings read_stream) on a torch-allocated buffer, the
//            page kind the cases' tensors get; elsewhere a reduction over a device buffer (torch's
//            sum), which only reads;
//   copy     CopyMeter (timing.h), read + written bytes;
//   compute  the peak of each instruction class the device has: on the CPU a register-only loop
//            of each class (csrc/cpu/ceilings compute_peak) on every intra-op thread at once; on
//            an accelerator a large matmul of each dtype (its matrix units).
// A case declares its bytes and its work per class (numerics::CaseMetadata); its ideal time is the
// largest of bytes read / read, (read + written) / copy and its compute time, the work of the
// fastest class it may use here over that class's peak.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "src/benchmark/timing.h"
#include "xllm_kernel/device_api.h"

namespace xllm_kernel::benchmark {

// Each method's median in bytes per second, and the fastest: the copy's type (timing.h).
using ReadCeiling = CopyBandwidth;

// Holds its buffer so the read ceiling can be measured again next to each case (as the copy).
class ReadMeter {
 public:
  ReadMeter(const DeviceApi& api, const at::Device& device, int index, int64_t bytes);
  // Every method, samples interleaved; remembers the best for measure_best.
  ReadCeiling measure(int iterations);
  // The best method of the last measure() only (measure() first if never called), bytes per second.
  double measure_best(int iterations);

 private:
  struct Method {
    std::string name;
    int threads = 1, streams = 1;
    int64_t prefetch = 0;
  };
  double time_method(const Method& m);
  const DeviceApi& api_;
  at::Device device_;
  int index_;
  int64_t bytes_;
  at::Tensor buffer_;
  std::unique_ptr<DeviceTimer> timer_;
  std::vector<Method> methods_;
  size_t best_ = 0;
  bool measured_ = false;
};

struct ComputePeak {
  double ops_per_second = 0;  // a multiply-add counts 2
  std::string method;
};

// Peaks of the instruction classes the device has (name -> peak), and why the others are absent
// (name -> reason). CPU classes: csrc/cpu/ceilings' compute_class_name; accelerators:
// "matrix_bf16", "matrix_f16" (square matmuls from 512 up, doubling while one takes under 5 ms, to
// 4096; the best of five at the last size).
struct ComputePeaks {
  std::map<std::string, ComputePeak> peaks;
  std::map<std::string, std::string> absent;
};
ComputePeaks measure_compute_peaks(const DeviceApi& api, const at::Device& device, int index);

// The ceilings of one run for the report's environment section.
nlohmann::json ceilings_json(const ReadCeiling& read, double copy_bps, const std::string& copy_method,
                             const ComputePeaks& compute);

// A paragraph for the benchmark's Markdown: every ceiling with its method, the absent classes with
// their reasons, and how the roofline column is computed.
std::string ceilings_markdown(const nlohmann::json& ceilings);

// The roofline of a case: the ideal time and which ceiling sets it ("read", "copy" or a compute
// class). work: operations per class the case may use, alternatives (the fastest class present in
// `peaks` counts; classes absent here are ignored). Ties go to read, then copy, then compute.
struct Roofline {
  double ideal_seconds = 0;
  std::string bound;
  double read_seconds = 0, copy_seconds = 0, compute_seconds = 0;
  std::string compute_class;  // the class of compute_seconds (empty: no declared work runs here)
};
Roofline roofline(double bytes_read, double bytes_written, const std::map<std::string, double>& work,
                  double read_bps, double copy_bps, const std::map<std::string, ComputePeak>& peaks);
nlohmann::json to_json(const Roofline& r, double measured_seconds);

}  // namespace xllm_kernel::benchmark
