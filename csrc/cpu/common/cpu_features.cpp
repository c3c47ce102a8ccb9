#include "csrc/cpu/common/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

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

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = Probe();
  return features;
}

bool amx_tile_data_granted() {
  static const bool granted = [] {
    const CpuFeatures& f = cpu_features();
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
