// What every family's bridges share (not public): dtype names and conversions, the argument
// checks all operators make, the row description handed to torch-free kernels, and the
// dependency probes of the torch-on-CUDA and CUDA-plugin modules.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include <functional>
#include <initializer_list>
#include <utility>

#include "csrc/common/rows.h"
#include "xllm_kernel/catalog.h"

namespace xllm_kernel::bridge {

// The names users write (torch.bfloat16), not c10's enum names.
const char* dtype_name(at::ScalarType t);

// float32, bfloat16 or float16.
bool is_floating_kernel_dtype(at::ScalarType t);

// The kernels' element type of a dtype accepted by is_floating_kernel_dtype (checked before).
kernels::DType kernel_dtype(at::ScalarType t);

// `op: <arg> must be a defined tensor / on <device> / float32, bfloat16 or float16 / have a
// contiguous last dimension`: the checks every floating tensor argument of a kernel gets.
void check_floating_tensor(const char* op, const char* arg, const at::Tensor& t, c10::DeviceType device);

// The same for a quantized KV cache (reshape_and_cache_quant, paged_attention_quant): defined, on
// `device`, float8_e4m3fn or int8, a contiguous last dimension (where it has one).
void check_quantized_cache(const char* op, const char* arg, const at::Tensor& t, c10::DeviceType device);

// Describes the leading dimensions of same-shaped tensors (all but the last) for a torch-free
// kernel: size-1 dimensions dropped, neighbours merged where every tensor lays them out as one.
// Fills row_sizes[0, ndim) and, for each (tensor, strides) pair, strides[0, ndim) (arrays of
// max_dims entries); sets rows (0 when shape is empty) and returns ndim (>= 1). More than
// max_dims dimensions after merging is an error naming `op`. Takes 1 to 5 tensors.
int describe_rows(const char* op, const at::Tensor& shape,
                  std::initializer_list<std::pair<const at::Tensor*, int64_t*>> tensors, int max_dims,
                  int64_t* row_sizes, int64_t& rows);

// The same into the kernels' RowShape / RowStrides.
void describe_rows(const char* op, const at::Tensor& shape,
                   std::initializer_list<std::pair<const at::Tensor*, kernels::RowStrides*>> tensors,
                   kernels::RowShape& out);

// Exact overlap of tensors whose last dimension is contiguous (stride 1; checked before): each
// row is the run [offset, offset + last size) of its storage, so two rows share an element iff
// their runs intersect. For the layouts at::get_overlap_status and at::has_internal_overlap call
// TooHard (anything not dense). Costs a sort of the rows; a 0-element tensor overlaps nothing.
// Whether two rows of t share an element:
bool rows_overlap_within(const at::Tensor& t);
// Whether a row of a shares an element with a row of b (same element size; different storages:
// false):
bool rows_overlap_between(const at::Tensor& a, const at::Tensor& b);

// torch's CUDA backend (libtorch_cuda) sees a device; asks the driver first, since torch's own
// check warns when there is no driver.
ProbeResult probe_torch_cuda();
// The native CPU modules' probe: always available; the detail is the SIMD target Highway
// dispatches to on this CPU ("AVX2").
ProbeResult probe_highway();
// The driver sees a device the CUDA plugin was built for (compute capability >= 8.0).
ProbeResult probe_cuda_plugin();

// torch_npu is loaded in this process: PrivateUse1 is registered as "npu" with a device guard that
// sees at least one device. Never imports or loads anything itself (Python: `import torch_npu`;
// C++ engines: link libtorch_npu.so).
ProbeResult probe_torch_npu();

// An implementation's `supports` probe for a vendor operator it calls through the dispatcher by
// schema: the operator is registered, has a PrivateUse1 kernel and exactly the schema the bridge
// was written against (a torch_npu release that changed it is excluded with both schemas).
std::function<ProbeResult()> vendor_operator(std::string qualified_name, std::string schema);

}  // namespace xllm_kernel::bridge
