#include "src/ops/common/bridge.h"

#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceType.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>

#include <algorithm>
#include <vector>

#include "csrc/cpu/common/simd.h"
#include "src/core/cuda_driver.h"

namespace xllm_kernel::bridge {

const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    case at::kDouble: return "float64";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kChar: return "int8";
    case at::kFloat8_e4m3fn: return "float8_e4m3fn";
    default: return c10::toString(t);
  }
}

bool is_floating_kernel_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf; }

kernels::DType kernel_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return kernels::DType::kFloat32;
    case at::kBFloat16: return kernels::DType::kBFloat16;
    case at::kHalf: return kernels::DType::kFloat16;
    default: TORCH_CHECK(false, "kernel_dtype: unsupported dtype ", dtype_name(t), "; this is a bug in the bridge");
  }
}

void check_floating_tensor(const char* op, const char* arg, const at::Tensor& t, c10::DeviceType device) {
  TORCH_CHECK(t.defined(), op, ": ", arg, " must be a defined tensor, got an undefined one");
  TORCH_CHECK(t.device().type() == device, op, ": ", arg, " must be on ", c10::DeviceTypeName(device, true),
              " for this implementation, got ", t.device());
  TORCH_CHECK(is_floating_kernel_dtype(t.scalar_type()), op, ": ", arg, " must be float32, bfloat16 or float16, got ",
              dtype_name(t.scalar_type()));
  TORCH_CHECK(t.dim() >= 1, op, ": ", arg, " must have at least 1 dimension, got a 0-D tensor");
  TORCH_CHECK(t.stride(-1) == 1 || t.size(-1) <= 1, op, ": ", arg,
              "'s last dimension must be contiguous (stride 1), got stride ", t.stride(-1));
}

void check_quantized_cache(const char* op, const char* arg, const at::Tensor& t, c10::DeviceType device) {
  TORCH_CHECK(t.defined(), op, ": ", arg, " must be a defined tensor, got an undefined one");
  TORCH_CHECK(t.device().type() == device, op, ": ", arg, " must be on ", c10::DeviceTypeName(device, true),
              " for this implementation, got ", t.device());
  TORCH_CHECK(t.scalar_type() == at::kFloat8_e4m3fn || t.scalar_type() == at::kChar, op, ": ", arg,
              " must be float8_e4m3fn or int8, got ", dtype_name(t.scalar_type()));
  TORCH_CHECK(t.dim() == 0 || t.size(-1) <= 1 || t.stride(-1) == 1, op, ": ", arg,
              "'s last dimension must be contiguous (stride 1), got stride ", t.stride(-1));
}

namespace {

constexpr size_t kMaxRowTensors = 5;

// One describe_rows call: `count` tensors (each with where its row strides go) laid out as `shape`;
// the merged dimensions' sizes go to row_sizes (at most max_dims of them), their product to rows.
//   describe_rows_of({.op = op, .shape = shape, .tensors = pairs, .count = n, .max_dims = kernels::kMaxRowDims,
//                     .row_sizes = out.sizes, .rows = out.rows});
struct RowsOf {
  const char* op = "";
  const at::Tensor& shape;
  const std::pair<const at::Tensor*, int64_t*>* tensors = nullptr;
  size_t count = 0;
  int max_dims = 0;
  int64_t* row_sizes = nullptr;
  int64_t& rows;
};

// Returns the number of merged dimensions.
int describe_rows_of(const RowsOf& call) {
  const char* op = call.op;
  const at::Tensor& shape = call.shape;
  const std::pair<const at::Tensor*, int64_t*>* tensors = call.tensors;
  const size_t count = call.count;
  const int max_dims = call.max_dims;
  TORCH_CHECK(count >= 1 && count <= kMaxRowTensors, op, ": describe_rows takes 1 to ", kMaxRowTensors,
              " tensors, got ", count, "; this is a bug in the bridge");
  struct Dim {
    int64_t size;
    int64_t strides[kMaxRowTensors];
  };
  std::vector<Dim> dims;
  for (int64_t d = 0; d + 1 < shape.dim(); ++d) {
    if (shape.size(d) == 1) continue;
    Dim dim{shape.size(d), {}};
    for (size_t i = 0; i < count; ++i) dim.strides[i] = tensors[i].first->stride(d);
    if (!dims.empty()) {
      Dim& outer = dims.back();
      bool mergeable = true;
      for (size_t k = 0; k < count; ++k) mergeable &= outer.strides[k] == dim.strides[k] * dim.size;
      if (mergeable) {
        outer.size *= dim.size;
        for (size_t k = 0; k < count; ++k) outer.strides[k] = dim.strides[k];
        continue;
      }
    }
    dims.push_back(dim);
  }
  if (dims.empty()) dims.push_back(Dim{1, {}});
  TORCH_CHECK(static_cast<int>(dims.size()) <= max_dims, op, ": input's leading dimensions must merge into at most ",
              max_dims, " strided dimensions, got ", dims.size(), " (shape ", shape.sizes(), ")");
  int64_t& rows = call.rows;
  rows = shape.numel() == 0 ? 0 : 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    call.row_sizes[d] = dims[d].size;
    rows *= dims[d].size;
    for (size_t i = 0; i < count; ++i) tensors[i].second[d] = dims[d].strides[i];
  }
  return static_cast<int>(dims.size());
}

}  // namespace

int describe_rows(const char* op, const at::Tensor& shape,
                  std::initializer_list<std::pair<const at::Tensor*, int64_t*>> tensors, int max_dims,
                  int64_t* row_sizes, int64_t& rows) {
  return describe_rows_of({.op = op, .shape = shape, .tensors = tensors.begin(), .count = tensors.size(),
                           .max_dims = max_dims, .row_sizes = row_sizes, .rows = rows});
}

namespace {

// The runs [begin, end) of t's rows in its storage, in elements, sorted by begin.
std::vector<std::pair<int64_t, int64_t>> row_runs(const at::Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> runs;
  if (t.numel() == 0) return runs;
  const int64_t width = t.dim() == 0 ? 1 : t.size(-1);
  const int64_t lead = std::max<int64_t>(t.dim() - 1, 0);
  runs.reserve(static_cast<size_t>(t.numel() / width));
  std::vector<int64_t> index(static_cast<size_t>(lead), 0);
  int64_t offset = t.storage_offset();
  while (true) {
    runs.emplace_back(offset, offset + width);
    int64_t d = lead - 1;  // the next row: an odometer over the leading dimensions
    for (; d >= 0; --d) {
      if (++index[d] < t.size(d)) {
        offset += t.stride(d);
        break;
      }
      offset -= t.stride(d) * (t.size(d) - 1);
      index[d] = 0;
    }
    if (d < 0) break;
  }
  std::sort(runs.begin(), runs.end());
  return runs;
}

bool sorted_runs_intersect(const std::vector<std::pair<int64_t, int64_t>>& runs) {
  for (size_t i = 1; i < runs.size(); ++i)
    if (runs[i].first < runs[i - 1].second) return true;
  return false;
}

}  // namespace

bool rows_overlap_within(const at::Tensor& t) { return sorted_runs_intersect(row_runs(t)); }

bool rows_overlap_between(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0 || !a.is_alias_of(b)) return false;
  const auto ra = row_runs(a), rb = row_runs(b);
  // Two sorted lists of runs, each free of overlaps or not: any run of one that meets a run of the other.
  size_t i = 0, j = 0;
  while (i < ra.size() && j < rb.size()) {
    if (ra[i].first < rb[j].second && rb[j].first < ra[i].second) return true;
    if (ra[i].second <= rb[j].second) ++i; else ++j;
  }
  return false;
}

void describe_rows(const char* op, const at::Tensor& shape,
                   std::initializer_list<std::pair<const at::Tensor*, kernels::RowStrides*>> tensors,
                   kernels::RowShape& out) {
  std::pair<const at::Tensor*, int64_t*> pairs[kMaxRowTensors];
  size_t n = 0;
  for (const auto& [t, strides] : tensors) {
    if (n == kMaxRowTensors) {
      ++n;
      break;
    }
    pairs[n++] = {t, strides->s};
  }
  out.ndim = describe_rows_of({.op = op, .shape = shape, .tensors = pairs, .count = n, .max_dims = kernels::kMaxRowDims,
                               .row_sizes = out.sizes, .rows = out.rows});
}

ProbeResult probe_highway() { return ProbeResult::ok(cpu::simd_target()); }

ProbeResult probe_torch_cuda() {
  const detail::CudaDriver& driver = detail::cuda_driver();
  if (!driver.missing.empty()) return ProbeResult::missing(driver.missing);
  if (!at::hasCUDA()) return ProbeResult::missing("torch without CUDA (this torch build cannot use the CUDA devices)");
  return ProbeResult::ok("torch CUDA, " + driver.describe());
}

ProbeResult probe_cuda_plugin() {
  // The plugin holds sm_80 and sm_90 code (and compute_90 PTX for newer GPUs).
  constexpr int kMinCapability = detail::kCudaPluginMinCapability;
  const detail::CudaDriver& driver = detail::cuda_driver();
  if (!driver.missing.empty()) return ProbeResult::missing(driver.missing);
  if (driver.best_capability() < kMinCapability) {
    return ProbeResult::missing("no CUDA device of compute capability >= 8.0 (" + driver.describe() + ")");
  }
  return ProbeResult::ok(driver.describe());
}

ProbeResult probe_torch_npu() {
  constexpr const char* kHow = " (Python: import torch_npu; C++: link libtorch_npu.so)";
  if (!c10::is_privateuse1_backend_registered()) {
    return ProbeResult::missing("torch_npu is not loaded in this process: no PrivateUse1 backend is registered" +
                                std::string(kHow));
  }
  const std::string backend = c10::get_privateuse1_backend();
  if (backend != "npu") {
    return ProbeResult::missing("torch_npu is not loaded in this process: PrivateUse1 is registered as '" + backend +
                                "', not torch_npu's 'npu'" + kHow);
  }
  if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::PrivateUse1)) {
    return ProbeResult::missing("the 'npu' backend registers no device guard" + std::string(kHow));
  }
  const int devices = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->deviceCount();
  if (devices <= 0) return ProbeResult::missing("torch_npu sees no NPU device");
  return ProbeResult::ok("torch_npu, " + std::to_string(devices) + " NPU device" + (devices == 1 ? "" : "s"));
}

std::function<ProbeResult()> vendor_operator(std::string qualified_name, std::string schema) {
  return [qualified_name = std::move(qualified_name), schema = std::move(schema)] {
    auto handle = c10::Dispatcher::singleton().findSchema({qualified_name, ""});
    if (!handle.has_value()) {
      return ProbeResult::missing("the dispatcher has no " + qualified_name + " (a torch_npu without this operator)");
    }
    const std::string expected = c10::toString(torch::jit::parseSchema(schema));
    const std::string found = c10::toString(handle->schema());
    if (found != expected) {
      return ProbeResult::missing(qualified_name + " has the schema '" + found + "'; this implementation calls '" +
                                  expected + "'");
    }
    if (!handle->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
      return ProbeResult::missing(qualified_name + " has no npu (PrivateUse1) kernel");
    }
    return ProbeResult::ok(qualified_name);
  };
}

}  // namespace xllm_kernel::bridge
