// simd_target(): compiled once per Highway target like every kernel translation unit, so the
// runtime dispatch below picks the same target as theirs.
#include "csrc/cpu/common/simd.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "csrc/cpu/common/simd.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace xllm_kernel::cpu {
namespace HWY_NAMESPACE {

const char* TargetNameOfThis() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace xllm_kernel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace xllm_kernel::cpu {

HWY_EXPORT(TargetNameOfThis);

const char* simd_target() { return HWY_DYNAMIC_DISPATCH(TargetNameOfThis)(); }

}  // namespace xllm_kernel::cpu
#endif  // HWY_ONCE
