// csrc/cpu/copy: the non-temporal copy copies exactly, for any size and alignment, and touches
// nothing outside the destination range.
#include "csrc/cpu/copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

namespace xllm_kernel::cpu {
namespace {

TEST(StreamCopy, CopiesEveryByteAtAnyAlignment) {
  constexpr size_t kGuard = 80;
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{64}, size_t{255},
                       size_t{4 * 64 + 5}, size_t{(1 << 20) + 7}}) {
    for (size_t dst_off : {0, 1, 7, 32, 63}) {
      for (size_t src_off : {0, 3, 16}) {
        std::vector<uint8_t> src(bytes + kGuard), dst(bytes + 2 * kGuard, 0xA5);
        std::iota(src.begin(), src.end(), uint8_t{1});
        stream_copy(dst.data() + kGuard + dst_off, src.data() + src_off, bytes);
        const uint8_t* out = dst.data() + kGuard + dst_off;
        size_t wrong = 0, outside = 0;
        for (size_t i = 0; i < bytes; ++i) wrong += out[i] != src[src_off + i];
        for (size_t i = 0; i < dst.size(); ++i) {
          const bool inside = i >= kGuard + dst_off && i < kGuard + dst_off + bytes;
          if (!inside) outside += dst[i] != 0xA5;
        }
        EXPECT_EQ(wrong, 0u) << bytes << " bytes, dst offset " << dst_off << ", src offset " << src_off;
        EXPECT_EQ(outside, 0u) << bytes << " bytes, dst offset " << dst_off << ": bytes outside were written";
      }
    }
  }
}

}  // namespace
}  // namespace xllm_kernel::cpu
