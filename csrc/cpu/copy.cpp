#include "csrc/cpu/copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "csrc/cpu/copy.cpp"
#include "hwy/cache_control.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace xllm_kernel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void StreamCopy(void* dst, const void* src, size_t bytes) {
  const hn::ScalableTag<uint8_t> d;
  const size_t n = hn::Lanes(d);
  auto* out = static_cast<uint8_t*>(dst);
  const auto* in = static_cast<const uint8_t*>(src);
  // Head: plain copy up to the first vector-aligned destination byte.
  const size_t head = std::min(bytes, (n - reinterpret_cast<uintptr_t>(out) % n) % n);
  std::memcpy(out, in, head);
  size_t i = head;
  for (; i + 4 * n <= bytes; i += 4 * n) {
    const auto v0 = hn::LoadU(d, in + i);
    const auto v1 = hn::LoadU(d, in + i + n);
    const auto v2 = hn::LoadU(d, in + i + 2 * n);
    const auto v3 = hn::LoadU(d, in + i + 3 * n);
    hn::Stream(v0, d, out + i);
    hn::Stream(v1, d, out + i + n);
    hn::Stream(v2, d, out + i + 2 * n);
    hn::Stream(v3, d, out + i + 3 * n);
  }
  std::memcpy(out + i, in + i, bytes - i);
  hwy::FlushStream();
}

}  // namespace HWY_NAMESPACE
}  // namespace xllm_kernel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace xllm_kernel::cpu {

HWY_EXPORT(StreamCopy);

void stream_copy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) HWY_DYNAMIC_DISPATCH(StreamCopy)(dst, src, bytes);
}

}  // namespace xllm_kernel::cpu
#endif  // HWY_ONCE
