// Highway helpers for moving rows through memory: prefetching the next row and non-temporal
// (streaming) stores for outputs much larger than the last-level cache.
//
// Include after "hwy/highway.h" in a foreach_target translation unit (per-target include guard):
//   #include "csrc/cpu/common/stream-inl.h"
//   ... StoreVec<kStream>(v, d, p); ... if (kStream) hwy::FlushStream();
//
// Non-temporal stores write whole lines without reading them first (a plain store reads each
// output line before overwriting it), but leave the data in memory rather than in cache, and they
// are weakly ordered: a kernel that streams calls hwy::FlushStream() before it returns.

// Per-target include guard (Highway's idiom): included once per target by foreach_target.
#if defined(XLLM_KERNEL_CPU_COMMON_STREAM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef XLLM_KERNEL_CPU_COMMON_STREAM_INL_H_
#undef XLLM_KERNEL_CPU_COMMON_STREAM_INL_H_
#else
#define XLLM_KERNEL_CPU_COMMON_STREAM_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace xllm_kernel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Prefetches the cache lines holding `count` elements from p.
template <typename T>
HWY_INLINE void PrefetchElems(const T* p, size_t count) {
  for (size_t k = 0; k < count * sizeof(T); k += 64) {
    hwy::Prefetch(reinterpret_cast<const char*>(p) + k);
  }
}

// The same into L2 only (prefetcht1 on x86, elsewhere as PrefetchElems): for a kernel whose
// non-temporal stores need the L1 fill buffers that prefetches into L1 would hold.
template <typename T>
HWY_INLINE void PrefetchElemsL2(const T* p, size_t count) {
#if HWY_ARCH_X86
  for (size_t k = 0; k < count * sizeof(T); k += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p) + k, _MM_HINT_T1);
  }
#else
  PrefetchElems(p, count);
#endif
}

// Whether p meets the alignment of a full-vector non-temporal store on this target.
HWY_INLINE bool StreamAligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % hn::Lanes(hn::ScalableTag<uint8_t>()) == 0;
}

// A full-vector store, non-temporal when kStream (p then aligned to the vector size).
template <bool kStream, class D>
HWY_INLINE void StoreVec(hn::Vec<D> v, D d, hn::TFromD<D>* HWY_RESTRICT p) {
  if constexpr (kStream) {
    hn::Stream(v, d, p);
  } else {
    hn::StoreU(v, d, p);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace xllm_kernel::cpu
HWY_AFTER_NAMESPACE();

#endif  // XLLM_KERNEL_CPU_COMMON_STREAM_INL_H_
