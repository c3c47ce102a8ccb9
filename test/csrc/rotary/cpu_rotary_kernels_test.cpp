// Torch-free tests of csrc/cpu/rotary: the kernel against a float64 reference on every Highway
// target this CPU can run, every dtype and cache dtype, NeoX and GPT-J, partial rotary, head sizes
// whose halves are not a multiple of the vector width, query and key as slices of one fused qkv
// buffer (GQA, padded heads, no key); everything outside the rotated elements bitwise unchanged,
// out-of-range positions skipped, split token ranges, no access past the last head or cache row,
// NaN propagation, and the kernel's defensive parameter checks.
#include "csrc/cpu/rotary/rotary.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "test/csrc/common/cpu_test_support.h"

namespace xllm_kernel::cpu {
namespace {

using namespace test;  // NOLINT: the test helpers

constexpr double kU32 = 0x1p-24;  // float32 unit roundoff

// A layout of query and key inside one buffer per token (a fused qkv row):
// [query heads (query_head_stride apart) | key heads (key_head_stride apart) | pad].
struct Shape {
  int64_t head_size = 64, rot_dim = 64;
  int64_t query_heads = 4, key_heads = 2;  // key_heads 0: no key
  int64_t head_pad = 0;                    // extra elements between heads
  int64_t tokens = 5;
  int64_t max_position = 37;
  int64_t position_stride = 1;
};

struct Buffers {
  DType dtype;
  DType cache_dtype;
  bool neox;
  Shape s;
  std::vector<unsigned char> qkv, cache;
  std::vector<int64_t> positions;
  RotaryParams p;

  Buffers(DType t, DType c, bool neox_in, Shape shape, uint32_t seed) : dtype(t), cache_dtype(c), neox(neox_in), s(shape) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    const int64_t hs = s.head_size + s.head_pad;
    const int64_t row = (s.query_heads + s.key_heads) * hs + 3;
    qkv.resize(static_cast<size_t>(s.tokens * row + 1) * ElemSize(t));
    for (int64_t i = 0; i < s.tokens * row + 1; ++i) Store(t, qkv.data(), i, normal(rng));
    // A real cos/sin table: angle pos * base^(-2i / rot_dim), base 10000.
    const int64_t half = s.rot_dim / 2, cache_stride = s.rot_dim + 2;
    cache.resize(static_cast<size_t>(s.max_position * cache_stride) * ElemSize(c));
    for (int64_t pos = 0; pos < s.max_position; ++pos) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(pos) * std::pow(10000.0, -2.0 * static_cast<double>(i) / s.rot_dim);
        Store(c, cache.data(), pos * cache_stride + i, static_cast<float>(std::cos(angle)));
        Store(c, cache.data(), pos * cache_stride + half + i, static_cast<float>(std::sin(angle)));
      }
    }
    std::uniform_int_distribution<int64_t> position(0, s.max_position - 1);
    positions.assign(static_cast<size_t>(std::max<int64_t>(s.tokens, 1) * s.position_stride), -7);
    for (int64_t t2 = 0; t2 < s.tokens; ++t2) positions[t2 * s.position_stride] = position(rng);

    p.dtype = t;
    p.cache_dtype = c;
    p.tokens = s.tokens;
    p.head_size = s.head_size;
    p.rot_dim = s.rot_dim;
    p.is_neox = neox;
    p.positions = positions.data();
    p.position_stride = s.position_stride;
    p.cos_sin_cache = cache.data();
    p.cache_stride = cache_stride;
    p.max_position = s.max_position;
    p.query = qkv.data() + ElemSize(t);  // one element in: rows not aligned to the vector width
    p.query_heads = s.query_heads;
    p.query_token_stride = row;
    p.query_head_stride = hs;
    if (s.key_heads > 0) {
      p.key = static_cast<unsigned char*>(p.query) + s.query_heads * hs * ElemSize(t);
      p.key_heads = s.key_heads;
      p.key_token_stride = row;
      p.key_head_stride = hs;
    }
  }

  // Element index in qkv of element j of head h (key heads follow the query heads) of token t.
  int64_t index(int64_t t, int64_t h, int64_t j) const { return 1 + t * p.query_token_stride + h * p.query_head_stride + j; }
};

// Checks every element of `after` against `before` and the float64 rotation; returns failures.
int Verify(const Buffers& su, const std::vector<unsigned char>& before, const std::vector<unsigned char>& after,
           const std::vector<bool>& skipped_token = {}) {
  const DType t = su.dtype;
  const int64_t n = static_cast<int64_t>(before.size() / ElemSize(t));
  std::vector<bool> rotated(static_cast<size_t>(n), false);
  const int64_t half = su.s.rot_dim / 2, heads = su.s.query_heads + su.s.key_heads;
  const double u = t == DType::kFloat32 ? 0.0 : Roundoff(t);
  int failures = 0;
  for (int64_t tok = 0; tok < su.s.tokens; ++tok) {
    if (!skipped_token.empty() && skipped_token[tok]) continue;
    const int64_t pos = su.positions[tok * su.s.position_stride];
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < half; ++i) {
        const int64_t j1 = su.neox ? i : 2 * i, j2 = su.neox ? half + i : 2 * i + 1;
        const int64_t a = su.index(tok, h, j1), b = su.index(tok, h, j2);
        const double x1 = Load(t, before.data(), a), x2 = Load(t, before.data(), b);
        const double c = Load(su.cache_dtype, su.cache.data(), pos * su.p.cache_stride + i);
        const double s = Load(su.cache_dtype, su.cache.data(), pos * su.p.cache_stride + half + i);
        const double want[2] = {x1 * c - x2 * s, x2 * c + x1 * s};
        // |x1 c| + |x2 s| for the first member, |x2 c| + |x1 s| for the second.
        const double m[2] = {std::fabs(x1 * c) + std::fabs(x2 * s), std::fabs(x2 * c) + std::fabs(x1 * s)};
        const int64_t at[2] = {a, b};
        for (int k = 0; k < 2; ++k) {
          const double f32 = 2 * kU32 * m[k] * (1 + 0x1p-20);
          rotated[at[k]] = true;
          const double got = Load(t, after.data(), at[k]);
          const double bound = f32 + u * (std::fabs(want[k]) + f32) + SubnormalHalfSpacing(t);
          if (!(std::fabs(got - want[k]) <= bound) && ++failures <= 5) {
            ADD_FAILURE() << "token " << tok << " head " << h << " pair " << i << " member " << k << ": got " << got
                          << ", want " << want[k] << ", bound " << bound;
          }
        }
      }
    }
  }
  for (int64_t e = 0; e < n; ++e) {
    if (!rotated[e] && LoadBits(t, before.data(), e) != LoadBits(t, after.data(), e) && ++failures <= 5) {
      ADD_FAILURE() << "element " << e << " is outside the rotated elements but changed";
    }
  }
  return failures;
}

struct Named {
  const char* name;
  Shape shape;
};

std::vector<Named> Shapes() {
  std::vector<Named> out;
  const int64_t sizes[][2] = {{64, 64}, {80, 40}, {96, 96}, {128, 64}, {256, 256}, {6, 2}, {18, 18}, {40, 34}};
  for (const auto& [hs, rot] : sizes) {
    Shape s;
    s.head_size = hs;
    s.rot_dim = rot;
    out.push_back({"gqa", s});
    s.query_heads = 3;
    s.key_heads = 0;
    s.head_pad = 5;
    s.position_stride = 2;
    out.push_back({"padded heads, no key, strided positions", s});
  }
  return out;
}

std::vector<DType> CacheDTypes(DType t) {
  return t == DType::kFloat32 ? std::vector<DType>{DType::kFloat32} : std::vector<DType>{DType::kFloat32, t};
}

TEST(RotaryKernel, MatchesReferenceAndTouchesNothingElseOnEveryTarget) {
  uint32_t seed = 1;
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      for (DType c : CacheDTypes(t)) {
        for (bool neox : {true, false}) {
          for (const Named& n : Shapes()) {
            SCOPED_TRACE(std::string(hwy::TargetName(target)) + " " + ShortName(t) + " cache " + ShortName(c) +
                         (neox ? " neox " : " gptj ") + n.name + " head_size " + std::to_string(n.shape.head_size) +
                         " rot_dim " + std::to_string(n.shape.rot_dim));
            Buffers su(t, c, neox, n.shape, seed++);
            const std::vector<unsigned char> before = su.qkv;
            ASSERT_TRUE(rotary_embedding(su.p, 0, su.s.tokens).is_ok());
            ASSERT_EQ(Verify(su, before, su.qkv), 0);
          }
        }
      }
    }
  }
}

TEST(RotaryKernel, SplitTokenRangesGiveTheSameBits) {
  for (bool neox : {true, false}) {
    Shape s;
    s.tokens = 9;
    s.rot_dim = 32;
    Buffers whole(DType::kBFloat16, DType::kFloat32, neox, s, 7), split(DType::kBFloat16, DType::kFloat32, neox, s, 7);
    ASSERT_TRUE(rotary_embedding(whole.p, 0, 9).is_ok());
    for (auto [b, e] : {std::pair<int64_t, int64_t>{4, 9}, {0, 1}, {1, 4}, {3, 3}}) {
      ASSERT_TRUE(rotary_embedding(split.p, b, e).is_ok());
    }
    EXPECT_EQ(whole.qkv, split.qkv);
  }
}

TEST(RotaryKernel, OutOfRangePositionsLeaveTheirTokensUnchanged) {
  for (bool neox : {true, false}) {
    Shape s;
    s.tokens = 4;
    Buffers su(DType::kFloat16, DType::kFloat16, neox, s, 3);
    su.positions[1] = -1;
    su.positions[3] = s.max_position;  // one past the last row
    const std::vector<unsigned char> before = su.qkv;
    ASSERT_TRUE(rotary_embedding(su.p, 0, s.tokens).is_ok());
    EXPECT_EQ(Verify(su, before, su.qkv, {false, true, false, true}), 0);
  }
}

// The last head ends right before an inaccessible page, and so do the last cache row and the
// positions: a read or write past any of them crashes. Head sizes whose pair counts are not
// multiples of the vector width.
TEST(RotaryKernel, NoAccessPastTheLastHeadOrCacheRow) {
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      for (bool neox : {true, false}) {
        for (int64_t rot : {2, 6, 34, 64}) {
          SCOPED_TRACE(std::string(hwy::TargetName(target)) + " " + ShortName(t) + (neox ? " neox" : " gptj") +
                       " rot_dim " + std::to_string(rot));
          const size_t es = ElemSize(t);
          GuardedRegion xs(rot * es), cs(rot * 4);
          ASSERT_TRUE(xs.ok() && cs.ok());
          void* x = xs.tail(rot * es);
          float* cache = reinterpret_cast<float*>(cs.tail(rot * 4));
          for (int64_t i = 0; i < rot; ++i) {
            Store(t, x, i, static_cast<float>(i + 1));
            cache[i] = i < rot / 2 ? 0.0f : 1.0f;  // cos 0, sin 1: a quarter turn
          }
          const int64_t position = 0;
          GuardedArray<int64_t> positions(&position, 1);  // the positions end at a guard page too
          ASSERT_TRUE(positions.ok());
          RotaryParams p;
          p.dtype = t;
          p.cache_dtype = DType::kFloat32;
          p.tokens = 1;
          p.head_size = rot;
          p.rot_dim = rot;
          p.is_neox = neox;
          p.positions = positions.data();
          p.cos_sin_cache = cache;
          p.cache_stride = rot;
          p.max_position = 1;
          p.query = x;
          p.query_heads = 1;
          p.query_token_stride = rot;
          p.query_head_stride = rot;
          ASSERT_TRUE(rotary_embedding(p, 0, 1).is_ok());
          // A quarter turn: (x1, x2) -> (-x2, x1), exact.
          const int64_t half = rot / 2;
          for (int64_t i = 0; i < half; ++i) {
            const int64_t a = neox ? i : 2 * i, b = neox ? half + i : 2 * i + 1;
            EXPECT_EQ(Load(t, x, a), -static_cast<double>(b + 1)) << i;
            EXPECT_EQ(Load(t, x, b), static_cast<double>(a + 1)) << i;
          }
        }
      }
    }
  }
}

TEST(RotaryKernel, NanPropagatesToBothMembersOfItsPair) {
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (bool neox : {true, false}) {
      Shape s;
      s.tokens = 1;
      s.key_heads = 0;
      s.query_heads = 1;
      s.head_size = s.rot_dim = 16;
      Buffers su(t, DType::kFloat32, neox, s, 5);
      Store(t, su.qkv.data(), su.index(0, 0, 0), NAN);
      ASSERT_TRUE(rotary_embedding(su.p, 0, 1).is_ok());
      const int64_t partner = neox ? 8 : 1;
      EXPECT_TRUE(std::isnan(Load(t, su.qkv.data(), su.index(0, 0, 0)))) << ShortName(t);
      EXPECT_TRUE(std::isnan(Load(t, su.qkv.data(), su.index(0, 0, partner)))) << ShortName(t);
      EXPECT_FALSE(std::isnan(Load(t, su.qkv.data(), su.index(0, 0, neox ? 1 : 2)))) << ShortName(t);
    }
  }
}

// A float32 cache NaN whose payload fills the low bits (rounding it to bf16 like a number would
// carry into the sign or give -0): both members of its pair are NaN in every dtype, on every target.
TEST(RotaryKernel, CacheNanWithAFullPayloadStaysNan) {
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      for (bool neox : {true, false}) {
        SCOPED_TRACE(std::string(hwy::TargetName(target)) + " " + ShortName(t) + (neox ? " neox" : " gptj"));
        Shape s;
        s.tokens = 1;
        s.key_heads = 0;
        s.query_heads = 2;
        s.head_size = s.rot_dim = 40;  // 20 pairs: a full even/odd block and a tail on AVX2
        Buffers su(t, DType::kFloat32, neox, s, 9);
        const int64_t half = s.rot_dim / 2, row = su.positions[0] * su.p.cache_stride;
        const uint32_t nan_bits[] = {0x7FFFFFFFu, 0xFFBFFFFFu};  // quiet and signaling, every low bit set
        const int64_t nan_at[] = {3, half + 18};                   // cos of pair 3, sin of pair 18
        for (int k = 0; k < 2; ++k) std::memcpy(su.cache.data() + 4 * (row + nan_at[k]), &nan_bits[k], 4);
        ASSERT_TRUE(rotary_embedding(su.p, 0, 1).is_ok());
        for (int64_t h = 0; h < s.query_heads; ++h) {
          for (int64_t i = 0; i < half; ++i) {
            const bool nan_pair = i == 3 || i == 18;
            for (int64_t j : {neox ? i : 2 * i, neox ? half + i : 2 * i + 1}) {
              EXPECT_EQ(std::isnan(Load(t, su.qkv.data(), su.index(0, h, j))), nan_pair) << "head " << h << " element " << j;
            }
          }
        }
      }
    }
  }
}

TEST(RotaryKernel, RejectsParametersABridgeMustNotPass) {
  Shape s;
  Buffers good(DType::kFloat32, DType::kFloat32, true, s, 1);
  ASSERT_TRUE(rotary_embedding(good.p, 0, s.tokens).is_ok());
  struct Bad {
    const char* what;
    void (*edit)(RotaryParams&);
  };
  const Bad cases[] = {
      {"unknown dtype", [](RotaryParams& p) { p.dtype = static_cast<DType>(7); }},
      {"cache dtype", [](RotaryParams& p) { p.cache_dtype = DType::kBFloat16; }},
      {"odd rot_dim", [](RotaryParams& p) { p.rot_dim = 63; }},
      {"rot_dim 0", [](RotaryParams& p) { p.rot_dim = 0; }},
      {"rot_dim > head_size", [](RotaryParams& p) { p.rot_dim = 66; }},
      {"no query heads", [](RotaryParams& p) { p.query_heads = 0; }},
      {"key heads without key", [](RotaryParams& p) { p.key = nullptr; }},
      {"range past tokens", [](RotaryParams& p) { p.tokens = 2; }},
      {"null positions", [](RotaryParams& p) { p.positions = nullptr; }},
      {"negative max_position", [](RotaryParams& p) { p.max_position = -1; }},
  };
  for (const Bad& b : cases) {
    RotaryParams p = good.p;
    b.edit(p);
    const Status st = rotary_embedding(p, 0, s.tokens);
    EXPECT_EQ(st, Status::kInvalidArgument) << b.what;
    EXPECT_NE(std::string(st.reason).find("rotary_embedding"), std::string::npos) << b.what;
  }
  // An empty range needs no pointers.
  RotaryParams empty = good.p;
  empty.positions = nullptr;
  empty.query = nullptr;
  EXPECT_TRUE(rotary_embedding(empty, 2, 2).is_ok());
}

}  // namespace
}  // namespace xllm_kernel::cpu
