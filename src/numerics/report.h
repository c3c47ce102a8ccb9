// Reports: the environment a run happened in, and atomic writing of JSON and Markdown files.
#pragma once

#include <string>

#include "src/numerics/suite.h"

namespace xllm_kernel::numerics {

// Host, CPU model and SIMD target, device, torch, compiler, build type, revision, load, threads.
json environment(Device device, int device_index, const std::string& revision);

// The implementation block every report carries.
json implementation_json(const PreparedKernel& kernel);

// Writes `text` to `path` atomically: a temporary file beside it, flushed, then renamed over it.
// Throws std::runtime_error naming the path on any failure; no partial file is left behind.
void write_atomically(const std::string& path, const std::string& text);

// A number for tables: fixed or scientific, whichever is shorter and exact enough.
std::string format_number(double value);

}  // namespace xllm_kernel::numerics
