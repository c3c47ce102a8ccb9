#include "src/core/cpu_allocator.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace xllm_kernel::testing {
namespace {

TEST(CpuAllocator, LargeBlocksAreReusedSmallOnesAreNot) {
  const void* first = nullptr;
  {
    at::Tensor t = detail::empty_cpu_cached({1024, 1024}, at::kFloat);  // 4 MiB
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_EQ(t.sizes(), at::IntArrayRef({1024, 1024}));
    EXPECT_EQ(t.scalar_type(), at::kFloat);
    t.fill_(1);  // the memory is usable
    EXPECT_EQ(t.sum().item<float>(), 1024.0f * 1024.0f);
    first = t.const_data_ptr();
  }
  const size_t cached = detail::cpu_cache_bytes();
  EXPECT_GE(cached, size_t{4} << 20);
  at::Tensor again = detail::empty_cpu_cached({2048, 512}, at::kFloat);  // same byte size
  EXPECT_EQ(again.const_data_ptr(), first);
  EXPECT_EQ(detail::cpu_cache_bytes(), cached - (size_t{4} << 20));
  at::Tensor small = detail::empty_cpu_cached({16}, at::kBFloat16);
  EXPECT_EQ(small.numel(), 16);
  at::Tensor empty = detail::empty_cpu_cached({0, 4096}, at::kHalf);
  EXPECT_EQ(empty.numel(), 0);
}

}  // namespace
}  // namespace xllm_kernel::testing
