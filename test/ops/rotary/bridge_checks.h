// One body per check of a rotary_embedding bridge, for every device: the CPU tests (test/ops) and
// the CUDA tests (test/cuda) call the same functions with their device. Inputs are drawn on the
// CPU and moved; the reference is the suite's (src/ops/rotary/suites/reference.h), float64 on the
// CPU, with its tolerance model. Values over the full grid are the numerics suite's job
// (test/numerics and test/cuda run it for every implementation).
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "src/ops/rotary/suites/reference.h"
#include "test/ops/common/registered.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing::rotary {

inline constexpr const char* kOperation = "rotary_embedding";

inline void call(const std::string& impl, const at::Tensor& positions, at::Tensor query,
                 const std::optional<at::Tensor>& key, int64_t head_size, const at::Tensor& cache, bool neox) {
  function_of<RotaryEmbeddingFn>(impl)(positions, query, key, head_size, cache, neox);
}

// The suite's cos/sin table and float64 reference.
using numerics::rotary::cos_sin_cache;
using numerics::rotary::reference_rotary_embedding;

// max |got - want| / (atol + rtol |want|), the suite's model: 4 u32 (|x1 c| + |x2 s|) for the
// float32 evaluation, 2 u of the dtype for the rounding. `terms` by reference: read after every
// argument is evaluated, so headroom(got, reference_rotary_embedding(..., terms), terms) sees the
// reference's value.
inline double headroom(const at::Tensor& got, const at::Tensor& want, const double& terms) {
  const at::ScalarType dtype = got.scalar_type();
  const double u = dtype == at::kFloat ? std::ldexp(1.0, -24) : dtype == at::kBFloat16 ? std::ldexp(1.0, -8)
                                                                                        : std::ldexp(1.0, -11);
  const double atol = 4 * std::ldexp(1.0, -24) * terms, rtol = 2 * u;
  const at::Tensor g = got.to(at::kCPU).to(at::kDouble).reshape(want.sizes());
  const at::Tensor err = (g - want).abs() / (atol + rtol * want.abs());
  return err.numel() == 0 ? 0.0 : err.max().item<double>();
}

// Query and key as slices of one fused qkv tensor (GQA 4/2, partial rotary, strided positions), in
// every dtype and cache dtype, NeoX and GPT-J: values within the tolerance, and every element
// outside the rotated ones (past rot_dim, the value part) bitwise unchanged, positions and cache too.
inline void check_fused_qkv(const std::string& impl, at::Device device) {
  const int64_t tokens = 6, heads = 4, kv_heads = 2, head_size = 80, rot = 40;
  const int64_t q = heads * head_size, k = kv_heads * head_size;
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (at::ScalarType cache_dtype : {at::kFloat, dtype}) {
      for (bool neox : {true, false}) {
        SCOPED_TRACE(std::string(c10::toString(dtype)) + " cache " + c10::toString(cache_dtype) +
                     (neox ? " neox" : " gptj"));
        const at::Tensor qkv = at::randn({tokens, q + 2 * k}).to(dtype).to(device);
        const at::Tensor before = qkv.clone();
        const at::Tensor positions = at::randint(0, 50, {2 * tokens}, at::kLong).to(device).slice(0, 0, 2 * tokens, 2);
        const at::Tensor cache = cos_sin_cache(50, rot, cache_dtype).to(device);
        const at::Tensor cache_before = cache.clone(), positions_before = positions.clone();
        call(impl, positions, qkv.narrow(1, 0, q), qkv.narrow(1, q, k), head_size, cache, neox);
        double terms = 0;
        const at::Tensor want_q =
            reference_rotary_embedding(positions, before.narrow(1, 0, q), head_size, cache, neox, terms);
        const at::Tensor want_k =
            reference_rotary_embedding(positions, before.narrow(1, q, k), head_size, cache, neox, terms);
        EXPECT_LE(headroom(qkv.narrow(1, 0, q), want_q, terms), 1.0);
        EXPECT_LE(headroom(qkv.narrow(1, q, k), want_k, terms), 1.0);
        // Everything but the rotated elements, bitwise.
        const at::Tensor heads_now = qkv.narrow(1, 0, q + k).reshape({tokens, heads + kv_heads, head_size});
        const at::Tensor heads_before = before.narrow(1, 0, q + k).reshape({tokens, heads + kv_heads, head_size});
        EXPECT_TRUE(at::equal(heads_now.narrow(2, rot, head_size - rot), heads_before.narrow(2, rot, head_size - rot)));
        EXPECT_TRUE(at::equal(qkv.narrow(1, q + k, k), before.narrow(1, q + k, k))) << "the value part changed";
        EXPECT_TRUE(at::equal(cache, cache_before));
        EXPECT_TRUE(at::equal(positions, positions_before));
      }
    }
  }
}

// 3-D views with padded heads (head stride != head_size), a query one element past an aligned
// address, and no key; 1 and 0 tokens.
inline void check_layouts(const std::string& impl, at::Device device) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (bool neox : {true, false}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + (neox ? " neox" : " gptj"));
      const at::Tensor cache = cos_sin_cache(64, 128, at::kFloat).to(device);
      const at::Tensor positions = at::randint(0, 64, {5}, at::kLong).to(device);
      // Padded heads: [5, 3, 128] views of [5, 3, 136].
      const at::Tensor padded = at::randn({5, 3, 136}).to(dtype).to(device);
      const at::Tensor before = padded.clone();
      const at::Tensor query = padded.narrow(2, 0, 128);
      call(impl, positions, query, std::nullopt, 128, cache, neox);
      double terms = 0;
      const at::Tensor want = reference_rotary_embedding(positions, before.narrow(2, 0, 128), 128, cache, neox, terms);
      EXPECT_LE(headroom(query, want, terms), 1.0);
      EXPECT_TRUE(at::equal(padded.narrow(2, 128, 8), before.narrow(2, 128, 8)));
      // Misaligned: the query starts one element into its buffer.
      const at::Tensor buffer = at::randn({5 * 256 + 1}).to(dtype).to(device);
      const at::Tensor misaligned = buffer.narrow(0, 1, 5 * 256).view({5, 256});
      const at::Tensor m0 = misaligned.clone(), buffer0 = buffer.clone();
      const at::Tensor key = at::randn({5, 1, 128}).to(dtype).to(device);
      const at::Tensor k0 = key.clone();
      call(impl, positions, misaligned, key, 128, cache, neox);
      terms = 0;
      const at::Tensor want_q = reference_rotary_embedding(positions, m0, 128, cache, neox, terms);
      const at::Tensor want_k = reference_rotary_embedding(positions, k0, 128, cache, neox, terms);
      EXPECT_LE(headroom(misaligned, want_q, terms), 1.0);
      EXPECT_LE(headroom(key, want_k, terms), 1.0);
      EXPECT_TRUE(at::equal(buffer.narrow(0, 0, 1), buffer0.narrow(0, 0, 1)));
      // One token, zero tokens.
      const at::Tensor one = at::randn({1, 2 * 128}).to(dtype).to(device);
      const at::Tensor o0 = one.clone();
      const at::Tensor pos1 = at::full({1}, 63, at::kLong).to(device);
      call(impl, pos1, one, std::nullopt, 128, cache, neox);
      terms = 0;
      EXPECT_LE(headroom(one, reference_rotary_embedding(pos1, o0, 128, cache, neox, terms), terms), 1.0);
      const at::Tensor none = at::empty({0, 256}, at::TensorOptions().dtype(dtype).device(device));
      call(impl, at::empty({0}, at::TensorOptions().dtype(at::kLong).device(device)), none,
           at::empty({0, 128}, none.options()), 128, cache, neox);
    }
  }
}

// Out-of-range positions: on the CPU an error before anything is written; on CUDA the token's rows
// are left unchanged and the other tokens rotate.
inline void check_out_of_range_positions(const std::string& impl, at::Device device) {
  const at::Tensor cache = cos_sin_cache(16, 64, at::kFloat).to(device);
  for (int64_t bad : {int64_t{-1}, int64_t{16}, int64_t{1} << 40}) {
    SCOPED_TRACE(bad);
    const at::Tensor positions = at::tensor({int64_t{3}, bad, int64_t{15}}, at::kLong).to(device);
    const at::Tensor query = at::randn({3, 128}).to(device), key = at::randn({3, 64}).to(device);
    const at::Tensor q0 = query.clone(), k0 = key.clone();
    if (device.is_cpu()) {
      const std::string e = error_message([&] { call(impl, positions, query, key, 64, cache, true); });
      EXPECT_NE(e.find("rotary_embedding: positions must be in [0, max_position = 16) (cos_sin_cache's rows), got "
                       "positions[1] = " + std::to_string(bad)),
                std::string::npos)
          << e;
      EXPECT_TRUE(at::equal(query, q0));
      EXPECT_TRUE(at::equal(key, k0));
    } else {
      call(impl, positions, query, key, 64, cache, true);
      EXPECT_TRUE(at::equal(query[1], q0[1]));
      EXPECT_TRUE(at::equal(key[1], k0[1]));
      const at::Tensor good = at::tensor({int64_t{3}, int64_t{15}}, at::kLong);
      double terms = 0;
      const at::Tensor rows = at::tensor({int64_t{0}, int64_t{2}}, at::kLong).to(device);
      const at::Tensor want = reference_rotary_embedding(good, q0.index_select(0, rows), 64, cache, true, terms);
      EXPECT_LE(headroom(query.index_select(0, rows), want, terms), 1.0);
    }
  }
}

// An empty cos_sin_cache ([0, rot_dim]): every position is out of range. On the CPU an error
// before anything is written; on CUDA no row changes.
inline void check_empty_cache(const std::string& impl, at::Device device) {
  const at::Tensor cache = at::empty({0, 64}, at::TensorOptions().dtype(at::kFloat).device(device));
  const at::Tensor positions = at::tensor({int64_t{0}, int64_t{1}}, at::kLong).to(device);
  const at::Tensor query = at::randn({2, 128}).to(device), key = at::randn({2, 64}).to(device);
  const at::Tensor q0 = query.clone(), k0 = key.clone();
  if (device.is_cpu()) {
    const std::string e = error_message([&] { call(impl, positions, query, key, 64, cache, true); });
    EXPECT_NE(e.find("rotary_embedding: positions must be in [0, max_position = 0)"), std::string::npos) << e;
  } else {
    call(impl, positions, query, key, 64, cache, true);
  }
  EXPECT_TRUE(at::equal(query, q0));
  EXPECT_TRUE(at::equal(key, k0));
}

// Rows 2^31 + 64 elements apart, as a strided view of one large allocation would be (4 GiB of
// bfloat16 reserved, two rows touched). Returns false where the memory cannot be reserved.
inline bool check_token_stride_beyond_2_to_31(const std::string& impl, at::Device device) {
  const int64_t width = 256, stride = (int64_t{1} << 31) + 64;
  at::Tensor storage;
  try {
    storage = at::empty({stride + width}, at::TensorOptions().dtype(at::kBFloat16).device(device));
  } catch (const c10::Error&) {
    return false;
  }
  const at::Tensor query = storage.as_strided({2, width}, {stride, 1});
  query.copy_(at::randn({2, width}));
  const at::Tensor q0 = query.clone();
  const at::Tensor positions = at::tensor({int64_t{5}, int64_t{9}}, at::kLong).to(device);
  const at::Tensor cache = cos_sin_cache(10, 128, at::kFloat).to(device);
  call(impl, positions, query, std::nullopt, 128, cache, false);
  double terms = 0;
  EXPECT_LE(headroom(query, reference_rotary_embedding(positions, q0, 128, cache, false, terms), terms), 1.0);
  return true;
}

// Every argument error names the operation, the argument, what was expected and what was given.
inline void check_argument_errors(const std::string& impl, at::Device device) {
  const at::Device other = device.is_cpu() ? at::Device(at::kMeta) : at::Device(at::kCPU);
  const std::string type = c10::DeviceTypeName(device.type(), /*lower_case=*/true);
  const auto on = [device](const at::Tensor& t) { return t.to(device); };
  const at::Tensor pos = on(at::tensor({int64_t{0}, int64_t{1}}, at::kLong));
  const at::Tensor q = on(at::randn({2, 4 * 64})), k = on(at::randn({2, 2 * 64}));
  const at::Tensor cache = on(cos_sin_cache(8, 64, at::kFloat));
  const at::Tensor qkv = on(at::randn({2, 8 * 64}));
  struct Bad {
    at::Tensor positions, query;
    std::optional<at::Tensor> key;
    int64_t head_size;
    at::Tensor cache;
    std::string expected;
  };
  const std::vector<Bad> cases = {
      {pos.to(at::kInt), q, k, 64, cache, "positions must be int64, got int32"},
      {on(at::zeros({2, 1}, at::kLong)), q, k, 64, cache, "positions must be 1-D [tokens], got shape [2, 1]"},
      {pos.to(other), q, k, 64, cache, "positions must be on " + type + " for this implementation, got " + other.str()},
      {at::Tensor(), q, k, 64, cache, "positions must be a defined tensor"},
      {on(at::zeros({3}, at::kLong)), q, k, 64, cache,
       "query must have 3 tokens (positions' length) in its first dimension, got shape [2, 256]"},
      {pos, on(at::randn({2, 250})), k, 64, cache,
       "query's last dimension must be a multiple of head_size 64 ([tokens, heads * head_size]), got 250"},
      {pos, on(at::randn({2, 4, 32})), k, 64, cache,
       "query's last dimension must be head_size 64 ([tokens, heads, head_size]), got 32"},
      {pos, on(at::randn({1, 2, 4, 64})), k, 64, cache,
       "query must be [tokens, heads * head_size] or [tokens, heads, head_size], got shape [1, 2, 4, 64]"},
      {pos, on(at::randn({2, 0})), k, 64, cache, "query must have at least one head, got shape [2, 0]"},
      {pos, on(at::ones({2, 256}, at::kDouble)), k, 64, cache, "query must be float32, bfloat16 or float16, got float64"},
      {pos, on(at::randn({256, 2})).t(), k, 64, cache, "query's last dimension must be contiguous (stride 1), got stride 2"},
      {pos, on(at::randn({1, 256})).expand({2, 256}), std::nullopt, 64, cache,
       "query's elements must not overlap each other (it is written in place)"},
      {pos, q.to(other), k, 64, cache, "query must be on " + type + " for this implementation, got " + other.str()},
      {pos, q, k.to(at::kHalf), 64, cache, "key must have query's dtype float32, got float16"},
      {pos, q, on(at::randn({2, 3 * 64})), 64, cache, "query's heads (4) must be a multiple of key's heads (3)"},
      {pos, q, on(at::randn({2, 100})), 64, cache, "key's last dimension must be a multiple of head_size 64"},
      {pos, q, k, 0, cache, "head_size must be >= 1, got 0"},
      {pos, q, k, 64, on(cos_sin_cache(8, 64, at::kHalf)), "cos_sin_cache must be float32 or query's dtype float32, got float16"},
      {pos, q, k, 64, on(at::randn({8, 63})), "cos_sin_cache's last dimension rot_dim must be even and in [2, head_size 64]"},
      {pos, q, k, 64, on(at::randn({8, 66})), "rot_dim must be even and in [2, head_size 64] (cos and sin halves), got 66"},
      {pos, q, k, 64, on(at::randn({8, 0})), "rot_dim must be even and in [2, head_size 64] (cos and sin halves), got 0"},
      {pos, q, k, 64, on(at::randn({8})), "cos_sin_cache must be 2-D [max_position, rot_dim], got shape [8]"},
      {pos, q, k, 64, on(at::randn({64, 8})).t(), "cos_sin_cache's last dimension must be contiguous"},
      {pos, qkv.narrow(1, 0, 256), qkv.narrow(1, 192, 128), 64, cache, "query and key must not overlap in memory"},
      {pos, qkv.narrow(1, 256, 256), qkv.narrow(1, 0, 320).narrow(1, 192, 128), 64, cache,
       "query and key must not overlap in memory"},
  };
  for (const auto& c : cases) {
    const std::string e = error_message([&] { call(impl, c.positions, c.query, c.key, c.head_size, c.cache, true); });
    EXPECT_NE(e.find(std::string(kOperation) + ": "), std::string::npos) << impl << ": " << e;
    EXPECT_NE(e.find(c.expected), std::string::npos) << impl << ": " << e << "\n expected: " << c.expected;
  }
  // Adjacent slices of one tensor do not overlap: query [0, 256), key [256, 384) of each row.
  EXPECT_EQ(error_message([&] { call(impl, pos, qkv.narrow(1, 0, 256), qkv.narrow(1, 256, 128), 64, cache, true); }),
            "<no error>");
}

// Every check above for one implementation.
inline void check_bridge(const std::string& impl, at::Device device) {
  SCOPED_TRACE(impl);
  check_fused_qkv(impl, device);
  check_layouts(impl, device);
  check_out_of_range_positions(impl, device);
  check_empty_cache(impl, device);
  check_argument_errors(impl, device);
}

}  // namespace xllm_kernel::testing::rotary
