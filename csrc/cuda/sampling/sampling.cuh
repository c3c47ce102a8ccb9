// CUDA kernels of sample; the launcher is csrc/cuda/sampling/sampling.cu.
//
// A block of kSampleThreads threads takes one row at a time. Its work is a short program of steps
// separated by block barriers; each step is a function of (thread, shared memory), and Team::step runs
// it: on the device every thread runs it once and meets the barrier, on the host
// (test/cuda/sampling/sampling_kernels_host_test.cpp) a loop runs it for every thread in turn. So the
// host runs the very code of the device. No value lives in a thread's registers across a barrier, and
// every decision that steers the program is read from shared memory by every thread alike.
//
// The order and the masses. A token's order value is the 64-bit integer
//   order_i = logit_order_key(l_i) << index_bits | (vocab - 1 - i)   (total_bits = 32 + index_bits)
// so that the order of csrc/common/sampling.h (logit descending, then index ascending) is order
// descending, and every token has its own value. top-p measures masses in fixed point: m_i =
// floor(w_i * 2^mass_shift) with mass_shift = 63 - index_bits, so a row's total stays below 2^63 and
// every sum is exact and independent of the order of additions (deterministic with shared-memory
// atomics); the boundary test "prefix mass >= p * W" is evaluated exactly as prefix >= ceil(p * W)
// (sample_mass_target). The truncation moves each mass by less than 2^-mass_shift (2^-46 for a
// vocabulary of 128256): the float32 sums of another implementation differ from the exact sums far
// more. w itself is the header's float32 expression: expf(__fdiv_rn(__fsub_rn(l, l_max), T)).
//
// The program of a row:
//   A  max:     thread t reads its pieces of the row; the largest order value (the first token) and
//               whether a NaN occurs, reduced through shared memory. row_nan is written. Invalid
//               parameters or no logit above -inf: -1. Greedy (T == 0): the first token. Neither
//               top-k nor top-p (K == vocab, p == 1): straight to the race over the row.
//   B  digit 0: a histogram of the top 11 bits of the order (the key's top bits) over the row: counts,
//               and masses where top-p is on. From it (thread 0): the bucket of the K-th token, and the
//               bucket where the mass reaches ceil(p * W) (with W's upper bound, the top-k bucket's
//               whole mass, when top-k is on); the tokens of those buckets and every bucket above are
//               the candidates: no kept token and no token the selections still have to tell apart lies
//               outside them.
//   C  gather:  if they fit (plan.candidates, at most kSampleCandidates), the candidates' keys,
//               indices and w go to shared memory, and every later pass reads them there instead of
//               the row (the row is read three times in all). Otherwise the later passes read the row.
//   top-k:      radix selection of the K-th token, 11 bits of the order per digit, from the bucket of B:
//               per digit a histogram of the tokens that still share the prefix, and the bucket where
//               the count reaches K; it ends when a bucket's tokens are exactly the ones still needed.
//               The kept tokens are those whose prefix is >= the final prefix; their mass is W.
//   top-p:      radix selection by mass over the top-k set, from the root (or from B's bucket when
//               top-k is off): per digit the bucket where the mass from the top reaches ceil(p * W),
//               until the bucket holds one token, the last one kept.
//   race:       every kept token with w >= min_p and w > 0 draws u_i (Philox4x32-10, one call per group
//               of four tokens along the row) and competes with w_i / (-log u_i) (IEEE division); the
//               largest quotient wins, ties to the lower index: a maximum over the 64-bit value
//               (quotient bits << 32 | ~index), reduced through shared memory. out[r] = its index.
// A digit's histogram is summed per thread (4 buckets), per group of 16 threads and over the 32
// groups; every thread finds the crossing group and chunk from those sums (the same integers, so the
// same answer), and the thread that owns the chunk finds the bucket and writes the selection's new
// state. Each histogram step is followed by the clearing of the buckets, so a block's shared memory
// needs no initialization beyond the first step of each row.
//
// Contracts the launcher guarantees: parameters that its check accepts, batch >= 1, a plan from
// plan_sample for them, blockDim.x == kSampleThreads. The per-row parameters are not trusted.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "csrc/common/sampling.h"
#include "csrc/cuda/common/codec.cuh"
#include "csrc/cuda/common/float_ops.cuh"
#include "csrc/cuda/common/macros.cuh"
#include "csrc/cuda/common/vector.cuh"
#include "csrc/cuda/sampling/sampling.h"

// Scalar code one thread runs once per digit or row (the decisions between the passes): kept out of
// line, so that its many 64-bit values do not raise the register count of the passes' loops.
#ifdef __CUDACC__
#define XLLM_SAMPLE_COLD __host__ __device__ inline __noinline__
#else
#define XLLM_SAMPLE_COLD inline __attribute__((noinline))
#endif

namespace xllm_kernel::cuda::kernels {

using ::xllm_kernel::kernels::kInvalidRow;
using ::xllm_kernel::kernels::logit_order_key;
using ::xllm_kernel::kernels::Philox4x32;
using ::xllm_kernel::kernels::sampling_parameters_valid;
using ::xllm_kernel::kernels::sampling_top_k;
using ::xllm_kernel::kernels::sampling_uniform;
using ::xllm_kernel::kernels::sampling_uniform_from_word;
using ::xllm_kernel::kernels::sampling_words;

inline constexpr int kSampleThreads = 512;            // per block
inline constexpr int kSampleMinBlocksPerSm = 2;       // __launch_bounds__: at most 64 registers per thread
inline constexpr int kSampleDigitBits = 11;           // bits of the order value per selection digit
inline constexpr int kSampleBuckets = 1 << kSampleDigitBits;
inline constexpr int kSampleBucketsPerThread = kSampleBuckets / kSampleThreads;  // a thread's chunk
inline constexpr int kSampleGroups = 32;                                          // of chunks
inline constexpr int kSampleChunksPerGroup = kSampleThreads / kSampleGroups;
inline constexpr int kSampleCandidates = 1024;        // tokens a row may gather in shared memory
inline constexpr uint32_t kSampleMinusInfKey = 0x007FFFFFu;  // logit_order_key(-inf) (and of NaN)
inline constexpr uint32_t kSamplePlusInfKey = 0xFF800000u;   // logit_order_key(+inf): the largest key

static_assert(kSampleBuckets == kSampleThreads * kSampleBucketsPerThread, "every thread owns a chunk of buckets");
static_assert(kSampleThreads == kSampleGroups * kSampleChunksPerGroup, "every group holds whole chunks");

// What the program of a row does after the first pass (SampleRowState::action).
inline constexpr int32_t kSampleDone = 0;     // out[r] written (invalid row or greedy)
inline constexpr int32_t kSampleRaceAll = 1;  // no top-k, no top-p: the race over the row
inline constexpr int32_t kSampleSelect = 2;   // selections, then the race over the kept tokens

// ---- Arithmetic (the same expressions on the host and the device) -------------------------------

// The float32 value of a key (the inverse of logit_order_key for every value it yields).
XLLM_CUDA_HD float sample_key_value(uint32_t key) {
  return float_from_bits((key & 0x80000000u) != 0 ? (key & 0x7FFFFFFFu) : ~key);
}

// The values of a row every thread of its block holds alike: its shape, its parameters and where
// its token goes. Filled once per row (sample_run_row).
struct SampleRowCtx {
  int64_t vocab = 0;
  int index_bits = 0;
  int total_bits = 0;        // 32 + index_bits
  float lmax = 0.0f;         // the largest logit (NaN counted as -inf)
  float temperature = 0.0f;  // > 0
  bool inf_max = false;      // lmax == +inf: w = 1 for the +inf tokens, 0 for the others
  int64_t top_k = 0;         // K
  float top_p = 1.0f;
  bool top_k_on = false;     // K < vocab
  bool top_p_on = false;     // top_p < 1
  float min_p = 0.0f;
  float mass_scale = 0.0f;   // 2^mass_shift
  int64_t seed = 0, offset = 0;
  int64_t* out = nullptr;    // out[r]
};

// w of a token with this key: exp((l - l_max) / T), or the +inf limit; 0 for -inf (and NaN).
XLLM_CUDA_HD float sample_weight(uint32_t key, const SampleRowCtx& c) {
  if (c.inf_max) return key == kSamplePlusInfKey ? 1.0f : 0.0f;
  if (key <= kSampleMinusInfKey) return 0.0f;
  return float_exp(float_div(float_sub(sample_key_value(key), c.lmax), c.temperature));
}

// 2^shift as a float32 (0 <= shift <= 63).
XLLM_CUDA_HD float sample_mass_scale(int shift) { return float_from_bits(static_cast<uint32_t>(127 + shift) << 23); }

// floor(w * scale) for w in [0, 1]: the product is exact (a power of two), the conversion truncates.
XLLM_CUDA_HD unsigned long long sample_mass(float w, float scale) {
  const float x = float_mul(w, scale);
#ifdef __CUDA_ARCH__
  return __float2ull_rz(x);
#else
  return static_cast<unsigned long long>(x);
#endif
}

XLLM_CUDA_HD unsigned long long sample_mul_hi(unsigned long long a, unsigned long long b) {
#ifdef __CUDA_ARCH__
  return __umul64hi(a, b);
#else
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
#endif
}

// ceil(p * total), exactly, for p in (0, 1) and any total: p = mantissa * 2^-shift with a mantissa of
// at most 24 bits and shift >= 24, so the product has at most 88 bits.
XLLM_CUDA_HD unsigned long long sample_mass_target(float p, unsigned long long total) {
  const uint32_t bits = float_bits(p);
  const uint32_t biased = (bits >> 23) & 0xFFu;
  const unsigned long long mantissa = biased == 0 ? (bits & 0x7FFFFFu) : ((bits & 0x7FFFFFu) | 0x800000u);
  const int shift = biased == 0 ? 149 : 150 - static_cast<int>(biased);
  const unsigned long long lo = mantissa * total, hi = sample_mul_hi(mantissa, total);
  if (shift >= 128) return (lo | hi) != 0 ? 1 : 0;
  unsigned long long quotient = 0;
  bool remainder = false;
  if (shift >= 64) {
    const int s = shift - 64;
    quotient = hi >> s;
    remainder = lo != 0 || (s > 0 && (hi & ((1ull << s) - 1)) != 0);
  } else {
    quotient = (hi << (64 - shift)) | (lo >> shift);
    remainder = (lo & ((1ull << shift) - 1)) != 0;
  }
  return quotient + (remainder ? 1 : 0);
}

XLLM_CUDA_HD unsigned long long sample_order(uint32_t key, uint32_t index, const SampleRowCtx& c) {
  return (static_cast<unsigned long long>(key) << c.index_bits) |
         static_cast<unsigned long long>(c.vocab - 1 - static_cast<int64_t>(index));
}

// The top `bits` bits of an order value (0 <= bits <= total_bits).
XLLM_CUDA_HD unsigned long long sample_prefix(unsigned long long order, const SampleRowCtx& c, int bits) {
  return order >> (c.total_bits - bits);
}

// ---- Shared memory -------------------------------------------------------------------------------

// A radix selection's progress over the order values. The tokens whose top `bits` bits exceed
// `prefix` are ahead of every token with that prefix: above_count of them with above_mass. Count
// mode (top-k): `need` more tokens are to be taken from the prefix's; mass mode (top-p): the
// prefix's tokens must add `need` more mass. bucket_count/bucket_mass: the prefix's tokens (those
// the selection's filter admits). done: the tokens with prefix >= `prefix` (and the filter) are the
// selection's set.
struct SampleSelection {
  unsigned long long prefix;
  unsigned long long above_mass;
  unsigned long long need;
  unsigned long long bucket_mass;
  uint32_t above_count;
  uint32_t bucket_count;
  int32_t bits;
  int32_t done;
};

// A row's decisions: written by one thread in a step, read by all after its barrier.
struct SampleRowState {
  unsigned long long top;    // the largest order value: the first token of the order
  SampleSelection k;         // top-k (count mode)
  SampleSelection p;         // top-p (mass mode)
  uint32_t candidates;       // gathered so far / in all
  int32_t action;            // kSampleDone, kSampleRaceAll or kSampleSelect
  int32_t use_candidates;    // the passes after B read the gathered candidates
  int32_t candidate_low;     // digit-0 buckets >= this one are gathered ...
  int32_t candidate_extra;   // ... and this one (the top-k bucket below them), or -1
  int32_t p_started;         // the top-p selection's first digit came from B
};

struct SampleShared {
  uint32_t count[kSampleBuckets];     // the histogram: tokens,
  uint32_t mass_lo[kSampleBuckets];   // and the mass, in two 32-bit halves (native shared atomics)
  uint32_t mass_hi[kSampleBuckets];
  uint32_t chunk_count[kSampleThreads];               // per thread: its buckets' sums,
  unsigned long long chunk_value[kSampleThreads];     // or its partial maximum
  uint32_t group_count[kSampleGroups];
  unsigned long long group_value[kSampleGroups];
  uint32_t cand_key[kSampleCandidates];
  uint32_t cand_index[kSampleCandidates];
  float cand_w[kSampleCandidates];
  SampleRowState row;
};

static_assert(sizeof(SampleShared) <= 48 * 1024, "static shared memory (no opt-in)");

struct SampleArgs {
  SamplingParams p;
  SamplePlan plan;
};

// Runs the steps on the device: each thread once, then a block barrier.
struct SampleDeviceTeam {
  template <class F>
  XLLM_CUDA_HD void step(F&& f) {
#ifdef __CUDA_ARCH__
    f(static_cast<int>(threadIdx.x));
    __syncthreads();
#endif
  }
};

XLLM_CUDA_HD uint32_t sample_atomic_add(uint32_t* a, uint32_t v) {
#ifdef __CUDA_ARCH__
  return atomicAdd(a, v);
#else
  const uint32_t old = *a;
  *a = old + v;
  return old;
#endif
}

// Adds m to bucket b's mass: the low half wraps, and the thread whose addition wrapped it carries
// one into the high half, so the two halves hold the exact sum.
XLLM_CUDA_HD void sample_add_mass(SampleShared& s, int b, unsigned long long m) {
  const uint32_t lo = static_cast<uint32_t>(m), hi = static_cast<uint32_t>(m >> 32);
  uint32_t carry = 0;
  if (lo != 0) {
    const uint32_t old = sample_atomic_add(&s.mass_lo[b], lo);
    carry = static_cast<uint32_t>(old + lo) < old ? 1u : 0u;
  }
  if (hi + carry != 0) sample_atomic_add(&s.mass_hi[b], hi + carry);
}

XLLM_CUDA_HD unsigned long long sample_bucket_mass(const SampleShared& s, int b) {
  return (static_cast<unsigned long long>(s.mass_hi[b]) << 32) | s.mass_lo[b];
}

// Thread t's buckets to zero.
XLLM_CUDA_HD void sample_clear_buckets(SampleShared& s, int t) {
  for (int j = 0; j < kSampleBucketsPerThread; ++j) {
    const int b = t * kSampleBucketsPerThread + j;
    s.count[b] = 0;
    s.mass_lo[b] = 0;
    s.mass_hi[b] = 0;
  }
}

// ---- The row's tokens ----------------------------------------------------------------------------

template <class T, bool kVector>
inline constexpr int kSamplePiece = kVector ? kVec<T> : 4;

// Calls f(index, logit) for thread t's tokens of a row: pieces of kSamplePiece elements at
// multiples of it (consecutive threads take consecutive pieces; one 16-byte load each on the vector
// path), then the tail one element at a time. A thread's indices increase, and a piece holds whole
// groups of four tokens (the Philox groups).
template <class T, bool kVector, class F>
XLLM_CUDA_HD void sample_for_each_logit(const T* row, int64_t vocab, int t, F&& f) {
  constexpr int N = kSamplePiece<T, kVector>;
  const int64_t body = vocab / N * N;
  for (int64_t e = int64_t{t} * N; e < body; e += int64_t{kSampleThreads} * N) {
    float v[N];
    if constexpr (kVector) {
      load<N>(row + e, v);
    } else {
XLLM_CUDA_UNROLL
      for (int i = 0; i < N; ++i) v[i] = Codec<T>::to_float(row[e + i]);
    }
XLLM_CUDA_UNROLL
    for (int i = 0; i < N; ++i) f(e + i, v[i]);
  }
  for (int64_t e = body + t; e < vocab; e += kSampleThreads) f(e, Codec<T>::to_float(row[e]));
}

// The tokens as the passes see them: f(key, index, weight) with weight() = w of the token.
template <class T, bool kVector>
struct SampleRowSource {
  const T* row;
  const SampleRowCtx* c;
  template <class F>
  XLLM_CUDA_HD void for_each(int t, F&& f) const {
    const SampleRowCtx& ctx = *c;
    sample_for_each_logit<T, kVector>(row, ctx.vocab, t, [&](int64_t i, float l) {
      const uint32_t key = logit_order_key(l);
      f(key, static_cast<uint32_t>(i), [&] { return sample_weight(key, ctx); });
    });
  }
};

struct SampleCandidateSource {
  const SampleShared* s;
  uint32_t n;
  template <class F>
  XLLM_CUDA_HD void for_each(int t, F&& f) const {
    for (uint32_t j = static_cast<uint32_t>(t); j < n; j += kSampleThreads) {
      f(s->cand_key[j], s->cand_index[j], [&] { return s->cand_w[j]; });
    }
  }
};

// ---- Reductions ----------------------------------------------------------------------------------

// Sums thread t's buckets into its chunk (step 1), the chunks into the groups (step 2).
template <class Team>
XLLM_CUDA_HD void sample_sum_histogram(Team& team, SampleShared& s) {
  team.step([&](int t) {
    uint32_t count = 0;
    unsigned long long mass = 0;
    for (int j = 0; j < kSampleBucketsPerThread; ++j) {
      const int b = t * kSampleBucketsPerThread + j;
      count += s.count[b];
      mass += sample_bucket_mass(s, b);
    }
    s.chunk_count[t] = count;
    s.chunk_value[t] = mass;
  });
  team.step([&](int t) {
    if (t >= kSampleGroups) return;
    uint32_t count = 0;
    unsigned long long mass = 0;
    for (int j = 0; j < kSampleChunksPerGroup; ++j) {
      count += s.chunk_count[t * kSampleChunksPerGroup + j];
      mass += s.chunk_value[t * kSampleChunksPerGroup + j];
    }
    s.group_count[t] = count;
    s.group_value[t] = mass;
  });
}

// The maximum of the threads' chunk_value into group_value (one step; thread 0 then takes the
// groups' maximum, sample_max_of_groups).
template <class Team>
XLLM_CUDA_HD void sample_max_chunks(Team& team, SampleShared& s) {
  team.step([&](int t) {
    if (t >= kSampleGroups) return;
    unsigned long long m = 0;
    for (int j = 0; j < kSampleChunksPerGroup; ++j) {
      const unsigned long long v = s.chunk_value[t * kSampleChunksPerGroup + j];
      m = v > m ? v : m;
    }
    s.group_value[t] = m;
  });
}

XLLM_CUDA_HD unsigned long long sample_max_of_groups(const SampleShared& s) {
  unsigned long long m = 0;
  for (int g = 0; g < kSampleGroups; ++g) m = s.group_value[g] > m ? s.group_value[g] : m;
  return m;
}

// Where a histogram's running total from the top (highest bucket first) first reaches `need` (>= 1):
// by count, or by mass. `before_*`: the totals of everything above the found group, chunk or bucket.
struct SampleCrossing {
  int index = -1;  // -1: not reached
  uint32_t before_count = 0;
  unsigned long long before_mass = 0;
};

XLLM_CUDA_HD bool sample_reaches(bool by_mass, const SampleCrossing& x, uint32_t count, unsigned long long mass,
                                 unsigned long long need) {
  return by_mass ? x.before_mass + mass >= need : static_cast<unsigned long long>(x.before_count) + count >= need;
}

// The chunk (= the thread that owns it) where the groups' and chunks' sums reach `need`.
XLLM_CUDA_HD SampleCrossing sample_find_chunk(const SampleShared& s, bool by_mass, unsigned long long need) {
  SampleCrossing x;
  int group = -1;
  for (int g = kSampleGroups - 1; g >= 0; --g) {
    if (sample_reaches(by_mass, x, s.group_count[g], s.group_value[g], need)) {
      group = g;
      break;
    }
    x.before_count += s.group_count[g];
    x.before_mass += s.group_value[g];
  }
  if (group < 0) return SampleCrossing{};
  for (int j = kSampleChunksPerGroup - 1; j >= 0; --j) {
    const int chunk = group * kSampleChunksPerGroup + j;
    if (sample_reaches(by_mass, x, s.chunk_count[chunk], s.chunk_value[chunk], need)) {
      x.index = chunk;
      return x;
    }
    x.before_count += s.chunk_count[chunk];
    x.before_mass += s.chunk_value[chunk];
  }
  return SampleCrossing{};  // unreachable: the group's chunks add up to the group
}

// The bucket within the chunk found by sample_find_chunk; before_* then cover everything above it.
XLLM_CUDA_HD SampleCrossing sample_find_bucket(const SampleShared& s, bool by_mass, unsigned long long need,
                                               SampleCrossing x) {
  const int chunk = x.index;
  x.index = -1;
  if (chunk < 0) return x;
  for (int j = kSampleBucketsPerThread - 1; j >= 0; --j) {
    const int b = chunk * kSampleBucketsPerThread + j;
    const unsigned long long mass = sample_bucket_mass(s, b);
    if (sample_reaches(by_mass, x, s.count[b], mass, need)) {
      x.index = b;
      return x;
    }
    x.before_count += s.count[b];
    x.before_mass += mass;
  }
  x.index = -1;  // unreachable: the chunk's buckets add up to the chunk
  return x;
}

// A digit of a selection: by count (top-k) or by mass (top-p, by_mass), `width` bits of order values
// of `total_bits` bits.
struct SampleDigit {
  bool by_mass = false;
  int width = 0;
  int total_bits = 0;
};

// The selection after its next digit d fell into bucket x.index.
XLLM_CUDA_HD SampleSelection sample_advance(const SampleSelection& sel, const SampleShared& s, const SampleCrossing& x,
                                            const SampleDigit& d) {
  const bool by_mass = d.by_mass;
  const int width = d.width;
  SampleSelection n = sel;
  const int b = x.index;
  n.above_count = sel.above_count + x.before_count;
  n.above_mass = sel.above_mass + x.before_mass;
  n.need = by_mass ? sel.need - x.before_mass : sel.need - x.before_count;
  n.prefix = (sel.prefix << width) | static_cast<unsigned long long>(b);
  n.bits = sel.bits + width;
  n.bucket_count = s.count[b];
  n.bucket_mass = sample_bucket_mass(s, b);
  const bool settled = by_mass ? n.bucket_count == 1 : n.bucket_count == n.need;
  n.done = settled || n.bits >= d.total_bits ? 1 : 0;
  return n;
}

// ---- Selection -----------------------------------------------------------------------------------

// Thread t's part of digit d's last step: every thread finds the crossing chunk of `need` (the
// selection's need before the digit, read before the step); its owner finds the bucket and rewrites
// the selection (no other thread reads it in this step).
XLLM_SAMPLE_COLD void sample_digit_finish(SampleShared& s, SampleSelection& sel, SampleDigit d, unsigned long long need,
                                          int t) {
  const SampleCrossing chunk = sample_find_chunk(s, d.by_mass, need);
  if (t == chunk.index) {
    const SampleCrossing x = sample_find_bucket(s, d.by_mass, need, chunk);
    if (x.index >= 0) {
      const SampleSelection now = sel;
      sel = sample_advance(now, s, x, d);
    } else {
      sel.done = 1;  // unreachable (the chunk reaches need): keep the prefix's tokens
    }
  } else if (chunk.index < 0 && t == 0) {
    sel.done = 1;  // unreachable (the digit's tokens reach need, see sample_plan_row)
  }
}

// One digit of a selection over `src`, top-k's (s.row.k, by count) or, kByMass, top-p's (s.row.p,
// by mass): the histogram of the next bits of the tokens that share the selection's prefix and that
// `filter(order)` admits, its sums, and the new state, written by the thread that owns the crossing
// chunk. Masses are summed for top-p's digits and, where top-p is on, for top-k's (W is the top-k
// set's mass). Reads the selection's state before its first step: the state is rewritten in its
// last one.
template <bool kByMass, class Team, class Source, class Filter>
XLLM_CUDA_HD void sample_digit(Team& team, SampleShared& s, const Source& src, const SampleRowCtx& c,
                               Filter&& filter) {
  SampleSelection& sel = kByMass ? s.row.p : s.row.k;
  const bool with_mass = kByMass || c.top_p_on;
  const SampleSelection now = sel;
  const int rest = c.total_bits - now.bits;
  const int width = rest < kSampleDigitBits ? rest : kSampleDigitBits;
  const SampleDigit d{kByMass, width, c.total_bits};
  const int shift = rest - width;
  const unsigned long long mask = (1ull << width) - 1;
  team.step([&](int t) {
    src.for_each(t, [&](uint32_t key, uint32_t index, auto weight) {
      const unsigned long long order = sample_order(key, index, c);
      if (sample_prefix(order, c, now.bits) != now.prefix || !filter(order)) return;
      const int b = static_cast<int>((order >> shift) & mask);
      sample_atomic_add(&s.count[b], 1u);
      if (with_mass) sample_add_mass(s, b, sample_mass(weight(), c.mass_scale));
    });
  });
  sample_sum_histogram(team, s);
  team.step([&](int t) {
    sample_digit_finish(s, sel, d, now.need, t);
    sample_clear_buckets(s, t);
  });
}

// Word j of four, without indexing an array by a variable (which would put it in local memory).
XLLM_CUDA_HD uint32_t sample_word(const Philox4x32& w, uint32_t j) {
  const uint32_t lo = (j & 1u) != 0 ? w.v[1] : w.v[0], hi = (j & 1u) != 0 ? w.v[3] : w.v[2];
  return (j & 2u) != 0 ? hi : lo;
}

// The race over the tokens of `src` that `kept(order)` admits, with w >= min_p and w > 0; thread 0
// writes the row's token (c.out).
template <class Team, class Source, class Kept>
XLLM_CUDA_HD void sample_race(Team& team, SampleShared& s, const Source& src, const SampleRowCtx& c, Kept&& kept) {
  team.step([&](int t) {
    unsigned long long best = 0;
    int64_t group = -1;  // the Philox group whose words `words` holds
    Philox4x32 words{{0, 0, 0, 0}};
    src.for_each(t, [&](uint32_t key, uint32_t index, auto weight) {
      const unsigned long long order = sample_order(key, index, c);
      if (!kept(order)) return;
      const float w = weight();
      if (!(w > 0.0f) || w < c.min_p) return;
      const int64_t g = static_cast<int64_t>(index >> 2);
      if (g != group) {
        words = sampling_words(c.seed, c.offset, g);
        group = g;
      }
      const float u = sampling_uniform_from_word(sample_word(words, index & 3u));
      const float q = float_div(w, -float_log(u));
      const unsigned long long v =
          (static_cast<unsigned long long>(float_bits(q)) << 32) | (0xFFFFFFFFu - index);
      best = v > best ? v : best;
    });
    s.chunk_value[t] = best;
  });
  sample_max_chunks(team, s);
  team.step([&](int t) {
    if (t != 0) return;
    const unsigned long long best = sample_max_of_groups(s);
    *c.out = best == 0 ? kInvalidRow : static_cast<int64_t>(0xFFFFFFFFu - static_cast<uint32_t>(best));
  });
}

// The selections (the row's top-k and top-p) and the race over `src` (the gathered candidates, or
// the row), after pass B.
template <class Team, class Source>
XLLM_CUDA_HD void sample_select_and_race(Team& team, SampleShared& s, const Source& src, const SampleRowCtx& c) {
  const bool top_k_on = c.top_k_on, top_p_on = c.top_p_on;
  // top-k: from B's bucket, until a bucket's tokens are exactly the ones still needed.
  if (top_k_on) {
    while (s.row.k.done == 0) sample_digit<false>(team, s, src, c, [](unsigned long long) { return true; });
  }
  const SampleSelection k = s.row.k;
  auto in_top_k = [&](unsigned long long order) {
    return !top_k_on || sample_prefix(order, c, k.bits) >= k.prefix;
  };
  if (top_p_on) {
    if (s.row.p_started == 0) {
      // W = the top-k set's mass: the selection's tokens above, and its last bucket's.
      team.step([&](int t) {
        if (t != 0) return;
        SampleSelection p{};
        p.need = sample_mass_target(c.top_p, k.above_mass + k.bucket_mass);
        s.row.p = p;
      });
    }
    while (s.row.p.done == 0) sample_digit<true>(team, s, src, c, in_top_k);
  }
  const SampleSelection p = s.row.p;
  sample_race(team, s, src, c, [&](unsigned long long order) {
    return in_top_k(order) && (!top_p_on || sample_prefix(order, c, p.bits) >= p.prefix);
  });
}

// After pass B (thread 0): the first digit of the top-k selection (and of the top-p selection where
// top-k is off) from the histogram of digit 0, and which buckets to gather (SampleRowState), at most
// `capacity` tokens. The row's values come by value: a reference would keep the caller's in local
// memory.
XLLM_SAMPLE_COLD void sample_plan_row(SampleShared& s, const SampleRowCtx c, int64_t capacity) {
  const int64_t vocab = c.vocab, top_k = c.top_k;
  const bool top_k_on = c.top_k_on, top_p_on = c.top_p_on;
  const float top_p = c.top_p;
  const SampleDigit k_digit{/*by_mass=*/false, kSampleDigitBits, c.total_bits};
  const SampleDigit p_digit{/*by_mass=*/true, kSampleDigitBits, c.total_bits};
  SampleRowState& st = s.row;
  SampleSelection k{}, sp{};
  k.done = 1;
  sp.done = 0;
  st.p_started = 0;
  int low = 0, extra = -1;
  unsigned long long gathered = 0;
  SampleCrossing xk;
  // The crossings below always exist (the histogram counts every token, K < vocab, and the targets
  // are at most the masses they are taken of); a missing one would keep every token of the row.
  if (top_k_on) {
    xk = sample_find_bucket(s, false, static_cast<unsigned long long>(top_k),
                            sample_find_chunk(s, false, static_cast<unsigned long long>(top_k)));
    if (xk.index >= 0) {
      k.need = static_cast<unsigned long long>(top_k);
      k = sample_advance(k, s, xk, k_digit);
      low = xk.index;
      gathered = xk.before_count + static_cast<unsigned long long>(k.bucket_count);
    } else {
      xk.index = 0;
      gathered = static_cast<unsigned long long>(vocab);
    }
  }
  if (top_p_on) {
    unsigned long long total = 0;
    for (int g = 0; g < kSampleGroups; ++g) total += s.group_value[g];
    // With top-k on, W lies in [k.above_mass, k.above_mass + k.bucket_mass]; the upper bound's
    // crossing is the lowest bucket the top-p boundary can lie in.
    const unsigned long long w = top_k_on ? k.above_mass + k.bucket_mass : total;
    const unsigned long long target = sample_mass_target(top_p, w);
    SampleCrossing xp = sample_find_bucket(s, true, target, sample_find_chunk(s, true, target));
    if (xp.index < 0) {
      xp = SampleCrossing{};
      xp.index = 0;
      sp.done = 1;
    }
    low = xp.index;
    gathered = xp.before_count + static_cast<unsigned long long>(s.count[xp.index]);
    if (top_k_on) {
      if (xk.index < xp.index) {
        extra = xk.index;
        gathered += k.bucket_count;
      }
    } else {
      if (sp.done == 0) {
        sp.need = target;
        sp = sample_advance(sp, s, xp, p_digit);
      }
      st.p_started = 1;
    }
  }
  st.k = k;
  st.p = sp;
  st.candidate_low = low;
  st.candidate_extra = extra;
  st.use_candidates = gathered <= static_cast<unsigned long long>(capacity) ? 1 : 0;
  st.candidates = 0;
}

// ---- The program of a row ------------------------------------------------------------------------

template <class T, bool kVector, class Team>
XLLM_CUDA_HD void sample_run_row(const SampleArgs& a, int64_t r, SampleShared& s, Team& team) {
  const SamplingParams& p = a.p;
  const SamplePlan& plan = a.plan;
  const T* row = static_cast<const T*>(p.logits) + r * p.logits_row_stride;
  const float temperature = p.temperature[r], top_p = p.top_p[r], min_p = p.min_p[r];
  const int64_t top_k = sampling_top_k(p.top_k[r], p.vocab);
  const bool valid = sampling_parameters_valid(temperature, top_p, min_p);
  SampleRowCtx c;
  c.vocab = p.vocab;
  c.index_bits = plan.index_bits;
  c.total_bits = 32 + plan.index_bits;
  c.temperature = temperature;
  c.top_k = top_k;
  c.top_p = top_p;
  c.top_k_on = top_k < p.vocab;
  c.top_p_on = top_p < 1.0f;
  c.min_p = min_p;
  c.mass_scale = sample_mass_scale(plan.mass_shift);
  c.seed = p.seeds[r];
  c.offset = p.offsets[r];
  c.out = p.out + r;

  // A: the first token, NaN.
  team.step([&](int t) {
    unsigned long long best = 0;
    bool nan = false;
    sample_for_each_logit<T, kVector>(row, c.vocab, t, [&](int64_t i, float l) {
      nan = nan || l != l;
      const unsigned long long order = sample_order(logit_order_key(l), static_cast<uint32_t>(i), c);
      best = order > best ? order : best;
    });
    s.chunk_value[t] = best;
    s.chunk_count[t] = nan ? 1u : 0u;
    sample_clear_buckets(s, t);
  });
  team.step([&](int t) {
    if (t >= kSampleGroups) return;
    uint32_t nan = 0;
    unsigned long long m = 0;
    for (int j = 0; j < kSampleChunksPerGroup; ++j) {
      nan |= s.chunk_count[t * kSampleChunksPerGroup + j];
      const unsigned long long v = s.chunk_value[t * kSampleChunksPerGroup + j];
      m = v > m ? v : m;
    }
    s.group_count[t] = nan;
    s.group_value[t] = m;
  });
  team.step([&](int t) {
    if (t != 0) return;
    const unsigned long long top = sample_max_of_groups(s);
    uint32_t nan = 0;
    for (int g = 0; g < kSampleGroups; ++g) nan |= s.group_count[g];
    if (p.row_nan != nullptr) p.row_nan[r] = nan != 0 ? 1 : 0;
    s.row.top = top;
    const uint32_t top_key = static_cast<uint32_t>(top >> c.index_bits);
    if (!valid || top_key <= kSampleMinusInfKey) {
      p.out[r] = kInvalidRow;
      s.row.action = kSampleDone;
    } else if (temperature == 0.0f) {
      p.out[r] = c.vocab - 1 - static_cast<int64_t>(top & ((1ull << c.index_bits) - 1));
      s.row.action = kSampleDone;
    } else {
      s.row.action = c.top_k_on || c.top_p_on ? kSampleSelect : kSampleRaceAll;
    }
  });
  const int32_t action = s.row.action;
  if (action == kSampleDone) return;
  c.lmax = sample_key_value(static_cast<uint32_t>(s.row.top >> c.index_bits));
  c.inf_max = static_cast<uint32_t>(s.row.top >> c.index_bits) == kSamplePlusInfKey;
  const SampleRowSource<T, kVector> whole{row, &c};
  if (action == kSampleRaceAll) {
    sample_race(team, s, whole, c, [](unsigned long long) { return true; });
    return;
  }

  // B: digit 0 over the row (the order's top 11 bits are the key's).
  constexpr int kKeyShift = 32 - kSampleDigitBits;
  team.step([&](int t) {
    whole.for_each(t, [&](uint32_t key, uint32_t, auto weight) {
      const int b = static_cast<int>(key >> kKeyShift);
      sample_atomic_add(&s.count[b], 1u);
      if (c.top_p_on) sample_add_mass(s, b, sample_mass(weight(), c.mass_scale));
    });
  });
  sample_sum_histogram(team, s);
  team.step([&](int t) {
    if (t == 0) sample_plan_row(s, c, plan.candidates);
  });
  // C: gather the candidates (or only clear the histogram).
  const int32_t use_candidates = s.row.use_candidates, low = s.row.candidate_low, extra = s.row.candidate_extra;
  team.step([&](int t) {
    sample_clear_buckets(s, t);
    if (use_candidates == 0) return;
    whole.for_each(t, [&](uint32_t key, uint32_t index, auto weight) {
      const int b = static_cast<int>(key >> kKeyShift);
      if (b < low && b != extra) return;
      const uint32_t slot = sample_atomic_add(&s.row.candidates, 1u);
      if (slot >= kSampleCandidates) return;  // unreachable: B counted them
      s.cand_key[slot] = key;
      s.cand_index[slot] = index;
      s.cand_w[slot] = weight();
    });
  });
  if (use_candidates != 0) {
    const uint32_t n = s.row.candidates;
    const SampleCandidateSource gathered{&s, n < kSampleCandidates ? n : static_cast<uint32_t>(kSampleCandidates)};
    sample_select_and_race(team, s, gathered, c);
  } else {
    sample_select_and_race(team, s, whole, c);
  }
}

// Block `block` of a grid of `grid` blocks: its rows in grid-sized steps.
template <class T, bool kVector, class Team>
XLLM_CUDA_HD void sample_run_block(const SampleArgs& a, int64_t block, int64_t grid, SampleShared& s, Team& team) {
  for (int64_t r = block; r < a.p.batch; r += grid) sample_run_row<T, kVector>(a, r, s, team);
}

#ifdef __CUDACC__

template <class T, bool kVector>
__global__ void __launch_bounds__(kSampleThreads, kSampleMinBlocksPerSm)
    sample_kernel(const __grid_constant__ SampleArgs a) {
  __shared__ SampleShared s;
  SampleDeviceTeam team;
  sample_run_block<T, kVector>(a, blockIdx.x, gridDim.x, s, team);
}

#endif  // __CUDACC__

}  // namespace xllm_kernel::cuda::kernels
