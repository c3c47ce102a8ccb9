// A CPU stand-in for an Ascend device, for tests on machines without one: PrivateUse1 named "npu",
// two devices whose memory is host memory, every aten op run by its CPU kernel on CPU tensors that
// alias that memory, and torch_npu's vendor operators (npu::npu_rms_norm, npu::npu_add_rms_norm)
// computed on the host. Everything runs synchronously on the calling thread.
//
// Loading libxllm_kernel_npu_standin.so registers all of it from static initializers:
//
//   dlopen("<build>/test/libxllm_kernel_npu_standin.so", RTLD_NOW | RTLD_GLOBAL);
//   at::Tensor x = at::randn({4, 64}).to("npu:0");
//   auto op = c10::Dispatcher::singleton().findSchemaOrThrow("npu::npu_rms_norm", "");
//
// This header is shared by the stand-in's own translation units only.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>

#include <unordered_map>
#include <vector>

namespace xllm_kernel::npu_standin {

inline constexpr c10::DeviceIndex kDeviceCount = 2;

// The device memory: host memory aligned to 64 bytes, tagged with the current npu device.
c10::Allocator* device_allocator();

// The calling thread's current npu device (0 until set_current_device).
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);

// Throws, naming `what`, unless 0 <= index < kDeviceCount.
void check_device_index(c10::DeviceIndex index, const char* what);

// Grows or shrinks an npu storage to `nbytes`, keeping the common prefix (torch's resize contract).
void resize_storage_bytes(c10::StorageImpl& storage, size_t nbytes);

// The CPU generator behind an npu generator (the fallback hands it to CPU kernels).
at::Generator host_generator_of(const at::Generator& npu_generator);

// CPU tensors aliasing npu tensors' host memory, one CPU storage per npu storage within one call
// (so CPU kernels see two views of one npu storage as views of one storage: overlap checks, and
// outputs that alias an input, keep working). The CPU storages are resizable: a CPU kernel that
// resizes an out= tensor gets fresh CPU memory, which write_back() moves into the npu storage.
class HostAliases {
 public:
  // `npu` itself when it is not an npu tensor.
  at::Tensor of(const at::Tensor& npu);

  // The npu tensor whose alias is `host`, when `host` is one of this call's aliases.
  const at::Tensor* original_of(const at::Tensor& host) const;

  // The npu storage whose memory `host` (a CPU tensor) lies in, when it lies in one.
  const c10::Storage* npu_storage_of(const at::Tensor& host) const;

  // Carries what a CPU kernel did to a mutable argument's alias (new sizes, strides or offset;
  // storage resized to other memory) over to the npu tensor.
  static void write_back(const at::Tensor& npu, const at::Tensor& host);

 private:
  std::unordered_map<const c10::StorageImpl*, c10::Storage> cpu_of_npu_;
  std::unordered_map<const c10::StorageImpl*, c10::Storage> npu_of_cpu_;
  std::unordered_map<const c10::TensorImpl*, at::Tensor> npu_of_alias_;
  std::vector<at::Tensor> keep_;  // the aliases handed out, so their TensorImpl* stay unique
};

// An npu tensor on `device` holding a copy of `host`'s whole storage, with host's sizes, strides
// and offset (a fresh output of a CPU kernel moved to the device).
at::Tensor copy_to_device(const at::Tensor& host, c10::Device device);

// An npu tensor viewing `storage` with `host`'s dtype, sizes, strides and offset.
at::Tensor npu_view(const c10::Storage& storage, const at::Tensor& host);

}  // namespace xllm_kernel::npu_standin
