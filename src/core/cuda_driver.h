// What the CUDA driver offers, found without creating a device context and without linking
// CUDA (not public). Every CUDA backend module's probe starts here.
//
//   const CudaDriver& d = cuda_driver();
//   if (!d.missing.empty()) return ProbeResult::missing(d.missing);  // "no CUDA driver (...)"
//
// The driver is dlopen()ed and initialized (cuInit) once per process, only when a CUDA module is
// probed, i.e. when the process asked for the cuda device; cuInit creates no context, but like any
// CUDA use it makes a later fork() unable to use CUDA in the child.
#pragma once

#include <dlfcn.h>

#include <string>
#include <vector>

namespace xllm_kernel::detail {

struct CudaDriver {
  std::string missing;            // empty when usable; otherwise why not, for explain()
  int version = 0;                // cuDriverGetVersion: 1000 * major + 10 * minor
  std::vector<int> capabilities;  // per visible device: 10 * major + minor

  int best_capability() const {
    int best = 0;
    for (int c : capabilities) best = c > best ? c : best;
    return best;
  }

  // Device `index` (the CUDA ordinal torch uses too) has compute capability >= `minimum`
  // (10 * major + minor). Cheap: bridges check it on every call.
  bool capable(int index, int minimum) const {
    return index >= 0 && index < static_cast<int>(capabilities.size()) && capabilities[index] >= minimum;
  }

  // The devices with compute capability >= `minimum`, by index.
  std::vector<int> capable_devices(int minimum) const {
    std::vector<int> out;
    for (int i = 0; i < static_cast<int>(capabilities.size()); ++i) {
      if (capabilities[i] >= minimum) out.push_back(i);
    }
    return out;
  }

  // Empty when capable(index, minimum); otherwise why not, naming the device and its capability:
  // "cuda:1 is sm_75, below sm_80", "cuda:2 is not among the 2 devices the driver sees".
  std::string capability_shortfall(int index, int minimum) const {
    if (capable(index, minimum)) return {};
    if (!missing.empty()) return "cuda:" + std::to_string(index) + " cannot be used: " + missing;
    if (index < 0 || index >= static_cast<int>(capabilities.size())) {
      return "cuda:" + std::to_string(index) + " is not among the " + std::to_string(capabilities.size()) +
             " devices the driver sees";
    }
    const int c = capabilities[index];
    return "cuda:" + std::to_string(index) + (c == 0 ? std::string(" has an unknown compute capability")
                                                     : " is sm_" + std::to_string(c)) +
           ", below sm_" + std::to_string(minimum);
  }

  // "driver 13.0, 1 device (sm_90)"
  std::string describe() const {
    std::string text = "driver " + std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10) + ", " +
                       std::to_string(capabilities.size()) + (capabilities.size() == 1 ? " device (" : " devices (");
    for (size_t i = 0; i < capabilities.size(); ++i) text += (i ? ", sm_" : "sm_") + std::to_string(capabilities[i]);
    return text + ")";
  }
};

// The oldest compute capability the CUDA plugin's kernels run on (it holds sm_80 and sm_90 code,
// and compute_90 PTX for newer GPUs).
inline constexpr int kCudaPluginMinCapability = 80;

namespace cuda_driver_api {
// Driver API entry points by name, with the types of cuda.h (CUresult and enums are ints).
using Init = int (*)(unsigned int flags);
using GetCount = int (*)(int* count);
using GetVersion = int (*)(int* version);
using DeviceGet = int (*)(int* device, int ordinal);
using GetAttribute = int (*)(int* value, int attribute, int device);
using ErrorName = int (*)(int error, const char** name);
inline constexpr int kErrorNoDevice = 100;            // CUDA_ERROR_NO_DEVICE
inline constexpr int kCapabilityMajorAttribute = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
inline constexpr int kCapabilityMinorAttribute = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
}  // namespace cuda_driver_api

inline CudaDriver probe_cuda_driver_once() {
  namespace api = cuda_driver_api;
  CudaDriver d;
  // Kept open for the process: the CUDA runtime loads the same library anyway.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    d.missing = "no CUDA driver (libcuda.so.1 not found)";
    return d;
  }
  auto init = reinterpret_cast<api::Init>(dlsym(lib, "cuInit"));
  auto get_count = reinterpret_cast<api::GetCount>(dlsym(lib, "cuDeviceGetCount"));
  auto get_version = reinterpret_cast<api::GetVersion>(dlsym(lib, "cuDriverGetVersion"));
  auto device_get = reinterpret_cast<api::DeviceGet>(dlsym(lib, "cuDeviceGet"));
  auto get_attribute = reinterpret_cast<api::GetAttribute>(dlsym(lib, "cuDeviceGetAttribute"));
  auto error_name = reinterpret_cast<api::ErrorName>(dlsym(lib, "cuGetErrorName"));
  if (!init || !get_count || !get_version || !device_get || !get_attribute) {
    d.missing = "no usable CUDA driver (libcuda.so.1 lacks the driver API entry points)";
    return d;
  }
  auto name_of = [&](int error) {
    const char* name = nullptr;
    if (error_name == nullptr || error_name(error, &name) != 0 || name == nullptr) return "CUresult " + std::to_string(error);
    return std::string(name);
  };
  get_version(&d.version);
  if (const int e = init(0); e != 0) {
    d.missing = e == api::kErrorNoDevice ? "no CUDA device" : "CUDA driver unusable: cuInit failed with " + name_of(e);
    return d;
  }
  int count = 0;
  if (const int e = get_count(&count); e != 0) {
    d.missing = "CUDA driver unusable: cuDeviceGetCount failed with " + name_of(e);
    return d;
  }
  if (count <= 0) {
    d.missing = "no CUDA device";
    return d;
  }
  for (int i = 0; i < count; ++i) {
    int device = 0, major = 0, minor = 0;
    if (device_get(&device, i) != 0 || get_attribute(&major, api::kCapabilityMajorAttribute, device) != 0 ||
        get_attribute(&minor, api::kCapabilityMinorAttribute, device) != 0) {
      major = minor = 0;
    }
    d.capabilities.push_back(10 * major + minor);
  }
  return d;
}

// Probed once per process, on first use.
inline const CudaDriver& cuda_driver() {
  static const CudaDriver driver = probe_cuda_driver_once();
  return driver;
}

}  // namespace xllm_kernel::detail
