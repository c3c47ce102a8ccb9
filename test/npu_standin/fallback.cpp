// Every aten op on npu tensors without a kernel of its own runs its CPU kernel on CPU tensors that
// alias the npu tensors' host memory (no copies), and its results come back as npu tensors: those
// that alias an input's memory (in-place ops, out=, views) share that input's npu storage, fresh
// ones are copied to the device. The ops that act on storages themselves (set_, resize_, copies
// between devices) have kernels here.
#include "npu_standin.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cstring>
#include <optional>
#include <unordered_set>

namespace xllm_kernel::npu_standin {
namespace {

constexpr c10::DeviceType kNpu = c10::DeviceType::PrivateUse1;

bool is_npu(const at::Tensor& t) { return t.defined() && t.device().type() == kNpu; }

}  // namespace

// ---- Aliases and copies ------------------------------------------------------------------------

at::Tensor HostAliases::of(const at::Tensor& npu) {
  if (!is_npu(npu)) {
    return npu;
  }
  c10::StorageImpl* npu_storage = npu.storage().unsafeGetStorageImpl();
  auto it = cpu_of_npu_.find(npu_storage);
  if (it == cpu_of_npu_.end()) {
    // Non-owning: the npu storage keeps the memory; the npu tensor outlives this call.
    c10::DataPtr view(npu_storage->data_ptr().get(), c10::Device(c10::kCPU));
    c10::Storage cpu(c10::Storage::use_byte_size_t(), npu_storage->nbytes(), std::move(view),
                     c10::GetAllocator(c10::kCPU), /*resizable=*/true);
    npu_of_cpu_.emplace(cpu.unsafeGetStorageImpl(), npu.storage());
    it = cpu_of_npu_.emplace(npu_storage, std::move(cpu)).first;
  }
  at::Tensor host = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(it->second), c10::DispatchKeySet(c10::DispatchKey::CPU), npu.dtype());
  host.unsafeGetTensorImpl()->set_sizes_and_strides(npu.sizes(), npu.strides(), npu.storage_offset());
  host._set_conj(npu.is_conj());
  host._set_neg(npu.is_neg());
  npu_of_alias_.emplace(host.unsafeGetTensorImpl(), npu);
  keep_.push_back(host);
  return host;
}

const at::Tensor* HostAliases::original_of(const at::Tensor& host) const {
  auto it = npu_of_alias_.find(host.unsafeGetTensorImpl());
  return it == npu_of_alias_.end() ? nullptr : &it->second;
}

const c10::Storage* HostAliases::npu_storage_of(const at::Tensor& host) const {
  if (!host.has_storage()) {
    return nullptr;
  }
  auto it = npu_of_cpu_.find(host.storage().unsafeGetStorageImpl());
  return it == npu_of_cpu_.end() ? nullptr : &it->second;
}

void HostAliases::write_back(const at::Tensor& npu, const at::Tensor& host) {
  c10::StorageImpl& n = *npu.storage().unsafeGetStorageImpl();
  const c10::StorageImpl& h = *host.storage().unsafeGetStorageImpl();
  if (h.data_ptr().get() != n.data_ptr().get() || h.nbytes() != n.nbytes()) {
    // The CPU kernel resized the alias (an out= tensor of another size): its new CPU memory holds
    // the result, so the npu storage takes a copy of it.
    const c10::DeviceGuard guard(npu.device());
    c10::DataPtr fresh = device_allocator()->allocate(h.nbytes());
    if (h.nbytes() > 0) {
      std::memcpy(fresh.get(), h.data_ptr().get(), h.nbytes());
    }
    n.set_data_ptr_noswap(std::move(fresh));
    n.set_nbytes(h.nbytes());
  }
  if (npu.sizes() != host.sizes() || npu.strides() != host.strides() ||
      npu.storage_offset() != host.storage_offset()) {
    npu.unsafeGetTensorImpl()->set_sizes_and_strides(host.sizes(), host.strides(), host.storage_offset());
  }
}

at::Tensor npu_view(const c10::Storage& storage, const at::Tensor& host) {
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), host.dtype());
  t.unsafeGetTensorImpl()->set_sizes_and_strides(host.sizes(), host.strides(), host.storage_offset());
  t._set_conj(host.is_conj());
  t._set_neg(host.is_neg());
  return t;
}

at::Tensor copy_to_device(const at::Tensor& host, c10::Device device) {
  TORCH_CHECK(host.layout() == c10::kStrided && host.has_storage(),
              "npu stand-in: cannot move a ", host.layout(), " tensor to the device");
  const c10::DeviceGuard guard(device);
  const size_t nbytes = host.storage().nbytes();
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, device_allocator()->allocate(nbytes),
                       device_allocator(), /*resizable=*/true);
  if (nbytes > 0) {
    std::memcpy(storage.mutable_data(), host.storage().data(), nbytes);
  }
  return npu_view(storage, host);
}

namespace {

// ---- The boxed fallback ------------------------------------------------------------------------

std::string op_name(const c10::OperatorHandle& op) {
  const auto& name = op.schema().operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

struct Call {
  explicit Call(std::string name) : op(std::move(name)) {}

  std::string op;
  HostAliases aliases;
  std::optional<c10::Device> device;  // the npu device of the arguments (or the one asked for)
  bool other_device_asked = false;    // a device= argument named a device other than npu
  std::unordered_set<const c10::StorageImpl*> host_input_storages;  // CPU tensors passed in
  std::vector<std::pair<at::Tensor, at::Tensor>> written;           // mutable npu args, aliases
  std::optional<c10::Device> host_tensor;  // set when a CPU tensor with dimensions is an argument

  void note_device(c10::Device d, const char* what) {
    if (!device) {
      device = d;
      return;
    }
    TORCH_CHECK(*device == d, "Expected all tensors to be on the same device, but found at least two devices, ",
                *device, " and ", d, "! (npu stand-in, ", what, " of ", op, ")");
  }

  at::Tensor argument(const at::Tensor& t, bool in_list) {
    if (!t.defined()) {
      return t;
    }
    if (is_npu(t)) {
      note_device(t.device(), "argument");
      return aliases.of(t);
    }
    // Plain CPU tensors beside npu ones would be a device mismatch on the device, except 0-dim
    // scalars and index lists (as CUDA allows); checked once all arguments are seen.
    if (t.has_storage()) {
      host_input_storages.insert(t.storage().unsafeGetStorageImpl());
    }
    if (t.device().is_cpu() && t.dim() > 0 && !in_list) {
      host_tensor = t.device();
    }
    return t;
  }

  c10::IValue result(const c10::IValue& v) {
    if (v.isTensor()) {
      return result(v.toTensor());
    }
    if (v.isList()) {
      return map_list(v.toList(), [this](const at::Tensor& t) { return result(t); });
    }
    return v;
  }

  at::Tensor result(const at::Tensor& host) {
    if (!host.defined() || !host.device().is_cpu()) {
      return host;
    }
    if (const at::Tensor* npu = aliases.original_of(host)) {
      return *npu;  // the op returned self / out
    }
    if (const c10::Storage* storage = aliases.npu_storage_of(host)) {
      return npu_view(*storage, host);  // a view of an npu input
    }
    if (host.has_storage() && host_input_storages.count(host.storage().unsafeGetStorageImpl())) {
      return host;  // a CPU input or a view of one
    }
    if (other_device_asked || !device) {
      return host;
    }
    return copy_to_device(host, *device);
  }

  template <typename Fn>
  static c10::IValue map_list(const c10::List<c10::IValue>& list, Fn&& fn) {
    bool has_tensor = false;
    for (const c10::IValue& e : list) {
      has_tensor = has_tensor || e.isTensor();
    }
    if (!has_tensor) {
      return list;
    }
    c10::impl::GenericList out(list.elementType());
    out.reserve(list.size());
    for (const c10::IValue& e : list) {
      out.push_back(e.isTensor() ? c10::IValue(fn(e.toTensor())) : e);
    }
    return out;
  }
};

void host_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet /*keys*/, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  Call call(op_name(op));
  TORCH_CHECK(op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU), "npu stand-in: ", call.op,
              " has no CPU kernel to run on the host, so the stand-in does not support it");

  const size_t num_args = schema.arguments().size();
  const size_t first = stack->size() - num_args;
  for (size_t i = 0; i < num_args; ++i) {
    c10::IValue& v = (*stack)[first + i];
    const auto& alias_info = schema.arguments()[i].alias_info();
    const bool written = alias_info != nullptr && alias_info->isWrite();
    if (v.isTensor()) {
      const at::Tensor npu = v.toTensor();
      at::Tensor host = call.argument(npu, /*in_list=*/false);
      if (written && is_npu(npu)) {
        call.written.emplace_back(npu, host);
      }
      v = std::move(host);
    } else if (v.isList()) {
      v = Call::map_list(v.toList(), [&](const at::Tensor& npu) {
        at::Tensor host = call.argument(npu, /*in_list=*/true);
        if (written && is_npu(npu)) {
          call.written.emplace_back(npu, host);
        }
        return host;
      });
    } else if (v.isDevice()) {
      const c10::Device d = v.toDevice();
      if (d.type() == kNpu) {
        call.note_device(d.index() < 0 ? c10::Device(kNpu, current_device()) : d, "device= argument");
        v = c10::Device(c10::kCPU);
      } else {
        call.other_device_asked = true;
      }
    } else if (v.isGenerator()) {
      const at::Generator g = v.toGenerator();
      if (g.device().type() == kNpu) {
        v = host_generator_of(g);
      }
    } else if (v.isStorage()) {
      TORCH_CHECK(false, "npu stand-in: ", call.op, " takes a Storage; the stand-in supports that only for set_");
    }
  }
  TORCH_CHECK(!call.host_tensor || !call.device,
              "Expected all tensors to be on the same device, but found at least two devices, ", *call.device,
              " and cpu! (npu stand-in: ", call.op,
              " got a CPU tensor with dimensions beside npu tensors; only 0-dim CPU scalars mix)");

  {
    const c10::OptionalDeviceGuard guard(call.device);
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  }

  const c10::OptionalDeviceGuard guard(call.device);
  for (const auto& [npu, host] : call.written) {
    HostAliases::write_back(npu, host);
  }
  const size_t num_returns = schema.returns().size();
  for (size_t i = stack->size() - num_returns; i < stack->size(); ++i) {
    (*stack)[i] = call.result((*stack)[i]);
  }
}

// ---- Storage-level kernels ---------------------------------------------------------------------

void check_npu(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK(is_npu(t), "npu stand-in: aten::", op, ": ", name, " must be an npu tensor, got ", t.device());
}

// dst.copy_(src) where either is on npu (torch's copy_ sends those here).
at::Tensor copy_from(const at::Tensor& src, const at::Tensor& dst, bool /*non_blocking*/) {
  HostAliases aliases;
  const at::Tensor host_dst = aliases.of(dst);
  host_dst.copy_(aliases.of(src));
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& src, const at::Tensor& dst) {
  check_npu("_copy_from_and_resize", "dst", dst);
  dst.resize_(src.sizes());
  return copy_from(src, dst, false);
}

const at::Tensor& resize(const at::Tensor& self, c10::IntArrayRef size, std::optional<c10::MemoryFormat> format) {
  check_npu("resize_", "self", self);
  TORCH_CHECK(format.value_or(c10::MemoryFormat::Contiguous) != c10::MemoryFormat::Preserve,
              "npu stand-in: aten::resize_: unsupported memory format Preserve");
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  if (format) {
    impl->empty_tensor_restride(*format);
  }
  const size_t needed = at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.dtype().itemsize(),
                                                         self.storage_offset());
  if (needed > self.storage().nbytes()) {
    resize_storage_bytes(*self.storage().unsafeGetStorageImpl(), needed);
  }
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  check_npu("set_", "self", self);
  TORCH_CHECK(source.device().type() == kNpu, "npu stand-in: aten::set_: cannot set an npu tensor to a ",
              source.device(), " storage");
  TORCH_CHECK(offset >= 0, "npu stand-in: aten::set_: storage offset must be non-negative, got ", offset);
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  if (self.storage().unsafeGetStorageImpl() != source.unsafeGetStorageImpl()) {
    impl->set_storage_keep_dtype(std::move(source));
  }
  if (stride.data() == nullptr || (stride.empty() && !size.empty())) {
    impl->set_sizes_contiguous(size);
    impl->set_storage_offset(offset);
  } else {
    TORCH_CHECK(size.size() == stride.size(), "npu stand-in: aten::set_: ", size.size(), " sizes but ",
                stride.size(), " strides");
    impl->set_sizes_and_strides(size, stride, offset);
  }
  const size_t needed =
      at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.dtype().itemsize(), offset);
  if (needed > self.storage().nbytes()) {
    resize_storage_bytes(*self.storage().unsafeGetStorageImpl(), needed);
  }
  return self;
}

at::Tensor& set_whole_storage(at::Tensor& self, c10::Storage source) {
  const int64_t elements = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage(self, std::move(source), 0, {elements}, {});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  check_npu("set_", "source", source);
  TORCH_CHECK(self.dtype() == source.dtype(), "npu stand-in: aten::set_: source dtype ", source.dtype(),
              " differs from self dtype ", self.dtype());
  return set_storage(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  check_npu("set_", "self", self);
  const c10::DeviceGuard guard(self.device());
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, device_allocator()->allocate(0), device_allocator(),
                     /*resizable=*/true);
  return set_storage(self, std::move(empty), 0, {0}, {});
}

// Work is synchronous, so a tensor never needs to outlive its use on another stream.
void record_stream(at::Tensor& self, c10::Stream stream) {
  check_npu("record_stream", "self", self);
  TORCH_CHECK(stream.device() == self.device(), "npu stand-in: aten::record_stream: stream of ", stream.device(),
              " for a tensor on ", self.device());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&host_fallback>()); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", &copy_from);
  m.impl("_copy_from_and_resize", &copy_from_and_resize);
  m.impl("resize_", &resize);
  m.impl("set_.source_Storage", &set_whole_storage);
  m.impl("set_.source_Storage_storage_offset", &set_storage);
  m.impl("set_.source_Tensor", &set_tensor);
  m.impl("set_", &set_empty);
  m.impl("record_stream", &record_stream);
  // torch's composite decomposes layer norm in the input dtype; the device (and the CPU kernel)
  // computes it in float32, so the op goes to its CPU kernel like the ops without a kernel.
  m.impl("native_layer_norm", torch::CppFunction::makeFromBoxedFunction<&host_fallback>());
}

}  // namespace
}  // namespace xllm_kernel::npu_standin
