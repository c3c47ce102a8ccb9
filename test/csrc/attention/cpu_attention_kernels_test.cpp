// Torch-free tests of csrc/cpu/attention on every Highway target this CPU runs, against a float64
// reference computed here from the pages (the decoded cache rows, never the kernel's code):
// decode, prefill, chunked prefill and mixed batches; GQA groups (32, 8), (8, 8), (16, 1), (9, 3),
// (40, 40); head sizes 64, 80, 96, 128, 256 and tails (33, 67, 1); block sizes 1, 16 and 32; soft
// cap; sliding windows; shuffled block tables; NaN in every cache row, query element and table
// entry the kernel must not read; strided query and output rows and padded cache blocks; padding
// sequences (seq_lens 0); split plans equal to unsplit ones; items run by threads taking the next
// one; the plan (every visible (sequence, KV head, query row, key) in exactly one item, splits
// merged once); bad block ids and contradicting lengths (nothing read, nothing written); rows and
// index arrays (block tables, seq_lens, query_start_loc) that end at an inaccessible page; the
// kernel's rejections. The tests of the AVX-512 BF16 decode kernel and of the prefill tile kernel
// (on AMX, and on AVX-512 BF16 tiles) skip, saying why, on a CPU without them (csrc/cpu/common/cpu_features.h, as the kernels ask); the
// tests of which kernel takes an item run everywhere.
//
// Tolerance of an output element with float64 reference r (u = 2^-24, the float32 unit roundoff):
//   |got - r| <= roundoff(dtype) |r| + subnormal(dtype) + 32 u vmax (sqrt(keys) + sqrt(head_size))
// The first terms are the one final rounding. The last bounds the float32 work: a dot of head_size
// products (its error moves a logit, which moves the output by at most that times vmax) and a
// weighted sum of `keys` value rows; rounding errors of random sign grow like the square root of
// the length, and 32 covers the constant factors (the exponential's 4.5e-7, the dot's scale) with
// a margin of 4 standard deviations. A single key left out or counted twice moves an output by
// about vmax / keys, above this bound for the contexts used here (<= 1100 keys).
// Where the prefill tile kernel may run a token (bf16, more than 16 query vectors per KV head in its
// sequence, a CPU with AVX512_BF16 or AMX, the AVX3 target allowed), its softmax weights w_j are
// rounded to bf16 (relative error d_j, |d_j| <= 2^-8) and the denominator sums the rounded weights,
// so the output moves by sum_j w_j d_j (v_j - out) to first order: with the d_j independent and
// uniform (standard deviation 2^-8 / sqrt(3)), 6 standard deviations of that sum, computed per
// element from the reference's weights, are added to the bound. Over quantized caches the rounded
// weights carry the value scales and the denominator sums the plain weights: w_j d_j v_j instead.
#include "csrc/cpu/attention/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "csrc/cpu/common/cpu_features.h"
#include "hwy/aligned_allocator.h"
#include "test/csrc/common/cpu_test_support.h"

namespace xllm_kernel::cpu {
namespace {

using namespace test;  // NOLINT: the test helpers

struct Seq {
  int64_t q_len;
  int64_t context;  // seq_lens: the new rows included
};

struct Case {
  DType dtype;
  int64_t q_heads, kv_heads, head_size, block_size;
  std::vector<Seq> seqs;
  float soft_cap = 0.0f;
  int64_t window = 0;
  int64_t head_pad = 0;   // extra elements between query / out heads
  int64_t block_pad = 0;  // extra elements between cache blocks
  // Quantized caches (a bf16 query): float8_e4m3fn with one scale per cache, or int8 with one per
  // (row, KV head); the reference works from the dequantized rows float(q) * scale (float32).
  kernels::KvCacheFormat cache = kernels::KvCacheFormat::kPlain;
};

Case WithCache(Case c, kernels::KvCacheFormat cache) {
  c.cache = cache;
  return c;
}

std::string Describe(const Case& c) {
  std::string s = std::string(ShortName(c.dtype)) + " heads " + std::to_string(c.q_heads) + "/" +
                  std::to_string(c.kv_heads) + " head_size " + std::to_string(c.head_size) + " block " +
                  std::to_string(c.block_size) + " cap " + std::to_string(c.soft_cap) + " window " +
                  std::to_string(c.window) + " seqs";
  for (const Seq& q : c.seqs) s += " " + std::to_string(q.q_len) + "/" + std::to_string(q.context);
  if (c.cache != kernels::KvCacheFormat::kPlain) s += std::string(" cache ") + kernels::kv_cache_format_name(c.cache);
  return s;
}

uint32_t NaNBits(DType t) { return t == DType::kFloat32 ? 0x7FC00000u : t == DType::kBFloat16 ? 0x7FC0u : 0x7E00u; }

// The buffers of one call, with NaN wherever the kernel must not read and a sentinel wherever it
// must not write.
struct Problem {
  Case c;
  int64_t tokens = 0, num_blocks = 0, max_blocks = 0, block_stride = 0;
  int64_t q_head_stride = 0, q_token_stride = 0;
  std::vector<uint8_t> query, key_cache, value_cache, out;
  std::vector<float> key_scale, value_scale;  // quantized caches: [1] fp8, [num_blocks][block_size][kv_heads] int8
  std::vector<int32_t> tables, qsl, lens;
  std::vector<double> kref, vref;  // [seq][key][kv_head][head_size], decoded
  std::vector<int64_t> key_offset;  // per seq: offset of key 0 in kref / vref
  std::vector<double> qref;  // [token][q_heads][head_size]
  double vmax = 0;
  float scale = 0;
  uint32_t sentinel = 0;
  // Per output element: sqrt(sum_j w_j^2 (v_j - out)^2) (Reference fills it).
  mutable std::vector<double> spread;
  // The index arrays the kernel reads, each ending right before an inaccessible page; kept until
  // the problem dies (earlier Params() stay valid).
  std::vector<std::shared_ptr<GuardedArray<int32_t>>> guarded;

  int32_t* Guarded(const int32_t* values, size_t n) {
    guarded.push_back(std::make_shared<GuardedArray<int32_t>>(values, n));
    EXPECT_TRUE(guarded.back()->ok());
    return guarded.back()->data();
  }

  // Parameters over copies of the index arrays as they are now (change tables, qsl or lens before
  // calling this). The block table ends right after the last sequence's last block (the rows before
  // it keep their unused entries): a kernel reading the table entry past the blocks a sequence
  // needs crashes, as it does on seq_lens[num_seqs] or query_start_loc[num_seqs + 1].
  PagedAttentionParams Params() {
    PagedAttentionParams p;
    p.dtype = c.dtype;
    p.num_seqs = static_cast<int64_t>(c.seqs.size());
    p.query_tokens = tokens;
    p.q_heads = c.q_heads;
    p.kv_heads = c.kv_heads;
    p.head_size = c.head_size;
    p.block_size = c.block_size;
    p.num_blocks = num_blocks;
    p.max_blocks_per_seq = max_blocks;
    p.query = query.data();
    p.query_strides = {q_token_stride, q_head_stride};
    p.key_cache = key_cache.data();
    p.key_cache_strides = {block_stride, c.kv_heads * c.head_size, c.head_size};
    p.value_cache = value_cache.data();
    p.value_cache_strides = {block_stride, c.kv_heads * c.head_size, c.head_size};
    if (c.cache != kernels::KvCacheFormat::kPlain) {
      p.cache_format = c.cache;
      p.key_scale = key_scale.data();
      p.value_scale = value_scale.data();
      p.key_scale_strides = p.value_scale_strides = {c.block_size * c.kv_heads, c.kv_heads, 1};
    }
    p.out = out.data();
    p.out_strides = {q_token_stride, q_head_stride};
    size_t table_entries = tables.size();
    if (!lens.empty()) {
      const int64_t last = std::clamp<int64_t>((lens.back() + c.block_size - 1) / c.block_size, 0, max_blocks);
      table_entries = static_cast<size_t>((static_cast<int64_t>(lens.size()) - 1) * max_blocks + last);
    }
    p.block_tables = Guarded(tables.data(), table_entries);
    p.block_table_stride = max_blocks;
    p.query_start_loc = Guarded(qsl.data(), qsl.size());
    p.seq_lens = Guarded(lens.data(), lens.size());
    p.scale = scale;
    p.soft_cap = c.soft_cap;
    p.sliding_window = c.window;
    return p;
  }
};

// A quantized cache's pages: uniform values of the rows [row][kv_heads * head_size] quantized (fp8 by
// the one scale, int8 by each (row, head)'s amax / 127), `ref` the dequantized values.
void QuantizeRows(const Case& c, const std::vector<float>& x, const std::vector<int64_t>& row_base,
                  const std::vector<int64_t>& scale_base, uint8_t* cache, float* scales, std::vector<double>& ref) {
  const int64_t row_elems = c.kv_heads * c.head_size;
  for (size_t r = 0; r < row_base.size(); ++r) {
    for (int64_t g = 0; g < c.kv_heads; ++g) {
      const float* xs = &x[r * row_elems + g * c.head_size];
      float scale = scales[0];
      if (c.cache == kernels::KvCacheFormat::kInt8) {
        float amax = 0;
        for (int64_t i = 0; i < c.head_size; ++i) amax = std::max(amax, std::fabs(xs[i]));
        scale = scales[scale_base[r] + g] = amax / 127.0f;
      }
      for (int64_t i = 0; i < c.head_size; ++i) {
        const int64_t e = row_base[r] + g * c.head_size + i;
        float q;
        if (c.cache == kernels::KvCacheFormat::kInt8) {
          const int v = scale > 0 ? static_cast<int>(std::nearbyint(xs[i] / scale)) : 0;
          cache[e] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(v, -127, 127)));
          q = static_cast<float>(static_cast<int8_t>(cache[e]));
        } else {
          cache[e] = Fp8Nearest(xs[i] / scale);
          q = static_cast<float>(Fp8Value(cache[e]));
        }
        ref[r * row_elems + g * c.head_size + i] = static_cast<double>(q * scale);  // float32, as dequantized
      }
    }
  }
}

Problem MakeProblem(const Case& c, std::mt19937& rng) {
  Problem pr;
  pr.c = c;
  const DType t = c.dtype;
  const bool quant = c.cache != kernels::KvCacheFormat::kPlain;
  if (quant) EXPECT_EQ(t, DType::kBFloat16) << "quantized caches take a bf16 query here";
  const int64_t es = static_cast<int64_t>(ElemSize(t));
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  pr.q_head_stride = c.head_size + c.head_pad;
  pr.q_token_stride = c.q_heads * pr.q_head_stride + c.head_pad;
  int64_t needed = 0;
  for (const Seq& s : c.seqs) {
    pr.tokens += s.q_len;
    const int64_t blocks = (s.context + c.block_size - 1) / c.block_size;
    needed += blocks;
    pr.max_blocks = std::max(pr.max_blocks, blocks + 2);
  }
  pr.num_blocks = needed + 3;  // three blocks no table names
  pr.block_stride = c.block_size * c.kv_heads * c.head_size + c.block_pad;
  const int64_t cache_elems = pr.num_blocks * pr.block_stride;
  if (quant) {
    // NaN wherever nothing may be read: fp8 0x7F in the rows, int8 NaN in the rows' scales.
    pr.key_cache.assign(cache_elems, 0x7F);
    pr.value_cache.assign(cache_elems, 0x7F);
    const bool fp8 = c.cache == kernels::KvCacheFormat::kFp8E4M3;
    const size_t scales = fp8 ? 1 : static_cast<size_t>(pr.num_blocks * c.block_size * c.kv_heads);
    pr.key_scale.assign(scales, NAN);
    pr.value_scale.assign(scales, NAN);
    if (fp8) {
      // The values up to about 1 use e4m3's range up to 448 (a scale as calibrated, with headroom).
      pr.key_scale[0] = 1.25f / 448.0f;
      pr.value_scale[0] = 1.5f / 448.0f;
    }
  } else {
    pr.key_cache.resize(cache_elems * es);
    pr.value_cache.resize(cache_elems * es);
    for (int64_t i = 0; i < cache_elems; ++i) {
      StoreBits(t, pr.key_cache.data(), i, NaNBits(t));
      StoreBits(t, pr.value_cache.data(), i, NaNBits(t));
    }
  }
  std::vector<int32_t> ids(pr.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  // Table entries past a sequence's blocks: ids no cache has (never read).
  pr.tables.assign(std::max<int64_t>(1, c.seqs.size() * pr.max_blocks), 0);
  for (size_t i = 0; i < pr.tables.size(); ++i) pr.tables[i] = i % 2 ? 0x7FFFFFFF : -7;
  pr.qsl.push_back(0);
  int64_t next_id = 0, key_total = 0;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    pr.qsl.push_back(pr.qsl.back() + static_cast<int32_t>(c.seqs[s].q_len));
    pr.lens.push_back(static_cast<int32_t>(c.seqs[s].context));
    pr.key_offset.push_back(key_total);
    key_total += c.seqs[s].context;
    const int64_t blocks = (c.seqs[s].context + c.block_size - 1) / c.block_size;
    for (int64_t b = 0; b < blocks; ++b) pr.tables[s * pr.max_blocks + b] = ids[next_id++];
  }
  const int64_t row_elems = c.kv_heads * c.head_size;
  pr.kref.resize(key_total * row_elems);
  pr.vref.resize(key_total * row_elems);
  std::vector<float> kx, vx;
  std::vector<int64_t> row_base, scale_base;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    for (int64_t j = 0; j < c.seqs[s].context; ++j) {
      const int64_t id = pr.tables[s * pr.max_blocks + j / c.block_size];
      const int64_t base = id * pr.block_stride + (j % c.block_size) * row_elems;
      row_base.push_back(base);
      scale_base.push_back((id * c.block_size + j % c.block_size) * c.kv_heads);
      for (int64_t e = 0; e < row_elems; ++e) {
        const int64_t ref = (pr.key_offset[s] + j) * row_elems + e;
        if (quant) {
          kx.push_back(uni(rng));
          vx.push_back(uni(rng));
          continue;
        }
        pr.kref[ref] = Store(t, pr.key_cache.data(), base + e, uni(rng));
        pr.vref[ref] = Store(t, pr.value_cache.data(), base + e, uni(rng));
      }
    }
  }
  if (quant) {
    QuantizeRows(c, kx, row_base, scale_base, pr.key_cache.data(), pr.key_scale.data(), pr.kref);
    QuantizeRows(c, vx, row_base, scale_base, pr.value_cache.data(), pr.value_scale.data(), pr.vref);
  }
  for (double v : pr.vref) pr.vmax = std::max(pr.vmax, std::fabs(v));
  const int64_t q_elems = std::max<int64_t>(1, pr.tokens) * pr.q_token_stride;
  pr.query.resize(q_elems * es);
  pr.out.resize(q_elems * es);
  pr.sentinel = EncodeBits(t, 7.0f);
  for (int64_t i = 0; i < q_elems; ++i) {
    StoreBits(t, pr.query.data(), i, NaNBits(t));
    StoreBits(t, pr.out.data(), i, pr.sentinel);
  }
  pr.qref.resize(std::max<int64_t>(1, pr.tokens) * c.q_heads * c.head_size);
  for (int64_t tok = 0; tok < pr.tokens; ++tok) {
    for (int64_t h = 0; h < c.q_heads; ++h) {
      for (int64_t i = 0; i < c.head_size; ++i) {
        pr.qref[(tok * c.q_heads + h) * c.head_size + i] =
            Store(t, pr.query.data(), tok * pr.q_token_stride + h * pr.q_head_stride + i, uni(rng));
      }
    }
  }
  // Logits of a few units: a peaked softmax, where a wrong maximum or mask shows.
  pr.scale = 3.0f / std::sqrt(static_cast<float>(c.head_size));
  return pr;
}

// out[token][h][:] in float64 from the pages; `written[token]` false where nothing may be written.
void Reference(const Problem& pr, std::vector<double>& ref) {
  const Case& c = pr.c;
  const int64_t G = c.q_heads / c.kv_heads, hs = c.head_size, row_elems = c.kv_heads * hs;
  ref.assign(std::max<int64_t>(1, pr.tokens) * c.q_heads * hs, 0.0);
  pr.spread.assign(ref.size(), 0.0);
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const int64_t q_len = c.seqs[s].q_len, ctx = c.seqs[s].context;
    for (int64_t r = 0; r < q_len; ++r) {
      const int64_t tok = pr.qsl[s] + r, pos = ctx - q_len + r;
      const int64_t lo = c.window > 0 ? std::max<int64_t>(0, pos - c.window + 1) : 0;
      for (int64_t h = 0; h < c.q_heads; ++h) {
        const int64_t g = h / G;
        const double* q = &pr.qref[(tok * c.q_heads + h) * hs];
        std::vector<double> logit(pos + 1 - lo);
        double mx = -INFINITY;
        for (int64_t j = lo; j <= pos; ++j) {
          const double* k = &pr.kref[(pr.key_offset[s] + j) * row_elems + g * hs];
          double dot = 0;
          for (int64_t i = 0; i < hs; ++i) dot += q[i] * k[i];
          double l = static_cast<double>(pr.scale) * dot;
          if (c.soft_cap > 0) l = c.soft_cap * std::tanh(l / c.soft_cap);
          logit[j - lo] = l;
          mx = std::max(mx, l);
        }
        double sum = 0;
        for (double& l : logit) sum += (l = std::exp(l - mx));
        double* o = &ref[(tok * c.q_heads + h) * hs];
        for (int64_t j = lo; j <= pos; ++j) {
          const double* v = &pr.vref[(pr.key_offset[s] + j) * row_elems + g * hs];
          for (int64_t i = 0; i < hs; ++i) o[i] += logit[j - lo] / sum * v[i];
        }
        double* sp = &pr.spread[(tok * c.q_heads + h) * hs];
        for (int64_t j = lo; j <= pos; ++j) {
          const double* v = &pr.vref[(pr.key_offset[s] + j) * row_elems + g * hs];
          const double w = logit[j - lo] / sum;
          // Quantized caches: the rounded weights carry the value scales and the denominator sums
          // the plain weights, so an error d_j moves the output by w_j d_j v_j.
          const bool quant = c.cache != kernels::KvCacheFormat::kPlain;
          for (int64_t i = 0; i < hs; ++i) {
            const double dv = quant ? v[i] : v[i] - o[i];
            sp[i] += w * w * dv * dv;
          }
        }
        for (int64_t i = 0; i < hs; ++i) sp[i] = std::sqrt(sp[i]);
      }
    }
  }
}

hwy::AlignedFreeUniquePtr<uint8_t[]> Workspace(const PagedAttentionPlan& plan) {
  return hwy::AllocateAligned<uint8_t>(static_cast<size_t>(std::max<int64_t>(plan.workspace_bytes, 64)));
}

// Runs the plan for `threads` threads: sequentially item by item, or on std::threads that each take
// the next unstarted item (the bridge's contract).
void RunPlan(PagedAttentionParams p, int64_t threads, bool on_threads) {
  const PagedAttentionPlan plan = plan_paged_attention(p, threads);
  auto ws = Workspace(plan);
  ASSERT_EQ(plan.items, static_cast<int64_t>(plan.work.size()));
  ASSERT_EQ(plan.merges, static_cast<int64_t>(plan.merge.size()));
  if (!on_threads) {
    for (int64_t i = 0; i < plan.items; ++i) ASSERT_TRUE(paged_attention(p, plan, ws.get(), i, i + 1).is_ok());
    for (int64_t i = 0; i < plan.merges; ++i) ASSERT_TRUE(paged_attention_merge(p, plan, ws.get(), i, i + 1).is_ok());
    return;
  }
  std::atomic<int64_t> next{0}, failures{0};
  auto pull = [&](int64_t count, auto&& run) {
    std::vector<std::thread> pool;
    next = 0;
    for (int64_t t = 0; t < threads; ++t) {
      pool.emplace_back([&] {
        for (int64_t i; (i = next.fetch_add(1)) < count;) {
          if (!run(i).is_ok()) ++failures;
        }
      });
    }
    for (auto& th : pool) th.join();
  };
  pull(plan.items, [&](int64_t i) { return paged_attention(p, plan, ws.get(), i, i + 1); });
  pull(plan.merges, [&](int64_t i) { return paged_attention_merge(p, plan, ws.get(), i, i + 1); });
  EXPECT_EQ(failures.load(), 0);
}

// Whether this CPU and OS run the prefill tile kernel on AMX: AVX512_BF16, AMX-TILE and AMX-BF16 and
// the tile data granted to the process, as the kernel itself asks (csrc/cpu/common/cpu_features.h),
// unless a test takes AMX away (Avx512PrefillTiles).
bool HasAmxKernel() {
  const CpuFeatures& f = cpu_features();
  return f.avx512_bf16 && f.amx_bf16 && amx_tile_data_granted();
}

// While alive, AMX is taken away (ScopedCpuFeatures): the prefill tile kernel runs on the AVX-512
// BF16 tiles, AMX or not.
class Avx512PrefillTiles {
 public:
  Avx512PrefillTiles() : scope_(WithoutAmx()) {}

 private:
  static CpuFeatures WithoutAmx() {
    CpuFeatures f = probed_cpu_features();
    f.amx_bf16 = f.amx_int8 = false;
    return f;
  }
  ScopedCpuFeatures scope_;
};

// The prefill tile kernel of this CPU: on AMX, or on the AVX-512 BF16 tiles (every CPU with
// AVX512_BF16; where it is absent, the kernel never runs).
AttentionKernel PrefillTileKernel() {
  return HasAmxKernel() ? AttentionKernel::kAmxBf16Prefill : AttentionKernel::kAvx512Bf16Prefill;
}

// Whether the prefill tile kernel may run items of this dtype under the current target restriction.
bool AmxKernelMayRun(DType t) {
  return t == DType::kBFloat16 && cpu_features().avx512_bf16 && (hwy::SupportedTargets() & (HWY_AVX3 | HWY_AVX3_DL)) != 0;
}

// Standard deviations of the bf16 rounding of the softmax weights allowed (see the top).
constexpr double kWeightSigmas = 6;

// Compares every output element with the reference and every other element with the sentinel.
// Returns the largest error / tolerance.
// worst_float32: where given, the largest error / the bound without the weights' rounding term.
double Check(const Problem& pr, const std::vector<double>& ref, const std::vector<bool>& written = {},
             double* worst_float32 = nullptr) {
  const Case& c = pr.c;
  const DType t = c.dtype;
  const int64_t hs = c.head_size;
  double worst = 0;
  int64_t reported = 0;
  for (int64_t tok = 0; tok < pr.tokens; ++tok) {
    const bool expect_written = written.empty() || written[tok];
    int64_t seq = 0;
    while (pr.qsl[seq + 1] <= tok) ++seq;
    const int64_t keys = std::min<int64_t>(c.seqs[seq].context, c.window > 0 ? c.window : INT64_MAX);
    const bool rounded_weights = AmxKernelMayRun(c.dtype) && c.seqs[seq].q_len * (c.q_heads / c.kv_heads) > 16 &&
                                 c.head_size <= 256;
    for (int64_t h = 0; h < c.q_heads; ++h) {
      for (int64_t i = 0; i < hs; ++i) {
        const uint32_t bits = LoadBits(t, pr.out.data(), tok * pr.q_token_stride + h * pr.q_head_stride + i);
        if (!expect_written) {
          EXPECT_EQ(bits, pr.sentinel) << "token " << tok << " written";
          continue;
        }
        const double got = DecodeBits(t, bits), want = ref[(tok * c.q_heads + h) * hs + i];
        const double tol32 = Roundoff(t) * std::fabs(want) + SubnormalHalfSpacing(t) +
                             32 * 0x1p-24 * pr.vmax * (std::sqrt(static_cast<double>(keys)) + std::sqrt(double(hs)));
        const double tol =
            tol32 + (rounded_weights ? kWeightSigmas * 0x1p-8 / std::sqrt(3.0) * pr.spread[(tok * c.q_heads + h) * hs + i]
                                     : 0.0);
        const double err = std::fabs(got - want);
        worst = std::max(worst, std::isnan(err) ? INFINITY : err / tol);
        if (worst_float32 != nullptr) *worst_float32 = std::max(*worst_float32, std::isnan(err) ? INFINITY : err / tol32);
        if (!(err <= tol) && reported++ < 5) {
          ADD_FAILURE() << "token " << tok << " head " << h << " elem " << i << ": got " << got << " want " << want
                        << " tol " << tol;
        }
      }
    }
  }
  // Padding between heads and after each token's heads is never written.
  for (int64_t tok = 0; tok < pr.tokens; ++tok) {
    for (int64_t e = 0; e < pr.q_token_stride; ++e) {
      const int64_t h = e / pr.q_head_stride, i = e % pr.q_head_stride;
      if (h < c.q_heads && i < hs) continue;
      EXPECT_EQ(LoadBits(t, pr.out.data(), tok * pr.q_token_stride + e), pr.sentinel) << "padding written";
    }
  }
  return worst;
}

double RunAndCheck(const Case& c, int64_t threads, bool on_threads, std::mt19937& rng) {
  SCOPED_TRACE(Describe(c) + " threads " + std::to_string(threads));
  Problem pr = MakeProblem(c, rng);
  std::vector<double> ref;
  Reference(pr, ref);
  RunPlan(pr.Params(), threads, on_threads);
  return Check(pr, ref);
}

// The cases of the reference tests, every dtype: decode, prefill, chunked prefill, mixed batches
// with padding sequences.
std::vector<Case> ReferenceCases() {
  const std::vector<Seq> mixed = {{1, 37}, {0, 0}, {5, 5}, {3, 70}, {1, 1}, {0, 9}};
  std::vector<Case> cases;
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    cases.push_back({t, 32, 8, 128, 16, {{1, 300}, {1, 17}, {1, 1}, {1, 64}}});       // decode
    cases.push_back({t, 8, 8, 64, 16, {{40, 40}}});                                    // prefill
    cases.push_back({t, 16, 1, 80, 32, {{24, 90}, {1, 33}}});                          // chunked prefill + decode
    cases.push_back({t, 9, 3, 96, 1, mixed, 0.0f, 0, 3, 5});                           // block 1, strided
    cases.push_back({t, 40, 40, 67, 16, {{2, 50}, {7, 7}}, 30.0f});                    // tail, soft cap
    cases.push_back({t, 4, 2, 256, 32, {{19, 120}, {1, 200}}, 0.0f, 7});               // window 7
    cases.push_back({t, 6, 2, 33, 16, {{33, 300}, {2, 17}}, 30.0f, 256, 1, 16});       // window 256, cap
    cases.push_back({t, 2, 1, 1, 16, {{3, 20}, {1, 1}}});                              // head size 1
  }
  return cases;
}

TEST(CpuAttentionKernel, MatchesFloat64ReferenceOnEveryTarget) {
  std::mt19937 rng(11);
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    SCOPED_TRACE(hwy::TargetName(target));
    double worst = 0;
    for (const Case& c : ReferenceCases()) worst = std::max(worst, RunAndCheck(c, 1, false, rng));
    std::printf("%s: worst error / tolerance %.3f\n", hwy::TargetName(target), worst);
  }
}

// Larger shapes on the best target only: the decode of the benchmark's shape (shortened), a
// prefill of several query tiles, and head size 512.
TEST(CpuAttentionKernel, LargerShapesMatchFloat64Reference) {
  std::mt19937 rng(12);
  const std::vector<Case> cases = {
      {DType::kBFloat16, 32, 8, 128, 16, {{1, 1100}, {1, 700}, {1, 1}}},
      {DType::kBFloat16, 32, 8, 128, 16, {{130, 130}}},
      {DType::kFloat32, 8, 2, 512, 16, {{3, 260}, {1, 100}}},
      {DType::kFloat16, 16, 4, 128, 16, {{64, 600}, {1, 600}}, 30.0f, 256},
  };
  for (const Case& c : cases) RunAndCheck(c, 2, true, rng);
}

// A plan with splits (threads 8 and one sequence) gives the unsplit answer within the tolerance.
TEST(CpuAttentionKernel, SplitPlansMatchUnsplit) {
  std::mt19937 rng(13);
  const std::vector<Case> cases = {
      {DType::kBFloat16, 8, 1, 128, 16, {{1, 1100}}},
      {DType::kFloat32, 32, 8, 64, 16, {{1, 1000}}, 30.0f},
      {DType::kFloat16, 4, 4, 67, 32, {{2, 1030}}, 0.0f, 700},
      {DType::kBFloat16, 8, 2, 96, 16, {{20, 1100}}},
  };
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (const Case& c : cases) {
      Problem pr = MakeProblem(c, rng);
      const PagedAttentionParams p = pr.Params();
      EXPECT_GT(plan_paged_attention(p, 8).merges, 0) << Describe(c);
      EXPECT_EQ(plan_paged_attention(p, 1).merges, 0) << Describe(c);
      std::vector<double> ref;
      Reference(pr, ref);
      RunPlan(p, 8, false);
      Check(pr, ref);
      RunPlan(p, 1, false);
      Check(pr, ref);
      // Not bitwise: the splits' sums are added in another order.
    }
  }
}

// Threads taking the next item give the bits of a sequential run (items never share outputs).
TEST(CpuAttentionKernel, ThreadsGiveTheSequentialBits) {
  std::mt19937 rng(14);
  const Case c = {DType::kBFloat16, 16, 4, 128, 16, {{1, 900}, {37, 300}, {1, 40}, {0, 0}, {5, 600}}};
  Problem pr = MakeProblem(c, rng);
  RunPlan(pr.Params(), 3, false);
  const std::vector<uint8_t> sequential = pr.out;
  RunPlan(pr.Params(), 3, true);
  EXPECT_EQ(pr.out, sequential);
}

// Every visible (sequence, KV head, query row, key) in exactly one item; split items in exactly one
// merge with slots [0, splits) and disjoint states inside the workspace; items longest first.
void CheckPlanCoverage(const Case& c, int64_t threads, std::mt19937& rng) {
  SCOPED_TRACE(Describe(c) + " threads " + std::to_string(threads));
  Problem pr = MakeProblem(c, rng);
  const PagedAttentionParams p = pr.Params();
  const PagedAttentionPlan plan = plan_paged_attention(p, threads);
  const int64_t G = c.q_heads / c.kv_heads;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, int> count;  // (seq, kv_head, row, key)
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, std::vector<int64_t>> splits;
  int64_t prev_cost = INT64_MAX;
  for (const AttentionItem& it : plan.work) {
    ASSERT_GE(it.seq, 0);
    ASSERT_LT(it.seq, static_cast<int64_t>(c.seqs.size()));
    const Seq& s = c.seqs[it.seq];
    ASSERT_TRUE(0 <= it.query_begin && it.query_begin < it.query_end && it.query_end <= s.q_len);
    ASSERT_TRUE(0 <= it.key_begin && it.key_begin < it.key_end && it.key_end <= s.context);
    ASSERT_TRUE(0 <= it.kv_head && it.kv_head < it.kv_head_end && it.kv_head_end <= c.kv_heads);
    for (int64_t g = it.kv_head; g < it.kv_head_end; ++g) {
      for (int64_t r = it.query_begin; r < it.query_end; ++r) {
        const int64_t pos = s.context - s.q_len + r;
        const int64_t lo = c.window > 0 ? std::max<int64_t>(0, pos - c.window + 1) : 0;
        for (int64_t j = std::max(lo, it.key_begin); j <= std::min(pos, it.key_end - 1); ++j) {
          ++count[{it.seq, g, r, j}];
        }
      }
    }
    const int64_t heads = it.kv_head_end - it.kv_head;
    const int64_t cost = (it.key_end - it.key_begin) * ((it.query_end - it.query_begin) * G + 8) * heads;
    EXPECT_LE(cost, prev_cost) << "items not longest first";
    prev_cost = cost;
    if (it.split >= 0) {
      splits[{it.seq, it.kv_head, it.query_begin, it.query_end}].push_back(it.split);
      const int64_t m = heads * (it.query_end - it.query_begin) * G;
      const int64_t floats = 16 * ((2 * m + 15) / 16) + m * 16 * ((c.head_size + 15) / 16);
      EXPECT_LE((it.state + (it.split + 1) * floats) * 4, plan.workspace_bytes);
    }
  }
  int64_t expected = 0;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    for (int64_t r = 0; r < c.seqs[s].q_len; ++r) {
      const int64_t pos = c.seqs[s].context - c.seqs[s].q_len + r;
      const int64_t lo = c.window > 0 ? std::max<int64_t>(0, pos - c.window + 1) : 0;
      expected += (pos - lo + 1) * c.kv_heads;
    }
  }
  EXPECT_EQ(static_cast<int64_t>(count.size()), expected);
  for (const auto& [key, n] : count) EXPECT_EQ(n, 1);
  EXPECT_EQ(splits.size(), plan.merge.size());
  std::vector<std::pair<int64_t, int64_t>> states;
  for (const AttentionMerge& mg : plan.merge) {
    auto it = splits.find({mg.seq, mg.kv_head, mg.query_begin, mg.query_end});
    ASSERT_NE(it, splits.end());
    std::vector<int64_t> slots = it->second;
    std::sort(slots.begin(), slots.end());
    std::vector<int64_t> want(mg.splits);
    std::iota(want.begin(), want.end(), 0);
    EXPECT_EQ(slots, want);
    const int64_t m = (mg.kv_head_end - mg.kv_head) * (mg.query_end - mg.query_begin) * G;
    const int64_t split_floats = 16 * ((2 * m + 15) / 16) + m * 16 * ((c.head_size + 15) / 16);
    states.push_back({mg.state, mg.state + mg.splits * split_floats});
  }
  std::sort(states.begin(), states.end());
  for (size_t i = 1; i < states.size(); ++i) EXPECT_LE(states[i - 1].second, states[i].first) << "states overlap";
}

TEST(CpuAttentionKernel, PlanCoversEveryVisibleKeyOnce) {
  std::mt19937 rng(15);
  const std::vector<Seq> mixed = {{1, 37}, {0, 0}, {50, 50}, {33, 700}, {1, 1}, {1, 2000}};
  for (int64_t threads : {1, 2, 8, 64}) {
    CheckPlanCoverage({DType::kBFloat16, 32, 8, 128, 16, mixed}, threads, rng);
    CheckPlanCoverage({DType::kFloat16, 9, 3, 67, 1, mixed, 0.0f, 7}, threads, rng);
    CheckPlanCoverage({DType::kFloat32, 8, 1, 256, 32, {{1, 3000}}, 0.0f, 1000}, threads, rng);
  }
}

// One 512-row prefill chunk and 15 decodes at context 4096 (the mixed batch): no item
// holds more than an eighth of the work, so two threads stay balanced.
TEST(CpuAttentionKernel, PlanBalancesAMixedBatch) {
  PagedAttentionParams p = Llama8BPagedAttention(16);
  std::vector<int32_t> qsl = {0}, lens, tables(16 * 256);
  std::iota(tables.begin(), tables.end(), 0);
  for (int s = 0; s < 16; ++s) {
    qsl.push_back(qsl.back() + (s == 0 ? 512 : 1));
    lens.push_back(4096);
  }
  p.query_tokens = qsl.back();
  p.query_start_loc = qsl.data();
  p.seq_lens = lens.data();
  p.block_tables = tables.data();
  p.block_table_stride = 256;
  for (int64_t threads : {2, 8}) {
    const PagedAttentionPlan plan = plan_paged_attention(p, threads);
    int64_t total = 0, largest = 0;
    for (const AttentionItem& it : plan.work) {
      const int64_t w = (it.key_end - it.key_begin) * (it.query_end - it.query_begin) * (it.kv_head_end - it.kv_head);
      total += w;
      largest = std::max(largest, w);
    }
    EXPECT_LE(largest * 8 * threads, total * 2) << "threads " << threads;
    EXPECT_GE(plan.items, 4 * threads);
    EXPECT_EQ(plan.merges, 0);
  }
}

// Bad block ids (past the cache, right at an inaccessible page, and negative) where a sequence's
// keys are, and lengths that contradict each other: nothing read there, nothing written for that
// sequence, the others right.
TEST(CpuAttentionKernel, BadBlocksAndLengthsWriteNothingAndReadNothing) {
  std::mt19937 rng(16);
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    SCOPED_TRACE(hwy::TargetName(target));
    const Case c = {DType::kBFloat16, 8, 2, 64, 16, {{1, 40}, {1, 40}, {2, 20}, {3, 2}, {1, 30}, {4, 4}}};
    Problem pr = MakeProblem(c, rng);
    // The caches end right before an inaccessible page: block num_blocks would be on it.
    const size_t bytes = pr.key_cache.size();
    GuardedRegion kc(bytes), vc(bytes);
    ASSERT_TRUE(kc.ok() && vc.ok());
    std::memcpy(kc.tail(bytes), pr.key_cache.data(), bytes);
    std::memcpy(vc.tail(bytes), pr.value_cache.data(), bytes);
    std::vector<double> ref;
    Reference(pr, ref);
    pr.tables[0 * pr.max_blocks + 1] = static_cast<int32_t>(pr.num_blocks);  // seq 0: past the end
    pr.tables[1 * pr.max_blocks + 2] = -1;                                    // seq 1: negative
    pr.lens[3] = 2;                                                            // seq 3: q_len 3 > 2 keys
    pr.lens[4] = static_cast<int32_t>(pr.max_blocks * c.block_size + 1);       // seq 4: beyond the table
    PagedAttentionParams p = pr.Params();  // the index arrays as changed
    p.key_cache = kc.tail(bytes);
    p.value_cache = vc.tail(bytes);
    std::vector<bool> written(pr.tokens, true);
    for (int s : {0, 1, 3, 4}) {
      for (int32_t t = pr.qsl[s]; t < pr.qsl[s + 1]; ++t) written[t] = false;
    }
    RunPlan(p, 2, false);
    Check(pr, ref, written);
  }
}

// Every index array ends right before an inaccessible page (Problem::Params): the block table right
// after the last sequence's last block, seq_lens and query_start_loc after their last entries.
// Batches whose last sequence fills its last block exactly (the walk must stop at the last key,
// not step into the next block's id), whole and split over threads (split items end mid-sequence),
// every block size of the reference tests, decode and prefill (the AVX-512 BF16 decode and the
// prefill tile kernels where the CPU has them).
TEST(CpuAttentionKernel, ReadsNoIndexPastTheArrays) {
  std::mt19937 rng(23);
  std::vector<Case> cases;
  for (DType t : {DType::kBFloat16, DType::kFloat32, DType::kFloat16}) {
    cases.push_back({t, 8, 2, 64, 16, {{1, 17}, {1, 64}}});                       // decode
    cases.push_back({t, 8, 2, 64, 16, {{1, 1}, {1, 1024}}});                      // decode, long
    cases.push_back({t, 32, 8, 128, 32, {{1, 96}, {40, 96}}});                    // mixed
    cases.push_back({t, 8, 8, 64, 16, {{48, 48}}});                               // prefill
    cases.push_back({t, 9, 3, 33, 1, {{3, 7}, {0, 0}, {2, 5}}});                  // block 1, padding seq
    cases.push_back({t, 4, 2, 128, 16, {{2, 40}, {1, 32}}, 0.0f, 7});             // window
  }
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (const Case& c : cases) {
      for (int64_t threads : {1, 3, 8}) RunAndCheck(c, threads, false, rng);
    }
  }
}

// Queries, outputs, cache blocks and the block table that end right before an inaccessible page,
// head sizes with tails: nothing read or written past a row, no table entry read past the block
// the last key is in (the last key is the last row of its block).
TEST(CpuAttentionKernel, NoAccessPastTheRows) {
  std::mt19937 rng(17);
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (DType t : {DType::kBFloat16, DType::kFloat32, DType::kFloat16}) {
      for (int64_t hs : {1, 7, 33, 67, 128}) {
        const Case c = {t, 2, 1, hs, 4, {{1, 4}}};
        Problem pr = MakeProblem(c, rng);
        // Exactly one block (no unused ones), the last row of the block the last key.
        const size_t es = ElemSize(t);
        const size_t cache_bytes = static_cast<size_t>(c.block_size * hs) * es;
        const size_t q_bytes = static_cast<size_t>(2 * hs) * es;
        GuardedRegion kc(cache_bytes), vc(cache_bytes), q(q_bytes), o(q_bytes);
        ASSERT_TRUE(kc.ok() && vc.ok() && q.ok() && o.ok());
        const int64_t id = pr.tables[0];
        std::memcpy(kc.tail(cache_bytes), pr.key_cache.data() + id * pr.block_stride * es, cache_bytes);
        std::memcpy(vc.tail(cache_bytes), pr.value_cache.data() + id * pr.block_stride * es, cache_bytes);
        for (int64_t h = 0; h < 2; ++h) {
          std::memcpy(q.tail(q_bytes) + h * hs * es, pr.query.data() + h * pr.q_head_stride * es, hs * es);
        }
        const int32_t block0 = 0;
        PagedAttentionParams p = pr.Params();
        p.num_blocks = 1;
        p.max_blocks_per_seq = 1;
        p.block_tables = pr.Guarded(&block0, 1);  // the table ends at a guard page too
        p.block_table_stride = 1;
        p.key_cache = kc.tail(cache_bytes);
        p.value_cache = vc.tail(cache_bytes);
        p.query = q.tail(q_bytes);
        p.query_strides = {2 * hs, hs};
        p.out = o.tail(q_bytes);
        p.out_strides = {2 * hs, hs};
        RunPlan(p, 1, false);
        for (int64_t h = 0; h < 2; ++h) {
          std::memcpy(pr.out.data() + h * pr.q_head_stride * es, o.tail(q_bytes) + h * hs * es, hs * es);
        }
        std::vector<double> ref;
        Reference(pr, ref);
        Check(pr, ref);
      }
    }
  }
}

// Whether this CPU runs the AVX-512 BF16 decode kernel (AVX-512 F/BW/VL/DQ and AVX512_BF16, from
// csrc/cpu/common/cpu_features.h as the kernel asks) and the AVX3 target is compiled here.
bool HasDecodeKernel() {
  const auto& targets = KernelTargets();
  return cpu_features().avx512_bf16 && std::find(targets.begin(), targets.end(), HWY_AVX3) != targets.end();
}

// Why the AVX-512 BF16 decode kernel or the AMX BF16 prefill kernel cannot run here (for
// GTEST_SKIP), or "" where it can.
std::string WhyNoDecodeKernel() {
  if (!cpu_features().avx512_bf16) return "no AVX512_BF16 on this CPU (it has: " + cpu_features_text() + ")";
  if (!HasDecodeKernel()) return "the AVX3 target is not among the kernel targets here";
  return "";
}

std::string WhyNoAmxKernel() {
  if (!cpu_features().amx_bf16) return "no AMX-BF16 on this CPU (it has: " + cpu_features_text() + ")";
  const std::string no_decode = WhyNoDecodeKernel();
  if (!no_decode.empty()) return no_decode;
  if (!amx_tile_data_granted()) return "the OS refused the AMX tile data to this process";
  return "";
}

// The AVX-512 BF16 decode kernel takes bf16 items of at most 16 query vectors per KV head and
// head_size <= 256 where the CPU has it and the AVX3 target is allowed; the other items here, and
// every item under a lower target, run the Highway kernel (prefill items: AmxKernelTakesTheItemsItApplies).
// Runs on every CPU: where the kernel is absent, the choice is the Highway kernel for every item.
TEST(CpuAttentionKernel, DecodeKernelTakesTheItemsItApplies) {
  std::mt19937 rng(19);
  const bool fast = HasDecodeKernel();
  if (!fast) std::printf("no AVX-512 BF16 decode kernel on this CPU: every item runs the Highway kernel\n");
  struct Expect {
    Case c;
    bool takes;  // where the CPU has the kernel
  };
  const std::vector<Expect> expects = {
      {{DType::kBFloat16, 32, 8, 128, 16, {{1, 300}, {1, 17}}}, true},   // decode, 4 vectors per KV head
      {{DType::kBFloat16, 64, 8, 64, 16, {{2, 40}}}, true},              // 2 rows x 8 = 16 vectors
      {{DType::kBFloat16, 9, 3, 67, 16, {{1, 40}}}, true},               // tail
      {{DType::kBFloat16, 8, 8, 256, 16, {{1, 40}}}, true},
      {{DType::kBFloat16, 8, 2, 512, 16, {{1, 40}}}, false},             // head_size 512
      {{DType::kFloat32, 32, 8, 128, 16, {{1, 300}}}, false},
      {{DType::kFloat16, 32, 8, 128, 16, {{1, 300}}}, false},
  };
  for (const Expect& e : expects) {
    SCOPED_TRACE(Describe(e.c));
    Problem pr = MakeProblem(e.c, rng);
    const PagedAttentionParams p = pr.Params();
    const PagedAttentionPlan plan = plan_paged_attention(p, 2);
    ASSERT_GT(plan.items, 0);
    for (const AttentionItem& it : plan.work) {
      EXPECT_EQ(paged_attention_item_kernel(p, it),
                fast && e.takes ? AttentionKernel::kAvx512Bf16Decode : AttentionKernel::kHighway);
    }
    for (int64_t target : KernelTargets()) {
      if (target == HWY_AVX3) continue;
      TargetScope scope(target);
      for (const AttentionItem& it : plan.work) EXPECT_EQ(paged_attention_item_kernel(p, it), AttentionKernel::kHighway);
    }
  }
}

// The decode kernel against the float64 reference (on the best target, where every item below runs
// it): head sizes 64, 80, 96, 128, 256 and tails 1, 33, 67; groups 1, 3, 4, 6, 8 (the Q.K passes
// over the query vectors full, partial, or both); several rows per item; soft cap; windows;
// partial tiles at the sequences' ends (NaN in the rest of their blocks); strided rows and padded
// blocks; split plans.
TEST(CpuAttentionKernel, DecodeKernelMatchesFloat64Reference) {
  const std::string why_not = WhyNoDecodeKernel();
  if (!why_not.empty()) GTEST_SKIP() << why_not << ": the AVX-512 BF16 decode kernel never runs here";
  std::mt19937 rng(20);
  const std::vector<Seq> decode = {{1, 300}, {1, 17}, {1, 1}, {1, 64}, {1, 129}, {0, 0}};
  double worst = 0;
  std::vector<Case> cases;
  for (int64_t hs : {64, 80, 96, 128, 256, 1, 33, 67}) {
    cases.push_back({DType::kBFloat16, 32, 8, hs, 16, decode});  // group 4
  }
  cases.push_back({DType::kBFloat16, 8, 8, 128, 16, decode});                         // group 1
  cases.push_back({DType::kBFloat16, 64, 8, 128, 32, decode});                        // group 8
  cases.push_back({DType::kBFloat16, 64, 8, 256, 16, decode});                        // group 8, passes of 2
  cases.push_back({DType::kBFloat16, 48, 8, 128, 16, decode});                        // group 6: 4 + 2
  cases.push_back({DType::kBFloat16, 9, 3, 96, 1, decode, 0.0f, 0, 3, 5});            // group 3, block 1, strided
  cases.push_back({DType::kBFloat16, 32, 8, 128, 16, decode, 30.0f});                 // soft cap
  cases.push_back({DType::kBFloat16, 32, 8, 80, 16, decode, 0.0f, 7});                // window 7
  cases.push_back({DType::kBFloat16, 16, 4, 64, 16, decode, 20.0f, 100});             // window 100, cap
  cases.push_back({DType::kBFloat16, 64, 8, 64, 16, {{2, 90}, {1, 5}}});              // 2 rows x 8
  cases.push_back({DType::kBFloat16, 16, 4, 128, 16, {{4, 70}, {3, 33}}, 0.0f, 20});  // 4 rows x 4, window
  cases.push_back({DType::kBFloat16, 4, 4, 67, 16, {{16, 50}}});                      // 16 rows x 1
  for (const Case& c : cases) {
    SCOPED_TRACE(Describe(c));
    Problem pr = MakeProblem(c, rng);
    const PagedAttentionParams p = pr.Params();
    for (const AttentionItem& it : plan_paged_attention(p, 2).work) {
      EXPECT_EQ(paged_attention_item_kernel(p, it), AttentionKernel::kAvx512Bf16Decode);
    }
    std::vector<double> ref;
    Reference(pr, ref);
    RunPlan(p, 2, true);
    worst = std::max(worst, Check(pr, ref));
  }
  // Split plans: one long sequence over 8 threads, its splits merged.
  const std::vector<Case> split_cases = {
      {DType::kBFloat16, 32, 8, 128, 16, {{1, 1100}}},
      {DType::kBFloat16, 8, 1, 80, 16, {{1, 1037}}, 30.0f},
      {DType::kBFloat16, 12, 4, 256, 16, {{1, 1030}}, 0.0f, 700},
      {DType::kBFloat16, 16, 8, 67, 16, {{2, 1100}}},
  };
  for (const Case& c : split_cases) {
    SCOPED_TRACE(Describe(c));
    Problem pr = MakeProblem(c, rng);
    const PagedAttentionParams p = pr.Params();
    const PagedAttentionPlan plan = plan_paged_attention(p, 8);
    EXPECT_GT(plan.merges, 0);
    for (const AttentionItem& it : plan.work) {
      EXPECT_EQ(paged_attention_item_kernel(p, it), AttentionKernel::kAvx512Bf16Decode);
    }
    std::vector<double> ref;
    Reference(pr, ref);
    RunPlan(p, 8, false);
    worst = std::max(worst, Check(pr, ref));
  }
  std::printf("AVX-512 BF16 decode kernel: worst error / tolerance %.3f\n", worst);
}

// The kernel the entry points should pick for an item, from the rules (attention.h): bf16 with the
// AVX3 target allowed and AVX-512 BF16 present; at most 16 query vectors per KV head the decode
// kernel, more the prefill tile kernel (on AMX where the CPU and OS have it); head_size <= 256 for
// both.
AttentionKernel ExpectedKernel(const PagedAttentionParams& p, const AttentionItem& it) {
  if (!(p.dtype == DType::kBFloat16 && HasDecodeKernel() && (hwy::SupportedTargets() & (HWY_AVX3 | HWY_AVX3_DL)) != 0)) {
    return AttentionKernel::kHighway;
  }
  const int64_t vectors = (it.query_end - it.query_begin) * (p.q_heads / p.kv_heads);
  if (p.head_size > 256) return AttentionKernel::kHighway;
  if (vectors <= 16) return AttentionKernel::kAvx512Bf16Decode;
  return PrefillTileKernel();
}

// The prefill tile kernel takes items of a bf16 query (over bf16, fp8 or int8 caches) of more than
// 16 query vectors per KV head and head_size <= 256 where the CPU has AVX512_BF16 (on AMX tiles where
// it has AMX-BF16 and the OS grants the tile data) and the AVX3 target is allowed; never anywhere
// else (other query dtypes, head_size 512, lower targets, CPUs without AVX512_BF16).
void CheckPrefillKernelChoice() {
  std::mt19937 rng(21);
  const bool tiles = HasDecodeKernel();
  if (!tiles) std::printf("no AVX512_BF16: prefill items run the Highway kernel\n");
  struct Expect {
    Case c;
    bool takes;  // some item runs the prefill tile kernel where the CPU has it
  };
  using kernels::KvCacheFormat;
  const std::vector<Expect> expects = {
      {{DType::kBFloat16, 8, 8, 64, 16, {{40, 40}}}, true},               // prefill: 40 vectors per KV head
      {{DType::kBFloat16, 32, 8, 128, 16, {{100, 300}, {1, 17}}}, true},  // chunked prefill + decode
      {{DType::kBFloat16, 64, 8, 64, 16, {{3, 40}}}, true},               // 3 rows x 8 = 24 vectors
      {{DType::kBFloat16, 9, 3, 67, 1, {{30, 40}}}, true},                // tail, block 1
      {WithCache({DType::kBFloat16, 8, 8, 64, 16, {{40, 40}}}, KvCacheFormat::kFp8E4M3), true},
      {WithCache({DType::kBFloat16, 32, 8, 128, 16, {{100, 300}, {1, 17}}}, KvCacheFormat::kInt8), true},
      {{DType::kBFloat16, 64, 8, 64, 16, {{2, 40}}}, false},              // 16 vectors: decode kernel
      {WithCache({DType::kBFloat16, 64, 8, 64, 16, {{2, 40}}}, KvCacheFormat::kInt8), false},
      {{DType::kBFloat16, 8, 2, 512, 16, {{40, 40}}}, false},             // head_size 512
      {{DType::kFloat32, 8, 8, 64, 16, {{40, 40}}}, false},
      {{DType::kFloat16, 8, 8, 64, 16, {{40, 40}}}, false},
  };
  for (const Expect& e : expects) {
    SCOPED_TRACE(Describe(e.c));
    Problem pr = MakeProblem(e.c, rng);
    const PagedAttentionParams p = pr.Params();
    const PagedAttentionPlan plan = plan_paged_attention(p, 2);
    ASSERT_GT(plan.items, 0);
    int64_t tile_items = 0;
    for (const AttentionItem& it : plan.work) {
      const AttentionKernel k = paged_attention_item_kernel(p, it);
      EXPECT_EQ(k, ExpectedKernel(p, it));
      tile_items += k == PrefillTileKernel();
    }
    EXPECT_EQ(tile_items > 0, tiles && e.takes);
    for (int64_t target : KernelTargets()) {
      if (target == HWY_AVX3) continue;
      TargetScope scope(target);
      for (const AttentionItem& it : plan.work) EXPECT_EQ(paged_attention_item_kernel(p, it), AttentionKernel::kHighway);
    }
  }
}

// Runs on every CPU, like DecodeKernelTakesTheItemsItApplies; and with the AVX-512 BF16 tiles forced
// (the same choice where the CPU has no AMX).
TEST(CpuAttentionKernel, PrefillKernelTakesTheItemsItApplies) {
  CheckPrefillKernelChoice();
  Avx512PrefillTiles forced;
  CheckPrefillKernelChoice();
}

// The prefill tile kernel against the float64 reference, each item's kernel asserted: prefill,
// chunked prefill and mixed batches; head sizes 64, 80, 96, 128, 256 and tails 1, 33, 67; groups
// 1, 3, 4, 8, 16; block sizes 1, 8, 16, 32 (tiles loaded from the cache blocks and copied ones);
// soft cap; windows; negative scales; strided rows and padded blocks; several query tiles an
// item; split plans; NaN in every cache row and query element the kernel must not read. The same
// batches over float8_e4m3fn and int8 caches (NaN: fp8 0x7F in the rows, int8 NaN scales), every
// key tile converted. Reports the worst error against the bound with the weights' rounding term and
// against the float32-only bound.
void CheckAmxKernelAgainstReference(const char* label) {
  std::mt19937 rng(22);
  const std::vector<Seq> mixed = {{40, 40}, {17, 80}, {1, 50}, {0, 0}, {3, 3}};
  struct Run {
    Case c;
    int64_t threads;
    bool negative_scale = false;  // logits decreasing in the dot
  };
  std::vector<Run> runs;
  for (int64_t hs : {64, 80, 96, 128, 256, 1, 33, 67}) runs.push_back({{DType::kBFloat16, 32, 8, hs, 16, mixed}, 2});
  runs.push_back({{DType::kBFloat16, 8, 8, 128, 16, {{70, 70}}}, 2});                         // group 1
  runs.push_back({{DType::kBFloat16, 16, 1, 128, 32, {{24, 90}, {1, 33}}}, 2});               // group 16
  runs.push_back({{DType::kBFloat16, 9, 3, 96, 1, mixed, 0.0f, 0, 3, 5}, 2});                 // block 1, strided
  runs.push_back({{DType::kBFloat16, 32, 8, 128, 8, {{50, 100}, {20, 20}}}, 2});              // block 8
  runs.push_back({{DType::kBFloat16, 40, 40, 64, 16, {{20, 50}, {7, 7}}, 30.0f}, 2});         // soft cap
  runs.push_back({{DType::kBFloat16, 4, 2, 256, 32, {{19, 120}, {40, 41}}, 0.0f, 7}, 2});     // window 7
  runs.push_back({{DType::kBFloat16, 6, 2, 128, 16, {{33, 300}}, 30.0f, 256, 1, 16}, 2});     // window 256, cap, pads
  runs.push_back({{DType::kBFloat16, 64, 8, 128, 16, {{130, 130}}}, 2});                      // several tiles
  runs.push_back({{DType::kBFloat16, 32, 8, 128, 16, {{200, 260}, {1, 600}, {1, 1}}}, 2});    // mixed, longer
  runs.push_back({{DType::kBFloat16, 32, 8, 128, 16, {{70, 90}}}, 2, true});                  // scale < 0
  runs.push_back({{DType::kBFloat16, 8, 2, 64, 16, {{40, 60}}, 30.0f}, 2, true});             // scale < 0, cap
  runs.push_back({{DType::kBFloat16, 8, 1, 128, 16, {{20, 1100}}}, 8});                       // split plans
  runs.push_back({{DType::kBFloat16, 12, 4, 96, 16, {{30, 1030}}, 0.0f, 700}, 8});
  runs.push_back({{DType::kBFloat16, 16, 8, 67, 16, {{40, 1100}}, 30.0f}, 8});
  const size_t plain = runs.size();
  for (kernels::KvCacheFormat cache : {kernels::KvCacheFormat::kFp8E4M3, kernels::KvCacheFormat::kInt8}) {
    for (size_t i = 0; i < plain; ++i) runs.push_back({WithCache(runs[i].c, cache), runs[i].threads, runs[i].negative_scale});
  }
  double worst = 0, worst32 = 0;
  for (const Run& r : runs) {
    SCOPED_TRACE(Describe(r.c) + " threads " + std::to_string(r.threads));
    Problem pr = MakeProblem(r.c, rng);
    if (r.negative_scale) pr.scale = -pr.scale;
    const PagedAttentionParams p = pr.Params();
    const PagedAttentionPlan plan = plan_paged_attention(p, r.threads);
    int64_t tile_items = 0;
    for (const AttentionItem& it : plan.work) {
      const AttentionKernel k = paged_attention_item_kernel(p, it);
      EXPECT_EQ(k, ExpectedKernel(p, it));
      tile_items += k == PrefillTileKernel();
    }
    EXPECT_GT(tile_items, 0);
    if (r.threads == 8) EXPECT_GT(plan.merges, 0);
    std::vector<double> ref;
    Reference(pr, ref);
    RunPlan(p, r.threads, true);
    worst = std::max(worst, Check(pr, ref, {}, &worst32));
  }
  std::printf("%s: worst error / tolerance %.3f (%.3f against the float32-only bound)\n", label, worst, worst32);
}

TEST(CpuAttentionKernel, AmxKernelMatchesFloat64Reference) {
  const std::string why_not = WhyNoAmxKernel();
  if (!why_not.empty()) GTEST_SKIP() << why_not << ": the prefill tile kernel never runs on AMX here";
  CheckAmxKernelAgainstReference("prefill kernel on AMX tiles");
}

// The same kernel on the AVX-512 BF16 tiles (csrc/cpu/common/amx_tiles.h), on every CPU with
// AVX512_BF16 (forced where the CPU has AMX).
TEST(CpuAttentionKernel, Avx512Bf16PrefillKernelMatchesFloat64Reference) {
  const std::string why_not = WhyNoDecodeKernel();
  if (!why_not.empty()) GTEST_SKIP() << why_not << ": the AVX-512 BF16 tiles need it";
  Avx512PrefillTiles forced;
  CheckAmxKernelAgainstReference("prefill kernel on AVX-512 BF16 tiles");
}

TEST(CpuAttentionKernel, RejectsInvalidParameters) {
  std::mt19937 rng(18);
  Problem pr = MakeProblem({DType::kFloat32, 4, 2, 64, 16, {{1, 20}}}, rng);
  const PagedAttentionParams good = pr.Params();
  const PagedAttentionPlan plan = plan_paged_attention(good, 1);
  auto ws = Workspace(plan);
  EXPECT_TRUE(paged_attention(good, plan, ws.get(), 0, plan.items).is_ok());
  EXPECT_EQ(paged_attention(good, plan, ws.get(), 0, plan.items + 1), Status::kInvalidArgument);
  EXPECT_EQ(paged_attention(good, plan, ws.get(), -1, 0), Status::kInvalidArgument);
  EXPECT_EQ(paged_attention_merge(good, plan, ws.get(), 0, 1), Status::kInvalidArgument);
  auto bad = good;
  bad.q_heads = 3;
  EXPECT_EQ(paged_attention(bad, plan, ws.get(), 0, 1), Status::kInvalidArgument);
  EXPECT_EQ(plan_paged_attention(bad, 1).items, 0);
  bad = good;
  bad.head_size = 513;
  EXPECT_EQ(paged_attention(bad, plan, ws.get(), 0, 1), Status::kInvalidArgument);
  bad = good;
  bad.dtype = static_cast<DType>(7);
  EXPECT_EQ(paged_attention(bad, plan, ws.get(), 0, 1), Status::kInvalidArgument);
  bad = good;
  bad.block_size = 0;
  EXPECT_EQ(paged_attention(bad, plan, ws.get(), 0, 1), Status::kInvalidArgument);
  // No query rows: an empty plan.
  bad = good;
  bad.num_seqs = 0;
  bad.query_tokens = 0;
  const PagedAttentionPlan empty = plan_paged_attention(bad, 4);
  EXPECT_EQ(empty.items, 0);
  EXPECT_EQ(empty.merges, 0);
  EXPECT_EQ(empty.workspace_bytes, 0);
  EXPECT_TRUE(paged_attention(bad, empty, nullptr, 0, 0).is_ok());
}

}  // namespace
}  // namespace xllm_kernel::cpu
