// Every registered CPU paged_attention_quant implementation against the float64 reference over the
// dequantized caches (reference_paged_attention on float(q) * scale, src/ops/kv_cache/suites/
// quant_reference.h): modes, layouts, query dtypes, float8_e4m3fn and int8 caches, soft cap and
// window; a NaN read (fp8 0x7F or 0xFF, an int8 row's NaN scale) reaches exactly the rows that read
// it, and rows never read do not; argument errors name the operation and the argument; batch
// invariance of the implementations that declare it; the public API and dispatcher. The batches are
// the bridge checks' (test/ops/attention/bridge_checks.h), their float32 pages quantized as
// reshape_and_cache_quant writes them. The numerics suite (paged_attention_quant.cpp) covers the
// grid.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "csrc/cpu/attention/attention.h"
#include "csrc/cpu/common/cpu_features.h"
#include "src/ops/kv_cache/suites/quant_reference.h"
#include "test/ops/attention/bridge_checks.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing {
namespace {

using attention::Batch;
using attention::expect_close;
using attention::kContiguous;
using attention::make_call;
using attention::reference_paged_attention;
using numerics::kv_cache::calibrated_fp8_scale;
using numerics::kv_cache::dequantized_cache;
using numerics::kv_cache::quantize_cache;

constexpr const char* kOperation = "paged_attention_quant";
const at::Device kCpu(at::kCPU);

struct QuantCall {
  at::Tensor query, key_cache, value_cache, key_scale, value_scale, block_tables, query_start_loc, seq_lens;
  double scale = 0.125, soft_cap = 0;
  int64_t window = 0;
};

at::Tensor call(const std::string& impl, const QuantCall& c) {
  return function_of<PagedAttentionQuantFn>(impl)(c.query, c.key_cache, c.value_cache, c.key_scale, c.value_scale,
                                                  c.block_tables, c.query_start_loc, c.seq_lens, c.scale, c.soft_cap,
                                                  c.window);
}

// The float64 reference over the caches' dequantized values.
at::Tensor reference(const QuantCall& c) {
  return reference_paged_attention(c.query, dequantized_cache(c.key_cache, c.key_scale),
                                   dequantized_cache(c.value_cache, c.value_scale), c.block_tables, c.query_start_loc,
                                   c.seq_lens, c.scale, c.soft_cap, c.window);
}

// make_call's batch (float32 pages, NaN in every row no sequence owns) with the query in `dtype`
// and the pages quantized into `cache_dtype` (NaN rows: fp8 0x7F, int8 rows of NaN scale).
// strided: the query a slice of a qkv tensor, the caches the halves of one KV tensor, the int8 key
// scales the halves of one tensor and the value scales transposed.
QuantCall make_quant_call(const Batch& b, at::ScalarType dtype, at::ScalarType cache_dtype, bool strided,
                          uint64_t seed = 0) {
  const attention::Call f = make_call(b, at::kFloat, kContiguous, kCpu, seed);
  const int64_t tokens = f.query.size(0), nb = f.key_cache.size(0), bs = b.block_size, kv = b.kv_heads;
  const int64_t d = b.head_size;
  QuantCall c;
  if (strided) {
    c.query = at::zeros({tokens, b.q_heads + 2 * kv, d}, dtype).narrow(1, 0, b.q_heads);
    c.query.copy_(f.query);
    const at::Tensor pages = at::empty({nb, 2, bs, kv, d}, cache_dtype);
    c.key_cache = pages.select(1, 0);
    c.value_cache = pages.select(1, 1);
  } else {
    c.query = f.query.to(dtype);
    c.key_cache = at::empty({nb, bs, kv, d}, cache_dtype);
    c.value_cache = at::empty({nb, bs, kv, d}, cache_dtype);
  }
  if (cache_dtype == at::kChar) {
    c.key_scale = strided ? at::empty({nb, 2, bs, kv}).select(1, 0) : at::empty({nb, bs, kv});
    c.value_scale = strided ? at::empty({nb, kv, bs}).transpose(1, 2) : at::empty({nb, bs, kv});
  } else {
    c.key_scale = at::full({1}, calibrated_fp8_scale(f.key_cache, 1.0f), at::kFloat);
    c.value_scale = at::full({1}, calibrated_fp8_scale(f.value_cache, 1.0f), at::kFloat);
  }
  quantize_cache(c.key_cache, c.key_scale, f.key_cache);
  quantize_cache(c.value_cache, c.value_scale, f.value_cache);
  c.block_tables = f.block_tables;
  c.query_start_loc = f.query_start_loc;
  c.seq_lens = f.seq_lens;
  c.scale = f.scale;
  return c;
}

const at::ScalarType kCacheDtypes[] = {at::kChar, at::kFloat8_e4m3fn};

TEST(AttentionQuant, EveryCpuImplementationIsRegistered) {
  const auto names = registered_implementations(kOperation, Device::kCpu);
  for (const char* name : {"cpu.torch.paged_attention_quant", "cpu.native.paged_attention_quant",
                           "cpu.native.paged_attention_quant.batch_invariant"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
}

class AttentionQuantImpl : public ::testing::TestWithParam<std::string> {};

// Modes, head configurations, layouts, query dtypes, cache dtypes, soft cap and window against the
// reference on the dequantized caches; the inputs are unchanged and padding rows zero.
TEST_P(AttentionQuantImpl, MatchesTheReferenceOnDequantizedCaches) {
  const Batch batches[] = {
      {{37, 16, 1, 70}, {1, 1, 1, 1}, 8, 2},           // decode, GQA
      {{19, 33}, {19, 33}, 8, 8, 80},                   // prefill, MHA, head 80
      {{50, 40, 9}, {12, 1, 9}, 16, 1, 128, 32},        // chunk + decode + prefill, MQA
      {{0, 21, 0, 5}, {0, 3, 0, 1}, 9, 3, 67, 16, 2},   // padding sequences and rows, a tail
      {{300}, {1}, 32, 8, 128, 16},                     // one long decode (split over threads)
  };
  for (const at::ScalarType cache_dtype : kCacheDtypes) {
    for (const bool strided : {false, true}) {
      for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
        for (size_t i = 0; i < std::size(batches); ++i) {
          for (const auto& [soft_cap, window] : {std::pair<double, int64_t>{0, 0}, {20, 0}, {0, 7}}) {
            SCOPED_TRACE(std::string(c10::toString(cache_dtype)) + (strided ? " strided " : " contiguous ") +
                         c10::toString(dtype) + " batch " + std::to_string(i) + " soft_cap " +
                         std::to_string(soft_cap) + " window " + std::to_string(window));
            QuantCall c = make_quant_call(batches[i], dtype, cache_dtype, strided, i);
            c.soft_cap = soft_cap;
            c.window = window;
            if (soft_cap > 0) c.query.mul_(4);
            const at::Tensor q = c.query.clone(), kc = c.key_cache.view(at::kByte).clone();
            const at::Tensor ks = c.key_scale.clone(), vs = c.value_scale.clone();
            const at::Tensor out = call(GetParam(), c);
            expect_close(out, reference(c), dtype);
            EXPECT_TRUE(at::equal(c.query, q)) << "query changed";
            EXPECT_TRUE(at::equal(c.key_cache.view(at::kByte), kc)) << "key_cache changed";
            EXPECT_TRUE(at::equal(c.key_scale.nan_to_num(0), ks.nan_to_num(0))) << "key_scale changed";
            EXPECT_TRUE(at::equal(c.value_scale.nan_to_num(0), vs.nan_to_num(0))) << "value_scale changed";
            const int64_t rows = c.query_start_loc[-1].item<int64_t>();
            if (rows < out.size(0)) {
              EXPECT_TRUE(out.narrow(0, rows, out.size(0) - rows).eq(0).all().item<bool>()) << "padding rows not zero";
            }
          }
        }
      }
    }
  }
}

// A NaN read (fp8 0x7F or 0xFF; an int8 row's NaN scale) makes exactly the rows that read it NaN;
// rows no sequence reads (NaN everywhere: quant_call's, and an int8 page of random bytes under NaN
// scales) and a NaN past a window never do.
TEST_P(AttentionQuantImpl, NanReadsReachTheRowsThatReadThemAndNoOthers) {
  const Batch batch{{37, 16}, {1, 1}, 8, 2, 64, 16};  // two decodes, two KV heads of four query heads each
  for (const at::ScalarType cache_dtype : kCacheDtypes) {
    for (const int64_t window : {int64_t{0}, int64_t{8}}) {
      SCOPED_TRACE(std::string(c10::toString(cache_dtype)) + " window " + std::to_string(window));
      QuantCall c = make_quant_call(batch, at::kFloat, cache_dtype, /*strided=*/false);
      c.window = window;
      // Sequence 0, position 5 (block table column 0, row 5), KV head 1.
      const int64_t block = c.block_tables[0][0].item<int64_t>();
      if (cache_dtype == at::kChar) {
        c.key_scale[block][5][1] = std::numeric_limits<float>::quiet_NaN();
      } else {
        c.key_cache.view(at::kByte)[block][5][1][0] = 0xFF;  // e4m3's negative NaN
        c.value_cache.view(at::kByte)[block][5][1][3] = 0x7F;
      }
      const at::Tensor out = call(GetParam(), c);
      const at::Tensor want = reference(c);
      for (int64_t h = 0; h < 8; ++h) {
        // Position 5 of 37 is outside a window of 8: no NaN then.
        const bool nan = window == 0 && h >= 4;
        EXPECT_EQ(out[0][h].isnan().all().item<bool>(), nan) << "sequence 0, head " << h;
        EXPECT_EQ(want[0][h].isnan().all().item<bool>(), nan) << "the reference, sequence 0, head " << h;
        EXPECT_FALSE(out[1][h].isnan().any().item<bool>()) << "sequence 1, head " << h;
      }
      expect_close(out.nan_to_num(0), want.nan_to_num(0), at::kFloat);
    }
  }
}

// Errors name the operation, the argument, what was expected and what was given.
TEST_P(AttentionQuantImpl, ArgumentErrorsNameTheOperationAndArgument) {
  const QuantCall i8 = make_quant_call({{20, 9}, {4, 1}}, at::kFloat, at::kChar, false);
  const QuantCall f8 = make_quant_call({{20, 9}, {4, 1}}, at::kFloat, at::kFloat8_e4m3fn, false);
  const std::vector<int64_t> s = i8.key_scale.sizes().vec();  // [num_blocks, 16, 2]
  const std::string shape = c10::str("[", s[0], ", 16, 2]");
  struct Bad {
    const QuantCall& base;
    std::function<void(QuantCall&)> apply;
    std::string expected;
  };
  const std::vector<Bad> cases = {
      {i8, [&](QuantCall& x) { x.key_scale = at::ones({s[0], 16, 3}); },
       c10::str("key_scale must be [num_blocks, block_size, kv_heads] = ", shape,
                " (the per-(token, head) scales of an int8 cache), got shape [", s[0], ", 16, 3]")},
      {i8, [&](QuantCall& x) { x.value_scale = at::ones({s[0], 16}); },
       "value_scale must be [num_blocks, block_size, kv_heads] = " + shape},
      {i8, [](QuantCall& x) { x.value_scale = at::ones({1}); }, "value_scale must be [num_blocks, block_size, kv_heads]"},
      {f8, [](QuantCall& x) { x.key_scale = at::ones({2}); },
       "key_scale must hold one element (the per-tensor scale of a float8_e4m3fn cache), got shape [2]"},
      {f8, [&](QuantCall& x) { x.value_scale = i8.value_scale; },
       "value_scale must hold one element (the per-tensor scale of a float8_e4m3fn cache)"},
      {i8, [](QuantCall& x) { x.key_scale = x.key_scale.to(at::kDouble); }, "key_scale must be float32, got float64"},
      {i8, [](QuantCall& x) { x.value_scale = at::Tensor(); }, "value_scale must be a defined tensor"},
      {i8, [](QuantCall& x) { x.key_scale = at::empty(x.key_scale.sizes(), at::TensorOptions().device(at::kMeta)); },
       "key_scale must be on query's device cpu, got meta"},
      {i8, [&](QuantCall& x) { x.value_cache = f8.value_cache; },
       "value_cache must have key_cache's dtype int8, got float8_e4m3fn"},
      {i8, [](QuantCall& x) { x.key_cache = x.key_cache.to(at::kBFloat16); },
       "key_cache must be float8_e4m3fn or int8, got bfloat16"},
      {i8, [](QuantCall& x) { x.key_cache = x.key_cache.narrow(3, 0, 32); },
       "key_cache's head_size (last dimension) must be query's 64"},
      {i8, [](QuantCall& x) { x.value_cache = x.value_cache.narrow(0, 0, 2); }, "value_cache must have key_cache's shape"},
      {i8,
       [](QuantCall& x) {
         std::vector<int64_t> wide = x.key_cache.sizes().vec();
         wide.back() *= 2;
         x.key_cache = at::zeros(wide, at::kChar).slice(3, 0, wide.back(), 2);
       },
       "key_cache's last dimension must be contiguous (stride 1), got stride 2"},
      {f8, [](QuantCall& x) { x.query = x.query.to(at::kDouble); }, "query must be float32, bfloat16 or float16, got float64"},
      {f8, [](QuantCall& x) { x.scale = 0; }, "scale must be positive and finite (a float32), got 0"},
      {i8, [](QuantCall& x) { x.block_tables = x.block_tables.clone(); x.block_tables[0][1] = 99; },
       "block_tables[0, 1] must be a block in [0, "},
      {f8, [](QuantCall& x) { x.seq_lens = x.seq_lens.clone(); x.seq_lens[1] = 1000; }, "seq_lens[1] must be in [1 "},
  };
  for (const Bad& bad : cases) {
    QuantCall x = bad.base;
    bad.apply(x);
    const std::string e = error_message([&] { call(GetParam(), x); });
    EXPECT_NE(e.find(std::string(kOperation) + ": " + bad.expected), std::string::npos) << GetParam() << ": " << e;
  }
}

INSTANTIATE_TEST_SUITE_P(All, AttentionQuantImpl,
                         ::testing::ValuesIn(registered_implementations(kOperation, Device::kCpu)),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '.' ? '_' : c;
                           return n;
                         });

// The implementations that declare batch invariance (the suite names this test for them): every
// sequence of a mixed batch (long decodes split over keys, a chunk, a prefill, short decodes), over
// int8 and fp8 caches, with a bf16 and a float32 query, a soft cap and a window, gives the same bits
// alone, in the reversed batch and on 1, 2, 3 and 8 CPU threads.
void CheckBatchInvariance(std::initializer_list<at::ScalarType> dtypes) {
  std::vector<std::string> invariant;
  for (const auto& name : registered_implementations(kOperation, Device::kCpu)) {
    if (registry().find(name)->spec.batch_invariant) invariant.push_back(name);
  }
  ASSERT_FALSE(invariant.empty()) << "no CPU paged_attention_quant implementation declares batch invariance";
  const int threads = at::get_num_threads();
  const Batch batch{{2600, 37, 1500, 300, 9, 1100}, {1, 1, 40, 300, 9, 1}, 8, 2, 128};
  const int64_t seqs = static_cast<int64_t>(batch.lengths.size());
  for (const std::string& impl : invariant) {
    for (const at::ScalarType cache_dtype : kCacheDtypes) {
      for (const at::ScalarType dtype : dtypes) {
        for (const auto& [soft_cap, window] : {std::pair<double, int64_t>{0, 0}, {30, 0}, {0, 700}}) {
          SCOPED_TRACE(impl + " " + c10::toString(cache_dtype) + " " + c10::toString(dtype) + " soft_cap " +
                       std::to_string(soft_cap) + " window " + std::to_string(window));
          QuantCall c = make_quant_call(batch, dtype, cache_dtype, /*strided=*/false, 7);
          c.soft_cap = soft_cap;
          c.window = window;
          at::set_num_threads(2);
          const at::Tensor whole = call(impl, c);
          for (const int n : {1, 3, 8}) {
            at::set_num_threads(n);
            EXPECT_TRUE(at::equal(call(impl, c), whole)) << "threads " << n;
          }
          at::set_num_threads(2);
          const at::Tensor starts = c.query_start_loc.to(at::kLong);
          auto rows_of = [&](int64_t s) {
            const int64_t begin = starts[s].item<int64_t>();
            return std::pair{begin, starts[s + 1].item<int64_t>() - begin};
          };
          // Each sequence alone.
          for (int64_t s = 0; s < seqs; ++s) {
            const auto [begin, rows] = rows_of(s);
            QuantCall alone = c;
            alone.query = c.query.narrow(0, begin, rows).clone();
            alone.block_tables = c.block_tables.narrow(0, s, 1).clone();
            alone.query_start_loc = at::tensor({0, static_cast<int32_t>(rows)}, at::kInt);
            alone.seq_lens = c.seq_lens.narrow(0, s, 1).clone();
            EXPECT_TRUE(at::equal(call(impl, alone), whole.narrow(0, begin, rows))) << "sequence " << s << " alone";
          }
          // The batch reversed.
          std::vector<at::Tensor> queries, tables;
          std::vector<int32_t> reversed_starts = {0};
          std::vector<int64_t> order;
          for (int64_t s = seqs - 1; s >= 0; --s) {
            const auto [begin, rows] = rows_of(s);
            order.push_back(s);
            queries.push_back(c.query.narrow(0, begin, rows));
            tables.push_back(c.block_tables.narrow(0, s, 1));
            reversed_starts.push_back(reversed_starts.back() + static_cast<int32_t>(rows));
          }
          QuantCall reversed = c;
          reversed.query = at::cat(queries);
          reversed.block_tables = at::cat(tables);
          reversed.query_start_loc = at::tensor(reversed_starts, at::kInt);
          reversed.seq_lens = c.seq_lens.index_select(0, at::tensor(order, at::kLong)).contiguous();
          const at::Tensor out = call(impl, reversed);
          for (size_t i = 0; i < order.size(); ++i) {
            const auto [begin, rows] = rows_of(order[i]);
            EXPECT_TRUE(at::equal(out.narrow(0, reversed_starts[i], rows), whole.narrow(0, begin, rows)))
                << "sequence " << order[i] << " in the reversed batch";
          }
          if (soft_cap == 0 && window == 0) expect_close(whole, reference(c), dtype);
        }
      }
    }
  }
  at::set_num_threads(threads);
}

TEST(CpuAttentionQuant, BatchInvariantRowsAreTheSameAloneAndInAnyBatch) { CheckBatchInvariance({at::kBFloat16, at::kFloat}); }

// The prefill tile kernel over quantized pages on the AVX-512 BF16 tiles (forced where the CPU has
// AMX: AMX taken away by cpu::ScopedCpuFeatures), on any CPU with AVX512_BF16: through cpu.native's
// bridge, its bf16-query prefill rows (more than 16 query vectors per KV head) against the reference
// over the dequantized caches, and batch invariant as above. On AMX CPUs the tests above run the
// AMX tiles. The kernel tests (test/csrc/attention) check both element by element against a
// float64 bound.
TEST(CpuAttentionQuant, PrefillOnAvx512Bf16TilesMatchesTheReferenceAndIsBatchInvariant) {
  if (!cpu::cpu_features().avx512_bf16) GTEST_SKIP() << "no AVX512_BF16: the AVX-512 BF16 tiles need it";
  cpu::CpuFeatures without_amx = cpu::probed_cpu_features();
  without_amx.amx_bf16 = without_amx.amx_int8 = false;
  const cpu::ScopedCpuFeatures forced(without_amx);
  const Batch batches[] = {
      {{19, 33}, {19, 33}, 8, 8, 80},                  // prefill, MHA, head 80
      {{50, 40, 9}, {12, 1, 9}, 16, 1, 128, 32},       // chunk + decode + prefill, MQA
      {{0, 21, 0, 40}, {0, 21, 0, 40}, 12, 3, 67, 16}, // padding sequences, a tail
  };
  for (const std::string impl : {"cpu.native.paged_attention_quant", "cpu.native.paged_attention_quant.batch_invariant"}) {
    for (const at::ScalarType cache_dtype : kCacheDtypes) {
      for (size_t i = 0; i < std::size(batches); ++i) {
        for (const auto& [soft_cap, window] : {std::pair<double, int64_t>{0, 0}, {20, 0}, {0, 7}}) {
          SCOPED_TRACE(impl + " " + c10::toString(cache_dtype) + " batch " + std::to_string(i) + " soft_cap " +
                       std::to_string(soft_cap) + " window " + std::to_string(window));
          QuantCall c = make_quant_call(batches[i], at::kBFloat16, cache_dtype, /*strided=*/i == 1, i);
          c.soft_cap = soft_cap;
          c.window = window;
          if (soft_cap > 0) c.query.mul_(4);
          expect_close(call(impl, c), reference(c), at::kBFloat16);
        }
      }
    }
  }
  CheckBatchInvariance({at::kBFloat16});
}

class AttentionQuantApi : public ::testing::Test {
 protected:
  void SetUp() override { runtime().reset_for_testing(); }
  void TearDown() override { runtime().reset_for_testing(); }
};

TEST_F(AttentionQuantApi, SelectsNativeAndPublicApiAndDispatcherGiveTheReference) {
  auto b = initialize("cpu", {"paged_attention_quant"});
  EXPECT_EQ(b->at(kOperation).spec().name, "cpu.native.paged_attention_quant");
  for (const at::ScalarType cache_dtype : kCacheDtypes) {
    SCOPED_TRACE(c10::toString(cache_dtype));
    const QuantCall c = make_quant_call({{33, 5}, {2, 1}, 8, 2, 64}, at::kHalf, cache_dtype, false);
    const at::Tensor want = reference(c);
    expect_close(ops::paged_attention_quant(c.query, c.key_cache, c.value_cache, c.key_scale, c.value_scale,
                                            c.block_tables, c.query_start_loc, c.seq_lens, c.scale, c.soft_cap,
                                            c.window),
                 want, at::kHalf);
    // And through the dispatcher, as torch.ops.xllm_kernel.paged_attention_quant.
    auto handle = c10::Dispatcher::singleton().findSchemaOrThrow("xllm_kernel::paged_attention_quant", "");
    const at::Tensor out = handle.typed<PagedAttentionQuantFn>().call(
        c.query, c.key_cache, c.value_cache, c.key_scale, c.value_scale, c.block_tables, c.query_start_loc, c.seq_lens,
        c.scale, c.soft_cap, c.window);
    expect_close(out, want, at::kHalf);
  }
}

TEST_F(AttentionQuantApi, CallBeforeInitializeIsAnError) {
  const QuantCall c = make_quant_call({{3}, {1}}, at::kFloat, at::kChar, false);
  const std::string e = error_message([&] {
    ops::paged_attention_quant(c.query, c.key_cache, c.value_cache, c.key_scale, c.value_scale, c.block_tables,
                               c.query_start_loc, c.seq_lens, 0.125, 0, 0);
  });
  EXPECT_NE(e.find("paged_attention_quant: device cpu is not initialized"), std::string::npos) << e;
}

}  // namespace
}  // namespace xllm_kernel::testing
