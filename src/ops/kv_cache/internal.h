// Shared by the kv_cache group's bridges (not public).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include "csrc/common/kv_cache.h"
#include "src/ops/common/bridge.h"
#include "src/ops/common/family.h"
#include "xllm_kernel/catalog.h"
#include "xllm_kernel/ops/kv_cache.h"

namespace xllm_kernel::kv_cache {

// The operation's name, from its contract, for messages.
inline const char* op_name() { return reshape_and_cache_operation().name().c_str(); }

// The sizes every bridge needs, from checked arguments.
struct CacheShape {
  int64_t tokens = 0;
  int64_t kv_heads = 0;
  int64_t head_size = 0;
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t slots = 0;  // num_blocks * block_size
};

// One call's arguments as its bridge received them (the schema's tensors) and the implementation's
// device: what check_arguments checks and kernel_params reads.
//   const Call call{.key = key, .value = value, .key_cache = key_cache, .value_cache = value_cache,
//                   .slot_mapping = slot_mapping, .device = kDevice};
// reshape_and_cache_quant sets key_scale and value_scale (non-null): the caches are then float8_e4m3fn
// or int8 and the scales checked as its contract says.
struct Call {
  const at::Tensor& key;
  const at::Tensor& value;
  const at::Tensor& key_cache;    // written (through its data pointer)
  const at::Tensor& value_cache;  // written (through its data pointer)
  const at::Tensor& slot_mapping;
  c10::DeviceType device = c10::DeviceType::CPU;  // the implementation's
  const at::Tensor* key_scale = nullptr;    // reshape_and_cache_quant only (int8: written)
  const at::Tensor* value_scale = nullptr;
};

// The name of the call's operation, for messages.
inline const char* call_name(const Call& call) {
  return call.key_scale != nullptr ? reshape_and_cache_quant_operation().name().c_str() : op_name();
}

// The kernel's format of a checked call's caches.
inline kernels::KvCacheFormat cache_format(const Call& call) {
  if (call.key_scale == nullptr) return kernels::KvCacheFormat::kPlain;
  return call.key_cache.scalar_type() == at::kChar ? kernels::KvCacheFormat::kInt8 : kernels::KvCacheFormat::kFp8E4M3;
}

// Checks every argument of reshape_and_cache (or reshape_and_cache_quant) for an implementation on `call.device` (shapes,
// dtypes, devices, the caches' layout, overlap; not the slot values); errors name the operation,
// the argument, what was expected and what was given.
CacheShape check_arguments(const Call& call);

// The CPU implementations' check of the slot values (slot_mapping on the CPU), before anything is
// written: every slot < shape.slots and no non-negative slot twice. Returns the number of
// non-negative slots.
int64_t check_slots_cpu(const CacheShape& shape, const at::Tensor& slot_mapping, const char* name = op_name());

// The CPU implementations' check of reshape_and_cache_quant's fp8 scales (host tensors): positive
// and finite. Nothing for int8 or reshape_and_cache.
void check_fp8_scales_cpu(const Call& call);

// The kernel parameters from checked arguments, for the CPU and the CUDA kernel alike. stream_out
// stays false: the CPU bridge decides it.
inline kernels::KvCacheParams kernel_params(const Call& call, const CacheShape& s) {
  const at::Tensor& key = call.key;
  const at::Tensor& value = call.value;
  const at::Tensor& key_cache = call.key_cache;
  const at::Tensor& value_cache = call.value_cache;
  const at::Tensor& slot_mapping = call.slot_mapping;
  kernels::KvCacheParams p;
  p.dtype = bridge::kernel_dtype(key.scalar_type());
  p.tokens = s.tokens;
  p.kv_heads = s.kv_heads;
  p.head_size = s.head_size;
  p.block_size = s.block_size;
  p.num_slots = s.slots;
  p.key = key.const_data_ptr();
  p.key_strides = {key.stride(0), key.stride(1)};
  p.value = value.const_data_ptr();
  p.value_strides = {value.stride(0), value.stride(1)};
  p.key_cache = key_cache.mutable_data_ptr();
  p.key_cache_block_stride = key_cache.stride(0);
  p.value_cache = value_cache.mutable_data_ptr();
  p.value_cache_block_stride = value_cache.stride(0);
  p.slot_mapping = slot_mapping.const_data_ptr<int64_t>();
  p.slot_stride = slot_mapping.stride(0);
  p.format = cache_format(call);
  if (p.format != kernels::KvCacheFormat::kPlain) {
    p.key_scale = call.key_scale->mutable_data_ptr<float>();
    p.value_scale = call.value_scale->mutable_data_ptr<float>();
    if (p.format == kernels::KvCacheFormat::kInt8) {
      p.key_scale_block_stride = call.key_scale->stride(0);
      p.value_scale_block_stride = call.value_scale->stride(0);
    }
  }
  return p;
}

// The two operations' signatures over one function of a Call on kDevice (each bridge's run), so
// that a bridge writes its work once for reshape_and_cache and reshape_and_cache_quant:
//   XLLM_REGISTER_NAMED("cpu.native.reshape_and_cache", ..., reshape_and_cache_entry<kCpu, run>);
template <c10::DeviceType kDevice, void (*kRun)(const Call&)>
void reshape_and_cache_entry(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                             at::Tensor& value_cache, const at::Tensor& slot_mapping) {
  kRun({.key = key, .value = value, .key_cache = key_cache, .value_cache = value_cache, .slot_mapping = slot_mapping,
        .device = kDevice});
}

template <c10::DeviceType kDevice, void (*kRun)(const Call&)>
void reshape_and_cache_quant_entry(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                                   at::Tensor& value_cache, const at::Tensor& slot_mapping, at::Tensor& key_scale,
                                   at::Tensor& value_scale) {
  kRun({.key = key, .value = value, .key_cache = key_cache, .value_cache = value_cache, .slot_mapping = slot_mapping,
        .device = kDevice, .key_scale = &key_scale, .value_scale = &value_scale});
}

// The group's backend modules (src/ops/kv_cache/kv_cache.cpp).
const family::StandardModules& modules();

}  // namespace xllm_kernel::kv_cache
