// One body per check of a paged_attention bridge, for every device: the CPU tests (test/ops) and
// the CUDA tests (test/cuda) call the same functions with their device. Batches are drawn on the
// CPU (shuffled block tables, NaN in every cache row no sequence owns and in the spare blocks) and
// moved; the expected output is the suite's float64 reference (src/ops/attention/suites/reference.h).
// The numerics suite covers the full grid.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "src/ops/attention/suites/reference.h"
#include "test/ops/common/registered.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing::attention {

inline constexpr const char* kOperation = "paged_attention";

using xllm_kernel::attention::reference_paged_attention;

struct Call {
  at::Tensor query, key_cache, value_cache, block_tables, query_start_loc, seq_lens;
  double scale = 0.125, soft_cap = 0;
  int64_t window = 0;
};

inline at::Tensor call(const std::string& impl, const Call& c) {
  return function_of<PagedAttentionFn>(impl)(c.query, c.key_cache, c.value_cache, c.block_tables, c.query_start_loc,
                                             c.seq_lens, c.scale, c.soft_cap, c.window);
}

inline at::Tensor reference(const Call& c) {
  return reference_paged_attention(c.query, c.key_cache, c.value_cache, c.block_tables, c.query_start_loc, c.seq_lens,
                                   c.scale, c.soft_cap, c.window);
}

// Four unit roundoffs of the output's dtype (2e-5 for float32): the kernels accumulate in float32
// and round once; torch's SDPA also rounds its softmax weights to the dtype.
inline double tolerance(at::ScalarType dtype) {
  return dtype == at::kFloat ? 2e-5 : dtype == at::kBFloat16 ? std::ldexp(1.0, -6) : std::ldexp(1.0, -9);
}

inline void expect_close(const at::Tensor& got, const at::Tensor& want, at::ScalarType dtype) {
  ASSERT_EQ(got.sizes(), want.sizes());
  ASSERT_EQ(got.scalar_type(), dtype);
  ASSERT_TRUE(got.is_contiguous());
  const at::Tensor g = got.to(at::kCPU, at::kDouble);
  const double tol = tolerance(dtype);
  const at::Tensor bad = (g - want).abs().gt(tol + tol * want.abs()).logical_or(g.isnan());
  EXPECT_EQ(bad.sum().item<int64_t>(), 0) << "max error " << (g - want).abs().nan_to_num(1e30).max().item<double>()
                                          << " (tolerance " << tol << ")";
}

struct Layout {
  const char* name;
  bool strided_query;  // a slice of [tokens, q_heads + 2 * kv_heads, head_size]
  bool kv_halves;      // caches the halves of [num_blocks, 2, block_size, kv_heads, head_size]
  int64_t head_pad;    // cache heads head_size + pad apart
  int64_t misalign;    // query and caches this many elements into their buffers
};

struct Batch {
  std::vector<int64_t> lengths, q_lens;
  int64_t q_heads = 8, kv_heads = 2, head_size = 64, block_size = 16, padding_rows = 0;
};

// The batch on `device`: sequence s of lengths[s] positions and q_lens[s] query rows.
inline Call make_call(const Batch& b, at::ScalarType dtype, const Layout& layout, at::Device device, uint64_t seed = 0) {
  at::manual_seed(seed);
  const int64_t n = static_cast<int64_t>(b.lengths.size()), bs = b.block_size, d = b.head_size;
  std::vector<int64_t> need;
  int64_t used = 0, widest = 0;
  for (const int64_t len : b.lengths) {
    need.push_back((len + bs - 1) / bs);
    used += need.back();
    widest = std::max(widest, need.back());
  }
  const int64_t num_blocks = used + 2;
  const at::Tensor order = at::randperm(num_blocks, at::kLong);
  at::Tensor table = at::full({n, widest + 1}, order[num_blocks - 1].item<int64_t>(), at::kInt);
  at::Tensor k = at::full({num_blocks, bs, b.kv_heads, d}, std::numeric_limits<double>::quiet_NaN(), at::kDouble);
  at::Tensor v = k.clone();
  std::vector<int32_t> starts = {0};
  int64_t next = 0;
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t j = 0; j < need[s]; ++j) {
      const int64_t id = order[next++].item<int64_t>(), rows = std::min(bs, b.lengths[s] - j * bs);
      table[s][j] = static_cast<int32_t>(id);
      k[id].narrow(0, 0, rows).normal_();
      v[id].narrow(0, 0, rows).normal_();
    }
    starts.push_back(starts.back() + static_cast<int32_t>(b.q_lens[s]));
  }
  const int64_t tokens = starts.back() + b.padding_rows;
  const at::Tensor q = at::randn({tokens, b.q_heads, d}, at::kDouble);
  const auto opts = at::TensorOptions().dtype(dtype).device(device);
  Call c;
  {
    const int64_t width = layout.strided_query ? b.q_heads + 2 * b.kv_heads : b.q_heads;
    const int64_t count = tokens * width * d;
    at::Tensor buffer = at::empty({count + layout.misalign}, opts);
    c.query = buffer.narrow(0, layout.misalign, count).view({tokens, width, d}).narrow(1, 0, b.q_heads);
    c.query.copy_(q);
  }
  const int64_t pad = layout.head_pad, row = b.kv_heads * (d + pad);
  auto cache = [&](const at::Tensor& values, int64_t half, at::Tensor& kv) {
    at::Tensor t;
    if (layout.kv_halves) {
      if (!kv.defined()) kv = at::empty({num_blocks, 2, bs, b.kv_heads, d + pad}, opts);
      t = kv.select(1, half).narrow(-1, 0, d);
    } else {
      const int64_t count = num_blocks * bs * row;
      t = at::empty({count + layout.misalign}, opts).narrow(0, layout.misalign, count)
              .view({num_blocks, bs, b.kv_heads, d + pad}).narrow(-1, 0, d);
    }
    t.copy_(values);
    return t;
  };
  at::Tensor kv;
  c.key_cache = cache(k, 0, kv);
  c.value_cache = cache(v, 1, kv);
  c.block_tables = table.to(device);
  c.query_start_loc = at::tensor(starts, at::kInt).to(device);
  c.seq_lens = at::tensor(std::vector<int32_t>(b.lengths.begin(), b.lengths.end()), at::kInt).to(device);
  c.scale = 1 / std::sqrt(static_cast<double>(d));
  return c;
}

inline const Layout kContiguous{"contiguous", false, false, 0, 0};

// Modes, head configurations, layouts, dtypes, soft cap and window against the reference; the
// inputs are unchanged.
inline void check_values_and_layouts(const std::string& impl, at::Device device) {
  const Layout layouts[] = {kContiguous, {"strided", true, true, 0, 0}, {"padded-misaligned", false, false, 8, 1}};
  const Batch batches[] = {
      {{37, 16, 1, 70}, {1, 1, 1, 1}, 8, 2},                   // decode, GQA
      {{19, 33}, {19, 33}, 8, 8, 80},                           // prefill, MHA, head 80
      {{50, 40, 9}, {12, 1, 9}, 16, 1, 128, 32},                // chunk + decode + prefill, MQA
      {{0, 21, 0, 5}, {0, 3, 0, 1}, 9, 3, 67, 16, 2},           // padding sequences and rows, a tail
      {{300}, {1}, 32, 8, 128, 16},                             // one long decode (split over threads)
  };
  for (const Layout& layout : layouts) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      for (size_t i = 0; i < std::size(batches); ++i) {
        for (const auto& [soft_cap, window] : {std::pair<double, int64_t>{0, 0}, {20, 0}, {0, 7}}) {
          SCOPED_TRACE(std::string(layout.name) + " " + c10::toString(dtype) + " batch " + std::to_string(i) +
                       " soft_cap " + std::to_string(soft_cap) + " window " + std::to_string(window));
          Call c = make_call(batches[i], dtype, layout, device, i);
          c.soft_cap = soft_cap;
          c.window = window;
          if (soft_cap > 0) c.query.mul_(4);
          const at::Tensor q = c.query.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
          const at::Tensor kc = c.key_cache.to(at::kCPU, false, true);
          const at::Tensor out = call(impl, c);
          expect_close(out, reference(c), dtype);
          EXPECT_TRUE(at::equal(c.query.cpu(), q)) << "query changed";
          EXPECT_TRUE(at::equal(c.key_cache.cpu().nan_to_num(0), kc.nan_to_num(0))) << "key_cache changed";
          const int64_t rows = c.query_start_loc[-1].item<int64_t>();
          if (rows < out.size(0)) {
            EXPECT_TRUE(out.narrow(0, rows, out.size(0) - rows).eq(0).all().item<bool>()) << "padding rows not zero";
          }
        }
      }
    }
  }
}

// No query rows at all (an empty batch, or only padding sequences): an empty or all-zero output.
inline void check_empty(const std::string& impl, at::Device device) {
  Call c = make_call({{0, 0}, {0, 0}}, at::kBFloat16, kContiguous, device);
  EXPECT_EQ(call(impl, c).numel(), 0);
  c = make_call({{0}, {0}, 8, 2, 64, 16, 3}, at::kBFloat16, kContiguous, device);
  const at::Tensor out = call(impl, c);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{3, 8, 64}));
  EXPECT_TRUE(out.eq(0).all().item<bool>());
}

// Values the CPU rejects before any compute (an error naming the entry) and CUDA turns into NaN
// rows (the contract): a block id out of range, and lengths that contradict each other.
inline void check_bad_values(const std::string& impl, at::Device device) {
  const Call good = make_call({{40, 20}, {3, 1}}, at::kFloat, kContiguous, device);
  const at::Tensor want = reference(good);
  struct Bad {
    std::string what;
    std::function<void(Call&)> apply;
    std::string cpu_error;
    std::vector<int64_t> nan_rows;  // on CUDA; every other row as the valid call
  };
  const std::vector<Bad> cases = {
      {"block id past the cache", [](Call& c) { c.block_tables[1][1] = 99; },
       "block_tables[1, 1] must be a block in [0, ", {3}},
      {"negative block id", [](Call& c) { c.block_tables[0][0] = -1; }, "block_tables[0, 0] must be a block in [0, ",
       {0, 1, 2}},
      {"seq_lens past the table", [](Call& c) { c.seq_lens[1] = 1000; }, "seq_lens[1] must be in [1 ", {3}},
      {"more query rows than context", [](Call& c) { c.seq_lens[0] = 2; }, "seq_lens[0] must be in [3 ", {0, 1, 2}},
      {"decreasing query_start_loc", [](Call& c) { c.query_start_loc[1] = 5; c.query_start_loc[2] = 4; },
       "query_start_loc must not decrease", {0, 1, 2, 3}},
      {"query_start_loc past the query", [](Call& c) { c.query_start_loc[2] = 9; },
       "query_start_loc[2] (the last entry) must be at most query's rows 4", {3}},
  };
  for (const auto& bad : cases) {
    SCOPED_TRACE(bad.what);
    Call c = good;
    c.block_tables = good.block_tables.clone();
    c.seq_lens = good.seq_lens.clone();
    c.query_start_loc = good.query_start_loc.clone();
    bad.apply(c);
    at::Tensor out;
    const std::string e = error_message([&] { out = call(impl, c); });
    if (device.is_cpu()) {
      EXPECT_NE(e.find(std::string(kOperation) + ": " + bad.cpu_error), std::string::npos) << e;
      continue;
    }
    ASSERT_EQ(e, "<no error>");
    const at::Tensor got = out.cpu().to(at::kDouble);
    for (int64_t t = 0; t < got.size(0); ++t) {
      const bool nan = std::find(bad.nan_rows.begin(), bad.nan_rows.end(), t) != bad.nan_rows.end();
      if (nan) {
        EXPECT_TRUE(got[t].isnan().all().item<bool>()) << "row " << t << " should be NaN";
      } else {
        EXPECT_TRUE(at::allclose(got[t], want[t], 2e-5, 2e-5)) << "row " << t << " changed";
      }
    }
  }
}

// Every argument error names the operation, the argument, what was expected and what was given.
inline void check_argument_errors(const std::string& impl, at::Device device) {
  const Call c = make_call({{20, 9}, {4, 1}}, at::kFloat, kContiguous, device);
  const at::Device other = device.is_cpu() ? at::Device(at::kMeta) : at::Device(at::kCPU);
  const std::string type = c10::DeviceTypeName(device.type(), /*lower_case=*/true);
  struct Bad {
    std::function<void(Call&)> apply;
    std::string expected;
  };
  const std::vector<Bad> cases = {
      {[](Call& x) { x.query = x.query.flatten(1); }, "query must be [tokens, q_heads, head_size], got shape [5, 512]"},
      {[](Call& x) { x.query = x.query.to(at::kDouble); }, "query must be float32, bfloat16 or float16, got float64"},
      {[](Call& x) { x.query = x.query.transpose(1, 2); }, "query's last dimension must be contiguous (stride 1), got stride 64"},
      {[](Call& x) { x.query = x.query.narrow(1, 0, 3); }, "query's heads (3) must be a multiple of the caches' kv_heads (2)"},
      {[&](Call& x) { x.query = at::zeros({5, 8, 600}, x.query.options()); }, "query's head_size must be in [1, 512], got shape [5, 8, 600]"},
      {[](Call& x) { x.key_cache = x.key_cache.to(at::kHalf); }, "key_cache must have query's dtype float32, got float16"},
      {[](Call& x) { x.value_cache = x.value_cache.narrow(0, 0, 2); }, "value_cache must have key_cache's shape"},
      {[](Call& x) { x.key_cache = x.key_cache.narrow(3, 0, 32); }, "key_cache's head_size (last dimension) must be query's 64"},
      {[](Call& x) { x.key_cache = x.key_cache.flatten(2); }, "key_cache must be [num_blocks, block_size, kv_heads, head_size], got shape"},
      {[&](Call& x) { x.key_cache = x.key_cache.to(other); }, "key_cache must be on " + type + " for this implementation, got " + other.str()},
      {[](Call& x) { x.block_tables = x.block_tables.to(at::kLong); }, "block_tables must be int32, got int64"},
      {[](Call& x) { x.block_tables = x.block_tables.narrow(0, 0, 1); }, "block_tables must have a row per sequence (seq_lens' 2), got shape [1, "},
      {[](Call& x) { x.seq_lens = x.seq_lens.view({1, 2}); }, "seq_lens must be 1-D, got shape [1, 2]"},
      {[](Call& x) { x.query_start_loc = x.query_start_loc.narrow(0, 0, 2); }, "query_start_loc must be [seqs + 1] with seq_lens' seqs = 2, got shape [2]"},
      {[&](Call& x) { x.seq_lens = x.seq_lens.to(other); }, "seq_lens must be on query's device " + c.query.device().str() + ", got " + other.str()},
      {[](Call& x) { x.block_tables = at::Tensor(); }, "block_tables must be a defined tensor"},
      {[](Call& x) { x.scale = 0; }, "scale must be positive and finite (a float32), got 0"},
      {[](Call& x) { x.scale = std::numeric_limits<double>::quiet_NaN(); }, "scale must be positive and finite"},
      {[](Call& x) { x.soft_cap = -1; }, "soft_cap must be finite and >= 0 (0: off), got -1"},
  };
  for (const auto& bad : cases) {
    Call x = c;
    bad.apply(x);
    const std::string e = error_message([&] { call(impl, x); });
    EXPECT_NE(e.find(std::string(kOperation) + ": " + bad.expected), std::string::npos) << impl << ": " << e;
  }
}

// Batch invariance (an implementation that declares it): every sequence of a mixed batch (long
// decodes split over keys, a chunk, a prefill, short decodes), in bf16 and float32, with a soft cap
// and a window, gives the same bits alone, in the reversed batch and on 1, 2, 3 and 8 CPU threads.
inline void check_batch_invariance(const std::string& impl, at::Device device) {
  const int threads = at::get_num_threads();
  const Batch batch{{2600, 37, 1500, 300, 9, 1100}, {1, 1, 40, 300, 9, 1}, 8, 2, 128};
  const int64_t seqs = static_cast<int64_t>(batch.lengths.size());
  auto ints = [&](const std::vector<int32_t>& v) { return at::tensor(v, at::kInt).to(device); };
  for (const at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    for (const auto& [soft_cap, window] : {std::pair<double, int64_t>{0, 0}, {30, 0}, {0, 700}}) {
      SCOPED_TRACE(impl + " " + c10::toString(dtype) + " soft_cap " + std::to_string(soft_cap) + " window " +
                   std::to_string(window));
      Call c = make_call(batch, dtype, kContiguous, device, 7);
      c.soft_cap = soft_cap;
      c.window = window;
      at::set_num_threads(2);
      const at::Tensor whole = call(impl, c);
      const at::Tensor starts = c.query_start_loc.to(at::kLong).cpu();
      for (const int n : {1, 3, 8}) {
        at::set_num_threads(n);
        EXPECT_TRUE(at::equal(call(impl, c), whole)) << "threads " << n;
      }
      at::set_num_threads(2);
      // Each sequence alone.
      for (int64_t s = 0; s < seqs; ++s) {
        const int64_t begin = starts[s].item<int64_t>(), rows = starts[s + 1].item<int64_t>() - begin;
        Call alone = c;
        alone.query = c.query.narrow(0, begin, rows).clone();
        alone.block_tables = c.block_tables.narrow(0, s, 1).clone();
        alone.query_start_loc = ints({0, static_cast<int32_t>(rows)});
        alone.seq_lens = c.seq_lens.narrow(0, s, 1).clone();
        EXPECT_TRUE(at::equal(call(impl, alone), whole.narrow(0, begin, rows))) << "sequence " << s << " alone";
      }
      // The batch reversed.
      std::vector<int64_t> order;
      for (int64_t s = seqs - 1; s >= 0; --s) order.push_back(s);
      std::vector<at::Tensor> queries, tables;
      std::vector<int32_t> reversed_starts = {0};
      for (const int64_t s : order) {
        const int64_t begin = starts[s].item<int64_t>(), rows = starts[s + 1].item<int64_t>() - begin;
        queries.push_back(c.query.narrow(0, begin, rows));
        tables.push_back(c.block_tables.narrow(0, s, 1));
        reversed_starts.push_back(reversed_starts.back() + static_cast<int32_t>(rows));
      }
      Call reversed = c;
      reversed.query = at::cat(queries);
      reversed.block_tables = at::cat(tables);
      reversed.query_start_loc = ints(reversed_starts);
      reversed.seq_lens = c.seq_lens.index_select(0, at::tensor(order, at::kLong).to(device)).contiguous();
      const at::Tensor out = call(impl, reversed);
      for (size_t i = 0; i < order.size(); ++i) {
        const int64_t s = order[i], begin = starts[s].item<int64_t>(), rows = starts[s + 1].item<int64_t>() - begin;
        EXPECT_TRUE(at::equal(out.narrow(0, reversed_starts[i], rows), whole.narrow(0, begin, rows)))
            << "sequence " << s << " in the reversed batch";
      }
      expect_close(whole, reference(c), dtype);
    }
  }
  at::set_num_threads(threads);
}

// Every check above for one implementation.
inline void check_bridge(const std::string& impl, at::Device device) {
  SCOPED_TRACE(impl);
  check_values_and_layouts(impl, device);
  check_empty(impl, device);
  check_bad_values(impl, device);
  check_argument_errors(impl, device);
}

}  // namespace xllm_kernel::testing::attention
