// Every registered CPU reshape_and_cache_quant implementation: the bytes and scales it writes
// against the reference (src/ops/kv_cache/suites/quant_reference.h, the scalar host functions of
// csrc/common/quantization.h) bit for bit over layouts, dtypes and random bits (NaN payloads,
// infinities, signed zeros, subnormals); an int8 row is per_token_quant's row, bit for bit; an fp8
// row is the division form, which static_quant's reciprocal form is not; the implementations agree
// byte for byte; argument errors name the operation and the argument, before anything is written;
// and the public API and dispatcher. The numerics suite (reshape_and_cache_quant.cpp) covers the
// shape grid.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "src/ops/kv_cache/suites/quant_reference.h"
#include "test/ops/common/registered.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing {
namespace {

using numerics::kv_cache::division_sensitive_values;
using numerics::kv_cache::fp8_division_form;
using numerics::kv_cache::fp8_reciprocal_form;
using numerics::kv_cache::reference_reshape_and_cache_quant;

constexpr const char* kOperation = "reshape_and_cache_quant";
constexpr float kFp8Scale = 0.0137f;  // not a power of two: its reciprocal is inexact

void call(const std::string& impl, const at::Tensor& key, const at::Tensor& value, at::Tensor key_cache,
          at::Tensor value_cache, const at::Tensor& slots, at::Tensor key_scale, at::Tensor value_scale) {
  function_of<ReshapeAndCacheQuantFn>(impl)(key, value, key_cache, value_cache, slots, key_scale, value_scale);
}

// A tensor of `shape` and `dtype` (float32, bfloat16 or float16) holding random bits.
at::Tensor random_bits(at::IntArrayRef shape, at::ScalarType dtype) {
  if (dtype == at::kFloat) {
    return at::randint(INT32_MIN, INT32_MAX, shape, at::TensorOptions().dtype(at::kInt)).view(dtype);
  }
  return at::randint(INT16_MIN, INT16_MAX, shape, at::TensorOptions().dtype(at::kShort)).view(dtype);
}

// Random bytes as int8 or float8_e4m3fn (NaN bytes included).
at::Tensor random_bytes(at::IntArrayRef shape, at::ScalarType dtype) {
  return at::randint(-128, 128, shape, at::TensorOptions().dtype(at::kChar)).view(dtype);
}

// The bytes of `t`'s whole storage (bitwise comparable).
at::Tensor storage_bytes(const at::Tensor& t) {
  const int64_t n = static_cast<int64_t>(t.storage().nbytes() / t.element_size());
  return t.as_strided({n}, {1}, 0).to(at::kCPU).contiguous().view(at::kByte).clone();
}

// Copies of a's and b's whole storages with their views on them (one copy when they share one), for
// the reference to write.
std::pair<at::Tensor, at::Tensor> views_on_copies(const at::Tensor& a, const at::Tensor& b) {
  auto whole = [](const at::Tensor& t) {
    const int64_t n = static_cast<int64_t>(t.storage().nbytes() / t.element_size());
    return t.as_strided({n}, {1}, 0).clone();
  };
  const at::Tensor wa = whole(a);
  const at::Tensor wb = a.storage().is_alias_of(b.storage()) ? wa : whole(b);
  return {wa.as_strided(a.sizes(), a.strides(), a.storage_offset()),
          wb.as_strided(b.sizes(), b.strides(), b.storage_offset())};
}

// A shape, and the caches and scales of one cache dtype in one layout, holding random old bytes.
struct Shape {
  int64_t tokens, kv_heads, head_size, num_blocks, block_size;
};

struct Layout {
  const char* name;
  bool fused_inputs;  // key, value slices of [tokens, 3, kv_heads, head_size]
  bool head_padding;  // key, value heads head_size + 8 apart
  bool fused_caches;  // caches the halves of [num_blocks, 2, ...]; int8 scales every other block of one
  int64_t misalign;   // inputs, caches and scales start this many elements into their buffer
};

const Layout kLayouts[] = {{"contiguous", false, false, false, 0},
                           {"fused", true, false, true, 0},
                           {"head-padding", false, true, false, 0},
                           {"misaligned", false, false, false, 1}};

struct Caches {
  at::Tensor key_cache, value_cache, key_scale, value_scale;
};

Caches make_caches(const Shape& s, at::ScalarType cache_dtype, const Layout& layout, float key_scale = kFp8Scale,
                   float value_scale = kFp8Scale * 3) {
  Caches c;
  const std::vector<int64_t> cache_shape = {s.num_blocks, s.block_size, s.kv_heads, s.head_size};
  const std::vector<int64_t> scale_shape = {s.num_blocks, s.block_size, s.kv_heads};
  auto numel = [](const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  };
  auto misaligned = [&](const at::Tensor& buffer, const std::vector<int64_t>& shape) {
    return buffer.narrow(0, layout.misalign, numel(shape)).view(shape);
  };
  if (layout.fused_caches) {
    const at::Tensor kv = random_bytes({s.num_blocks, 2, s.block_size, s.kv_heads, s.head_size}, cache_dtype);
    c.key_cache = kv.select(1, 0);
    c.value_cache = kv.select(1, 1);
  } else {
    c.key_cache = misaligned(random_bytes({numel(cache_shape) + layout.misalign}, cache_dtype), cache_shape);
    c.value_cache = misaligned(random_bytes({numel(cache_shape) + layout.misalign}, cache_dtype), cache_shape);
  }
  if (cache_dtype == at::kFloat8_e4m3fn) {
    c.key_scale = at::full({1}, key_scale, at::kFloat);
    c.value_scale = at::scalar_tensor(value_scale, at::kFloat);
  } else if (layout.fused_caches) {
    // Blocks two blocks apart, each scale in its own tensor (InterleavedInt8ScalesAreAccepted puts
    // both in one).
    c.key_scale = random_bits({s.num_blocks, 2, s.block_size, s.kv_heads}, at::kFloat).select(1, 0);
    c.value_scale = random_bits({s.num_blocks, 2, s.block_size, s.kv_heads}, at::kFloat).select(1, 1);
  } else {
    c.key_scale = misaligned(random_bits({numel(scale_shape) + layout.misalign}, at::kFloat), scale_shape);
    c.value_scale = misaligned(random_bits({numel(scale_shape) + layout.misalign}, at::kFloat), scale_shape);
  }
  return c;
}

// Key and value rows in `layout`, of randn values (with a few planted specials) or random bits.
std::pair<at::Tensor, at::Tensor> make_inputs(const Shape& s, at::ScalarType dtype, const Layout& layout, bool bits) {
  auto values = [&](at::IntArrayRef shape) {
    if (bits) return random_bits(shape, dtype);
    return at::randn(shape, at::kFloat).to(dtype);
  };
  at::Tensor key, value;
  if (layout.fused_inputs) {
    const at::Tensor qkv = values({s.tokens, 3, s.kv_heads, s.head_size});
    key = qkv.select(1, 1);
    value = qkv.select(1, 2);
  } else {
    const int64_t pad = layout.head_padding ? 8 : 0, n = s.tokens * s.kv_heads * (s.head_size + pad);
    auto rows = [&] {
      return values({n + layout.misalign})
          .narrow(0, layout.misalign, n)
          .view({s.tokens, s.kv_heads, s.head_size + pad})
          .narrow(2, 0, s.head_size);
    };
    key = rows();
    value = rows();
  }
  if (!bits && s.tokens > 6) {  // a NaN, an infinity, a zero row, a -0 row, a tiny row (random_slots skips token 5)
    for (at::Tensor& rows : {std::ref(key), std::ref(value)}) {
      rows[1][0][s.head_size - 1] = std::numeric_limits<float>::quiet_NaN();
      rows[2][s.kv_heads - 1][0] = -std::numeric_limits<float>::infinity();
      rows[3][0].zero_();
      rows[4][0].fill_(-0.0);
      rows[6][0].copy_(rows[6][0].to(at::kFloat).mul_(std::ldexp(1.0f, -130)));
    }
  }
  return {key, value};
}

// Distinct slots in random order with some -1.
at::Tensor random_slots(int64_t tokens, int64_t slots) {
  at::Tensor perm = at::randperm(slots, at::kLong).narrow(0, 0, tokens).clone();
  for (int64_t t = 0; t < tokens; t += 5) perm[t] = -1;
  return perm;
}

const Shape kShapes[] = {{37, 8, 128, 5, 16}, {9, 1, 80, 2, 32}, {20, 2, 67, 3, 8}, {1, 4, 256, 3, 16}};

TEST(KvCacheQuant, EveryCpuImplementationIsRegistered) {
  const auto names = registered_implementations(kOperation, Device::kCpu);
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu.torch.reshape_and_cache_quant"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu.native.reshape_and_cache_quant"), names.end());
}

class KvCacheQuantImpl : public ::testing::TestWithParam<std::string> {};

// Every layout, input dtype, cache dtype, and values from randn (with specials) and from random
// bits: the whole storage of the caches and scales as the reference writes it, bit for bit (the
// untouched slots and the other halves included); the inputs unchanged.
TEST_P(KvCacheQuantImpl, WritesTheReferenceBitForBitOverLayoutsAndDtypes) {
  at::manual_seed(11);
  for (const Layout& layout : kLayouts) {
    for (const at::ScalarType cache_dtype : {at::kChar, at::kFloat8_e4m3fn}) {
      for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
        for (const bool bits : {false, true}) {
          for (const Shape& s : kShapes) {
            SCOPED_TRACE(std::string(layout.name) + " " + c10::toString(cache_dtype) + " " + c10::toString(dtype) +
                         (bits ? " random bits" : " randn") + " tokens " + std::to_string(s.tokens) + " head_size " +
                         std::to_string(s.head_size));
            const auto [key, value] = make_inputs(s, dtype, layout, bits);
            Caches c = make_caches(s, cache_dtype, layout);
            const at::Tensor slots = random_slots(s.tokens, s.num_blocks * s.block_size);
            auto [want_kc, want_vc] = views_on_copies(c.key_cache, c.value_cache);
            auto [want_ks, want_vs] = views_on_copies(c.key_scale, c.value_scale);
            reference_reshape_and_cache_quant(want_kc, want_ks, key, slots);
            reference_reshape_and_cache_quant(want_vc, want_vs, value, slots);
            const at::Tensor key_before = storage_bytes(key), value_before = storage_bytes(value);
            call(GetParam(), key, value, c.key_cache, c.value_cache, slots, c.key_scale, c.value_scale);
            EXPECT_TRUE(at::equal(storage_bytes(c.key_cache), storage_bytes(want_kc))) << "key_cache's storage";
            EXPECT_TRUE(at::equal(storage_bytes(c.value_cache), storage_bytes(want_vc))) << "value_cache's storage";
            EXPECT_TRUE(at::equal(storage_bytes(c.key_scale), storage_bytes(want_ks))) << "key_scale's storage";
            EXPECT_TRUE(at::equal(storage_bytes(c.value_scale), storage_bytes(want_vs))) << "value_scale's storage";
            EXPECT_TRUE(at::equal(storage_bytes(key), key_before)) << "key changed";
            EXPECT_TRUE(at::equal(storage_bytes(value), value_before)) << "value changed";
          }
        }
      }
    }
  }
}

// int8 scales that are the interleaved halves of one [num_blocks, 2, block_size, kv_heads] tensor,
// like the caches of one KV tensor, share no element: the contract allows them (any block stride,
// not overlapping each other), and each half is written as alone.
TEST_P(KvCacheQuantImpl, InterleavedInt8ScalesAreAccepted) {
  at::manual_seed(15);
  const Shape s{37, 8, 128, 5, 16};
  // Not a structured binding: the lambda below captures them (clang before 16 cannot).
  const auto inputs = make_inputs(s, at::kBFloat16, kLayouts[1], /*bits=*/false);
  const at::Tensor &key = inputs.first, &value = inputs.second;
  Caches c = make_caches(s, at::kChar, kLayouts[1]);
  const at::Tensor scales = random_bits({s.num_blocks, 2, s.block_size, s.kv_heads}, at::kFloat);
  c.key_scale = scales.select(1, 0);
  c.value_scale = scales.select(1, 1);
  const at::Tensor slots = random_slots(s.tokens, s.num_blocks * s.block_size);
  auto [want_kc, want_vc] = views_on_copies(c.key_cache, c.value_cache);
  auto [want_ks, want_vs] = views_on_copies(c.key_scale, c.value_scale);
  reference_reshape_and_cache_quant(want_kc, want_ks, key, slots);
  reference_reshape_and_cache_quant(want_vc, want_vs, value, slots);
  const std::string e = error_message(
      [&] { call(GetParam(), key, value, c.key_cache, c.value_cache, slots, c.key_scale, c.value_scale); });
  ASSERT_EQ(e, "<no error>");
  EXPECT_TRUE(at::equal(storage_bytes(c.key_cache), storage_bytes(want_kc)));
  EXPECT_TRUE(at::equal(storage_bytes(c.key_scale), storage_bytes(want_ks)));  // both halves
}

// An int8 page row is per_token_quant(row, int8) bit for bit (q and scale), for every CPU
// implementation of per_token_quant: rows of randn with a NaN, an infinity, zeros, -0, subnormals,
// and rows of random bits.
TEST_P(KvCacheQuantImpl, Int8RowsArePerTokenQuantsRowsBitForBit) {
  at::manual_seed(12);
  const Shape s{23, 4, 96, 3, 16};
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    SCOPED_TRACE(c10::toString(dtype));
    const at::Tensor key = make_inputs(s, dtype, kLayouts[0], /*bits=*/false).first;
    const at::Tensor value = random_bits({s.tokens, s.kv_heads, s.head_size}, dtype);
    Caches c = make_caches(s, at::kChar, kLayouts[0]);
    const at::Tensor slots = random_slots(s.tokens, s.num_blocks * s.block_size);
    call(GetParam(), key, value, c.key_cache, c.value_cache, slots, c.key_scale, c.value_scale);
    for (const char* quant : {"cpu.torch.per_token_quant", "cpu.native.per_token_quant"}) {
      SCOPED_TRACE(quant);
      for (const auto& [rows, cache, scale] : {std::tuple{key, c.key_cache, c.key_scale},
                                               std::tuple{value, c.value_cache, c.value_scale}}) {
        const auto [q, q_scale] = function_of<PerTokenQuantFn>(quant)(
            rows.reshape({s.tokens * s.kv_heads, s.head_size}), at::kChar, std::nullopt);
        const at::Tensor q_rows = q.view({s.tokens, s.kv_heads, s.head_size});
        const at::Tensor q_scales = q_scale.view({s.tokens, s.kv_heads}).view(at::kInt);
        const at::Tensor page_scales = scale.view(at::kInt);
        int64_t nan_rows = 0;
        for (int64_t t = 0; t < s.tokens; ++t) {
          const int64_t slot = slots[t].item<int64_t>();
          if (slot < 0) continue;
          const int64_t b = slot / s.block_size, r = slot % s.block_size;
          EXPECT_TRUE(at::equal(cache[b][r], q_rows[t])) << "token " << t << ": q";
          EXPECT_TRUE(at::equal(page_scales[b][r], q_scales[t])) << "token " << t << ": scale bits";
          nan_rows += scale[b][r].isnan().sum().item<int64_t>();
        }
        EXPECT_GT(nan_rows, 0) << "no row with a NaN was written";
      }
    }
  }
}

// An fp8 page element is e4m3(x / scale), the true division: on values crafted so that the
// division and static_quant's reciprocal multiply round differently, the page holds the division
// form and static_quant (every CPU implementation) the other.
TEST_P(KvCacheQuantImpl, Fp8RowsAreTheDivisionFormNotStaticQuantsReciprocal) {
  const std::vector<float> crafted = division_sensitive_values(kFp8Scale, at::kFloat, 32);
  ASSERT_GE(crafted.size(), 2u) << "no value found whose division and reciprocal forms differ";
  const int64_t n = static_cast<int64_t>(crafted.size());
  for (const float x : crafted) {
    ASSERT_NE(fp8_division_form(x, kFp8Scale), fp8_reciprocal_form(x, kFp8Scale)) << x;
  }
  const at::Tensor key = at::tensor(crafted, at::kFloat).view({1, 1, n});
  const at::Tensor value = key.neg();
  const Shape s{1, 1, n, 2, 4};
  Caches c = make_caches(s, at::kFloat8_e4m3fn, kLayouts[0], kFp8Scale, kFp8Scale);
  call(GetParam(), key, value, c.key_cache, c.value_cache, at::tensor({int64_t{5}}, at::kLong), c.key_scale,
       c.value_scale);
  const at::Tensor key_page = c.key_cache[1][1][0].view(at::kByte), value_page = c.value_cache[1][1][0].view(at::kByte);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(key_page[i].item<uint8_t>(), fp8_division_form(crafted[i], kFp8Scale)) << "x = " << crafted[i];
    EXPECT_EQ(value_page[i].item<uint8_t>(), fp8_division_form(-crafted[i], kFp8Scale)) << "x = " << -crafted[i];
  }
  for (const char* quant : {"cpu.torch.static_quant", "cpu.native.static_quant"}) {
    const at::Tensor q = function_of<StaticQuantFn>(quant)(key.view({1, n}), c.key_scale, at::kFloat8_e4m3fn,
                                                           std::nullopt).view(at::kByte).view({n});
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(q[i].item<uint8_t>(), fp8_reciprocal_form(crafted[i], kFp8Scale)) << quant << ", x = " << crafted[i];
      EXPECT_NE(q[i].item<uint8_t>(), key_page[i].item<uint8_t>()) << quant << ", x = " << crafted[i];
    }
  }
}

// Errors name the operation, the argument, what was expected and what was given; nothing of the
// caches or scales is written before one.
TEST_P(KvCacheQuantImpl, ArgumentErrorsNameTheOperationAndArgumentBeforeAnyWrite) {
  const Shape s{4, 2, 8, 3, 4};
  const at::Tensor key = at::randn({4, 2, 8}), value = at::randn({4, 2, 8});
  const at::Tensor slots = at::tensor({0, 1, 2, 3}, at::kLong);
  const Caches i8 = make_caches(s, at::kChar, kLayouts[0]);
  const Caches f8 = make_caches(s, at::kFloat8_e4m3fn, kLayouts[0]);
  auto with = [](Caches c, auto&& change) {
    change(c);
    return c;
  };
  struct Bad {
    Caches caches;
    at::Tensor slots;
    std::string expected;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Bad> cases = {
      {with(i8, [](Caches& c) { c.key_scale = at::ones({3, 4, 3}); }), slots,
       "key_scale must be [num_blocks, block_size, kv_heads] = [3, 4, 2] (the per-(token, head) scales of an int8 "
       "cache), got shape [3, 4, 3]"},
      {with(i8, [](Caches& c) { c.value_scale = at::ones({3, 4}); }), slots,
       "value_scale must be [num_blocks, block_size, kv_heads] = [3, 4, 2]"},
      {with(i8, [](Caches& c) { c.value_scale = at::ones({3, 2, 4}).transpose(1, 2); }), slots,
       "value_scale must hold each block contiguously"},
      {with(i8, [](Caches& c) { c.key_scale = c.key_scale.to(at::kDouble); }), slots,
       "key_scale must be float32, got float64"},
      {with(i8, [](Caches& c) { c.value_scale = c.key_scale; }), slots, "key_scale and value_scale must not share an element"},
      {with(i8, [](Caches& c) { c.key_scale = at::Tensor(); }), slots, "key_scale must be a defined tensor"},
      {with(i8, [](Caches& c) { c.key_scale = at::empty({3, 4, 2}, at::TensorOptions().device(at::kMeta)); }), slots,
       "key_scale must be on the caches' device cpu, got meta"},
      {with(f8, [](Caches& c) { c.key_scale = at::zeros({1}); }), slots,
       "key_scale (the per-tensor scale of a float8_e4m3fn cache) must be positive and finite, got 0"},
      {with(f8, [&](Caches& c) { c.value_scale = at::full({1}, nan); }), slots,
       "value_scale (the per-tensor scale of a float8_e4m3fn cache) must be positive and finite, got nan"},
      {with(f8, [](Caches& c) { c.value_scale = at::full({}, -1.0f); }), slots,
       "value_scale (the per-tensor scale of a float8_e4m3fn cache) must be positive and finite, got -1"},
      {with(f8, [](Caches& c) { c.key_scale = at::ones({2}); }), slots,
       "key_scale must hold one element (the per-tensor scale of a float8_e4m3fn cache), got shape [2]"},
      {with(f8, [&](Caches& c) { c.value_cache = i8.value_cache.clone(); }), slots,
       "value_cache must have key_cache's dtype float8_e4m3fn, got int8"},
      {with(i8, [](Caches& c) { c.key_cache = at::zeros({3, 4, 2, 8}); }), slots,
       "key_cache must be float8_e4m3fn or int8, got float32"},
      {with(i8, [](Caches& c) { c.value_cache = c.value_cache.narrow(0, 0, 2); }), slots,
       "value_cache must have key_cache's shape [3, 4, 2, 8], got [2, 4, 2, 8]"},
      {i8, at::tensor({0, 12, -1, 3}, at::kLong),
       "slot_mapping[1] = 12 is out of range: the caches hold num_blocks * block_size = 3 * 4 = 12 slots"},
      {f8, at::tensor({5, -1, 9, 5}, at::kLong),
       "slot_mapping must not give a non-negative slot twice, got slot 5 for tokens 0 and 3"},
  };
  for (const Bad& bad : cases) {
    Caches c = bad.caches;
    std::vector<at::Tensor> before;
    for (const at::Tensor& t : {c.key_cache, c.value_cache, c.key_scale, c.value_scale}) {
      before.push_back(t.defined() && !t.is_meta() ? storage_bytes(t) : at::Tensor());
    }
    const std::string e = error_message(
        [&] { call(GetParam(), key, value, c.key_cache, c.value_cache, bad.slots, c.key_scale, c.value_scale); });
    EXPECT_NE(e.find(std::string(kOperation) + ": " + bad.expected), std::string::npos) << GetParam() << ": " << e;
    size_t i = 0;
    for (const at::Tensor& t : {c.key_cache, c.value_cache, c.key_scale, c.value_scale}) {
      if (before[i].defined()) EXPECT_TRUE(at::equal(storage_bytes(t), before[i])) << "written before: " << e;
      ++i;
    }
  }
}

// A cache whose last dimension is not contiguous is an error even where the block layout check
// cannot see it (one KV head, blocks of one slot).
TEST_P(KvCacheQuantImpl, ACacheWithANonContiguousLastDimensionIsAnError) {
  const at::Tensor key = at::randn({4, 1, 8}), value = at::randn({4, 1, 8});
  for (const at::ScalarType cache_dtype : {at::kChar, at::kFloat8_e4m3fn}) {
    SCOPED_TRACE(c10::toString(cache_dtype));
    Caches c = make_caches({4, 1, 8, 5, 1}, cache_dtype, kLayouts[0]);
    c.value_cache = random_bytes({5, 1, 1, 16}, cache_dtype).slice(3, 0, 16, 2);
    const std::string e = error_message([&] {
      call(GetParam(), key, value, c.key_cache, c.value_cache, at::tensor({0, 1, 2, 3}, at::kLong), c.key_scale,
           c.value_scale);
    });
    EXPECT_NE(e.find("reshape_and_cache_quant: value_cache's last dimension must be contiguous (stride 1), got stride 2"),
              std::string::npos)
        << e;
  }
}

INSTANTIATE_TEST_SUITE_P(All, KvCacheQuantImpl,
                         ::testing::ValuesIn(registered_implementations(kOperation, Device::kCpu)),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '.' ? '_' : c;
                           return n;
                         });

// cpu.torch and cpu.native write the same bytes and scales, on random bits and on randn with
// specials, in every layout.
TEST(KvCacheQuant, TorchAndNativeWriteIdenticalBytesAndScales) {
  at::manual_seed(13);
  for (const Layout& layout : kLayouts) {
    for (const at::ScalarType cache_dtype : {at::kChar, at::kFloat8_e4m3fn}) {
      for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
        for (const bool bits : {false, true}) {
          SCOPED_TRACE(std::string(layout.name) + " " + c10::toString(cache_dtype) + " " + c10::toString(dtype) +
                       (bits ? " random bits" : " randn"));
          const Shape s{300, 8, 128, 24, 16};
          const auto [key, value] = make_inputs(s, dtype, layout, bits);
          const at::Tensor slots = random_slots(s.tokens, s.num_blocks * s.block_size);
          const Caches torch = make_caches(s, cache_dtype, layout, 0.0123f, 3.7f);
          auto [kc, vc] = views_on_copies(torch.key_cache, torch.value_cache);
          auto [ks, vs] = views_on_copies(torch.key_scale, torch.value_scale);
          call("cpu.torch.reshape_and_cache_quant", key, value, torch.key_cache, torch.value_cache, slots, torch.key_scale,
               torch.value_scale);
          call("cpu.native.reshape_and_cache_quant", key, value, kc, vc, slots, ks, vs);
          EXPECT_TRUE(at::equal(storage_bytes(torch.key_cache), storage_bytes(kc)));
          EXPECT_TRUE(at::equal(storage_bytes(torch.value_cache), storage_bytes(vc)));
          EXPECT_TRUE(at::equal(storage_bytes(torch.key_scale), storage_bytes(ks)));
          EXPECT_TRUE(at::equal(storage_bytes(torch.value_scale), storage_bytes(vs)));
        }
      }
    }
  }
}

class KvCacheQuantApi : public ::testing::Test {
 protected:
  void SetUp() override { runtime().reset_for_testing(); }
  void TearDown() override { runtime().reset_for_testing(); }
};

TEST_F(KvCacheQuantApi, SelectsNativeAndPublicApiAndDispatcherWriteTheCaches) {
  auto b = initialize("cpu", {"reshape_and_cache_quant"});
  EXPECT_EQ(b->at(kOperation).spec().name, "cpu.native.reshape_and_cache_quant");
  at::manual_seed(14);
  const Shape s{6, 2, 64, 2, 16};
  const at::Tensor key = at::randn({6, 2, 64}).to(at::kHalf), value = at::randn({6, 2, 64}).to(at::kHalf);
  const at::Tensor slots = at::tensor({7, -1, 0, 31, 12, 3}, at::kLong);
  for (const at::ScalarType cache_dtype : {at::kChar, at::kFloat8_e4m3fn}) {
    SCOPED_TRACE(c10::toString(cache_dtype));
    Caches c = make_caches(s, cache_dtype, kLayouts[0]);
    auto [want_kc, want_vc] = views_on_copies(c.key_cache, c.value_cache);
    auto [want_ks, want_vs] = views_on_copies(c.key_scale, c.value_scale);
    reference_reshape_and_cache_quant(want_kc, want_ks, key, slots);
    reference_reshape_and_cache_quant(want_vc, want_vs, value, slots);
    Caches d{c.key_cache.clone(), c.value_cache.clone(), c.key_scale.clone(), c.value_scale.clone()};
    ops::reshape_and_cache_quant(key, value, c.key_cache, c.value_cache, slots, c.key_scale, c.value_scale);
    EXPECT_TRUE(at::equal(storage_bytes(c.key_cache), storage_bytes(want_kc)));
    EXPECT_TRUE(at::equal(storage_bytes(c.value_cache), storage_bytes(want_vc)));
    EXPECT_TRUE(at::equal(storage_bytes(c.key_scale), storage_bytes(want_ks)));
    // And through the dispatcher, as torch.ops.xllm_kernel.reshape_and_cache_quant.
    auto handle = c10::Dispatcher::singleton().findSchemaOrThrow("xllm_kernel::reshape_and_cache_quant", "");
    handle.typed<ReshapeAndCacheQuantFn>().call(key, value, d.key_cache, d.value_cache, slots, d.key_scale,
                                                d.value_scale);
    EXPECT_TRUE(at::equal(storage_bytes(d.key_cache), storage_bytes(want_kc)));
    EXPECT_TRUE(at::equal(storage_bytes(d.value_cache), storage_bytes(want_vc)));
    EXPECT_TRUE(at::equal(storage_bytes(d.value_scale), storage_bytes(want_vs)));
  }
}

TEST_F(KvCacheQuantApi, CallBeforeInitializeIsAnError) {
  Caches c = make_caches({1, 1, 8, 1, 16}, at::kChar, kLayouts[0]);
  const std::string e = error_message([&] {
    ops::reshape_and_cache_quant(at::zeros({1, 1, 8}), at::zeros({1, 1, 8}), c.key_cache, c.value_cache,
                                 at::zeros({1}, at::kLong), c.key_scale, c.value_scale);
  });
  EXPECT_NE(e.find("reshape_and_cache_quant: device cpu is not initialized"), std::string::npos) << e;
}

}  // namespace
}  // namespace xllm_kernel::testing
