// The benchmark's reset of mutated arguments (numerics::restore): the whole storage of each
// argument comes back bit for bit from its copy_with_layout copy, a storage shared by two arguments
// is restored once, undefined arguments are skipped, both below the stream threshold (copy_) and
// above it (non-temporal stores).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "src/core/cpu_stream.h"
#include "src/numerics/tensor_case.h"

namespace xllm_kernel::numerics {
namespace {

// Two halves of one [2, elements] bfloat16 tensor (a KV tensor's key and value caches) and a
// column slice of another (padding between rows), all mutated, then restored.
void RestoresWholeStorages(int64_t elements) {
  const at::Device cpu(at::kCPU);
  const at::Tensor kv = at::randn({2, elements}).to(at::kBFloat16);
  const at::Tensor padded = at::randn({64, 130});
  const at::Tensor key = kv.select(0, 0), value = kv.select(0, 1), columns = padded.slice(1, 0, 128);
  const at::Tensor kv_before = kv.clone(), padded_before = padded.clone();
  const at::Tensor pristine_key = copy_with_layout(key, cpu), pristine_value = copy_with_layout(value, cpu);
  const at::Tensor pristine_columns = copy_with_layout(columns, cpu);
  kv.fill_(7);
  padded.fill_(-3);
  restore({{key, pristine_key}, {at::Tensor(), at::Tensor()}, {value, pristine_value}, {columns, pristine_columns}});
  EXPECT_TRUE(at::equal(kv.view(at::kShort), kv_before.view(at::kShort)));  // bits, not values
  EXPECT_TRUE(at::equal(padded.view(at::kInt), padded_before.view(at::kInt)));
}

TEST(Restore, SmallStoragesComeBackBitForBit) {
  ASSERT_FALSE(detail::stream_cpu_output(2 * 4096 * 2 + 64 * 130 * 4));
  RestoresWholeStorages(4096);
}

TEST(Restore, StoragesPastTheStreamThresholdComeBackBitForBitThroughNonTemporalStores) {
  const int64_t elements = (int64_t{48} << 20) / 4 + 3;  // 48 MiB of bfloat16 pairs, odd length: a tail
  ASSERT_TRUE(detail::stream_cpu_output(2 * elements * 2)) << detail::cpu_stream_policy();
  RestoresWholeStorages(elements);
}

}  // namespace
}  // namespace xllm_kernel::numerics
