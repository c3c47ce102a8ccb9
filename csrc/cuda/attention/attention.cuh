// CUDA kernels of paged attention; the launcher is csrc/cuda/attention/attention.cu.
//
// An item (PagedAttentionPlan) is one query row, the heads_per_block query heads of one chunk of a
// KV head's group, and one split of the row's keys. A block runs an item as a short program of
// steps separated by block barriers; each step is a function of (thread, the thread's registers)
// over shared memory, and Team::step runs it: on the device every thread runs it once and meets
// the barrier, on the host (test/cuda/attention/attention_kernels_host_test.cpp) a loop runs it
// for every thread of the block in turn. So the host runs the very code of the device, every
// block and thread of a plan. The steps of an item:
//   load the query rows of its heads into shared memory (float32);
//   per tile of kAttentionTile keys:
//     scores:  thread t takes key t of the tile: its block id (checked), K row, logits of all heads;
//     softmax: thread h < heads: the tile's maximum, the running maximum and sum, p = exp(logit - max);
//     values:  thread (slice, lane) rescales its accumulators and adds p * V for the keys of its
//              slice, reading 16-byte pieces (or elements) of V rows; a warp reads whole rows;
//   reduce the slices' accumulators through shared memory; write the output (splits == 1) or the
//   partial result (maximum, sum, unnormalized float32 output) of the split.
// The merge kernel combines a row's splits per piece of the output, one thread per piece.
//
// The caches' element type C is a template parameter beside the query's T: C = T for kPlain
// caches (the loads as they always were), Fp8E4M3 or int8_t for the quantized formats, whose
// elements are dequantized in registers as they are loaded, x = float(q) * scale with a correctly
// rounded float32 multiplication (load_cache), and then used exactly as a plain cache's. A
// quantized cache's piece is vec one-byte elements (4 or 8 bytes, one load where aligned).
//
// Contracts the launcher guarantees: parameters that its check accepts, query_tokens >= 1, a plan
// from plan_paged_attention for them, and a workspace of plan.workspace_bytes (256-byte aligned)
// when plan.splits > 1. Values of block_tables, query_start_loc and seq_lens are not trusted: see
// csrc/cuda/attention/attention.h for what the kernels do with bad ones.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "csrc/common/quantization.h"
#include "csrc/cuda/attention/attention.h"
#include "csrc/cuda/common/codec.cuh"
#include "csrc/cuda/common/float_ops.cuh"
#include "csrc/cuda/common/macros.cuh"
#include "csrc/cuda/common/vector.cuh"

namespace xllm_kernel::cuda::kernels {

inline constexpr int kAttentionThreads = 128;       // per block of the attention kernel
inline constexpr int kAttentionTile = 128;          // keys per tile: one per thread in the score step
inline constexpr int kAttentionMaxHeads = 8;        // query heads per item
inline constexpr int kAttentionMaxHeadSize = 512;   // head_size the kernels take
inline constexpr int kAttentionMergeThreads = 128;  // per block of the merge kernel
inline constexpr int64_t kAttentionMaxSplits = 32;   // key ranges of a row, at most
inline constexpr int64_t kAttentionInvariantSplitKeys = 1024;  // a batch-invariant plan's range
// Blocks per SM the attention kernel is compiled for (registers: at most 65536 / (4 * 128) = 128).
inline constexpr int kAttentionMinBlocksPerSm = 4;

static_assert(kAttentionTile == kAttentionThreads, "the score step gives each thread one key of a tile");

// Pieces of a head row one thread of the value step holds (elements of 1 or 16-byte pieces).
template <int N>
inline constexpr int kAttentionPiecesPerThread =
    (kAttentionMaxHeadSize / N + kAttentionThreads - 1) / kAttentionThreads;

// ---------------------------------------------------------------- cache elements

// A float8_e4m3fn cache element (its bits), distinct from int8_t in the kernels' template
// arguments.
struct Fp8E4M3 {
  uint8_t bits;
};

// Whether C is a quantized cache element, and the format it belongs to.
template <class C>
inline constexpr bool kQuantizedCache = std::is_same_v<C, Fp8E4M3> || std::is_same_v<C, int8_t>;

// The value of float8_e4m3fn bits, the same bits as kernels::float_from_float8_e4m3fn (the host
// test compares all 256), with fewer branches: a normal code's exponent and mantissa are the
// float32's shifted and rebiased (7 -> 127) in one addition, a subnormal's m * 2^-9 is exact.
XLLM_CUDA_HD float fp8_e4m3fn_value(uint8_t q) {
  const uint32_t mag = q & 0x7Fu, sign = static_cast<uint32_t>(q & 0x80u) << 24;
  const uint32_t bits = mag == 0x7Fu ? 0x7FC00000u
                        : mag >= 8u  ? (mag + (120u << 3)) << 20
                                     : float_bits(static_cast<float>(mag) * 0.001953125f);
  return float_from_bits(sign | bits);
}

// A quantized cache element's value: float(q) * scale, one correctly rounded float32
// multiplication (never contracted into the dot product or the weighted sum that follows).
XLLM_CUDA_HD float dequantize_cache(Fp8E4M3 q, float scale) { return float_mul(fp8_e4m3fn_value(q.bits), scale); }
XLLM_CUDA_HD float dequantize_cache(int8_t q, float scale) { return float_mul(static_cast<float>(q), scale); }

// A quantized cache element from its byte.
template <class C>
XLLM_CUDA_HD C cache_element(uint8_t bits) {
  if constexpr (std::is_same_v<C, Fp8E4M3>) {
    return Fp8E4M3{bits};
  } else {
    return static_cast<int8_t>(bits);  // two's complement
  }
}

// Loads N consecutive one-byte elements: one 4- or 8-byte load for N = 4 or 8 (p aligned to N
// bytes; the host build throws otherwise, as load16 does), bytes otherwise.
template <int N>
XLLM_CUDA_HD void load_bytes(const void* p, uint8_t (&b)[N]) {
  if constexpr (N == 4 || N == 8) {
    using Word = std::conditional_t<N == 4, uint32_t, uint64_t>;
#ifdef __CUDA_ARCH__
    const Word w = *reinterpret_cast<const Word*>(p);
#else
    if (reinterpret_cast<uintptr_t>(p) % N != 0) throw std::logic_error("cache piece load from a misaligned address");
    Word w;
    std::memcpy(&w, p, sizeof(w));
#endif
XLLM_CUDA_UNROLL
    for (int i = 0; i < N; ++i) b[i] = static_cast<uint8_t>(w >> (8 * i));  // little-endian
  } else {
    const auto* q = static_cast<const uint8_t*>(p);
XLLM_CUDA_UNROLL
    for (int i = 0; i < N; ++i) b[i] = q[i];
  }
}

// Loads N consecutive cache elements as float32: a plain cache's as load<N>; a quantized cache's
// dequantized with the row's scale (unused for a plain cache).
template <int N, class C>
XLLM_CUDA_HD void load_cache(const C* p, float scale, float (&v)[N]) {
  if constexpr (kQuantizedCache<C>) {
    uint8_t b[N];
    load_bytes<N>(p, b);
XLLM_CUDA_UNROLL
    for (int i = 0; i < N; ++i) v[i] = dequantize_cache(cache_element<C>(b[i]), scale);
  } else {
    (void)scale;
    load<N>(p, v);
  }
}

// The scales of a cache: fp8 one per tensor, int8 one per (block, row, KV head), read where a row
// of a valid block is (never otherwise: a call without blocks may pass none); 1 for a plain cache
// (unused).
template <class C>
struct CacheScales {
  const float* scale = nullptr;  // PagedAttentionParams::key_scale / value_scale
  CacheStrides strides;

  XLLM_CUDA_HD float at(int64_t block, int64_t row, int64_t head) const {
    if constexpr (std::is_same_v<C, int8_t>) {
      return scale[block * strides.block + row * strides.row + head * strides.head];
    } else if constexpr (std::is_same_v<C, Fp8E4M3>) {
      return *scale;
    } else {
      return 1.0f;
    }
  }
};

template <class C>
XLLM_CUDA_HD CacheScales<C> cache_scales(const float* scale, const CacheStrides& strides) {
  CacheScales<C> s;
  s.scale = scale;
  s.strides = strides;
  return s;
}

// ---------------------------------------------------------------- the kernels

XLLM_CUDA_HD float attention_nan() { return float_from_bits(0x7FC00000u); }
XLLM_CUDA_HD float attention_minus_inf() { return float_from_bits(0xFF800000u); }
XLLM_CUDA_HD bool attention_is_nan(float x) { return x != x; }

struct AttentionArgs {
  PagedAttentionParams p;
  PagedAttentionPlan plan;
  float* partial_out = nullptr;  // workspace, plan.splits > 1
  float* partial_max = nullptr;
  float* partial_sum = nullptr;
};

// The fixed part of a block's shared memory; the float region follows it (AttentionShared::floats).
struct AttentionShared {
  float max[kAttentionMaxHeads];    // running maximum of the logits, per head
  float sum[kAttentionMaxHeads];    // running sum of exp(logit - max)
  float alpha[kAttentionMaxHeads];  // the current tile's rescaling of the accumulators
  int32_t block[kAttentionTile];    // the tile's keys: block id, or -1 (past the range, or a bad id)
  int32_t row[kAttentionTile];      // row within the block
  int32_t bad;                      // a key of the item had a block id outside [0, num_blocks)
  int32_t pad[3];
};

// Floats after AttentionShared: max(query + scores, reduction) (the reduction reuses the others).
//   query:     [heads][head_size]     scores: [heads][kAttentionTile]   (p after the softmax step)
//   reduction: [slices][heads][head_size]
inline int64_t attention_shared_floats(int64_t heads, int64_t head_size, int64_t slices) {
  const int64_t a = heads * head_size + heads * kAttentionTile, b = slices * heads * head_size;
  return a > b ? a : b;
}

// A thread's registers that live across steps: accumulators of its value pieces for every head.
template <int N>
struct AttentionThread {
  float acc[kAttentionMaxHeads][kAttentionPiecesPerThread<N>][N];
};

// Runs the steps on the device: each thread once, then a block barrier.
template <int N>
struct DeviceTeam {
  AttentionThread<N> self;
  template <class F>
  XLLM_CUDA_HD void step(F&& f) {
#ifdef __CUDA_ARCH__
    f(static_cast<int>(threadIdx.x), self);
    __syncthreads();
#endif
  }
};

// What an item is, the same for every thread of its block.
struct AttentionItem {
  int64_t row = 0, kv_head = 0, head_begin = 0, heads = 0, split = 0;
  int64_t seq = -1;
  bool invalid = false;  // NaN output (bad lengths, no sequence)
  bool padding = false;  // a row from query_start_loc[num_seqs] on: zero output
  int64_t key_begin = 0, key_end = 0;  // this split's keys; empty when key_begin >= key_end
};

XLLM_CUDA_HD AttentionItem attention_item(const AttentionArgs& a, int64_t item) {
  const PagedAttentionParams& p = a.p;
  const PagedAttentionPlan& plan = a.plan;
  AttentionItem w;
  w.split = item % plan.splits;
  item /= plan.splits;
  const int64_t chunk = item % plan.head_chunks;
  item /= plan.head_chunks;
  w.kv_head = item % p.kv_heads;
  w.row = item / p.kv_heads;
  const int64_t group = p.q_heads / p.kv_heads;
  w.head_begin = w.kv_head * group + chunk * plan.heads_per_block;
  const int64_t group_end = (w.kv_head + 1) * group;
  w.heads = group_end - w.head_begin < plan.heads_per_block ? group_end - w.head_begin : plan.heads_per_block;
  // Rows from query_start_loc[num_seqs] on are padding (a batch padded to a fixed shape).
  if (w.row >= p.query_start_loc[p.num_seqs]) {
    w.padding = true;
    return w;
  }
  // The last s in [0, num_seqs) with query_start_loc[s] <= row (for non-decreasing entries).
  int64_t lo = 0, hi = p.num_seqs;  // answer in [lo - 1, hi)
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (p.query_start_loc[mid] <= w.row) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  const int64_t s = lo - 1;
  if (s < 0) {
    w.invalid = true;
    return w;
  }
  const int64_t q_begin = p.query_start_loc[s], q_end = p.query_start_loc[s + 1];
  if (!(q_begin <= w.row && w.row < q_end)) {  // a row of no sequence
    w.invalid = true;
    return w;
  }
  w.seq = s;
  const int64_t seq_len = p.seq_lens[s];
  const int64_t longest = ::xllm_kernel::kernels::max_context(p);
  if (q_begin < 0 || q_end > p.query_tokens || q_end - q_begin > seq_len || seq_len > longest) {
    w.invalid = true;
    return w;
  }
  const int64_t pos = seq_len - (q_end - q_begin) + (w.row - q_begin);
  const int64_t first = p.sliding_window > 0 && pos - p.sliding_window + 1 > 0 ? pos - p.sliding_window + 1 : 0;
  const int64_t count = pos + 1 - first;
  int64_t per_split =
      ((count + plan.splits - 1) / plan.splits + kAttentionTile - 1) / kAttentionTile * kAttentionTile;
  if (p.batch_invariant) {
    // From this row's keys alone (attention.h: PagedAttentionPlan).
    const int64_t spread = ((count + kAttentionMaxSplits - 1) / kAttentionMaxSplits + kAttentionTile - 1) /
                           kAttentionTile * kAttentionTile;
    per_split = spread > kAttentionInvariantSplitKeys ? spread : kAttentionInvariantSplitKeys;
  }
  w.key_begin = first + w.split * per_split;
  w.key_end = w.key_begin + per_split < pos + 1 ? w.key_begin + per_split : pos + 1;
  return w;
}

// The program of one item (see the top of this file). smem: AttentionShared, then the floats.
// C: the caches' element type (T, or a quantized one).
template <class T, class C, int N, class Team>
XLLM_CUDA_HD void attention_run_item(const AttentionArgs& a, int64_t item_index, AttentionShared& s, float* floats,
                                     Team& team) {
  const PagedAttentionParams& p = a.p;
  const PagedAttentionPlan& plan = a.plan;
  constexpr int kPer = kAttentionPiecesPerThread<N>;
  const AttentionItem w = attention_item(a, item_index);
  const int64_t H = w.heads, D = p.head_size, P = plan.pieces, threads = plan.threads;
  const bool split_mode = plan.splits > 1;
  const float nan = attention_nan(), minus_inf = attention_minus_inf();

  // Items with nothing to compute: NaN rows, zero (padding) rows, or a split past the row's keys.
  if (w.invalid || w.padding || w.key_begin >= w.key_end) {
    team.step([&](int t, AttentionThread<N>&) {
      if (split_mode) {
        for (int64_t h = t; h < H; h += threads) {
          const int64_t at = (w.row * p.q_heads + w.head_begin + h) * plan.splits + w.split;
          a.partial_max[at] = w.invalid ? nan : minus_inf;
          a.partial_sum[at] = w.invalid ? nan : 0.0f;
        }
        return;
      }
      float v[N];
      for (int i = 0; i < N; ++i) v[i] = w.padding ? 0.0f : nan;  // direct mode: only invalid or padding items
      for (int64_t u = t; u < H * P; u += threads) {
        const int64_t h = u / P, piece = u % P;
        T* out = static_cast<T*>(p.out) + w.row * p.out_strides.token + (w.head_begin + h) * p.out_strides.head;
        store<N>(out + piece * N, v);
      }
    });
    return;
  }

  float* q_smem = floats;                // [H][D]
  float* scores = floats + H * D;        // [H][kAttentionTile]
  float* reduction = floats;             // [slices][H][D], after the last tile
  const T* query = static_cast<const T*>(p.query) + w.row * p.query_strides.token;
  const C* key_cache = static_cast<const C*>(p.key_cache);
  const C* value_cache = static_cast<const C*>(p.value_cache);
  const CacheScales<C> key_scales = cache_scales<C>(p.key_scale, p.key_scale_strides);
  const CacheScales<C> value_scales = cache_scales<C>(p.value_scale, p.value_scale_strides);
  const int32_t* table = p.block_tables + w.seq * p.block_table_stride;
  const int64_t width = P < threads ? P : threads;  // threads per slice of the value step
  const int64_t slices = plan.slices;

  team.step([&](int t, AttentionThread<N>& r) {
    for (int64_t u = t; u < H * P; u += threads) {
      const int64_t h = u / P, piece = u % P;
      float v[N];
      load<N>(query + (w.head_begin + h) * p.query_strides.head + piece * N, v);
      for (int i = 0; i < N; ++i) q_smem[h * D + piece * N + i] = v[i];
    }
    if (t < kAttentionMaxHeads) {
      s.max[t] = minus_inf;
      s.sum[t] = 0.0f;
    }
    if (t == 0) s.bad = 0;
XLLM_CUDA_UNROLL
    for (int h = 0; h < kAttentionMaxHeads; ++h) {
XLLM_CUDA_UNROLL
      for (int j = 0; j < kPer; ++j) {
XLLM_CUDA_UNROLL
        for (int i = 0; i < N; ++i) r.acc[h][j][i] = 0.0f;
      }
    }
  });

  for (int64_t tile = w.key_begin; tile < w.key_end; tile += kAttentionTile) {
    // Scores: thread t takes key tile + t.
    team.step([&](int t, AttentionThread<N>&) {
      const int64_t key = tile + t;
      float dot[kAttentionMaxHeads];
XLLM_CUDA_UNROLL
      for (int h = 0; h < kAttentionMaxHeads; ++h) dot[h] = 0.0f;
      int32_t block = -1;
      const int64_t row = key % p.block_size;
      if (t < kAttentionTile && key < w.key_end) {
        const int32_t id = table[key / p.block_size];
        if (id >= 0 && id < p.num_blocks) {
          block = id;
        } else {
          s.bad = 1;  // every writer stores the same value
        }
      }
      if (block >= 0) {
        const C* k = key_cache + block * p.key_cache_strides.block + row * p.key_cache_strides.row +
                     w.kv_head * p.key_cache_strides.head;
        const float k_scale = key_scales.at(block, row, w.kv_head);
XLLM_CUDA_UNROLL_4
        for (int64_t piece = 0; piece < P; ++piece) {
          float v[N];
          load_cache<N>(k + piece * N, k_scale, v);
XLLM_CUDA_UNROLL
          for (int h = 0; h < kAttentionMaxHeads; ++h) {
            if (h >= H) break;
            const float* q = q_smem + h * D + piece * N;
XLLM_CUDA_UNROLL
            for (int i = 0; i < N; ++i) dot[h] += q[i] * v[i];
          }
        }
      }
      if (t < kAttentionTile) {
        s.block[t] = block;
        s.row[t] = static_cast<int32_t>(row);
XLLM_CUDA_UNROLL
        for (int h = 0; h < kAttentionMaxHeads; ++h) {
          if (h >= H) break;
          float logit = minus_inf;
          if (block >= 0) {
            logit = p.scale * dot[h];
            if (p.soft_cap > 0.0f) logit = p.soft_cap * float_tanh(logit / p.soft_cap);
          }
          scores[h * kAttentionTile + t] = logit;
        }
      }
    });
    // Softmax: thread h takes head h.
    team.step([&](int t, AttentionThread<N>&) {
      if (t >= H) return;
      float* sc = scores + t * kAttentionTile;
      float tile_max = minus_inf;
      for (int k = 0; k < kAttentionTile; ++k) tile_max = sc[k] > tile_max ? sc[k] : tile_max;
      const float old_max = s.max[t];
      const float new_max = tile_max > old_max ? tile_max : old_max;
      float alpha = 1.0f, sum = 0.0f;
      if (new_max == minus_inf) {  // no key so far (a tile of bad block ids only)
        for (int k = 0; k < kAttentionTile; ++k) sc[k] = 0.0f;
      } else {
        alpha = float_exp(old_max - new_max);  // 0 for the first keys
        for (int k = 0; k < kAttentionTile; ++k) {
          const float e = float_exp(sc[k] - new_max);  // 0 for keys past the range
          sc[k] = e;
          sum += e;
        }
      }
      s.max[t] = new_max;
      s.sum[t] = s.sum[t] * alpha + sum;
      s.alpha[t] = alpha;
    });
    // Values: thread (slice, lane) takes pieces lane, lane + width, ... of the keys of its slice.
    team.step([&](int t, AttentionThread<N>& r) {
      const int64_t slice = t / width, lane = t % width;
      if (slice >= slices) return;
XLLM_CUDA_UNROLL
      for (int h = 0; h < kAttentionMaxHeads; ++h) {
        if (h >= H) break;
        const float alpha = s.alpha[h];
XLLM_CUDA_UNROLL
        for (int j = 0; j < kPer; ++j) {
XLLM_CUDA_UNROLL
          for (int i = 0; i < N; ++i) r.acc[h][j][i] *= alpha;
        }
      }
      for (int64_t k = slice; k < kAttentionTile; k += slices) {
        const int32_t block = s.block[k];
        if (block < 0) continue;
        const C* v_row = value_cache + block * p.value_cache_strides.block + s.row[k] * p.value_cache_strides.row +
                         w.kv_head * p.value_cache_strides.head;
        const float v_scale = value_scales.at(block, s.row[k], w.kv_head);
XLLM_CUDA_UNROLL
        for (int j = 0; j < kPer; ++j) {
          const int64_t piece = lane + j * width;
          if (piece >= P) break;
          float v[N];
          load_cache<N>(v_row + piece * N, v_scale, v);
XLLM_CUDA_UNROLL
          for (int h = 0; h < kAttentionMaxHeads; ++h) {
            if (h >= H) break;
            const float pr = scores[h * kAttentionTile + k];
XLLM_CUDA_UNROLL
            for (int i = 0; i < N; ++i) r.acc[h][j][i] += pr * v[i];
          }
        }
      }
    });
  }

  // The slices' accumulators into shared memory (query and scores are no longer read).
  team.step([&](int t, AttentionThread<N>& r) {
    const int64_t slice = t / width, lane = t % width;
    if (slice >= slices) return;
XLLM_CUDA_UNROLL
    for (int h = 0; h < kAttentionMaxHeads; ++h) {
      if (h >= H) break;
XLLM_CUDA_UNROLL
      for (int j = 0; j < kPer; ++j) {
        const int64_t piece = lane + j * width;
        if (piece >= P) break;
        float* dst = reduction + (slice * H + h) * D + piece * N;
XLLM_CUDA_UNROLL
        for (int i = 0; i < N; ++i) dst[i] = r.acc[h][j][i];
      }
    }
  });
  // Sum over the slices; the output (rounded once) or the split's partial result.
  team.step([&](int t, AttentionThread<N>&) {
    const bool bad = s.bad != 0;
    for (int64_t u = t; u < H * P; u += threads) {
      const int64_t h = u / P, piece = u % P;
      float v[N];
      for (int i = 0; i < N; ++i) v[i] = 0.0f;
      for (int64_t sl = 0; sl < slices; ++sl) {
        const float* src = reduction + (sl * H + h) * D + piece * N;
        for (int i = 0; i < N; ++i) v[i] += src[i];
      }
      const int64_t head = w.head_begin + h;
      if (split_mode) {
        const int64_t at = (w.row * p.q_heads + head) * plan.splits + w.split;
        store<N>(a.partial_out + at * D + piece * N, v);
        if (piece == 0) {
          a.partial_max[at] = bad ? nan : s.max[h];
          a.partial_sum[at] = bad ? nan : s.sum[h];
        }
      } else {
        const float inv = 1.0f / s.sum[h];
        for (int i = 0; i < N; ++i) v[i] = bad ? nan : v[i] * inv;
        T* out = static_cast<T*>(p.out) + w.row * p.out_strides.token + head * p.out_strides.head;
        store<N>(out + piece * N, v);
      }
    }
  });
}

// Block `block` of a grid of `grid` blocks: its items in grid-sized steps.
template <class T, class C, int N, class Team>
XLLM_CUDA_HD void attention_run_block(const AttentionArgs& a, int64_t block, int64_t grid, AttentionShared& s,
                                      float* floats, Team& team) {
  for (int64_t item = block; item < a.plan.items; item += grid) attention_run_item<T, C, N>(a, item, s, floats, team);
}

// Merge piece `index` of plan.merge_pieces: vec elements of one (row, query head), from the
// splits' partial results. A split without keys (sum 0) adds nothing; a NaN sum (a bad block id,
// bad lengths) makes the piece NaN; no split with a key (a padding row: every valid row has its own
// position) makes it zero.
template <class T, int N>
XLLM_CUDA_HD void attention_merge_piece(const AttentionArgs& a, int64_t index) {
  const PagedAttentionParams& p = a.p;
  const int64_t S = a.plan.splits, P = a.plan.pieces;
  const int64_t piece = index % P, rh = index / P;  // rh = row * q_heads + head
  const int64_t row = rh / p.q_heads, head = rh % p.q_heads;
  const float* maxima = a.partial_max + rh * S;
  const float* sums = a.partial_sum + rh * S;
  bool nan = false;
  float m = attention_minus_inf();
  for (int64_t s = 0; s < S; ++s) {
    if (attention_is_nan(sums[s]) || attention_is_nan(maxima[s])) nan = true;
    if (sums[s] > 0.0f && maxima[s] > m) m = maxima[s];
  }
  float v[N], acc[N];
  for (int i = 0; i < N; ++i) acc[i] = 0.0f;
  float total = 0.0f;
  const bool padding = !nan && m == attention_minus_inf();
  if (!nan && !padding) {
    for (int64_t s = 0; s < S; ++s) {
      if (!(sums[s] > 0.0f)) continue;
      const float weight = float_exp(maxima[s] - m);
      total += sums[s] * weight;
      load<N>(a.partial_out + (rh * S + s) * p.head_size + piece * N, v);
      for (int i = 0; i < N; ++i) acc[i] += weight * v[i];
    }
  }
  const float inv = padding ? 0.0f : 1.0f / total;
  for (int i = 0; i < N; ++i) v[i] = nan ? attention_nan() : acc[i] * inv;
  T* out = static_cast<T*>(p.out) + row * p.out_strides.token + head * p.out_strides.head;
  store<N>(out + piece * N, v);
}

#ifdef __CUDACC__

template <class T, class C, int N>
__global__ void __launch_bounds__(kAttentionThreads, kAttentionMinBlocksPerSm)
    paged_attention_kernel(const __grid_constant__ AttentionArgs a) {
  extern __shared__ float4 attention_smem[];
  AttentionShared& s = *reinterpret_cast<AttentionShared*>(attention_smem);
  float* floats = reinterpret_cast<float*>(attention_smem) + sizeof(AttentionShared) / sizeof(float);
  DeviceTeam<N> team;
  attention_run_block<T, C, N>(a, blockIdx.x, gridDim.x, s, floats, team);
}

template <class T, int N>
__global__ void __launch_bounds__(kAttentionMergeThreads)
    paged_attention_merge_kernel(const __grid_constant__ AttentionArgs a) {
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < a.plan.merge_pieces; i += step) {
    attention_merge_piece<T, N>(a, i);
  }
}

#endif  // __CUDACC__

// Calls f(Element<C>{}) for the caches' element type: T for kPlain, Fp8E4M3 or int8_t for the
// quantized formats; `otherwise` for a value that is no format. Host code (launcher, tests).
template <class T, class R, class F>
R dispatch_cache_element(::xllm_kernel::kernels::KvCacheFormat format, R otherwise, F&& f) {
  using ::xllm_kernel::kernels::KvCacheFormat;
  switch (format) {
    case KvCacheFormat::kPlain: return f(Element<T>{});
    case KvCacheFormat::kFp8E4M3: return f(Element<Fp8E4M3>{});
    case KvCacheFormat::kInt8: return f(Element<int8_t>{});
  }
  return otherwise;
}

}  // namespace xllm_kernel::cuda::kernels
