// Helpers for the torch-free CPU kernel tests (test/csrc/<family>/): element codecs that do not
// share code with the kernels, the Highway targets to run every test on, memory that ends right
// before an inaccessible page (guarded_memory.h) and rows among sentinels (sentinel_rows.h).
//
//   for (int64_t target : KernelTargets()) {
//     TargetScope scope(target);                  // the kernels now dispatch to `target`
//     const double v = Store(DType::kBFloat16, buf, i, 1.5f);  // rounded to nearest even
//   }
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "csrc/common/rows.h"
#include "csrc/cpu/common/cpu_features.h"
#include "csrc/cpu/common/simd.h"
#include "hwy/targets.h"
#include "test/csrc/common/guarded_memory.h"
#include "test/csrc/common/kernel_params.h"
#include "test/csrc/common/sentinel_rows.h"

namespace xllm_kernel::cpu::test {

using kernels::DType;

// ---------------------------------------------------------------- element codecs
// Independent of the kernels: bf16 rounds via nearbyint on a scaled double, f16 via the
// compiler's _Float16 conversion (both round to nearest even).

// fp8 e4m3fn byte -> value, from the format's definition (bias 7, no infinities, S.1111.111 NaN).
inline double Fp8Value(uint8_t b) {
  const int e = (b >> 3) & 0xF, m = b & 7;
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  if (e == 15 && m == 7) return NAN;
  if (e == 0) return sign * m * std::ldexp(1.0, -9);
  return sign * (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
}

// The non-negative finite e4m3fn values, ascending: index = code (0..0x7E).
inline const std::vector<double>& Fp8Positives() {
  static const std::vector<double> v = [] {
    std::vector<double> out;
    for (int c = 0; c <= 0x7E; ++c) out.push_back(Fp8Value(static_cast<uint8_t>(c)));
    return out;
  }();
  return v;
}

// e4m3(v): the byte of the nearest value, ties to the even code, |v| >= 448 saturated to 448, NaN
// 0x7F; by comparing exact float64 distances.
inline uint8_t Fp8Nearest(double v) {
  if (std::isnan(v)) return 0x7F;
  const int sign = std::signbit(v) ? 0x80 : 0;
  const double a = std::fabs(v);
  if (a >= 448.0) return static_cast<uint8_t>(sign | 0x7E);
  const std::vector<double>& t = Fp8Positives();
  const int lo = static_cast<int>(std::upper_bound(t.begin(), t.end(), a) - t.begin()) - 1;  // t[lo] <= a < t[lo + 1]
  const double below = a - t[lo], above = t[lo + 1] - a;
  const int c = below < above ? lo : above < below ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
  return static_cast<uint8_t>(sign | c);
}

inline size_t ElemSize(DType t) { return t == DType::kFloat32 ? 4 : 2; }

inline const char* ShortName(DType t) {
  switch (t) {
    case DType::kFloat32: return "f32";
    case DType::kBFloat16: return "bf16";
    case DType::kFloat16: return "f16";
  }
  return "?";
}

inline uint32_t F32Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float F32FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t Bf16Round(float f) {
  const uint32_t sign = (F32Bits(f) >> 16) & 0x8000u;
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7FC0u);
  if (std::isinf(f) || f == 0.0f) return static_cast<uint16_t>(F32Bits(f) >> 16);
  const double a = std::fabs(static_cast<double>(f));
  // bf16 keeps 8 significant bits; its subnormal spacing is 2^-133.
  const double quantum = std::ldexp(1.0, std::max(std::ilogb(a) - 7, -133));
  const double r = std::nearbyint(a / quantum) * quantum;
  if (r >= 0x1p128) return static_cast<uint16_t>(sign | 0x7F80u);
  return static_cast<uint16_t>(sign | (F32Bits(static_cast<float>(r)) >> 16));
}

#if defined(__FLT16_MANT_DIG__)  // the compiler has _Float16 (gcc 12, clang 15 on x86)
inline uint16_t F16Round(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

inline float F16ToFloat(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return static_cast<float>(h);
}
#else  // e.g. clang 14 (the sanitizer builds): the same conversions, written out
inline uint16_t F16Round(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000u : 0u;
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7E00u | ((F32Bits(f) >> 13) & 0x3FFu));  // quieted
  if (std::isinf(f)) return static_cast<uint16_t>(sign | 0x7C00u);
  const double a = std::fabs(static_cast<double>(f));
  if (a == 0.0) return sign;
  // half keeps 11 significant bits; its subnormal spacing is 2^-24; ties to even (nearbyint).
  const double quantum = std::ldexp(1.0, std::max(std::ilogb(a) - 10, -24));
  const double r = std::nearbyint(a / quantum) * quantum;
  if (r >= 65536.0) return static_cast<uint16_t>(sign | 0x7C00u);
  if (r == 0.0) return sign;
  const int e = std::ilogb(r);
  if (e < -14) return static_cast<uint16_t>(sign | static_cast<uint16_t>(r / 0x1p-24));
  const auto mantissa = static_cast<uint16_t>((r / std::ldexp(1.0, e) - 1.0) * 1024.0);
  return static_cast<uint16_t>(sign | ((e + 15) << 10) | mantissa);
}

inline float F16ToFloat(uint16_t u) {
  const float sign = (u & 0x8000u) ? -1.0f : 1.0f;
  const int e = (u >> 10) & 0x1F;
  const int m = u & 0x3FF;
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -24);
  if (e == 31) {
    if (m == 0) return sign * std::numeric_limits<float>::infinity();
    const uint32_t bits = ((u & 0x8000u) << 16) | 0x7FC00000u | (static_cast<uint32_t>(m) << 13);  // quieted
    float out;
    std::memcpy(&out, &bits, 4);
    return out;
  }
  return sign * std::ldexp(static_cast<float>(m | 0x400), e - 25);
}
#endif

// Raw bits of v rounded to t.
inline uint32_t EncodeBits(DType t, float v) {
  switch (t) {
    case DType::kFloat32: return F32Bits(v);
    case DType::kBFloat16: return Bf16Round(v);
    case DType::kFloat16: return F16Round(v);
  }
  return 0;
}

inline float DecodeBits(DType t, uint32_t bits) {
  switch (t) {
    case DType::kFloat32: return F32FromBits(bits);
    case DType::kBFloat16: return F32FromBits(bits << 16);
    case DType::kFloat16: return F16ToFloat(static_cast<uint16_t>(bits));
  }
  return 0.0f;
}

inline uint32_t LoadBits(DType t, const void* base, int64_t i) {
  if (t == DType::kFloat32) {
    uint32_t u;
    std::memcpy(&u, static_cast<const char*>(base) + i * 4, 4);
    return u;
  }
  uint16_t u;
  std::memcpy(&u, static_cast<const char*>(base) + i * 2, 2);
  return u;
}

inline void StoreBits(DType t, void* base, int64_t i, uint32_t bits) {
  if (t == DType::kFloat32) {
    std::memcpy(static_cast<char*>(base) + i * 4, &bits, 4);
  } else {
    const uint16_t u = static_cast<uint16_t>(bits);
    std::memcpy(static_cast<char*>(base) + i * 2, &u, 2);
  }
}

inline double Load(DType t, const void* base, int64_t i) { return DecodeBits(t, LoadBits(t, base, i)); }

// Stores v rounded to t and returns the stored value.
inline double Store(DType t, void* base, int64_t i, float v) {
  const uint32_t bits = EncodeBits(t, v);
  StoreBits(t, base, i, bits);
  return DecodeBits(t, bits);
}

// Same bits, or both NaN.
inline bool SameValue(DType t, uint32_t a, uint32_t b) {
  return a == b || (std::isnan(DecodeBits(t, a)) && std::isnan(DecodeBits(t, b)));
}

// Unit roundoff of a dtype: round to nearest is off by at most this fraction of the value.
inline double Roundoff(DType t) {
  return t == DType::kFloat32 ? 0x1p-24 : t == DType::kBFloat16 ? 0x1p-8 : 0x1p-11;
}

// Half the spacing of the dtype's subnormals: the absolute error of rounding a tiny value.
inline double SubnormalHalfSpacing(DType t) {
  return t == DType::kFloat32 ? 0x1p-150 : t == DType::kBFloat16 ? 0x1p-134 : 0x1p-25;
}

// ---------------------------------------------------------------- targets

// Targets the kernel library was compiled for and this CPU runs, found by forcing each
// supported target and asking the dispatcher which one it picked (every kernel translation unit
// is compiled for the same targets, see csrc/cpu/common/simd.h).
inline const std::vector<int64_t>& KernelTargets() {
  static const std::vector<int64_t> targets = [] {
    std::vector<int64_t> result;
    hwy::SetSupportedTargetsForTest(0);
    const int64_t supported = hwy::SupportedTargets();
    for (int64_t rest = supported; rest != 0; rest &= rest - 1) {
      const int64_t bit = rest & -rest;
      hwy::SetSupportedTargetsForTest(bit);
      if (std::string(simd_target()) == hwy::TargetName(bit)) result.push_back(bit);
    }
    hwy::SetSupportedTargetsForTest(0);
    return result;
  }();
  return targets;
}

// Makes the runtime dispatch pick `target` while in scope.
class TargetScope {
 public:
  explicit TargetScope(int64_t target) { hwy::SetSupportedTargetsForTest(target); }
  ~TargetScope() { hwy::SetSupportedTargetsForTest(0); }
  TargetScope(const TargetScope&) = delete;
  TargetScope& operator=(const TargetScope&) = delete;
};

// Runs f(target) once per kernel target with the dispatch forced to it (checked through
// simd_target()) and the target named in failures; stops at the first fatal failure.
template <class F>
void ForEachKernelTarget(F&& f) {
  ASSERT_FALSE(KernelTargets().empty());
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    SCOPED_TRACE(std::string("target ") + hwy::TargetName(target));
    ASSERT_EQ(std::string(simd_target()), hwy::TargetName(target));
    f(target);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// ---------------------------------------------------------------- CPU classes

// A kernel test parametrized over CPU classes (cpu_class_names(), csrc/cpu/common/cpu_features.h):
// each class this CPU can stand in for runs with that class's features and the best Highway target
// they leave (ScopedCpuFeatures), so a test reaches every kernel variant its CPU can run; a class
// whose features this CPU lacks is skipped, naming them, so that a variant never run reads SKIPPED,
// not PASSED. scripts/kernel_variants.py lists which ran and which were skipped.
//
//   class CpuScaledMmClass : public ::testing::TestWithParam<std::string> {};
//   TEST_P(CpuScaledMmClass, MatchesTheContract) {
//     XLLM_AS_CPU_CLASS(GetParam());
//     ... the kernels dispatch as on a CPU of that class ...
//   }
//   INSTANTIATE_TEST_SUITE_P(Cpu, CpuScaledMmClass, CpuClasses(), CpuClassTestName);
class CpuClassScope {
 public:
  explicit CpuClassScope(const std::string& name) : missing_(missing_cpu_features(cpu_class_features(name))) {
    // The Highway target the class dispatches to must be compiled (a build for this machine's
    // target alone, XLLM_KERNEL_CPU_TARGETS=native as in the sanitizer builds, has no other).
    const std::string target = name == "sse4" ? "SSE4" : name.rfind("avx2", 0) == 0 ? "AVX2" : "AVX3";
    bool compiled = false;
    for (int64_t t : KernelTargets()) compiled |= target == hwy::TargetName(t);
    if (missing_.empty() && !compiled) missing_ = "the kernels' " + target + " target (not compiled in this build)";
    if (missing_.empty()) scope_ = std::make_unique<ScopedCpuFeatures>(cpu_class_features(name));
  }
  // What the CPU or the build lacks for the class ("" when the class runs here).
  const std::string& missing() const { return missing_; }

 private:
  std::string missing_;
  std::unique_ptr<ScopedCpuFeatures> scope_;
};

#define XLLM_AS_CPU_CLASS(name)                                                                      \
  const ::xllm_kernel::cpu::test::CpuClassScope xllm_cpu_class_scope(name);                           \
  if (!xllm_cpu_class_scope.missing().empty())                                                       \
  GTEST_SKIP() << "CPU class " << (name) << ": this CPU lacks " << xllm_cpu_class_scope.missing() \
               << " (it has: " << ::xllm_kernel::cpu::cpu_features_text() << ")"

// The classes, all or those named (in cpu_class_names()' order).
inline ::testing::internal::ParamGenerator<std::string> CpuClasses(std::vector<std::string> only = {}) {
  if (only.empty()) only = cpu_class_names();
  return ::testing::ValuesIn(only);
}
inline std::string CpuClassTestName(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

// ---------------------------------------------------------------- memory (guarded_memory.h)

using xllm_kernel::test::GuardedArray;
using xllm_kernel::test::GuardedRegion;

// ---------------------------------------------------------------- parameters (kernel_params.h)

using xllm_kernel::test::Llama8BPagedAttention;
using xllm_kernel::test::OneSlotKvCache;

}  // namespace xllm_kernel::cpu::test
