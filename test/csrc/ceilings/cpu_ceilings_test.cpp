// Torch-free tests of csrc/cpu/ceilings and csrc/cpu/common/cpu_features on every Highway target
// this CPU runs: the read stream depends on every byte it reads and on nothing past the range
// (which ends at an inaccessible page), its value is the same however the range is split into
// cursors or prefetched; each compute class reports the operations of its loop where the CPU has
// it and none, with the reason, where it does not. Speeds are the benchmark's to measure.
#include "csrc/cpu/ceilings/ceilings.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "csrc/cpu/common/cpu_features.h"
#include "test/csrc/common/cpu_test_support.h"

namespace xllm_kernel::cpu {
namespace {

using namespace test;  // NOLINT: the test helpers

TEST(CpuCeilings, ReadStreamSeesEveryByteAndNothingPastTheRange) {
  std::mt19937 rng(3);
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{255}, size_t{4096}, size_t{10000}, size_t{65536 + 77}}) {
      SCOPED_TRACE("bytes " + std::to_string(bytes));
      GuardedRegion region(bytes);
      ASSERT_TRUE(region.ok());
      auto* p = reinterpret_cast<uint8_t*>(region.tail(bytes));
      for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(rng());
      const uint64_t base = read_stream(p, bytes, 1, 0);
      // The same value however the range is walked (the cursors' parts and the tail start at
      // multiples of 256 bytes), with prefetches running past the end (harmless).
      for (int streams : {1, 2, 3, 4, 8}) {
        for (size_t prefetch : {size_t{0}, size_t{512}, size_t{4096}}) {
          EXPECT_EQ(read_stream(p, bytes, streams, prefetch), base) << "streams " << streams << " prefetch " << prefetch;
        }
      }
      // One bit flipped anywhere changes the value: every byte is read.
      for (size_t i : {size_t{0}, bytes / 3, bytes / 2 + 1, bytes - 1}) {
        if (i >= bytes) continue;
        p[i] ^= 0x10;
        EXPECT_NE(read_stream(p, bytes, 4, 256), base) << "byte " << i;
        p[i] ^= 0x10;
      }
    }
  }
}

TEST(CpuCeilings, ComputeClassesDoTheirOperationsWhereTheCpuHasThem) {
  const CpuFeatures& f = cpu_features();
  for (ComputeClass c : kComputeClasses) {
    SCOPED_TRACE(compute_class_name(c));
    std::string detail;
    const bool available = compute_class_available(c, &detail);
    EXPECT_FALSE(detail.empty());
    const double ops1 = compute_peak(c, 10), ops3 = compute_peak(c, 30);
    if (!available) {
      EXPECT_EQ(ops1, 0.0) << detail;
      continue;
    }
    EXPECT_GT(ops1, 0.0);
    EXPECT_DOUBLE_EQ(ops3, 3 * ops1);  // linear in the iterations
  }
  // Which classes each CPU must have: float32 FMA everywhere; the others as the features say.
  EXPECT_TRUE(compute_class_available(ComputeClass::kF32Fma));
  EXPECT_EQ(compute_class_available(ComputeClass::kBf16Dot), f.avx512_bf16);
  EXPECT_EQ(compute_class_available(ComputeClass::kInt8Dot), f.avx2_fma);
  EXPECT_EQ(compute_class_available(ComputeClass::kAmxBf16), f.amx_bf16 && amx_tile_data_granted());
  EXPECT_EQ(compute_class_available(ComputeClass::kAmxInt8), f.amx_int8 && amx_tile_data_granted());
  std::printf("cpu features: %s\n", cpu_features_text().c_str());
}

TEST(CpuCeilings, FeaturesAgreeWithTheCompilersProbe) {
  const CpuFeatures& f = cpu_features();
  EXPECT_EQ(f.avx2_fma, __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
  EXPECT_EQ(f.avx512_vnni, f.avx512 && __builtin_cpu_supports("avx512vnni"));
  EXPECT_EQ(f.avx512_vbmi, f.avx512 && __builtin_cpu_supports("avx512vbmi"));
  EXPECT_EQ(f.avx512_bf16, f.avx512 && __builtin_cpu_supports("avx512bf16"));
  if (f.avx512_bf16 || f.avx512_vnni || f.avx512_vbmi) EXPECT_TRUE(f.avx512);
  if (f.avx_vnni) EXPECT_TRUE(f.avx2_fma);
}

}  // namespace
}  // namespace xllm_kernel::cpu
