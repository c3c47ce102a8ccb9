// Torch-free host tests of csrc/cuda/rotary: every block and thread of the launch plans that
// plan_rotary picks runs on the CPU (kernels::run_block, the same code the device runs), in the
// variant the launcher would pick, against a float64 reference written here: every dtype and cache
// dtype, NeoX and GPT-J, partial rotary, fused qkv slices (GQA, no key, padded heads), misaligned
// layouts (scalar path), out-of-range positions (the token's rows untouched, no store), grids
// smaller than the token count. The host build's store observer checks that every rotated element
// is stored exactly once and nothing else is, in 16-byte stores exactly on the vector path (the
// host load16/store16 throw on a misaligned address). Also the plan's rules and the launcher's
// argument checks (which need no GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "csrc/cuda/rotary/rotary.cuh"
#include "csrc/cuda/rotary/rotary.h"
#include "test/cuda/common/host_buffers.h"
#include "test/cuda/element_codec.h"
#include "test/cuda/launcher_status.h"

namespace xllm_kernel::cuda {
namespace {

constexpr DType kDTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

size_t size_of(DType t) { return static_cast<size_t>(::xllm_kernel::kernels::element_size(t)); }

// Element i of a buffer of t (element_codec.h: CUDA's host conversions, not the kernels' bit decoding).
double get(const void* base, DType t, int64_t i) {
  return to_double(static_cast<const char*>(base) + i * static_cast<int64_t>(size_of(t)), t);
}

void set(void* base, DType t, int64_t i, double v) {
  from_double(static_cast<char*>(base) + i * static_cast<int64_t>(size_of(t)), t, v);
}

// ---- one case ----

struct Case {
  DType dtype = DType::kBFloat16;
  bool cache_f32 = true;
  bool neox = true;
  int64_t head_size = 128, rot_dim = 128;
  int64_t heads = 4, kv_heads = 2;  // kv_heads 0: no key
  int64_t tokens = 5;
  int64_t head_pad = 0;  // elements between heads
  int64_t offset = 0;    // the qkv buffer's first element (1: misaligned)
  int sm_count = 132;
  int64_t grid = 0;      // > 0: run with this grid instead of the plan's
  std::vector<int64_t> bad_tokens;  // tokens given out-of-range positions

  std::string describe() const {
    return std::string(name_of(dtype)) + (cache_f32 ? " cache f32" : " cache dtype") + (neox ? " neox" : " gptj") +
           " head_size=" + std::to_string(head_size) + " rot_dim=" + std::to_string(rot_dim) + " heads=" +
           std::to_string(heads) + "/" + std::to_string(kv_heads) + " tokens=" + std::to_string(tokens) +
           " pad=" + std::to_string(head_pad) + " offset=" + std::to_string(offset) +
           (grid > 0 ? " grid=" + std::to_string(grid) : "");
  }
};

bool run_plan(const kernels::RotaryArgs& args, int64_t grid) {
  if (grid <= 0) grid = args.plan.blocks;
  return kernels::dispatch_rotary(args, false, [&](auto variant) {
    using V = decltype(variant);
    for (int64_t block = 0; block < grid; ++block)
      for (int t = 0; t < args.plan.threads; ++t)
        kernels::run_block<typename V::type, typename V::cache_type, V::neox, V::piece>(args, block, grid, t);
    return true;
  });
}

void check_case(const Case& c, std::mt19937& rng) {
  SCOPED_TRACE(c.describe());
  const DType t = c.dtype, ct = c.cache_f32 ? DType::kFloat32 : c.dtype;
  const int64_t hs = c.head_size + c.head_pad, all_heads = c.heads + c.kv_heads;
  const int64_t row = (all_heads + c.kv_heads) * hs;  // a fused qkv row: q, k, v
  const int64_t elements = c.offset + c.tokens * row;
  AlignedBytes qkv(elements * size_of(t) + 64);
  std::normal_distribution<double> normal(0.0, 2.0);
  for (int64_t i = 0; i < elements; ++i) set(qkv.get(), t, i, normal(rng));
  const std::vector<unsigned char> before(qkv.get(), qkv.get() + qkv.size());

  const int64_t max_position = 50, half = c.rot_dim / 2, cache_stride = c.rot_dim + 8;
  AlignedBytes cache(max_position * cache_stride * size_of(ct));
  for (int64_t pos = 0; pos < max_position; ++pos) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(pos) * std::pow(10000.0, -2.0 * static_cast<double>(i) / c.rot_dim);
      set(cache.get(), ct, pos * cache_stride + i, std::cos(angle));
      set(cache.get(), ct, pos * cache_stride + half + i, std::sin(angle));
    }
  }
  std::vector<int64_t> positions(std::max<int64_t>(c.tokens, 1));
  std::uniform_int_distribution<int64_t> position(0, max_position - 1);
  for (int64_t& p : positions) p = position(rng);
  std::vector<bool> bad(positions.size(), false);
  for (size_t k = 0; k < c.bad_tokens.size(); ++k) {
    const int64_t tok = c.bad_tokens[k];
    positions[tok] = k % 2 == 0 ? max_position : -3;
    bad[tok] = true;
  }

  RotaryParams p;
  p.dtype = t;
  p.cache_dtype = ct;
  p.tokens = c.tokens;
  p.head_size = c.head_size;
  p.rot_dim = c.rot_dim;
  p.is_neox = c.neox;
  p.positions = positions.data();
  p.cos_sin_cache = cache.get();
  p.cache_stride = cache_stride;
  p.max_position = max_position;
  auto* base = qkv.get() + c.offset * size_of(t);
  p.query = base;
  p.query_heads = c.heads;
  p.query_token_stride = row;
  p.query_head_stride = hs;
  if (c.kv_heads > 0) {
    p.key = base + c.heads * hs * size_of(t);
    p.key_heads = c.kv_heads;
    p.key_token_stride = row;
    p.key_head_stride = hs;
  }
  kernels::RotaryArgs args;
  args.p = p;
  args.plan = plan_rotary(p, c.sm_count);
  const int64_t vec = 16 / static_cast<int64_t>(size_of(t));
  const int64_t span = c.neox ? half : c.rot_dim;
  const bool want_vector = c.offset * size_of(t) % 16 == 0 && span % vec == 0 && hs % vec == 0;
  ASSERT_EQ(args.plan.vector, want_vector);
  ASSERT_EQ(vector_access(p), want_vector);

  StoreLog log(qkv.get(), qkv.size());
  bool ran = false;
  {
    StoreObserverScope observe(log);
    EXPECT_NO_THROW(ran = run_plan(args, c.grid));
  }
  ASSERT_TRUE(ran) << "no kernel variant for the plan";
  EXPECT_EQ(log.elsewhere, 0) << "stores outside the qkv buffer";
  // The observer sees one call per store<N>: 16 bytes (vector), one element (NeoX) or one pair (GPT-J).
  const size_t access = args.plan.vector ? 16 : (c.neox ? 1 : 2) * size_of(t);
  for (size_t s = 1; s <= 16; ++s) {
    if (s != access) EXPECT_EQ(log.by_size[s], 0) << "stores of " << s << " bytes";
  }

  // Each rotated element stored once and within the bound; every other byte stored never and unchanged.
  const double u = t == DType::kFloat32 ? 0.0 : t == DType::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  std::vector<char> rotated(log.bytes, 0);
  int failures = 0;
  for (int64_t tok = 0; tok < c.tokens; ++tok) {
    if (bad[tok]) continue;
    const int64_t pos = positions[tok];
    for (int64_t h = 0; h < all_heads; ++h) {
      for (int64_t i = 0; i < half; ++i) {
        const int64_t e1 = c.offset + tok * row + h * hs + (c.neox ? i : 2 * i);
        const int64_t e2 = c.offset + tok * row + h * hs + (c.neox ? half + i : 2 * i + 1);
        const double x1 = get(before.data(), t, e1), x2 = get(before.data(), t, e2);
        const double cs = get(cache.get(), ct, pos * cache_stride + i);
        const double sn = get(cache.get(), ct, pos * cache_stride + half + i);
        const double want[2] = {x1 * cs - x2 * sn, x2 * cs + x1 * sn};
        // |x1 c| + |x2 s| for the first member, |x2 c| + |x1 s| for the second.
        const double terms[2] = {std::fabs(x1 * cs) + std::fabs(x2 * sn), std::fabs(x2 * cs) + std::fabs(x1 * sn)};
        const int64_t at[2] = {e1, e2};
        for (int k = 0; k < 2; ++k) {
          const double f32 = 2 * std::ldexp(1.0, -24) * terms[k] * (1 + 0x1p-20);
          for (size_t b = 0; b < size_of(t); ++b) rotated[at[k] * size_of(t) + b] = 1;
          const double got = get(qkv.get(), t, at[k]);
          const double bound = f32 + u * (std::fabs(want[k]) + f32) + std::ldexp(1.0, -133);
          if (!(std::fabs(got - want[k]) <= bound) && ++failures <= 5) {
            ADD_FAILURE() << "token " << tok << " head " << h << " pair " << i << ": got " << got << ", want "
                          << want[k] << ", bound " << bound;
          }
        }
      }
    }
  }
  for (size_t b = 0; b < log.bytes && failures <= 5; ++b) {
    const int want = rotated[b] ? 1 : 0;
    if (log.count[b] != want) {
      ADD_FAILURE() << "byte " << b << " stored " << log.count[b] << " times, want " << want;
      ++failures;
    }
    if (!rotated[b] && qkv.get()[b] != before[b]) {
      ADD_FAILURE() << "byte " << b << " outside the rotated elements changed";
      ++failures;
    }
  }
}

TEST(RotaryKernelsHost, EveryDtypeLayoutAndPathMatchesTheReference) {
  std::mt19937 rng(11);
  const int64_t sizes[][2] = {{64, 64}, {80, 40}, {96, 96}, {128, 64}, {128, 128}, {256, 256}, {6, 2}, {18, 18}};
  for (DType t : kDTypes) {
    for (bool cache_f32 : {true, false}) {
      if (t == DType::kFloat32 && !cache_f32) continue;
      for (bool neox : {true, false}) {
        for (const auto& [hs, rot] : sizes) {
          Case c;
          c.dtype = t;
          c.cache_f32 = cache_f32;
          c.neox = neox;
          c.head_size = hs;
          c.rot_dim = rot;
          check_case(c, rng);  // aligned: the vector path where the pieces fill 16 bytes
          c.offset = 1;        // misaligned: the scalar path
          c.kv_heads = 0;
          check_case(c, rng);
          c.offset = 0;
          c.head_pad = 3;      // padded heads: head stride not a multiple of 16 bytes
          c.kv_heads = 1;
          check_case(c, rng);
        }
      }
    }
  }
}

TEST(RotaryKernelsHost, OutOfRangePositionsLeaveTheirTokensUnstored) {
  std::mt19937 rng(12);
  for (DType t : kDTypes) {
    for (bool neox : {true, false}) {
      Case c;
      c.dtype = t;
      c.neox = neox;
      c.tokens = 6;
      c.bad_tokens = {1, 4};  // max_position and -3
      check_case(c, rng);
    }
  }
}

TEST(RotaryKernelsHost, AnyGridCoversEveryToken) {
  std::mt19937 rng(13);
  for (int64_t grid : {1, 2, 3, 7}) {
    Case c;
    c.tokens = 11;
    c.grid = grid;
    c.heads = 8;
    c.kv_heads = 1;
    check_case(c, rng);
    c.neox = false;
    check_case(c, rng);
  }
}

TEST(RotaryKernelsHost, PlanRules) {
  RotaryParams p;
  p.dtype = DType::kBFloat16;
  p.tokens = 8192;
  p.head_size = p.rot_dim = 128;
  int64_t dummy[1] = {0};
  alignas(16) static unsigned char memory[64];
  p.positions = dummy;
  p.cos_sin_cache = memory;
  p.cache_stride = 128;
  p.max_position = 1;
  p.query = memory;
  p.query_heads = 32;
  p.query_token_stride = 48 * 128;
  p.query_head_stride = 128;
  p.key = memory + 16;
  p.key_heads = 8;
  p.key_token_stride = 48 * 128;
  p.key_head_stride = 128;
  RotaryPlan plan = plan_rotary(p, 132);
  EXPECT_TRUE(plan.vector);
  EXPECT_EQ(plan.piece, 8);
  EXPECT_EQ(plan.pieces_per_head, 8);  // half = 64 pairs, 8 per piece
  EXPECT_EQ(plan.pieces_per_token, 40 * 8);
  EXPECT_EQ(plan.threads, 256);
  EXPECT_EQ(plan.blocks, 8192);  // 132 SMs * 8 blocks * 16 waves > 8192
  p.is_neox = false;
  plan = plan_rotary(p, 132);
  EXPECT_EQ(plan.pieces_per_head, 16);  // 128 elements, 8 per piece
  p.tokens = 1;
  p.query_heads = 8;
  p.key_heads = 1;
  plan = plan_rotary(p, 132);
  EXPECT_EQ(plan.threads, 160);  // 9 heads * 16 pieces, rounded up to a warp
  EXPECT_EQ(plan.blocks, 1);
  p.tokens = int64_t{1} << 40;
  plan = plan_rotary(p, 2);
  EXPECT_EQ(plan.blocks, 2 * 12 * 16);  // 2048 / 160 = 12 resident blocks per SM, 16 waves
  p.key = memory + 2;  // misaligned key: the scalar path, pairs for GPT-J
  plan = plan_rotary(p, 132);
  EXPECT_FALSE(plan.vector);
  EXPECT_EQ(plan.piece, 2);
  p.is_neox = true;
  EXPECT_EQ(plan_rotary(p, 132).piece, 1);
  p.tokens = 0;
  EXPECT_EQ(plan_rotary(p, 132).blocks, 0);
}

TEST(RotaryKernelsHost, LauncherRejectsWhatTheKernelCannotHandle) {
  int64_t position = 0;
  alignas(16) static unsigned char memory[1024];
  RotaryParams good;
  good.tokens = 1;
  good.head_size = good.rot_dim = 8;
  good.positions = &position;
  good.cos_sin_cache = memory;
  good.cache_stride = 8;
  good.max_position = 1;
  good.query = memory + 256;
  good.query_heads = 1;
  good.query_token_stride = 8;
  good.query_head_stride = 8;
  ASSERT_EQ(plan_rotary(good, 1).threads, 32);
  // What is wrong, and what the launcher's reason says.
  const std::tuple<const char*, void (*)(RotaryParams&), const char*> cases[] = {
      {"dtype", [](RotaryParams& p) { p.dtype = static_cast<DType>(9); }, "unknown dtype"},
      {"cache dtype", [](RotaryParams& p) { p.cache_dtype = DType::kFloat16; }, "cache dtype"},  // query float32
      {"odd rot_dim", [](RotaryParams& p) { p.rot_dim = 7; }, "rot_dim must be even"},
      {"rot_dim > head_size", [](RotaryParams& p) { p.rot_dim = 10; }, "[2, head_size]"},
      {"no query heads", [](RotaryParams& p) { p.query_heads = 0; }, "query needs >= 1 head"},
      {"key heads without key", [](RotaryParams& p) { p.key_heads = 2; }, "key null exactly when"},
      {"null positions", [](RotaryParams& p) { p.positions = nullptr; }, "null positions"},
      {"null cache", [](RotaryParams& p) { p.cos_sin_cache = nullptr; }, "null positions, query or cache"},
      {"negative tokens", [](RotaryParams& p) { p.tokens = -1; }, "tokens must be >= 0"},
      {"negative max_position", [](RotaryParams& p) { p.max_position = -1; }, "max_position"},
      {"pieces per token", [](RotaryParams& p) { p.query_heads = int64_t{1} << 30; }, "2^30 pieces"},
  };
  for (const auto& [what, edit, reason] : cases) {
    RotaryParams p = good;
    edit(p);
    EXPECT_TRUE(rejected(rotary_embedding(p, nullptr), reason)) << what;
    EXPECT_EQ(plan_rotary(p, 1).threads, 0) << what;
  }
  RotaryParams empty = good;
  empty.tokens = 0;
  empty.query = nullptr;
  EXPECT_TRUE(accepted(rotary_embedding(empty, nullptr)));  // nothing to launch, no GPU needed
  // An empty cache ([0, rot_dim], possibly without data): every position is out of range, so no
  // row changes and nothing is launched (no GPU needed); a null cache with positions to read is
  // still rejected (above).
  RotaryParams no_cache = good;
  no_cache.max_position = 0;
  no_cache.cos_sin_cache = nullptr;
  EXPECT_TRUE(accepted(rotary_embedding(no_cache, nullptr)));
  // Valid parameters without a usable device: the runtime's error, nothing launched.
  if (!cuda_device_present()) EXPECT_TRUE(device_failure(rotary_embedding(good, nullptr)));
}

}  // namespace
}  // namespace xllm_kernel::cuda
