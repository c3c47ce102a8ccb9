// Torch-free host tests of csrc/cuda/attention: every block and thread of the plans that
// plan_paged_attention picks runs on the CPU (kernels::attention_run_block with a team that runs
// each step for every thread in turn, then kernels::attention_merge_piece for every merge piece:
// the code the device runs), against a float64 reference computed here from the pages. Decode,
// prefill, chunked prefill and mixed batches; GQA groups (32, 8), (8, 8), (16, 1), (9, 3); head
// sizes 64, 80, 128, 256 and tails (element path); block sizes 16 and 32; soft cap; sliding
// window; shuffled block tables; NaN in every cache row and block a sequence does not own; split
// and unsplit plans; out-of-range block ids and contradicting lengths (NaN rows exactly as
// csrc/cuda/attention/attention.h documents, the caches and tables in buffers between
// inaccessible pages, so an access outside them crashes the test). The host build's store
// observer checks that every output element is stored exactly once and nothing else in the
// output buffer, in 16-byte stores exactly on the vector path (the host load16/store16 throw on
// a misaligned address). Also the plan's rules and the launcher's argument checks.
//
// Quantized caches (float8_e4m3fn, int8; PagedAttentionParams::cache_format): the same cases over
// caches quantized here with csrc/common/quantization.h's host functions (NaN codes or NaN scales in
// every row a sequence does not own), against the float64 reference over the dequantized values
// float(q) * scale; the element decoding against the header's for every code; the cache pieces'
// alignment rule; the launcher's checks of the scales.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "csrc/common/quantization.h"
#include "csrc/cuda/attention/attention.cuh"
#include "csrc/cuda/attention/attention.h"
#include "test/cuda/common/host_buffers.h"
#include "test/csrc/common/kernel_params.h"
#include "test/cuda/element_codec.h"
#include "test/cuda/launcher_status.h"

namespace xllm_kernel::cuda {
namespace {

using kernels::AttentionArgs;
using kernels::AttentionShared;
using kernels::AttentionThread;
using ::xllm_kernel::kernels::KvCacheFormat;

constexpr int kSms = 132;
constexpr DType kDTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

// A typed view of a guarded buffer of `n` elements (plus `misalign` leading elements).
struct Tensor {
  DType dtype;
  int64_t n;
  GuardedBuffer mem;
  int64_t misalign;
  Tensor(DType t, int64_t elements, int64_t lead = 0)
      : dtype(t), n(elements), mem((elements + lead) * element_size(t), 64), misalign(lead) {}
  void* base() const { return mem.data() + misalign * element_size(dtype); }
  void* at(int64_t i) const { return static_cast<unsigned char*>(base()) + i * element_size(dtype); }
  double get(int64_t i) const { return to_double(at(i), dtype); }
  void set(int64_t i, double v) const { from_double(at(i), dtype, v); }
  static int64_t element_size(DType t) { return ::xllm_kernel::kernels::element_size(t); }
};

struct Seq {
  int64_t q_len, seq_len;
};

struct Case {
  DType dtype = DType::kBFloat16;
  int64_t q_heads = 8, kv_heads = 8, head_size = 64, block_size = 16;
  std::vector<Seq> seqs;
  float soft_cap = 0;
  int64_t window = 0;
  int64_t head_pad = 0;   // query/out head stride = head_size + head_pad
  int64_t misalign = 0;   // elements before the query, caches and out
  int64_t extra_columns = 1;  // block table columns beyond the longest sequence's need

  std::string describe() const {
    std::string s = std::string(name_of(dtype)) + " heads " + std::to_string(q_heads) + "/" + std::to_string(kv_heads) +
                    " head_size " + std::to_string(head_size) + " block " + std::to_string(block_size) + " seqs";
    for (const Seq& q : seqs) s += " " + std::to_string(q.q_len) + "/" + std::to_string(q.seq_len);
    if (soft_cap > 0) s += " cap " + std::to_string(soft_cap);
    if (window > 0) s += " window " + std::to_string(window);
    if (head_pad) s += " head_pad " + std::to_string(head_pad);
    if (misalign) s += " misalign " + std::to_string(misalign);
    return s;
  }
};

// Which bytes of the output buffer were stored, how often, and the sizes of the stores.
struct StoreLog {
  const unsigned char* out = nullptr;
  std::vector<int> count;
  std::map<size_t, int64_t> out_sizes;
};
thread_local StoreLog* g_log = nullptr;
void observe(const void* p, size_t bytes) {
  const auto* q = static_cast<const unsigned char*>(p);
  if (q < g_log->out || q >= g_log->out + g_log->count.size()) return;  // the workspace
  g_log->out_sizes[bytes] += 1;
  for (size_t i = 0; i < bytes; ++i) g_log->count[q + i - g_log->out] += 1;
}

// A block on the host: each step runs for every thread in turn (the barrier between steps is
// the end of the loop); each thread keeps its registers across steps.
template <int N>
struct HostTeam {
  std::vector<AttentionThread<N>> states;
  template <class F>
  void step(F&& f) {
    for (size_t t = 0; t < states.size(); ++t) f(static_cast<int>(t), states[t]);
  }
};

// Runs every block and thread of `plan`, then every merge piece, on the host. C: the caches'
// element type.
template <class T, class C, int N>
void run_plan_typed(const AttentionArgs& a) {
  HostTeam<N> team;
  team.states.resize(a.plan.threads);
  auto& states = team.states;
  std::vector<float> smem(a.plan.shared_bytes / sizeof(float) + 4);
  for (int64_t b = 0; b < a.plan.blocks; ++b) {
    // Shared memory and registers start as garbage on the device.
    std::fill(smem.begin(), smem.end(), std::numeric_limits<float>::quiet_NaN());
    for (auto& s : states) std::memset(&s, 0xFF, sizeof(s));
    auto& shared = *reinterpret_cast<AttentionShared*>(smem.data());
    float* floats = smem.data() + sizeof(AttentionShared) / sizeof(float);
    kernels::attention_run_block<T, C, N>(a, b, a.plan.blocks, shared, floats, team);
  }
  for (int64_t i = 0; i < a.plan.merge_pieces; ++i) kernels::attention_merge_piece<T, N>(a, i);
}

void run_plan(const PagedAttentionParams& p, const PagedAttentionPlan& plan, void* workspace) {
  AttentionArgs a;
  a.p = p;
  a.plan = plan;
  if (plan.workspace_bytes > 0) {
    auto* base = static_cast<unsigned char*>(workspace);
    a.partial_out = reinterpret_cast<float*>(base);
    a.partial_max = reinterpret_cast<float*>(base + plan.max_offset);
    a.partial_sum = reinterpret_cast<float*>(base + plan.sum_offset);
  }
  const bool ran = kernels::dispatch_dtype(p.dtype, false, [&](auto element) {
    using T = typename decltype(element)::type;
    return kernels::dispatch_cache_element<T>(p.cache_format, false, [&](auto cache_element) {
      using C = typename decltype(cache_element)::type;
      if (plan.vector) {
        run_plan_typed<T, C, kernels::kVec<T>>(a);
      } else {
        run_plan_typed<T, C, 1>(a);
      }
      return true;
    });
  });
  ASSERT_TRUE(ran);
}

// The inputs of a case: caches with NaN everywhere a sequence does not own, shuffled tables.
struct Inputs {
  Case c;
  int64_t query_tokens = 0, num_blocks = 0, max_blocks = 0;
  std::vector<int32_t> qsl;
  std::unique_ptr<Tensor> query, key_cache, value_cache, out;
  std::unique_ptr<GuardedBuffer> tables, qsl_mem, lens_mem;
  int32_t* block_tables = nullptr;
  PagedAttentionParams p;

  int64_t head_stride() const { return c.head_size + c.head_pad; }
  int64_t token_stride() const { return c.q_heads * head_stride(); }
  int64_t cache_row() const { return c.kv_heads * c.head_size; }

  Inputs(const Case& cs, std::mt19937& rng) : c(cs) {
    const int64_t num_seqs = static_cast<int64_t>(c.seqs.size());
    qsl.push_back(0);
    int64_t need = 0, total_blocks = 0;
    for (const Seq& s : c.seqs) {
      qsl.push_back(static_cast<int32_t>(qsl.back() + s.q_len));
      const int64_t blocks = (std::max<int64_t>(s.seq_len, 0) + c.block_size - 1) / c.block_size;
      need = std::max(need, blocks);
      total_blocks += blocks;
    }
    query_tokens = qsl.back();
    max_blocks = need + c.extra_columns;
    num_blocks = total_blocks + 3;  // blocks nobody owns, all NaN
    const double nan = std::numeric_limits<double>::quiet_NaN();
    std::normal_distribution<double> normal(0.0, 1.0);
    query = std::make_unique<Tensor>(c.dtype, std::max<int64_t>(query_tokens, 1) * token_stride(), c.misalign);
    for (int64_t i = 0; i < query->n; ++i) query->set(i, normal(rng));
    const int64_t cache_elements = num_blocks * c.block_size * cache_row();
    key_cache = std::make_unique<Tensor>(c.dtype, cache_elements, c.misalign);
    value_cache = std::make_unique<Tensor>(c.dtype, cache_elements, c.misalign);
    for (int64_t i = 0; i < cache_elements; ++i) {
      key_cache->set(i, nan);
      value_cache->set(i, nan);
    }
    out = std::make_unique<Tensor>(c.dtype, std::max<int64_t>(query_tokens, 1) * token_stride(), c.misalign);
    for (int64_t i = 0; i < out->n; ++i) out->set(i, 1234.0);
    // Shuffled block ids; a sequence's rows below seq_len get values, the rest stays NaN. Table
    // entries past a sequence's blocks hold ids that must never be read (out of range).
    std::vector<int32_t> ids(num_blocks);
    for (int64_t i = 0; i < num_blocks; ++i) ids[i] = static_cast<int32_t>(i);
    std::shuffle(ids.begin(), ids.end(), rng);  // the first total_blocks are used
    const int64_t table_elements = std::max<int64_t>(num_seqs * max_blocks, 1);
    tables = std::make_unique<GuardedBuffer>(table_elements * 4, 4);
    block_tables = reinterpret_cast<int32_t*>(tables->data());
    int64_t next = 0;
    for (int64_t s = 0; s < num_seqs; ++s) {
      for (int64_t b = 0; b < max_blocks; ++b) {
        const int64_t rows = std::min<int64_t>(c.block_size, c.seqs[s].seq_len - b * c.block_size);
        if (rows <= 0) {
          block_tables[s * max_blocks + b] = b % 2 ? -1 : static_cast<int32_t>(num_blocks + b);
          continue;
        }
        const int32_t id = ids[next++];
        block_tables[s * max_blocks + b] = id;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t e = 0; e < cache_row(); ++e) {
            const int64_t at = (id * c.block_size + r) * cache_row() + e;
            key_cache->set(at, normal(rng));
            value_cache->set(at, normal(rng));
          }
        }
      }
    }
    qsl_mem = std::make_unique<GuardedBuffer>(qsl.size() * 4, 4);
    std::memcpy(qsl_mem->data(), qsl.data(), qsl.size() * 4);
    lens_mem = std::make_unique<GuardedBuffer>(std::max<size_t>(num_seqs, 1) * 4, 4);
    for (int64_t s = 0; s < num_seqs; ++s) lens()[s] = static_cast<int32_t>(c.seqs[s].seq_len);

    p.dtype = c.dtype;
    p.num_seqs = num_seqs;
    p.query_tokens = query_tokens;
    p.q_heads = c.q_heads;
    p.kv_heads = c.kv_heads;
    p.head_size = c.head_size;
    p.block_size = c.block_size;
    p.num_blocks = num_blocks;
    p.max_blocks_per_seq = max_blocks;
    p.query = query->base();
    p.query_strides = {token_stride(), head_stride()};
    p.key_cache = key_cache->base();
    p.key_cache_strides = {c.block_size * cache_row(), cache_row(), c.head_size};
    p.value_cache = value_cache->base();
    p.value_cache_strides = p.key_cache_strides;
    p.out = out->base();
    p.out_strides = {token_stride(), head_stride()};
    p.block_tables = block_tables;
    p.block_table_stride = max_blocks;
    p.query_start_loc = reinterpret_cast<const int32_t*>(qsl_mem->data());
    p.seq_lens = lens();
    p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_size)));
    p.soft_cap = c.soft_cap;
    p.sliding_window = c.window;
  }
  int32_t* lens() const { return reinterpret_cast<int32_t*>(lens_mem->data()); }
  int32_t* starts() const { return reinterpret_cast<int32_t*>(qsl_mem->data()); }
};

// out[t, h] in float64, from the pages as the header defines it; NaN for the rows the header
// says get NaN (a block id outside [0, num_blocks), contradicting lengths, rows of no sequence) and
// zero for the padding rows (from query_start_loc[num_seqs] on). keys, values: the caches' values
// by element offset, where they are not in.key_cache and in.value_cache (quantized caches).
std::vector<double> reference(const Inputs& in, const std::vector<double>* keys = nullptr,
                              const std::vector<double>* values = nullptr) {
  auto key_at = [&](int64_t i) { return keys != nullptr ? (*keys)[i] : in.key_cache->get(i); };
  auto value_at = [&](int64_t i) { return values != nullptr ? (*values)[i] : in.value_cache->get(i); };
  const PagedAttentionParams& p = in.p;
  std::vector<double> want(std::max<int64_t>(p.query_tokens, 1) * p.q_heads * p.head_size,
                           std::numeric_limits<double>::quiet_NaN());
  const int32_t* qsl = p.query_start_loc;
  for (int64_t t = std::max<int64_t>(qsl[p.num_seqs], 0); t < p.query_tokens; ++t) {
    std::fill_n(want.begin() + t * p.q_heads * p.head_size, p.q_heads * p.head_size, 0.0);
  }
  const int64_t group = p.q_heads / p.kv_heads;
  for (int64_t s = 0; s < p.num_seqs; ++s) {
    const int64_t qb = qsl[s], qe = qsl[s + 1], len = p.seq_lens[s];
    if (qb < 0 || qe > p.query_tokens || qe < qb || qe - qb > len || len > p.max_blocks_per_seq * p.block_size) {
      continue;  // NaN rows
    }
    for (int64_t t = qb; t < qe; ++t) {
      const int64_t pos = len - (qe - qb) + (t - qb);
      const int64_t lo = p.sliding_window > 0 ? std::max<int64_t>(0, pos - p.sliding_window + 1) : 0;
      bool bad = false;
      for (int64_t j = lo; j <= pos; ++j) {
        const int32_t id = p.block_tables[s * p.block_table_stride + j / p.block_size];
        if (id < 0 || id >= p.num_blocks) bad = true;
      }
      if (bad) continue;
      for (int64_t h = 0; h < p.q_heads; ++h) {
        const int64_t g = h / group;
        std::vector<double> logits;
        for (int64_t j = lo; j <= pos; ++j) {
          const int64_t id = p.block_tables[s * p.block_table_stride + j / p.block_size];
          const int64_t krow = id * p.key_cache_strides.block + (j % p.block_size) * p.key_cache_strides.row +
                               g * p.key_cache_strides.head;
          double dot = 0;
          for (int64_t e = 0; e < p.head_size; ++e) {
            const double q = in.query->get(t * p.query_strides.token + h * p.query_strides.head + e);
            dot += q * key_at(krow + e);
          }
          double logit = static_cast<double>(p.scale) * dot;
          if (p.soft_cap > 0) logit = p.soft_cap * std::tanh(logit / p.soft_cap);
          logits.push_back(logit);
        }
        const double m = *std::max_element(logits.begin(), logits.end());
        double sum = 0;
        for (double& l : logits) sum += (l = std::exp(l - m));
        for (int64_t e = 0; e < p.head_size; ++e) {
          double acc = 0;
          for (int64_t j = lo; j <= pos; ++j) {
            const int64_t id = p.block_tables[s * p.block_table_stride + j / p.block_size];
            const int64_t vrow = id * p.value_cache_strides.block + (j % p.block_size) * p.value_cache_strides.row +
                                 g * p.value_cache_strides.head;
            acc += logits[j - lo] * value_at(vrow + e);
          }
          want[(t * p.q_heads + h) * p.head_size + e] = acc / sum;
        }
      }
    }
  }
  return want;
}

// One rounding to the dtype plus float32 accumulation (exp, sums over at most a few hundred keys
// of values of magnitude ~1).
double tolerance(DType t) { return t == DType::kBFloat16 ? 1.0 / 128 : t == DType::kFloat16 ? 1.0 / 1024 : 2e-5; }

struct Result {
  PagedAttentionPlan plan;
  std::vector<double> got;  // [query_tokens, q_heads, head_size]
};

// Runs the plan for sm_count on the host; checks the stores into the output buffer.
Result run(const Inputs& in, int sm_count, bool expect_vector) {
  Result r;
  r.plan = plan_paged_attention(in.p, sm_count);
  EXPECT_GT(r.plan.blocks, 0);
  EXPECT_EQ(r.plan.vector, expect_vector);
  EXPECT_EQ(r.plan.workspace_bytes, paged_attention_workspace_bytes(in.p, sm_count));
  GuardedBuffer workspace(std::max<int64_t>(r.plan.workspace_bytes, 1), 256);
  std::memset(workspace.data(), 0xFF, workspace.bytes());  // NaN: nothing may rely on its contents
  EXPECT_TRUE(accepted(paged_attention_check(in.p, workspace.data(), r.plan.workspace_bytes, sm_count)));
  for (int64_t i = 0; i < in.out->n; ++i) in.out->set(i, 1234.0);
  StoreLog log;
  log.out = static_cast<const unsigned char*>(in.out->base());
  log.count.assign(in.out->n * Tensor::element_size(in.c.dtype), 0);
  g_log = &log;
  kernels::host_store_observer = &observe;
  run_plan(in.p, r.plan, workspace.data());
  kernels::host_store_observer = nullptr;
  g_log = nullptr;
  // Every element of the [tokens, q_heads, head_size] view stored once, padding never.
  const int64_t es = Tensor::element_size(in.c.dtype);
  int64_t wrong = 0;
  for (int64_t i = 0; i < in.out->n; ++i) {
    const int64_t t = i / in.token_stride(), h = i % in.token_stride() / in.head_stride();
    const int64_t e = i % in.head_stride();
    const int want = t < in.p.query_tokens && h < in.p.q_heads && e < in.p.head_size ? 1 : 0;
    for (int64_t b = 0; b < es; ++b) wrong += log.count[i * es + b] != want;
  }
  EXPECT_EQ(wrong, 0) << "output bytes not stored exactly once (or padding stored)";
  for (const auto& [size, n] : log.out_sizes) {
    EXPECT_EQ(static_cast<int64_t>(size), expect_vector ? 16 : es) << n << " stores";
  }
  r.got.resize(std::max<int64_t>(in.p.query_tokens, 1) * in.p.q_heads * in.p.head_size);
  for (int64_t t = 0; t < in.p.query_tokens; ++t) {
    for (int64_t h = 0; h < in.p.q_heads; ++h) {
      for (int64_t e = 0; e < in.p.head_size; ++e) {
        r.got[(t * in.p.q_heads + h) * in.p.head_size + e] =
            in.out->get(t * in.p.out_strides.token + h * in.p.out_strides.head + e);
      }
    }
  }
  return r;
}

// Compares with the reference: NaN exactly where it has NaN, else within the tolerance.
void expect_matches(const Inputs& in, const std::vector<double>& want, const std::vector<double>& got) {
  const double tol = tolerance(in.c.dtype);
  int64_t bad = 0, shown = 0;
  for (int64_t i = 0; i < in.p.query_tokens * in.p.q_heads * in.p.head_size; ++i) {
    const bool close = !std::isnan(got[i]) && std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i]));
    const bool ok = std::isnan(want[i]) ? std::isnan(got[i]) : close;
    if (!ok && shown++ < 5) {
      const int64_t per_row = in.p.q_heads * in.p.head_size;
      ADD_FAILURE() << "row " << i / per_row << " head " << i % per_row / in.p.head_size << " element "
                    << i % in.p.head_size << ": got " << got[i] << ", want " << want[i];
    }
    bad += !ok;
  }
  EXPECT_EQ(bad, 0);
}

// Runs a case with a few SM counts (one split, several) and checks each against float64.
void check_case(const Case& c, std::mt19937& rng, bool expect_vector = true, std::vector<int> sm_counts = {1, kSms}) {
  SCOPED_TRACE(c.describe());
  Inputs in(c, rng);
  const std::vector<double> want = reference(in);
  for (int sms : sm_counts) {
    SCOPED_TRACE("sm_count " + std::to_string(sms));
    const Result r = run(in, sms, expect_vector);
    expect_matches(in, want, r.got);
  }
}

TEST(AttentionHost, DecodeMatchesFloat64) {
  std::mt19937 rng(1);
  const std::pair<int64_t, int64_t> groups[] = {{32, 8}, {8, 8}, {16, 1}, {9, 3}};
  for (DType dtype : kDTypes) {
    for (auto [qh, kvh] : groups) {
      for (int64_t head_size : {64, 128}) {
        Case c;
        c.dtype = dtype;
        c.q_heads = qh;
        c.kv_heads = kvh;
        c.head_size = head_size;
        c.block_size = head_size == 64 ? 16 : 32;
        c.seqs = {{1, 37}, {1, 1}, {1, 300}, {1, 16}};
        check_case(c, rng);
      }
    }
  }
}

TEST(AttentionHost, HeadSizesAndTails) {
  std::mt19937 rng(2);
  for (DType dtype : kDTypes) {
    for (int64_t head_size : {80, 96, 256}) {
      Case c;
      c.dtype = dtype;
      c.q_heads = 4;
      c.kv_heads = 2;
      c.head_size = head_size;
      c.seqs = {{1, 50}, {2, 140}};
      check_case(c, rng);
    }
    // Rows not a multiple of 16 bytes: the element path.
    for (int64_t head_size : {67, 1, 3, 512}) {
      Case c;
      c.dtype = dtype;
      c.q_heads = 4;
      c.kv_heads = 2;
      c.head_size = head_size;
      c.seqs = {{1, 40}, {3, 21}};
      const bool vector = head_size * Tensor::element_size(dtype) % 16 == 0;
      check_case(c, rng, vector);
    }
  }
}

TEST(AttentionHost, PrefillChunkedAndMixedBatchesMatchFloat64) {
  std::mt19937 rng(3);
  for (DType dtype : kDTypes) {
    Case c;
    c.dtype = dtype;
    c.q_heads = 8;
    c.kv_heads = 2;
    c.head_size = 64;
    c.seqs = {{20, 20}};  // prefill
    check_case(c, rng);
    c.seqs = {{7, 45}, {16, 16}};  // chunked prefill after 38 keys; a prefill
    check_case(c, rng);
    // Mixed: decode rows, a padding sequence (no rows, no keys), chunked prefill, a prefill.
    c.seqs = {{1, 70}, {0, 0}, {5, 33}, {1, 2}, {9, 9}, {0, 0}};
    c.block_size = 32;
    check_case(c, rng);
  }
}

TEST(AttentionHost, SoftCapAndSlidingWindow) {
  std::mt19937 rng(4);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    Case c;
    c.dtype = dtype;
    c.q_heads = 8;
    c.kv_heads = 4;
    c.head_size = 64;
    c.seqs = {{1, 300}, {6, 40}, {1, 5}};
    c.soft_cap = 0.5f;  // tight: a wrong cap changes every weight
    check_case(c, rng);
    c.soft_cap = 0;
    for (int64_t window : {1, 17, 64, 1000}) {
      c.window = window;
      check_case(c, rng);
    }
    c.soft_cap = 30.0f;
    c.window = 33;
    check_case(c, rng);
  }
}

TEST(AttentionHost, LayoutsOutsideTheVectorPathUseElements) {
  std::mt19937 rng(5);
  for (DType dtype : kDTypes) {
    Case c;
    c.dtype = dtype;
    c.q_heads = 8;
    c.kv_heads = 2;
    c.head_size = 64;
    c.seqs = {{1, 40}, {4, 20}};
    c.misalign = 1;  // bases not 16-byte aligned
    check_case(c, rng, false);
    c.misalign = 0;
    c.head_pad = 3;  // head stride not a multiple of 16 bytes
    check_case(c, rng, false);
    c.head_pad = 16;  // padded but aligned: still the vector path
    check_case(c, rng, true);
  }
}

TEST(AttentionHost, SplitAndUnsplitPlansAgree) {
  std::mt19937 rng(6);
  Case c;
  c.dtype = DType::kFloat32;
  c.q_heads = 8;
  c.kv_heads = 2;
  c.head_size = 64;
  c.seqs = {{1, 1000}, {1, 130}, {3, 700}};
  Inputs in(c, rng);
  const Result one = run(in, 1, true), many = run(in, kSms, true);
  EXPECT_EQ(one.plan.splits, 1);
  EXPECT_EQ(one.plan.workspace_bytes, 0);
  EXPECT_GT(many.plan.splits, 3);  // more splits than a short row has keys for: empty splits
  EXPECT_GT(many.plan.workspace_bytes, 0);
  double worst = 0;
  for (size_t i = 0; i < one.got.size(); ++i) worst = std::max(worst, std::abs(one.got[i] - many.got[i]));
  EXPECT_LT(worst, 1e-5);  // float32 both: the merge only reorders the sums
  expect_matches(in, reference(in), many.got);
}

// A batch-invariant plan (PagedAttentionParams::batch_invariant): every row gets the same bits on
// any SM count, and alone (its sequence as a call of its own over the same memory) as in the
// batch; the default plan, whose splits follow the SM count and the rows, does not.
TEST(AttentionHost, BatchInvariantPlanGivesARowTheSameBitsAloneAndOnAnyGpu) {
  std::mt19937 rng(11);
  for (const DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    Case c;
    c.dtype = dtype;
    c.q_heads = 8;
    c.kv_heads = 2;
    c.head_size = 64;
    c.seqs = {{1, 3000}, {1, 130}, {20, 700}, {1, 2100}, {3, 40}};
    SCOPED_TRACE(c.describe());
    Inputs in(c, rng);
    // The output buffer's bytes after running plan_paged_attention(p, sms) on the host.
    auto outputs = [&](const PagedAttentionParams& p, int sms) {
      const PagedAttentionPlan plan = plan_paged_attention(p, sms);
      EXPECT_GT(plan.blocks, 0);
      GuardedBuffer workspace(std::max<int64_t>(plan.workspace_bytes, 1), 256);
      std::memset(workspace.data(), 0xFF, workspace.bytes());
      for (int64_t i = 0; i < in.out->n; ++i) in.out->set(i, 1234.0);
      run_plan(p, plan, workspace.data());
      const auto* bytes = static_cast<const unsigned char*>(in.out->base());
      return std::vector<unsigned char>(bytes, bytes + in.out->n * Tensor::element_size(dtype));
    };
    const int64_t row_bytes = in.token_stride() * Tensor::element_size(dtype);
    auto rows_of = [&](const std::vector<unsigned char>& b, int64_t first, int64_t count) {
      return std::vector<unsigned char>(b.begin() + first * row_bytes, b.begin() + (first + count) * row_bytes);
    };
    in.p.batch_invariant = true;
    for (const int sms : {1, 8, 132, 100000}) {
      const PagedAttentionPlan plan = plan_paged_attention(in.p, sms);
      EXPECT_EQ(plan.splits, 3) << sms;  // ceil(189 blocks x 16 / 1024): from the table's width, not the GPU
    }
    const std::vector<unsigned char> whole = outputs(in.p, 132);
    for (const int sms : {1, 8, 100000}) EXPECT_TRUE(outputs(in.p, sms) == whole) << "sm_count " << sms;
    const int64_t es = Tensor::element_size(dtype);
    for (size_t s = 0; s < c.seqs.size(); ++s) {
      PagedAttentionParams one = in.p;
      const int64_t first = in.qsl[s], rows = c.seqs[s].q_len;
      one.num_seqs = 1;
      one.query_tokens = rows;
      one.query = static_cast<const unsigned char*>(in.p.query) + first * in.p.query_strides.token * es;
      one.out = static_cast<unsigned char*>(in.p.out) + first * in.p.out_strides.token * es;
      one.block_tables = in.p.block_tables + static_cast<int64_t>(s) * in.p.block_table_stride;
      const int32_t starts[2] = {0, static_cast<int32_t>(rows)};
      one.query_start_loc = starts;
      one.seq_lens = in.p.seq_lens + s;
      const std::vector<unsigned char> alone = outputs(one, 132);
      EXPECT_TRUE(rows_of(alone, first, rows) == rows_of(whole, first, rows)) << "sequence " << s << " alone";
    }
    // The control: the default plan's splits follow the SM count, and so do the bits.
    in.p.batch_invariant = false;
    EXPECT_FALSE(outputs(in.p, 1) == outputs(in.p, 132)) << "the default plan gave the same bits on 1 and 132 SMs";
  }
}

TEST(AttentionHost, OutOfRangeBlockIdsGiveNaNRowsOnly) {
  std::mt19937 rng(7);
  for (int64_t window : {0, 20}) {
    Case c;
    c.dtype = DType::kBFloat16;
    c.q_heads = 4;
    c.kv_heads = 2;
    c.head_size = 64;
    c.block_size = 16;
    c.window = window;
    c.seqs = {{1, 100}, {10, 40}, {1, 30}};
    Inputs in(c, rng);
    // Sequence 0: its first block is bad (read by its only row unless the window skips it);
    // sequence 1: its third block (positions 32..39) is bad: rows at positions 30, 31 are fine.
    const int32_t bad_ids[] = {-1, static_cast<int32_t>(in.num_blocks), std::numeric_limits<int32_t>::max(),
                               std::numeric_limits<int32_t>::min()};
    for (int32_t bad : bad_ids) {
      SCOPED_TRACE("window " + std::to_string(window) + " id " + std::to_string(bad));
      const int32_t keep0 = in.block_tables[0], keep1 = in.block_tables[in.max_blocks + 2];
      in.block_tables[0] = bad;
      in.block_tables[in.max_blocks + 2] = bad;
      const std::vector<double> want = reference(in);
      // The reference marks exactly the rows that read them.
      const auto row_nan = [&](int64_t t) { return std::isnan(want[t * c.q_heads * c.head_size]); };
      EXPECT_EQ(row_nan(0), window == 0);
      EXPECT_FALSE(row_nan(1));
      EXPECT_FALSE(row_nan(2));
      EXPECT_TRUE(row_nan(3));
      EXPECT_FALSE(row_nan(11));
      for (int sms : {1, kSms}) expect_matches(in, want, run(in, sms, true).got);
      in.block_tables[0] = keep0;
      in.block_tables[in.max_blocks + 2] = keep1;
    }
  }
}

TEST(AttentionHost, ContradictingLengthsGiveNaNRows) {
  std::mt19937 rng(8);
  Case c;
  c.dtype = DType::kFloat16;
  c.q_heads = 4;
  c.kv_heads = 1;
  c.head_size = 64;
  c.seqs = {{2, 30}, {3, 20}, {1, 10}, {2, 5}};
  c.extra_columns = 0;  // the last sequence's table row ends at the guard page
  Inputs in(c, rng);
  const int64_t row = c.q_heads * c.head_size;
  auto nan_rows = [&](const std::vector<double>& got) {
    std::vector<int> rows;
    for (int64_t t = 0; t < in.p.query_tokens; ++t) {
      int nan = 0;
      for (int64_t i = 0; i < row; ++i) nan += std::isnan(got[t * row + i]);
      EXPECT_TRUE(nan == 0 || nan == row) << "row " << t << " partly NaN";
      if (nan) rows.push_back(static_cast<int>(t));
    }
    return rows;
  };
  struct Edit {
    const char* what;
    int64_t seq;
    int32_t seq_len;              // new seq_lens[seq]; -1: unchanged
    std::vector<int32_t> starts;  // new query_start_loc; empty: unchanged
    std::vector<int> nan;         // rows expected NaN
  };
  const int32_t longest = static_cast<int32_t>(in.max_blocks * c.block_size);
  const std::vector<Edit> edits = {
      {"q rows outnumber seq_lens", 1, 2, {}, {2, 3, 4}},
      {"seq_lens past the table", 3, longest + 1, {}, {6, 7}},
      {"seq_lens negative", 2, -4, {}, {5}},
      {"entries past query_tokens", 3, -1, {0, 2, 5, 6, 9}, {6, 7}},
      {"a decreasing entry", 0, -1, {0, 2, 1, 6, 8}, {}},  // seq 1 is empty; rows 1 in seqs 0, rows 2..5 in 2
      {"rows before the first sequence", 0, -1, {1, 2, 5, 6, 8}, {0}},
      {"padding rows after the last sequence (zeros)", 0, -1, {0, 2, 5, 6, 7}, {}},
  };
  for (const Edit& e : edits) {
    SCOPED_TRACE(e.what);
    const std::vector<int32_t> starts(in.starts(), in.starts() + in.qsl.size());
    const int32_t len = in.lens()[e.seq];
    if (e.seq_len != -1) in.lens()[e.seq] = e.seq_len;
    if (!e.starts.empty()) std::copy(e.starts.begin(), e.starts.end(), in.starts());
    for (int sms : {1, kSms}) {
      SCOPED_TRACE(sms);
      const Result r = run(in, sms, true);
      if (std::string(e.what) == "a decreasing entry") {
        // Row 1 lies in sequence 0 ([0, 2)) and in sequence 2 ([1, 6)): either result or NaN.
        const std::vector<int> rows = nan_rows(r.got);
        EXPECT_TRUE(rows.empty() || rows == std::vector<int>{1});
        continue;
      }
      EXPECT_EQ(nan_rows(r.got), e.nan);
      // The other rows are as the reference computes them (it also marks bad lengths NaN; rows
      // of no sequence stay NaN in it).
      expect_matches(in, reference(in), r.got);
    }
    std::copy(starts.begin(), starts.end(), in.starts());
    in.lens()[e.seq] = len;
  }
}

// ---------------------------------------------------------------- quantized caches

// Quantized copies of a case's caches (format fp8 or int8), quantized here with the header's host
// functions: NaN elements (every row no sequence owns) give fp8 code 0x7F, or an int8 row whose
// scale is NaN. Installed into in.p; `values` are the dequantized elements float(q) * scale
// (float32) for the reference.
struct QuantCaches {
  KvCacheFormat format;
  std::unique_ptr<GuardedBuffer> codes[2], scales[2];
  std::vector<double> values[2];
  float tensor_scale[2] = {4.0f / 448, 3.0f / 448};  // fp8: |x| up to 4 (keys) and 3 (values), beyond saturates

  // offset: bytes before each cache's first element (0: 64-byte aligned).
  QuantCaches(Inputs& in, KvCacheFormat f, int64_t offset = 0) : format(f) {
    namespace k = ::xllm_kernel::kernels;
    const int64_t n = in.key_cache->n, D = in.c.head_size, H = in.c.kv_heads, B = in.c.block_size;
    const int64_t blocks = in.num_blocks;
    // int8 scales: keys [blocks, B, H] with blocks 3 floats apart beyond their rows; values
    // transposed within a block ([blocks, H, B] in memory).
    const CacheStrides scale_strides[2] = {{B * H + 3, H, 1}, {H * B, 1, B}};
    for (int c = 0; c < 2; ++c) {
      const Tensor& src = c == 0 ? *in.key_cache : *in.value_cache;
      codes[c] = std::make_unique<GuardedBuffer>(n + offset, 64);
      values[c].assign(n, 0.0);
      uint8_t* q = codes[c]->data() + offset;
      if (f == KvCacheFormat::kFp8E4M3) {
        scales[c] = std::make_unique<GuardedBuffer>(4, 4);
        std::memcpy(scales[c]->data(), &tensor_scale[c], 4);
        for (int64_t i = 0; i < n; ++i) {
          q[i] = k::quantize_fp8_per_token(static_cast<float>(src.get(i)), tensor_scale[c]);
          values[c][i] = k::float_from_float8_e4m3fn(q[i]) * tensor_scale[c];
        }
      } else {
        const CacheStrides& ss = scale_strides[c];
        scales[c] = std::make_unique<GuardedBuffer>(4 * ((blocks - 1) * ss.block + B * H), 4);
        float* sc = reinterpret_cast<float*>(scales[c]->data());
        for (int64_t r = 0; r < n / D; ++r) {  // rows in the caches' contiguous layout
          const int64_t b = r / (B * H), row = r / H % B, h = r % H;
          float amax = 0.0f;
          for (int64_t e = 0; e < D; ++e) amax = k::quant_max(amax, std::fabs(static_cast<float>(src.get(r * D + e))));
          const float scale = k::int8_per_token_scale(amax), m = k::int8_per_token_multiplier(amax);
          sc[b * ss.block + row * ss.row + h * ss.head] = scale;
          for (int64_t e = 0; e < D; ++e) {
            const int8_t code = k::quantize_int8_per_token(static_cast<float>(src.get(r * D + e)), m);
            q[r * D + e] = static_cast<uint8_t>(code);
            values[c][r * D + e] = static_cast<float>(code) * scale;
          }
        }
      }
    }
    in.p.cache_format = f;
    in.p.key_cache = codes[0]->data() + offset;
    in.p.value_cache = codes[1]->data() + offset;
    in.p.key_scale = reinterpret_cast<const float*>(scales[0]->data());
    in.p.value_scale = reinterpret_cast<const float*>(scales[1]->data());
    if (f == KvCacheFormat::kInt8) {
      in.p.key_scale_strides = scale_strides[0];
      in.p.value_scale_strides = scale_strides[1];
    }
  }
  std::vector<double> reference(const Inputs& in) const { return ::xllm_kernel::cuda::reference(in, &values[0], &values[1]); }
};

constexpr KvCacheFormat kQuantFormats[] = {KvCacheFormat::kFp8E4M3, KvCacheFormat::kInt8};

// A case over quantized caches, with a few SM counts, against float64 over the dequantized values.
void check_quant_case(const Case& c, KvCacheFormat f, std::mt19937& rng, bool expect_vector = true,
                      int64_t cache_offset = 0, std::vector<int> sm_counts = {1, kSms}) {
  SCOPED_TRACE(c.describe() + " " + kv_cache_format_name(f) + " cache offset " + std::to_string(cache_offset));
  Inputs in(c, rng);
  const QuantCaches q(in, f, cache_offset);
  const std::vector<double> want = q.reference(in);
  for (int sms : sm_counts) {
    SCOPED_TRACE("sm_count " + std::to_string(sms));
    const Result r = run(in, sms, expect_vector);
    expect_matches(in, want, r.got);
  }
}

// Every fp8 code decodes to the header's value (bits, NaN included), and a dequantized element of
// either format is float(q) * scale rounded once.
TEST(AttentionHost, QuantizedCacheElementsDequantizeAsTheHeaderSays) {
  const float scales[] = {1.0f, 4.0f / 448, 0.37f, -2.5f, 0.0f, std::numeric_limits<float>::quiet_NaN()};
  for (int code = 0; code < 256; ++code) {
    const uint8_t b = static_cast<uint8_t>(code);
    const float want = ::xllm_kernel::kernels::float_from_float8_e4m3fn(b);
    EXPECT_EQ(kernels::float_bits(kernels::fp8_e4m3fn_value(b)), kernels::float_bits(want)) << "code " << code;
    for (float scale : scales) {
      const float fp8 = kernels::dequantize_cache(kernels::Fp8E4M3{b}, scale);
      const float i8 = kernels::dequantize_cache(static_cast<int8_t>(b), scale);
      const float want_fp8 = want * scale, want_i8 = static_cast<float>(static_cast<int8_t>(b)) * scale;
      EXPECT_TRUE(std::isnan(want_fp8) ? std::isnan(fp8) : kernels::float_bits(fp8) == kernels::float_bits(want_fp8))
          << "fp8 code " << code << " scale " << scale;
      EXPECT_TRUE(std::isnan(want_i8) ? std::isnan(i8) : kernels::float_bits(i8) == kernels::float_bits(want_i8))
          << "int8 code " << code << " scale " << scale;
    }
  }
  // Pieces: vec one-byte elements in one load at a multiple of vec bytes; elements anywhere.
  alignas(16) uint8_t bytes[32];
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<uint8_t>(i * 37 + 1);
  const auto* fp8 = reinterpret_cast<const kernels::Fp8E4M3*>(bytes);
  const auto* i8 = reinterpret_cast<const int8_t*>(bytes);
  float v8[8], v4[4], v1[1];
  kernels::load_cache<8>(fp8 + 8, 0.5f, v8);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(v8[i], kernels::dequantize_cache(kernels::Fp8E4M3{bytes[8 + i]}, 0.5f)) << i;
  kernels::load_cache<4>(i8 + 12, 3.0f, v4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(v4[i], static_cast<float>(static_cast<int8_t>(bytes[12 + i])) * 3.0f) << i;
  kernels::load_cache<1>(i8 + 3, 1.0f, v1);
  EXPECT_EQ(v1[0], static_cast<float>(static_cast<int8_t>(bytes[3])));
  EXPECT_THROW(kernels::load_cache<8>(fp8 + 4, 1.0f, v8), std::logic_error);
  EXPECT_THROW(kernels::load_cache<4>(i8 + 2, 1.0f, v4), std::logic_error);
}

TEST(AttentionHost, QuantizedCachesDecodeMatchesFloat64) {
  std::mt19937 rng(31);
  const std::pair<int64_t, int64_t> groups[] = {{32, 8}, {16, 1}, {9, 3}};
  for (KvCacheFormat f : kQuantFormats) {
    for (DType dtype : kDTypes) {
      for (auto [qh, kvh] : groups) {
        Case c;
        c.dtype = dtype;
        c.q_heads = qh;
        c.kv_heads = kvh;
        c.head_size = 128;
        c.block_size = 16;
        c.seqs = {{1, 37}, {1, 1}, {1, 300}, {1, 16}};
        check_quant_case(c, f, rng);
      }
    }
  }
}

TEST(AttentionHost, QuantizedCachesPrefillMixedSoftCapAndWindowMatchFloat64) {
  std::mt19937 rng(32);
  for (KvCacheFormat f : kQuantFormats) {
    for (DType dtype : kDTypes) {
      Case c;
      c.dtype = dtype;
      c.q_heads = 8;
      c.kv_heads = 2;
      c.head_size = 64;
      c.seqs = {{20, 20}};
      check_quant_case(c, f, rng);
      c.seqs = {{1, 70}, {0, 0}, {5, 33}, {1, 2}, {9, 9}, {0, 0}};
      c.block_size = 32;
      check_quant_case(c, f, rng);
      c.block_size = 16;
      c.seqs = {{1, 300}, {6, 40}, {1, 5}};
      c.soft_cap = 30.0f;
      c.window = 33;
      check_quant_case(c, f, rng);
    }
  }
}

// The vector path reads vec one-byte elements at once: the caches' bases (and used strides) must be
// multiples of vec bytes (8 for bf16 and fp16 queries, 4 for float32), else elements. Head sizes
// that are not a multiple of vec elements take elements too.
TEST(AttentionHost, QuantizedCachePiecesFollowTheAlignmentRule) {
  std::mt19937 rng(33);
  for (KvCacheFormat f : kQuantFormats) {
    for (DType dtype : kDTypes) {
      const int64_t vec = 16 / Tensor::element_size(dtype);
      Case c;
      c.dtype = dtype;
      c.q_heads = 4;
      c.kv_heads = 2;
      c.head_size = 64;
      c.seqs = {{1, 40}, {3, 21}};
      check_quant_case(c, f, rng, true, vec, {kSms});       // aligned to vec bytes, not to 16
      check_quant_case(c, f, rng, false, vec / 2, {kSms});  // misaligned: elements
      c.head_size = 67;
      check_quant_case(c, f, rng, false, 0, {kSms});
      c.head_size = 512;
      check_quant_case(c, f, rng, true, 0, {kSms});
    }
  }
}

// NaN rows for out-of-range block ids, and batch-invariant plans, as over plain caches.
TEST(AttentionHost, QuantizedCachesBadBlocksAndBatchInvariantPlans) {
  std::mt19937 rng(34);
  for (KvCacheFormat f : kQuantFormats) {
    SCOPED_TRACE(kv_cache_format_name(f));
    Case c;
    c.dtype = DType::kBFloat16;
    c.q_heads = 4;
    c.kv_heads = 2;
    c.head_size = 64;
    c.seqs = {{1, 100}, {10, 40}, {1, 3000}};
    Inputs in(c, rng);
    const QuantCaches q(in, f);
    in.block_tables[in.max_blocks + 2] = -1;  // sequence 1's third block: its rows at positions >= 32
    const std::vector<double> want = q.reference(in);
    EXPECT_TRUE(std::isnan(want[3 * c.q_heads * c.head_size]));
    EXPECT_FALSE(std::isnan(want[0]));
    for (int sms : {1, kSms}) expect_matches(in, want, run(in, sms, true).got);
    in.p.batch_invariant = true;
    const Result one = run(in, 1, true), many = run(in, kSms, true);
    EXPECT_GE(one.plan.splits, 2);
    EXPECT_TRUE(one.got == many.got || std::equal(one.got.begin(), one.got.end(), many.got.begin(), [](double a, double b) {
                  return (std::isnan(a) && std::isnan(b)) || a == b;
                })) << "batch-invariant plans on 1 and 132 SMs differ";
    expect_matches(in, want, many.got);
  }
}

TEST(AttentionHost, QuantizedPlanFollowsTheCacheAlignmentOnly) {
  alignas(16) static unsigned char buf[64];
  alignas(16) static float scales[4];
  static const int32_t zero = 0;
  PagedAttentionParams p = test::Llama8BPagedAttention(64);
  p.query_tokens = 64;
  p.query = p.key_cache = p.value_cache = buf;
  p.out = buf;
  p.query_strides = p.out_strides = {32 * 128, 128};
  p.key_cache_strides = p.value_cache_strides = {16 * 8 * 128, 8 * 128, 128};
  p.block_tables = &zero;
  p.block_table_stride = 256;
  p.query_start_loc = p.seq_lens = &zero;
  const PagedAttentionPlan plain = plan_paged_attention(p, kSms);
  for (KvCacheFormat f : kQuantFormats) {
    SCOPED_TRACE(kv_cache_format_name(f));
    PagedAttentionParams q = p;
    q.cache_format = f;
    q.key_scale = q.value_scale = scales;
    q.key_scale_strides = q.value_scale_strides = {16 * 8, 8, 1};
    PagedAttentionPlan plan = plan_paged_attention(q, kSms);
    // The same shape as the plain plan: the format changes the loads, not the work.
    EXPECT_TRUE(plan.vector);
    EXPECT_EQ(plan.vec, plain.vec);
    EXPECT_EQ(plan.splits, plain.splits);
    EXPECT_EQ(plan.shared_bytes, plain.shared_bytes);
    EXPECT_EQ(plan.blocks, plain.blocks);
    q.key_cache = buf + 8;  // bf16 query: pieces of 8 cache bytes
    EXPECT_TRUE(plan_paged_attention(q, kSms).vector);
    q.key_cache = buf + 4;
    EXPECT_FALSE(plan_paged_attention(q, kSms).vector);
    q.key_cache = buf;
    q.value_cache_strides.head = 132;  // 132 bytes: not a multiple of 8
    EXPECT_FALSE(plan_paged_attention(q, kSms).vector);
    q.value_cache_strides.head = 136;
    EXPECT_TRUE(plan_paged_attention(q, kSms).vector);
    q.dtype = DType::kFloat32;  // pieces of 4 cache bytes
    q.query_strides = q.out_strides = {32 * 128, 128};
    q.key_cache = buf + 4;
    q.value_cache_strides.head = 132;
    EXPECT_TRUE(plan_paged_attention(q, kSms).vector);
    EXPECT_EQ(plan_paged_attention(q, kSms).vec, 4);
  }
}

TEST(AttentionHost, QuantizedLauncherRejectsInvalidScalesWithoutTouchingTheDevice) {
  alignas(256) static unsigned char buf[1 << 16];
  alignas(16) static float scales[64];
  static const int32_t ints[] = {0, 1};
  PagedAttentionParams good;
  good.dtype = DType::kFloat16;
  good.num_seqs = 1;
  good.query_tokens = 1;
  good.q_heads = 2;
  good.kv_heads = 1;
  good.head_size = 8;
  good.block_size = 1;
  good.num_blocks = 1;
  good.max_blocks_per_seq = 512;
  good.query = good.key_cache = good.value_cache = buf;
  good.out = buf + 4096;
  good.query_strides = good.out_strides = {16, 8};
  good.key_cache_strides = good.value_cache_strides = {8, 8, 8};
  good.block_tables = ints;
  good.block_table_stride = 512;
  good.query_start_loc = ints;
  good.seq_lens = ints + 1;
  good.key_scale = scales;
  good.value_scale = scales + 1;
  for (KvCacheFormat f : kQuantFormats) {
    SCOPED_TRACE(kv_cache_format_name(f));
    good.cache_format = f;
    ASSERT_GT(plan_paged_attention(good, kSms).blocks, 0);
    EXPECT_TRUE(accepted(paged_attention_check(good, buf, sizeof(buf), kSms)));
    auto bad = [&](auto change, const char* reason) {
      SCOPED_TRACE(reason);
      PagedAttentionParams p = good;
      change(p);
      EXPECT_TRUE(rejected(paged_attention(p, buf, sizeof(buf), nullptr), reason));
      EXPECT_TRUE(rejected(paged_attention_check(p, buf, sizeof(buf), kSms), reason));
      EXPECT_EQ(plan_paged_attention(p, kSms).blocks, 0);
    };
    using P = PagedAttentionParams;
    bad([](P& p) { p.key_scale = nullptr; }, "null key_scale");
    bad([](P& p) { p.value_scale = nullptr; }, "value_scale");
    bad([](P& p) { p.cache_format = static_cast<KvCacheFormat>(3); }, "unknown cache format");
    if (f == KvCacheFormat::kInt8) {
      bad([](P& p) { p.key_scale_strides.row = -1; }, "negative stride");
      bad([](P& p) { p.value_scale_strides.head = -1; }, "negative stride");
      bad([](P& p) {
        p.num_blocks = int64_t{1} << 40;
        p.key_scale_strides.block = int64_t{1} << 40;
      }, "beyond int64");
    } else {
      PagedAttentionParams p = good;  // an fp8 call never reads the int8 scale strides
      p.key_scale_strides.row = -1;
      EXPECT_TRUE(accepted(paged_attention_check(p, buf, sizeof(buf), kSms)));
    }
    // No blocks: nothing is read, the scales may be null.
    PagedAttentionParams none = good;
    none.num_blocks = 0;
    none.key_cache = none.value_cache = nullptr;
    none.key_scale = none.value_scale = nullptr;
    EXPECT_TRUE(accepted(paged_attention_check(none, buf, sizeof(buf), kSms)));
    if (!cuda_device_present()) EXPECT_TRUE(device_failure(paged_attention(good, buf, sizeof(buf), nullptr)));
  }
  // A plain cache never reads the scale fields.
  good.cache_format = KvCacheFormat::kPlain;
  good.key_scale = good.value_scale = nullptr;
  good.key_scale_strides.block = -1;
  EXPECT_TRUE(accepted(paged_attention_check(good, buf, sizeof(buf), kSms)));
}

TEST(AttentionHost, PlanRules) {
  alignas(16) static unsigned char buf[64];
  static const int32_t zero = 0;
  PagedAttentionParams p = test::Llama8BPagedAttention(64);
  p.query_tokens = 64;
  p.query = p.key_cache = p.value_cache = buf;
  p.out = buf;
  p.query_strides = p.out_strides = {32 * 128, 128};
  p.key_cache_strides = p.value_cache_strides = {16 * 8 * 128, 8 * 128, 128};
  p.block_tables = &zero;
  p.block_table_stride = 256;
  p.query_start_loc = p.seq_lens = &zero;
  // Decode 64 x 4096, 32/8 heads of 128, bf16, on 132 SMs: 512 units, 528 resident blocks.
  PagedAttentionPlan plan = plan_paged_attention(p, kSms);
  EXPECT_TRUE(plan.vector);
  EXPECT_EQ(plan.vec, 8);
  EXPECT_EQ(plan.pieces, 16);
  EXPECT_EQ(plan.threads, 128);
  EXPECT_EQ(plan.heads_per_block, 4);
  EXPECT_EQ(plan.head_chunks, 1);
  EXPECT_EQ(plan.slices, 8);
  EXPECT_EQ(plan.shared_bytes, sizeof(AttentionShared) + 4 * 8 * 4 * 128);
  EXPECT_EQ(plan.splits, 1);
  EXPECT_EQ(plan.items, 512);
  EXPECT_EQ(plan.blocks, 512);
  EXPECT_EQ(plan.workspace_bytes, 0);
  // Eight sequences: splits fill the GPU (floor(528 / 64) = 8), with a merge and a workspace.
  p.num_seqs = p.query_tokens = 8;
  plan = plan_paged_attention(p, kSms);
  EXPECT_EQ(plan.splits, 8);
  EXPECT_EQ(plan.items, 8 * 8 * 8);
  EXPECT_EQ(plan.merge_pieces, 8 * 32 * 16);
  EXPECT_EQ(plan.merge_threads, 128);
  EXPECT_EQ(plan.merge_blocks, 8 * 32 * 16 / 128);
  const int64_t partials = 8 * 32 * 8;
  EXPECT_EQ(plan.max_offset, partials * 128 * 4);
  EXPECT_EQ(plan.sum_offset, plan.max_offset + partials * 4);
  EXPECT_EQ(plan.workspace_bytes, plan.sum_offset + partials * 4);
  // One sequence: at most 32 splits, and at most ceil(context / 256).
  p.num_seqs = p.query_tokens = 1;
  EXPECT_EQ(plan_paged_attention(p, kSms).splits, 16);  // 4096 keys / 256
  p.max_blocks_per_seq = 1024;
  EXPECT_EQ(plan_paged_attention(p, kSms).splits, 32);
  p.max_blocks_per_seq = 40;  // 640 keys
  EXPECT_EQ(plan_paged_attention(p, kSms).splits, 3);
  // The same shapes give the same plan whatever the lengths (never read on the host).
  static const int32_t other[] = {4000, 1, 7};
  PagedAttentionParams q = p;
  q.seq_lens = other;
  q.query_start_loc = other;
  q.block_tables = other;
  EXPECT_EQ(plan_paged_attention(q, kSms).workspace_bytes, plan_paged_attention(p, kSms).workspace_bytes);
  EXPECT_EQ(plan_paged_attention(q, kSms).splits, plan_paged_attention(p, kSms).splits);
  // Groups of more than 8 heads in equal chunks: 9 -> 5 + 4, 16 -> 8 + 8, 64 -> 8 x 8.
  p.max_blocks_per_seq = 256;
  p.kv_heads = 1;
  p.q_heads = 9;
  EXPECT_EQ(plan_paged_attention(p, kSms).head_chunks, 2);
  EXPECT_EQ(plan_paged_attention(p, kSms).heads_per_block, 5);
  p.q_heads = 16;
  EXPECT_EQ(plan_paged_attention(p, kSms).heads_per_block, 8);
  p.q_heads = 64;
  EXPECT_EQ(plan_paged_attention(p, kSms).head_chunks, 8);
  // Element path for a misaligned base or a tail; more pieces than threads: one slice.
  p.q_heads = 8;
  p.query = buf + 2;
  EXPECT_FALSE(plan_paged_attention(p, kSms).vector);
  EXPECT_EQ(plan_paged_attention(p, kSms).pieces, 128);
  EXPECT_EQ(plan_paged_attention(p, kSms).slices, 1);
  p.query = buf;
  p.head_size = 100;  // 200 bytes
  EXPECT_FALSE(plan_paged_attention(p, kSms).vector);
  // Many rows (prefill): no splits; the grid is capped at 16 waves of resident blocks.
  p.head_size = 128;
  p.query_tokens = 1 << 20;
  plan = plan_paged_attention(p, kSms);
  EXPECT_EQ(plan.splits, 1);
  EXPECT_EQ(plan.items, int64_t{1} << 20);
  EXPECT_EQ(plan.blocks, kSms * 4 * 16);
  // Nothing to do: no plan.
  p.query_tokens = 0;
  EXPECT_EQ(plan_paged_attention(p, kSms).blocks, 0);
  EXPECT_EQ(paged_attention_workspace_bytes(p, kSms), 0);
}

TEST(AttentionHost, LauncherRejectsInvalidParametersWithoutTouchingTheDevice) {
  alignas(256) static unsigned char buf[1 << 16];
  static const int32_t ints[] = {0, 1};
  PagedAttentionParams good;
  good.dtype = DType::kFloat16;
  good.num_seqs = 1;
  good.query_tokens = 1;
  good.q_heads = 2;
  good.kv_heads = 1;
  good.head_size = 8;
  good.block_size = 1;
  good.num_blocks = 1;
  good.max_blocks_per_seq = 512;
  good.query = good.key_cache = good.value_cache = buf;
  good.out = buf + 4096;
  good.query_strides = good.out_strides = {16, 8};
  good.key_cache_strides = good.value_cache_strides = {8, 8, 8};
  good.block_tables = ints;
  good.block_table_stride = 512;
  good.query_start_loc = ints;
  good.seq_lens = ints + 1;
  ASSERT_GT(plan_paged_attention(good, kSms).blocks, 0);
  const int64_t need = paged_attention_workspace_bytes(good, kSms);
  ASSERT_GT(need, 0);  // one row on 132 SMs: two splits of the 512 keys a sequence may have
  auto bad = [&](auto change, const char* reason) {
    SCOPED_TRACE(reason);
    PagedAttentionParams p = good;
    change(p);
    EXPECT_TRUE(rejected(paged_attention(p, buf, sizeof(buf), nullptr), reason));
    EXPECT_TRUE(rejected(paged_attention_check(p, buf, sizeof(buf), kSms), reason));
    EXPECT_EQ(plan_paged_attention(p, kSms).blocks, 0);
    EXPECT_EQ(paged_attention_workspace_bytes(p, kSms), 0);
  };
  using P = PagedAttentionParams;
  bad([](P& p) { p.dtype = static_cast<DType>(9); }, "unknown dtype");
  bad([](P& p) { p.q_heads = 0; }, "must be >= 1");
  bad([](P& p) { p.kv_heads = 0; }, "must be >= 1");
  bad([](P& p) { p.head_size = 0; }, "must be >= 1");
  bad([](P& p) { p.block_size = 0; }, "must be >= 1");
  bad([](P& p) { p.head_size = 513; }, "head_size must be <= 512");
  bad([](P& p) { p.q_heads = 3; p.kv_heads = 2; }, "multiple of kv_heads");
  bad([](P& p) { p.num_seqs = -1; }, "must be >= 0");
  bad([](P& p) { p.query_tokens = -1; }, "must be >= 0");
  bad([](P& p) { p.num_blocks = -1; }, "must be >= 0");
  bad([](P& p) { p.max_blocks_per_seq = -1; }, "must be >= 0");
  bad([](P& p) { p.query_strides.token = -1; }, "negative stride");
  bad([](P& p) { p.key_cache_strides.row = -1; }, "negative stride");
  bad([](P& p) { p.block_table_stride = -1; }, "negative stride");
  bad([](P& p) { p.scale = NAN; }, "scale must be finite");
  bad([](P& p) { p.soft_cap = -1; }, "soft_cap must be finite and >= 0");
  bad([](P& p) { p.soft_cap = INFINITY; }, "soft_cap must be finite and >= 0");
  bad([](P& p) { p.query = nullptr; }, "null query");
  bad([](P& p) { p.out = nullptr; }, "null query, out");
  bad([](P& p) { p.query_start_loc = nullptr; }, "query_start_loc");
  bad([](P& p) { p.seq_lens = nullptr; }, "null seq_lens");
  bad([](P& p) { p.block_tables = nullptr; }, "block_tables");
  bad([](P& p) { p.key_cache = nullptr; }, "null key_cache");
  bad([](P& p) { p.value_cache = nullptr; }, "value_cache");
  bad([](P& p) {
    p.num_blocks = int64_t{1} << 40;
    p.key_cache_strides.block = int64_t{1} << 40;
  }, "beyond int64");
  bad([](P& p) {
    p.query_tokens = int64_t{1} << 50;
    p.query_strides.token = 1 << 20;
  }, "beyond int64");
  bad([](P& p) { p.max_blocks_per_seq = int64_t{1} << 62; p.block_size = 8; }, "beyond int64");
  // The workspace: too small, null or misaligned, where the plan needs one.
  EXPECT_TRUE(rejected(paged_attention_check(good, buf, need - 1, kSms), "workspace too small"));
  EXPECT_TRUE(rejected(paged_attention_check(good, nullptr, need, kSms), "workspace too small"));
  EXPECT_TRUE(rejected(paged_attention_check(good, buf + 16, need, kSms), "256-byte aligned"));
  EXPECT_TRUE(accepted(paged_attention_check(good, buf, need, kSms)));
  // Null caches and tables are fine where nothing can be read from them.
  PagedAttentionParams none = good;
  none.num_blocks = 0;
  none.key_cache = none.value_cache = nullptr;
  EXPECT_TRUE(accepted(paged_attention_check(none, buf, sizeof(buf), kSms)));
  none = good;
  none.num_seqs = 0;
  none.seq_lens = nullptr;
  none.block_tables = nullptr;
  EXPECT_TRUE(accepted(paged_attention_check(none, buf, sizeof(buf), kSms)));
  // Zero query rows: success without a launch (no device needed), even without pointers.
  none = good;
  none.query_tokens = 0;
  none.query = none.out = nullptr;
  none.query_start_loc = nullptr;
  EXPECT_TRUE(accepted(paged_attention(none, nullptr, 0, nullptr)));
  // Valid parameters without a usable device: the runtime's error, nothing launched.
  if (!cuda_device_present()) EXPECT_TRUE(device_failure(paged_attention(good, buf, sizeof(buf), nullptr)));
}

}  // namespace
}  // namespace xllm_kernel::cuda
