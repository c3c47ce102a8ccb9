// The stand-in device: PrivateUse1 named "npu", its device guard (devices, streams, events), its
// allocator and empty kernels, torch's PrivateUse1 hooks (availability, pinned memory, generators,
// storage resize), and the npu_standin::* helper ops the fake torch_npu package calls.
#include "npu_standin.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/Generator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace xllm_kernel::npu_standin {
namespace {

constexpr c10::DeviceType kNpu = c10::DeviceType::PrivateUse1;
constexpr size_t kAlignment = 64;

// ---- Devices and streams -----------------------------------------------------------------------

thread_local c10::DeviceIndex tls_device = 0;
// The current stream of each device, per thread; id 0 is the default stream.
thread_local std::array<c10::StreamId, kDeviceCount> tls_stream{};

// Pool streams take ids 1..kPoolSize, streams made by getNewStream the ids after.
constexpr c10::StreamId kPoolSize = 8;

std::atomic<c10::StreamId>& next_new_stream() {
  static std::atomic<c10::StreamId> next{kPoolSize + 1};
  return next;
}

c10::StreamId next_pool_stream(c10::DeviceIndex device) {
  static std::array<std::atomic<c10::StreamId>, kDeviceCount> round_robin{};
  return 1 + round_robin[device].fetch_add(1) % kPoolSize;
}

c10::DeviceIndex index_or_current(c10::Device device) {
  return device.index() < 0 ? tls_device : device.index();
}

// An event: the host time at record (work is synchronous, so recording completes at once).
struct Event {
  c10::DeviceIndex device = -1;
  bool recorded = false;
  std::chrono::steady_clock::time_point time;
};

struct GuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNpu; }

  c10::Device exchangeDevice(c10::Device device) const override {
    const c10::Device previous = getDevice();
    setDevice(device);
    return previous;
  }
  c10::Device getDevice() const override { return {kNpu, tls_device}; }
  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == kNpu, "npu stand-in: setDevice: expected an npu device, got ", device);
    if (device.index() >= 0) {
      set_current_device(device.index());
    }
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    if (device.index() >= 0 && device.index() < kDeviceCount) {
      tls_device = device.index();
    }
  }
  c10::DeviceIndex deviceCount() const noexcept override { return kDeviceCount; }

  c10::Stream getStream(c10::Device device) const override {
    const c10::DeviceIndex index = index_or_current(device);
    check_device_index(index, "getStream");
    return c10::Stream(c10::Stream::UNSAFE, {kNpu, index}, tls_stream[index]);
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    const c10::DeviceIndex index = index_or_current(device);
    check_device_index(index, "getDefaultStream");
    return c10::Stream(c10::Stream::UNSAFE, {kNpu, index}, 0);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool /*high_priority*/) const override {
    const c10::DeviceIndex index = index_or_current(device);
    check_device_index(index, "getStreamFromGlobalPool");
    return c10::Stream(c10::Stream::UNSAFE, {kNpu, index}, next_pool_stream(index));
  }
  c10::Stream getNewStream(c10::Device device, int /*priority*/) const override {
    const c10::DeviceIndex index = index_or_current(device);
    check_device_index(index, "getNewStream");
    return c10::Stream(c10::Stream::UNSAFE, {kNpu, index}, next_new_stream().fetch_add(1));
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    const c10::DeviceIndex index = stream.device_index();
    check_device_index(index, "exchangeStream");
    const c10::Stream previous(c10::Stream::UNSAFE, {kNpu, index}, tls_stream[index]);
    tls_stream[index] = stream.id();
    return previous;
  }
  bool queryStream(const c10::Stream& /*stream*/) const override { return true; }
  void synchronizeStream(const c10::Stream& /*stream*/) const override {}
  void synchronizeDevice(c10::DeviceIndex /*device*/) const override {}

  void record(void** event, const c10::Stream& stream, c10::DeviceIndex device,
              c10::EventFlag /*flag*/) const override {
    TORCH_CHECK(device == -1 || device == stream.device_index(), "npu stand-in: event on npu:", device,
                " recorded on a stream of npu:", stream.device_index());
    auto*& e = reinterpret_cast<Event*&>(*event);
    if (e == nullptr) {
      e = new Event;
      e->device = stream.device_index();
    }
    TORCH_CHECK(e->device == stream.device_index(), "npu stand-in: event of npu:", e->device,
                " recorded on a stream of npu:", stream.device_index());
    e->recorded = true;
    e->time = std::chrono::steady_clock::now();
  }
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override { return true; }
  void synchronizeEvent(void* /*event*/) const override {}
  void destroyEvent(void* event, c10::DeviceIndex /*device*/) const noexcept override {
    delete static_cast<Event*>(event);
  }
  double elapsedTime(void* start, void* end, c10::DeviceIndex /*device*/) const override {
    const auto* a = static_cast<const Event*>(start);
    const auto* b = static_cast<const Event*>(end);
    TORCH_CHECK(a != nullptr && b != nullptr && a->recorded && b->recorded,
                "npu stand-in: elapsedTime: both events must have been recorded");
    return std::chrono::duration<double, std::milli>(b->time - a->time).count();
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

// ---- Memory ------------------------------------------------------------------------------------

// Live allocations, begin -> (bytes, device); pinned host memory is tagged with the CPU device.
struct Allocations {
  std::mutex mutex;
  std::map<const char*, std::pair<size_t, c10::Device>> live;

  std::optional<c10::Device> find(const void* p) {
    const auto* c = static_cast<const char*>(p);
    std::lock_guard lock(mutex);
    auto it = live.upper_bound(c);
    if (it == live.begin()) {
      return std::nullopt;
    }
    --it;
    if (c < it->first + std::max<size_t>(it->second.first, 1)) {
      return it->second.second;
    }
    return std::nullopt;
  }
};

Allocations& allocations() {
  static auto* a = new Allocations;  // leaked: frees can run during exit
  return *a;
}

void free_host(void* p) {
  if (p == nullptr) {
    return;
  }
  {
    auto& a = allocations();
    std::lock_guard lock(a.mutex);
    a.live.erase(static_cast<const char*>(p));
  }
  std::free(p);
}

c10::DataPtr allocate_host(size_t nbytes, c10::Device device) {
  void* p = nullptr;
  if (nbytes > 0) {
    const size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
    p = std::aligned_alloc(kAlignment, rounded);
    TORCH_CHECK(p != nullptr, "npu stand-in: out of host memory allocating ", nbytes, " bytes on ", device);
    auto& a = allocations();
    std::lock_guard lock(a.mutex);
    a.live.insert_or_assign(static_cast<const char*>(p), std::make_pair(nbytes, device));
  }
  return {p, p, &free_host, device};
}

struct DeviceAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override { return allocate_host(nbytes, {kNpu, tls_device}); }
  c10::DeleterFnPtr raw_deleter() const override { return &free_host; }
  void copy_data(void* dest, const void* src, size_t count) const override {
    if (count > 0) std::memcpy(dest, src, count);  // an empty storage may hold a null pointer
  }
};

// Page-locked host memory has no meaning here; pinned allocations are ordinary host memory that
// is_pinned() recognizes.
struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override { return allocate_host(nbytes, c10::Device(c10::kCPU)); }
  c10::DeleterFnPtr raw_deleter() const override { return &free_host; }
  void copy_data(void* dest, const void* src, size_t count) const override {
    if (count > 0) std::memcpy(dest, src, count);  // an empty storage may hold a null pointer
  }
};

PinnedAllocator& pinned_allocator() {
  static PinnedAllocator a;
  return a;
}

// ---- Generators --------------------------------------------------------------------------------

// An npu generator: a CPU generator (Mersenne twister) that CPU kernels use in its place.
class HostGenerator final : public c10::GeneratorImpl {
 public:
  HostGenerator(c10::DeviceIndex device, uint64_t seed)
      : c10::GeneratorImpl({kNpu, device}, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        host_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

  const at::Generator& host() const { return host_; }

  void set_current_seed(uint64_t seed) override { host_.set_current_seed(seed); }
  void set_offset(uint64_t offset) override { host_.set_offset(offset); }
  uint64_t get_offset() const override { return host_.get_offset(); }
  uint64_t current_seed() const override { return host_.current_seed(); }
  uint64_t seed() override { return host_.seed(); }
  void set_state(const c10::TensorImpl& state) override { host_.unsafeGetGeneratorImpl()->set_state(state); }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    return host_.unsafeGetGeneratorImpl()->get_state();
  }

 private:
  HostGenerator* clone_impl() const override {
    auto* copy = new HostGenerator(device().index(), 0);
    copy->host_ = host_.clone();
    return copy;
  }

  at::Generator host_;
};

const at::Generator& default_generator(c10::DeviceIndex device) {
  static const auto* generators = [] {
    auto* g = new std::array<at::Generator, kDeviceCount>;
    for (c10::DeviceIndex i = 0; i < kDeviceCount; ++i) {
      (*g)[i] = at::make_generator<HostGenerator>(i, c10::default_rng_seed_val);
    }
    return g;
  }();
  const c10::DeviceIndex index = device < 0 ? tls_device : device;
  check_device_index(index, "default generator");
  return (*generators)[index];
}

// ---- torch's PrivateUse1 hooks -----------------------------------------------------------------

// Once a PrivateUse1 backend is registered it is torch's accelerator, so torch asks these hooks
// (CPU tensors' is_pinned, torch.accelerator, torch.Generator(device="npu"), storage resize_).
struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex /*device*/) const override { return true; }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override { return kDeviceCount; }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_current_device(device); }
  c10::DeviceIndex getCurrentDevice() const override { return tls_device; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    const c10::DeviceIndex previous = tls_device;
    if (device >= 0) {
      set_current_device(device);
    }
    return previous;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override { return exchangeDevice(device); }
  bool isPinnedPtr(const void* data) const override {
    const auto device = allocations().find(data);
    return device.has_value() && device->is_cpu();
  }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &pinned_allocator(); }
  c10::Device getDeviceFromPtr(void* data) const override {
    const auto device = allocations().find(data);
    TORCH_CHECK(device.has_value() && device->type() == kNpu, "npu stand-in: ", data,
                " is not npu memory allocated by the stand-in");
    return *device;
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    const c10::DeviceIndex index = device < 0 ? tls_device : device;
    check_device_index(index, "new generator");
    return at::make_generator<HostGenerator>(index, c10::default_rng_seed_val);
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    resize_storage_bytes(*storage.unsafeGetStorageImpl(), nbytes);
  }
};

// ---- Registration at load ----------------------------------------------------------------------

[[maybe_unused]] const bool registered = [] {
  c10::register_privateuse1_backend("npu");
  c10::SetAllocator(kNpu, device_allocator());
  at::RegisterPrivateUse1HooksInterface(new Hooks);
  return true;
}();

c10::Device requested_device(std::optional<c10::Device> device) {
  const c10::Device d = device.value_or(c10::Device(kNpu, tls_device));
  TORCH_CHECK(d.type() == kNpu, "npu stand-in: empty: expected an npu device, got ", d);
  const c10::DeviceIndex index = d.index() < 0 ? tls_device : d.index();
  check_device_index(index, "empty");
  return {kNpu, index};
}

void check_strided(const char* op, std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided, "npu stand-in: ", op,
              ": only strided npu tensors exist, got layout ", *layout);
  TORCH_CHECK(!pin_memory.value_or(false), "npu stand-in: ", op,
              ": npu tensors cannot be pinned (pinned memory is host memory)");
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  check_strided("aten::empty.memory_format", layout, pin_memory);
  const c10::DeviceGuard guard(requested_device(device));
  return at::detail::empty_generic(size, device_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   dtype.value_or(c10::get_default_dtype_as_scalartype()), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  check_strided("aten::empty_strided", layout, pin_memory);
  const c10::DeviceGuard guard(requested_device(device));
  return at::detail::empty_strided_generic(size, stride, device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           dtype.value_or(c10::get_default_dtype_as_scalartype()));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", &empty_memory_format);
  m.impl("empty_strided", &empty_strided);
}

// The fake torch_npu package's torch.npu module calls these.
TORCH_LIBRARY(npu_standin, m) {
  m.def("device_count() -> int", [] { return static_cast<int64_t>(kDeviceCount); });
  m.def("current_device() -> int", [] { return static_cast<int64_t>(tls_device); });
  m.def("set_device(int device) -> ()", [](int64_t device) {
    TORCH_CHECK(device >= 0 && device < kDeviceCount, "npu stand-in: set_device: device ", device,
                " out of range (", static_cast<int>(kDeviceCount), " devices)");
    set_current_device(static_cast<c10::DeviceIndex>(device));
  });
  m.def("manual_seed(int seed, int device=-1) -> ()", [](int64_t seed, int64_t device) {
    for (c10::DeviceIndex i = 0; i < kDeviceCount; ++i) {
      if (device < 0 || device == i) {
        at::Generator g = default_generator(i);
        std::lock_guard lock(g.mutex());
        g.unsafeGetGeneratorImpl()->set_current_seed(static_cast<uint64_t>(seed));
      }
    }
  });
}

}  // namespace

c10::Allocator* device_allocator() {
  static DeviceAllocator a;
  return &a;
}

c10::DeviceIndex current_device() { return tls_device; }

void check_device_index(c10::DeviceIndex index, const char* what) {
  TORCH_CHECK(index >= 0 && index < kDeviceCount, "npu stand-in: ", what, ": device index ",
              static_cast<int>(index), " out of range (", static_cast<int>(kDeviceCount), " npu devices)");
}

void set_current_device(c10::DeviceIndex index) {
  check_device_index(index, "set device");
  tls_device = index;
}

void resize_storage_bytes(c10::StorageImpl& storage, size_t nbytes) {
  TORCH_CHECK(storage.resizable(), "npu stand-in: trying to resize storage that is not resizable");
  const c10::Device device = storage.device();
  TORCH_CHECK(device.type() == kNpu, "npu stand-in: resize of a ", device, " storage");
  const c10::DeviceGuard guard(device);
  c10::DataPtr fresh = device_allocator()->allocate(nbytes);
  const size_t common = std::min(nbytes, storage.nbytes());
  if (common > 0) {
    std::memcpy(fresh.get(), storage.data_ptr().get(), common);
  }
  storage.set_data_ptr_noswap(std::move(fresh));
  storage.set_nbytes(nbytes);
}

at::Generator host_generator_of(const at::Generator& npu_generator) {
  auto* g = dynamic_cast<HostGenerator*>(npu_generator.unsafeGetGeneratorImpl());
  TORCH_CHECK(g != nullptr, "npu stand-in: a ", npu_generator.device(), " generator not made by the stand-in");
  return g->host();
}

}  // namespace xllm_kernel::npu_standin
