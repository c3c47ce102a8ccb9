#include "csrc/cpu/common/cpu_features.h"

#include <cpuid.h>
#include <hwy/targets.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <stdexcept>
#include <utility>

namespace xllm_kernel::cpu {

namespace {

// Linux's arch_prctl code (asm/prctl.h) and the tile data's xsave feature number.
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXFeatureXTileData = 18;

struct Cpuid {
  unsigned a = 0, b = 0, c = 0, d = 0;
  bool ok = false;
  Cpuid(unsigned leaf, unsigned sub) { ok = __get_cpuid_count(leaf, sub, &a, &b, &c, &d) != 0; }
};

bool Bit(unsigned word, int bit) { return (word >> bit) & 1u; }

// XCR0, the state components the OS saves (0 without OSXSAVE).
unsigned long long Xcr0() {
  const Cpuid one(1, 0);
  if (!one.ok || !Bit(one.c, 27)) return 0;  // OSXSAVE
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

CpuFeatures Probe() {
  CpuFeatures f;
  // GCC and Clang check the OS's saving of the ymm / zmm state (XGETBV) for these.
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const Cpuid seven(7, 0), seven_one(7, 1);
  if (seven.ok) {
    f.avx512_vnni = f.avx512 && Bit(seven.c, 11);
    f.avx512_vbmi = f.avx512 && Bit(seven.c, 1);
    // XCR0 bits 17 and 18: the tile configuration and data states.
    const bool tiles = Bit(seven.d, 24) && ((Xcr0() >> 17) & 3) == 3;
    f.amx_bf16 = tiles && Bit(seven.d, 22);
    f.amx_int8 = tiles && Bit(seven.d, 25);
  }
  if (seven.ok && seven.a >= 1 && seven_one.ok) {
    f.avx512_bf16 = f.avx512 && Bit(seven_one.a, 5);
    f.avx_vnni = f.avx2_fma && Bit(seven_one.a, 4);
  }
  return f;
}

// The features the kernels may use now: the probe's, less a ScopedCpuFeatures' restriction.
CpuFeatures& Effective() {
  static CpuFeatures features = probed_cpu_features();
  return features;
}

bool g_torch_brgemm_without_amx = false;

#define XLLM_CPU_FEATURE_FIELDS(X) \
  X(avx2_fma) X(avx512) X(avx512_bf16) X(avx512_vnni) X(avx512_vbmi) X(avx_vnni) X(amx_bf16) X(amx_int8)

CpuFeatures Intersect(const CpuFeatures& a, const CpuFeatures& b) {
  CpuFeatures r;
#define XLLM_AND(field) r.field = a.field && b.field;
  XLLM_CPU_FEATURE_FIELDS(XLLM_AND)
#undef XLLM_AND
  return r;
}

// Highway's targets this CPU has, whatever a test forces (hwy::SupportedTargets answers a forced
// set): read once with the force lifted, and the force put back.
int64_t ProbedTargets() {
  static const int64_t targets = [] {
    const int64_t now = hwy::SupportedTargets();
    hwy::SetSupportedTargetsForTest(0);
    const int64_t probed = hwy::SupportedTargets();
    if (now != probed) hwy::SetSupportedTargetsForTest(now);
    return probed;
  }();
  return targets;
}

// The Highway targets features `f` rules out: every AVX-512 target without avx512, AVX2 and better
// without avx2_fma (a lower bit is a better x86 target).
int64_t RuledOutTargets(const CpuFeatures& f) {
#if HWY_ARCH_X86
  if (!f.avx2_fma) return (int64_t{HWY_AVX2} << 1) - 1;
  if (!f.avx512) return int64_t{HWY_AVX2} - 1;
#else
  (void)f;
#endif
  return 0;
}

void ForceTargets(int64_t targets) { hwy::SetSupportedTargetsForTest(targets == ProbedTargets() ? 0 : targets); }

}  // namespace

const CpuFeatures& probed_cpu_features() {
  static const CpuFeatures features = Probe();
  return features;
}

const CpuFeatures& cpu_features() { return Effective(); }

const std::vector<std::string>& cpu_class_names() {
  static const std::vector<std::string> names{"sse4",        "avx2",        "avx2_vnni",   "avx512", "avx512_avx_vnni",
                                              "avx512_vnni", "avx512_bf16", "amx"};
  return names;
}

CpuFeatures cpu_class_features(const std::string& name) {
  CpuFeatures f;
  if (name == "sse4") return f;
  f.avx2_fma = true;
  if (name == "avx2") return f;
  f.avx_vnni = true;
  if (name == "avx2_vnni") return f;
  f.avx_vnni = false;
  f.avx512 = true;
  if (name == "avx512") return f;
  f.avx_vnni = true;
  if (name == "avx512_avx_vnni") return f;
  f.avx_vnni = false;
  f.avx512_vnni = f.avx512_vbmi = true;
  if (name == "avx512_vnni") return f;
  f.avx512_bf16 = true;
  if (name == "avx512_bf16") return f;
  f.avx_vnni = f.amx_bf16 = f.amx_int8 = true;
  if (name == "amx") return f;
  throw std::invalid_argument("cpu_class_features: unknown CPU class '" + name + "'");
}

std::string missing_cpu_features(const CpuFeatures& wanted) {
  const CpuFeatures& have = probed_cpu_features();
  std::string missing;
#define XLLM_MISSING(field) \
  if (wanted.field && !have.field) missing += (missing.empty() ? "" : " ") + std::string(#field);
  XLLM_CPU_FEATURE_FIELDS(XLLM_MISSING)
#undef XLLM_MISSING
  return missing;
}

ScopedCpuFeatures::ScopedCpuFeatures(const CpuFeatures& allowed, bool torch_brgemm_without_amx)
    : outer_(Effective()), outer_brgemm_(g_torch_brgemm_without_amx), outer_targets_(hwy::SupportedTargets()) {
  (void)ProbedTargets();  // read before any force of this scope's
  Effective() = Intersect(outer_, allowed);
  g_torch_brgemm_without_amx = outer_brgemm_ || torch_brgemm_without_amx;
  ForceTargets(outer_targets_ & ~RuledOutTargets(Effective()));
}

ScopedCpuFeatures::~ScopedCpuFeatures() {
  Effective() = outer_;
  g_torch_brgemm_without_amx = outer_brgemm_;
  ForceTargets(outer_targets_);
}

bool torch_brgemm_without_amx() { return g_torch_brgemm_without_amx; }

#undef XLLM_CPU_FEATURE_FIELDS

bool amx_tile_data_granted() {
  static const bool granted = [] {
    const CpuFeatures& f = probed_cpu_features();
    if (!f.amx_bf16 && !f.amx_int8) return false;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXFeatureXTileData) == 0;
  }();
  return granted;
}

std::string cpu_features_text() {
  const CpuFeatures& f = cpu_features();
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (on) s += (s.empty() ? "" : " ") + std::string(name);
  };
  add(f.avx2_fma, "avx2_fma");
  add(f.avx512, "avx512");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx512_vnni, "avx512_vnni");
  add(f.avx512_vbmi, "avx512_vbmi");
  add(f.avx_vnni, "avx_vnni");
  add(f.amx_bf16, "amx_bf16");
  add(f.amx_int8, "amx_int8");
  if (f.amx_bf16 || f.amx_int8) s += amx_tile_data_granted() ? " (tile data granted)" : " (tile data refused by the OS)";
  return s.empty() ? "none of these" : s;
}

}  // namespace xllm_kernel::cpu
