// One body per check of a reshape_and_cache bridge, for every device: the CPU tests (test/ops) and
// the CUDA tests (test/cuda) call the same functions with their device. Inputs and old caches are
// random bits (NaN payloads, infinities, signed zeros, subnormals included), drawn on the CPU and
// moved; the expected caches are built on the CPU row by row by the suite's reference
// (src/ops/kv_cache/suites/reference.h), and compared bit for bit over the caches' whole storage.
// The numerics suite covers the full shape grid.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "src/ops/kv_cache/suites/reference.h"
#include "test/ops/common/registered.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing::kv_cache {

inline constexpr const char* kOperation = "reshape_and_cache";

inline void call(const std::string& impl, const at::Tensor& key, const at::Tensor& value, at::Tensor key_cache,
                 at::Tensor value_cache, const at::Tensor& slots) {
  function_of<ReshapeAndCacheFn>(impl)(key, value, key_cache, value_cache, slots);
}

inline at::ScalarType bits_type(at::ScalarType dtype) { return dtype == at::kFloat ? at::kInt : at::kShort; }

// A tensor of `shape` and `dtype` holding random bits.
inline at::Tensor random_bits(at::IntArrayRef shape, at::ScalarType dtype) {
  const at::ScalarType bits = bits_type(dtype);
  const int64_t lo = bits == at::kInt ? INT32_MIN : INT16_MIN, hi = bits == at::kInt ? INT32_MAX : INT16_MAX;
  return at::randint(lo, hi, shape, at::TensorOptions().dtype(bits)).view(dtype);
}

// The whole storage of `t` as integers on the CPU (bitwise comparable).
inline at::Tensor storage_bits(const at::Tensor& t) {
  const int64_t n = static_cast<int64_t>(t.storage().nbytes() / t.element_size());
  return t.as_strided({n}, {1}, 0).to(at::kCPU).view(bits_type(t.scalar_type())).clone();
}

// The suite's reference: writes the rows of `rows` into `cache` (CPU) at `slots`, row by row.
using numerics::kv_cache::reference_reshape_and_cache;

// Distinct slots in random order with some -1.
inline at::Tensor random_slots(int64_t tokens, int64_t slots) {
  at::Tensor perm = at::randperm(slots, at::kLong).narrow(0, 0, tokens).clone();
  for (int64_t t = 0; t < tokens; t += 5) perm[t] = -1;
  return perm;
}

struct Layout {
  const char* name;
  bool fused_inputs;   // key, value slices of [tokens, 3, kv_heads, head_size]
  bool head_padding;   // key, value heads head_size + 8 apart (heads not adjacent)
  bool fused_caches;   // caches halves of [num_blocks, 2, block_size, kv_heads, head_size]
  int64_t misalign;    // key, value and caches start this many elements into their buffer
};

// Every layout and dtype: the addressed slots hold the inputs' bits, everything else of the
// caches' storage is unchanged, and the inputs are unchanged.
inline void check_values_and_layouts(const std::string& impl, at::Device device) {
  const Layout layouts[] = {{"contiguous", false, false, false, 0},
                            {"fused", true, false, true, 0},
                            {"head-padding", false, true, false, 0},
                            {"misaligned", false, false, false, 1}};
  struct Shape {
    int64_t tokens, kv_heads, head_size, num_blocks, block_size;
  };
  const Shape shapes[] = {{37, 8, 128, 5, 16}, {9, 1, 80, 2, 32}, {20, 2, 3, 3, 8}, {1, 4, 256, 3, 16}};
  for (const Layout& layout : layouts) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      for (const Shape& s : shapes) {
        SCOPED_TRACE(std::string(layout.name) + " " + c10::toString(dtype) + " tokens " + std::to_string(s.tokens) +
                     " heads " + std::to_string(s.kv_heads) + " head_size " + std::to_string(s.head_size));
        const int64_t pad = layout.head_padding ? 8 : 0;
        at::Tensor key, value, key_cache, value_cache;
        if (layout.fused_inputs) {
          const at::Tensor qkv = random_bits({s.tokens, 3, s.kv_heads, s.head_size}, dtype).to(device);
          key = qkv.select(1, 1);
          value = qkv.select(1, 2);
        } else {
          const int64_t n = s.tokens * s.kv_heads * (s.head_size + pad);
          const at::Tensor kb = random_bits({n + layout.misalign}, dtype).to(device);
          const at::Tensor vb = random_bits({n + layout.misalign}, dtype).to(device);
          key = kb.narrow(0, layout.misalign, n).view({s.tokens, s.kv_heads, s.head_size + pad}).narrow(2, 0, s.head_size);
          value = vb.narrow(0, layout.misalign, n).view({s.tokens, s.kv_heads, s.head_size + pad}).narrow(2, 0, s.head_size);
        }
        if (layout.fused_caches) {
          const at::Tensor kv = random_bits({s.num_blocks, 2, s.block_size, s.kv_heads, s.head_size}, dtype).to(device);
          key_cache = kv.select(1, 0);
          value_cache = kv.select(1, 1);
        } else {
          const int64_t n = s.num_blocks * s.block_size * s.kv_heads * s.head_size;
          key_cache = random_bits({n + layout.misalign}, dtype).to(device).narrow(0, layout.misalign, n)
                          .view({s.num_blocks, s.block_size, s.kv_heads, s.head_size});
          value_cache = random_bits({n + layout.misalign}, dtype).to(device).narrow(0, layout.misalign, n)
                            .view({s.num_blocks, s.block_size, s.kv_heads, s.head_size});
        }
        const at::Tensor slots = random_slots(s.tokens, s.num_blocks * s.block_size).to(device);
        const at::Tensor key_before = storage_bits(key), value_before = storage_bits(value);
        // Expected storages: copies of the caches' storages on the CPU, written by the reference.
        const auto expected = [&](const at::Tensor& cache, const at::Tensor& rows) {
          const int64_t n = static_cast<int64_t>(cache.storage().nbytes() / cache.element_size());
          at::Tensor whole = cache.as_strided({n}, {1}, 0).to(at::kCPU).clone();
          at::Tensor view = whole.as_strided(cache.sizes(), cache.strides(), cache.storage_offset());
          reference_reshape_and_cache(view, rows.to(at::kCPU), slots);
          return whole.view(bits_type(dtype));
        };
        at::Tensor want_key = expected(key_cache, key);
        // The fused caches share one storage: the value half is written into the key's expectation.
        at::Tensor want_value = layout.fused_caches ? want_key : expected(value_cache, value);
        if (layout.fused_caches) {
          at::Tensor whole = want_key.view(dtype);
          reference_reshape_and_cache(whole.as_strided(value_cache.sizes(), value_cache.strides(), value_cache.storage_offset()),
                          value.to(at::kCPU), slots);
        }
        call(impl, key, value, key_cache, value_cache, slots);
        EXPECT_TRUE(at::equal(storage_bits(key_cache), want_key)) << "key_cache's storage";
        EXPECT_TRUE(at::equal(storage_bits(value_cache), want_value)) << "value_cache's storage";
        EXPECT_TRUE(at::equal(storage_bits(key), key_before)) << "key changed";
        EXPECT_TRUE(at::equal(storage_bits(value), value_before)) << "value changed";
      }
    }
  }
}

// No tokens, or every token padding: nothing changes.
inline void check_nothing_to_write(const std::string& impl, at::Device device) {
  for (int64_t tokens : {0, 6}) {
    SCOPED_TRACE(tokens);
    const at::Tensor key = random_bits({tokens, 2, 64}, at::kBFloat16).to(device);
    const at::Tensor value = random_bits({tokens, 2, 64}, at::kBFloat16).to(device);
    at::Tensor kc = random_bits({3, 16, 2, 64}, at::kBFloat16).to(device);
    at::Tensor vc = random_bits({3, 16, 2, 64}, at::kBFloat16).to(device);
    const at::Tensor kb = storage_bits(kc), vb = storage_bits(vc);
    call(impl, key, value, kc, vc, at::full({tokens}, -1, at::kLong).to(device));
    EXPECT_TRUE(at::equal(storage_bits(kc), kb));
    EXPECT_TRUE(at::equal(storage_bits(vc), vb));
  }
}

// A slot >= num_blocks * block_size: on the CPU an error naming it, before anything is written;
// on CUDA the token is skipped (the others are written). A duplicated slot: an error on the CPU; on
// CUDA each element of its rows is one of its tokens' (per element: pieces may come from either).
inline void check_bad_slots(const std::string& impl, at::Device device) {
  const at::Tensor key = random_bits({4, 2, 64}, at::kHalf).to(device);
  const at::Tensor value = random_bits({4, 2, 64}, at::kHalf).to(device);
  at::Tensor kc = random_bits({2, 16, 2, 64}, at::kHalf).to(device);
  at::Tensor vc = random_bits({2, 16, 2, 64}, at::kHalf).to(device);
  const at::Tensor kb = storage_bits(kc), vb = storage_bits(vc);
  const at::Tensor out_of_range = at::tensor({3, 32, -1, 7}, at::kLong).to(device);
  const std::string e = error_message([&] { call(impl, key, value, kc, vc, out_of_range); });
  if (device.is_cpu()) {
    EXPECT_NE(e.find("reshape_and_cache: slot_mapping[1] = 32 is out of range: the caches hold num_blocks * "
                     "block_size = 2 * 16 = 32 slots"),
              std::string::npos)
        << e;
    EXPECT_TRUE(at::equal(storage_bits(kc), kb)) << "written before the error";
    EXPECT_TRUE(at::equal(storage_bits(vc), vb)) << "written before the error";
    const at::Tensor duplicate = at::tensor({5, -1, 9, 5}, at::kLong);
    const std::string d = error_message([&] { call(impl, key, value, kc, vc, duplicate); });
    EXPECT_NE(d.find("reshape_and_cache: slot_mapping must not give a non-negative slot twice, got slot 5 for "
                     "tokens 0 and 3"),
              std::string::npos)
        << d;
    EXPECT_TRUE(at::equal(storage_bits(kc), kb)) << "written before the error";
    // Far apart slots take the sorted path of the duplicate check.
    at::Tensor big_k = random_bits({70000, 1, 1}, at::kHalf), big_v = random_bits({70000, 1, 1}, at::kHalf);
    at::Tensor far = at::tensor({int64_t{0}, int64_t{69999}, int64_t{0}}, at::kLong);
    const std::string f = error_message([&] {
      call(impl, key.narrow(0, 0, 3).narrow(1, 0, 1).narrow(2, 0, 1), value.narrow(0, 0, 3).narrow(1, 0, 1).narrow(2, 0, 1),
           big_k.view({70000, 1, 1, 1}), big_v.view({70000, 1, 1, 1}), far);
    });
    EXPECT_NE(f.find("got slot 0 for tokens 0 and 2"), std::string::npos) << f;
  } else {
    EXPECT_EQ(e, "<no error>");
    at::Tensor want_k = kc.to(at::kCPU), want_v = vc.to(at::kCPU);
    want_k.copy_(kb.view({2, 16, 2, 64}).view(at::kHalf));
    want_v.copy_(vb.view({2, 16, 2, 64}).view(at::kHalf));
    reference_reshape_and_cache(want_k, key.to(at::kCPU), out_of_range);
    reference_reshape_and_cache(want_v, value.to(at::kCPU), out_of_range);
    EXPECT_TRUE(at::equal(storage_bits(kc), storage_bits(want_k)));
    EXPECT_TRUE(at::equal(storage_bits(vc), storage_bits(want_v)));

    // Tokens 0 and 3 both to slot 5 (block 0, offset 5).
    kc.copy_(kb.view({2, 16, 2, 64}).view(at::kHalf).to(device));
    vc.copy_(vb.view({2, 16, 2, 64}).view(at::kHalf).to(device));
    const at::Tensor duplicate = at::tensor({5, -1, 9, 5}, at::kLong).to(device);
    EXPECT_EQ(error_message([&] { call(impl, key, value, kc, vc, duplicate); }), "<no error>");
    for (const auto& [cache, source, before] :
         {std::tuple{kc, key, kb}, std::tuple{vc, value, vb}}) {
      const at::Tensor got = storage_bits(cache).view({2, 16, 2, 64});
      const at::Tensor bits = storage_bits(source.contiguous()).view({4, 2, 64});
      const at::Tensor row = got[0][5];
      EXPECT_TRUE(at::logical_or(row.eq(bits[0]), row.eq(bits[3])).all().item<bool>())
          << "an element of the duplicated slot from neither token";
      at::Tensor want = before.view({2, 16, 2, 64}).clone();
      want[0][9].copy_(bits[2]);
      want[0][5].copy_(row);  // checked above
      EXPECT_TRUE(at::equal(got, want)) << "written outside the two slots";
    }
  }
}

// Every argument error names the operation, the argument, what was expected and what was given.
inline void check_argument_errors(const std::string& impl, at::Device device) {
  const auto on = [device](const at::Tensor& t) { return t.to(device); };
  const at::Tensor key = on(at::randn({4, 2, 8})), value = on(at::randn({4, 2, 8}));
  const at::Tensor kc = on(at::randn({3, 4, 2, 8})), vc = on(at::randn({3, 4, 2, 8}));
  const at::Tensor slots = on(at::tensor({0, 1, 2, 3}, at::kLong));
  const at::Device other = device.is_cpu() ? at::Device(at::kMeta) : at::Device(at::kCPU);
  const std::string type = c10::DeviceTypeName(device.type(), /*lower_case=*/true);
  const at::Tensor kv = on(at::randn({3, 4, 2, 8}));
  struct Bad {
    at::Tensor key, value, key_cache, value_cache, slots;
    std::string expected;
  };
  const std::vector<Bad> cases = {
      {on(at::randn({4, 16})), value, kc, vc, slots, "key must be 3-D [tokens, kv_heads, head_size], got shape [4, 16]"},
      {key, on(at::randn({4, 2, 9})), kc, vc, slots, "value must have key's shape [4, 2, 8], got [4, 2, 9]"},
      {key, value.to(at::kHalf), kc, vc, slots, "value must have key's dtype float32, got float16"},
      {key.to(at::kDouble), value, kc, vc, slots, "key must be float32, bfloat16 or float16, got float64"},
      {key, value, kc.to(at::kBFloat16), vc, slots, "key_cache must have key's dtype float32, got bfloat16"},
      {key, value, on(at::randn({3, 4, 16})), vc, slots,
       "key_cache must be 4-D [num_blocks, block_size, kv_heads, head_size], got shape [3, 4, 16]"},
      {key, value, on(at::randn({3, 4, 1, 8})), vc, slots,
       "key_cache must be [num_blocks, block_size, kv_heads, head_size] with key's kv_heads = 2 and head_size = 8, "
       "got shape [3, 4, 1, 8]"},
      {key, value, kc, on(at::randn({2, 4, 2, 8})), slots, "value_cache must have key_cache's shape [3, 4, 2, 8], got [2, 4, 2, 8]"},
      {key, value, on(at::randn({4, 3, 2, 8})).transpose(0, 1), vc, slots,
       "key_cache must hold each block contiguously: strides [>= 64, 16, 8, 1] (any block stride of at least one "
       "block), got strides [16, 48, 8, 1]"},
      {key, value, kc, on(at::randn({3, 4, 8, 2})).transpose(2, 3), slots, "value_cache's last dimension must be contiguous (stride 1), got stride 2"},
      {on(at::randn({4, 8, 2})).transpose(1, 2), value, kc, vc, slots, "key's last dimension must be contiguous (stride 1), got stride 2"},
      {key, value, kc, vc, on(at::tensor({0, 1, 2, 3}, at::kInt)), "slot_mapping must be int64, got int32"},
      {key, value, kc, vc, on(at::tensor({0, 1, 2}, at::kLong)), "slot_mapping must be 1-D [tokens] with key's tokens = 4, got shape [3]"},
      {key, value, kc, vc, at::Tensor(), "slot_mapping must be a defined tensor"},
      {key, value, kc, kc, slots, "key_cache and value_cache must not share an element"},
      {key, value, kv.narrow(0, 0, 2), kv.narrow(0, 1, 2), slots, "key_cache and value_cache must not share an element"},
      {kc.select(0, 0).narrow(0, 0, 4), value, kc, vc, slots, "key must not overlap key_cache"},
      {key, vc.select(0, 2), kc, vc, slots, "value must not overlap value_cache"},
      {key, value, kc.to(other), vc, slots, "key_cache must be on " + type + " for this implementation, got " + other.str()},
      {key, value, kc, vc, slots.to(other), "slot_mapping must be on key's device " + key.device().str() + ", got " + other.str()},
  };
  for (const auto& c : cases) {
    const std::string e = error_message([&] { call(impl, c.key, c.value, c.key_cache, c.value_cache, c.slots); });
    EXPECT_NE(e.find(std::string(kOperation) + ": " + c.expected), std::string::npos) << impl << ": " << e;
  }
}

// Every check above for one implementation.
inline void check_bridge(const std::string& impl, at::Device device) {
  SCOPED_TRACE(impl);
  check_values_and_layouts(impl, device);
  check_nothing_to_write(impl, device);
  check_bad_slots(impl, device);
  check_argument_errors(impl, device);
}

}  // namespace xllm_kernel::testing::kv_cache
