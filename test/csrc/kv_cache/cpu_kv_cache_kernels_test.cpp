// Torch-free tests of csrc/cpu/kv_cache on every Highway target this CPU runs: random bytes copied
// bit for bit into the addressed slots and nothing else written (the expected caches are built
// here with plain loops), row sizes around the vector widths (tails), heads not adjacent, block
// strides beyond one block, negative and out-of-range slots skipped, split token ranges, streaming
// stores, runs of consecutive slots (a prefill: one copy per run, which must end at its block's
// end, a skipped slot and its range's end), rows and slot mappings that end at an inaccessible page,
// and the kernel's rejections.
#include "csrc/cpu/kv_cache/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "test/csrc/common/cpu_test_support.h"

namespace xllm_kernel::cpu {
namespace {

using namespace test;  // NOLINT: the test helpers

struct Case {
  DType dtype;
  int64_t tokens, kv_heads, head_size, block_size, num_blocks;
  int64_t head_pad = 0;    // extra elements between the inputs' heads
  int64_t block_pad = 0;   // extra elements between cache blocks
  bool consecutive = false;  // slots in runs (a prefill) instead of random order
};

std::vector<uint8_t> RandomBytes(size_t n, std::mt19937& rng) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Runs one case (with `splits` token ranges) and compares every byte of both caches and inputs.
void RunCase(const Case& c, bool stream, int splits, std::mt19937& rng) {
  SCOPED_TRACE(std::string(ShortName(c.dtype)) + " tokens " + std::to_string(c.tokens) + " heads " +
               std::to_string(c.kv_heads) + " head_size " + std::to_string(c.head_size) + " head_pad " +
               std::to_string(c.head_pad) + " block_pad " + std::to_string(c.block_pad) +
               (stream ? " stream" : ""));
  const int64_t es = static_cast<int64_t>(ElemSize(c.dtype));
  const int64_t head_stride = c.head_size + c.head_pad, token_stride = c.kv_heads * head_stride;
  const int64_t row = c.kv_heads * c.head_size, block = c.block_size * row + c.block_pad;
  const int64_t slots = c.num_blocks * c.block_size;
  std::vector<uint8_t> key = RandomBytes(c.tokens * token_stride * es, rng);
  std::vector<uint8_t> value = RandomBytes(c.tokens * token_stride * es, rng);
  std::vector<uint8_t> kc = RandomBytes(c.num_blocks * block * es + 64, rng);
  std::vector<uint8_t> vc = RandomBytes(c.num_blocks * block * es + 64, rng);
  // Distinct slots in random order; every 4th token padding, every 7th out of range. Consecutive:
  // slots r, r + 1, ... (mod slots: runs go on past block ends, where the blocks are not adjacent
  // with a block_pad), every 11th token padding and every 13th out of range.
  std::vector<int64_t> perm(slots);
  for (int64_t i = 0; i < slots; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int64_t> slot(c.tokens);
  if (c.consecutive) {
    for (int64_t t = 0, next = perm[0]; t < c.tokens; ++t) {
      slot[t] = t % 11 == 10 ? -1 : t % 13 == 12 ? slots + t : next++ % slots;
    }
  } else {
    for (int64_t t = 0; t < c.tokens; ++t) slot[t] = t % 4 == 3 ? -1 : t % 7 == 6 ? slots + t : perm[t % slots];
  }
  std::vector<uint8_t> want_k = kc, want_v = vc;
  for (int64_t t = 0; t < c.tokens; ++t) {
    if (slot[t] < 0 || slot[t] >= slots) continue;
    const int64_t b = slot[t] / c.block_size, o = slot[t] % c.block_size;
    for (int64_t h = 0; h < c.kv_heads; ++h) {
      for (int64_t i = 0; i < c.head_size * es; ++i) {
        const int64_t dst = (b * block + o * row + h * c.head_size) * es + i;
        const int64_t src = (t * token_stride + h * head_stride) * es + i;
        want_k[dst] = key[src];
        want_v[dst] = value[src];
      }
    }
  }
  const std::vector<uint8_t> key_before = key, value_before = value;
  KvCacheParams p;
  p.dtype = c.dtype;
  p.tokens = c.tokens;
  p.kv_heads = c.kv_heads;
  p.head_size = c.head_size;
  p.block_size = c.block_size;
  p.num_slots = slots;
  p.key = key.data();
  p.key_strides = {token_stride, head_stride};
  p.value = value.data();
  p.value_strides = {token_stride, head_stride};
  p.key_cache = kc.data();
  p.key_cache_block_stride = block;
  p.value_cache = vc.data();
  p.value_cache_block_stride = block;
  GuardedArray<int64_t> guarded_slots(slot);  // ends at a guard page: no slot read past the last token
  ASSERT_TRUE(guarded_slots.ok());
  p.slot_mapping = guarded_slots.data();
  p.slot_stride = 1;
  p.stream_out = stream;
  for (int s = 0; s < splits; ++s) {
    const int64_t begin = c.tokens * s / splits, end = c.tokens * (s + 1) / splits;
    ASSERT_TRUE(reshape_and_cache(p, begin, end).is_ok());
  }
  EXPECT_EQ(kc, want_k);
  EXPECT_EQ(vc, want_v);
  EXPECT_EQ(key, key_before);
  EXPECT_EQ(value, value_before);
}

TEST(CpuKvCacheKernel, CopiesBitsIntoTheAddressedSlotsOnEveryTarget) {
  std::mt19937 rng(7);
  const std::vector<Case> cases = {
      {DType::kBFloat16, 37, 8, 128, 16, 4},      {DType::kFloat16, 37, 1, 80, 32, 2},
      {DType::kFloat32, 21, 2, 96, 16, 3},        {DType::kBFloat16, 13, 1, 256, 16, 1},
      {DType::kFloat32, 9, 3, 1, 4, 4},           {DType::kFloat16, 40, 2, 3, 8, 6},
      {DType::kBFloat16, 17, 2, 67, 16, 2, 5, 0}, {DType::kFloat32, 17, 4, 64, 16, 2, 0, 24},
      {DType::kFloat16, 25, 8, 64, 16, 3, 8, 40}, {DType::kBFloat16, 1, 8, 128, 16, 1},
      {DType::kBFloat16, 37, 8, 128, 16, 4, 0, 0, true}, {DType::kFloat32, 40, 2, 64, 8, 6, 0, 24, true},
      {DType::kFloat16, 33, 1, 80, 4, 10, 0, 0, true},   {DType::kBFloat16, 30, 2, 67, 16, 2, 5, 0, true},
      {DType::kFloat16, 50, 3, 5, 4, 13, 0, 6, true},
  };
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (const Case& c : cases) {
      for (bool stream : {false, true}) RunCase(c, stream, stream ? 1 : 3, rng);
    }
  }
}

// Rows and the slot mapping that end right before an inaccessible page: no read or write past a
// row, no slot read past the last token.
TEST(CpuKvCacheKernel, NoAccessPastTheRows) {
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (int64_t head_size : {1, 7, 64, 67, 128}) {
      const size_t bytes = static_cast<size_t>(head_size) * 2;
      GuardedRegion key(bytes), value(bytes), kc(bytes), vc(bytes);
      ASSERT_TRUE(key.ok() && value.ok() && kc.ok() && vc.ok());
      std::memset(key.tail(bytes), 0x3c, bytes);
      std::memset(value.tail(bytes), 0x5a, bytes);
      std::memset(kc.tail(bytes), 0, bytes);
      std::memset(vc.tail(bytes), 0, bytes);
      const int64_t slot = 0;
      GuardedArray<int64_t> slots(&slot, 1);  // the slot mapping ends at a guard page too
      ASSERT_TRUE(slots.ok());
      KvCacheParams p;
      p.dtype = DType::kFloat16;
      p.tokens = 1;
      p.kv_heads = 1;
      p.head_size = head_size;
      p.block_size = 1;
      p.num_slots = 1;
      p.key = key.tail(bytes);
      p.value = value.tail(bytes);
      p.key_cache = kc.tail(bytes);
      p.value_cache = vc.tail(bytes);
      p.slot_mapping = slots.data();
      ASSERT_TRUE(reshape_and_cache(p, 0, 1).is_ok());
      EXPECT_EQ(std::memcmp(kc.tail(bytes), key.tail(bytes), bytes), 0);
      EXPECT_EQ(std::memcmp(vc.tail(bytes), value.tail(bytes), bytes), 0);
    }
  }
}

TEST(CpuKvCacheKernel, RejectsWhatTheBridgeMustNotPass) {
  const int64_t slot = 0;
  float buf[16] = {};
  const KvCacheParams good = OneSlotKvCache(DType::kFloat32, 4, buf, buf + 4, buf + 8, &slot);
  EXPECT_TRUE(reshape_and_cache(good, 0, 1).is_ok());
  EXPECT_TRUE(reshape_and_cache(good, 0, 0).is_ok());
  KvCacheParams p = good;
  p.dtype = static_cast<DType>(9);
  EXPECT_FALSE(reshape_and_cache(p, 0, 1).is_ok());
  p = good;
  p.head_size = 0;
  EXPECT_FALSE(reshape_and_cache(p, 0, 1).is_ok());
  p = good;
  p.block_size = 0;
  EXPECT_FALSE(reshape_and_cache(p, 0, 1).is_ok());
  EXPECT_FALSE(reshape_and_cache(good, 0, 2).is_ok());
  EXPECT_FALSE(reshape_and_cache(good, 1, 0).is_ok());
  p = good;
  p.slot_mapping = nullptr;
  EXPECT_FALSE(reshape_and_cache(p, 0, 1).is_ok());
  p = good;
  p.key_cache = nullptr;
  EXPECT_FALSE(reshape_and_cache(p, 0, 1).is_ok());
}

}  // namespace
}  // namespace xllm_kernel::cpu
