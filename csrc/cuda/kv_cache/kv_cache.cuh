// CUDA kernel of the paged KV-cache write; the launcher is csrc/cuda/kv_cache/kv_cache.cu.
//
// Thread t of an item's block works on token item * tokens_per_block + t / threads_per_token and,
// as lane t % threads_per_token, on pieces lane, lane + threads_per_token, ... of that token's
// 2 * kv_heads * pieces_per_head pieces (key's heads first, then value's). A piece is 16 bytes
// (plan.vector) or one element, copied as raw bits (never through a float: NaN payloads and
// signed zeros survive). run_block is __host__ __device__ so that a test without a GPU can run
// every block and thread of a plan (test/cuda/kv_cache/kv_cache_kernels_host_test.cpp).
//
// Quantized formats (p.format != kPlain): a row is one (token, tensor, KV head)'s head_size
// elements, taken by a group of threads_per_row adjacent lanes of a warp, as a short program that
// a Team runs (kv_quant_row): int8 first reduces the row's amax over the group (each lane's
// partial over its pieces, combined with quant_max: NaN propagates, and max is exact, so any order
// gives the same bits), lane 0 writes the row's scale, then every lane quantizes and stores its
// pieces (16 elements into one 16-byte store, or one element). On the device a team is the
// group's lanes and a warp shuffle (KvQuantDeviceTeam); on the host (the test) a team runs each
// pass for every lane in turn, so the host runs the very code of the device. The arithmetic is the
// quantization family's device functions (csrc/cuda/quantization/quantization.cuh: int8_scale,
// int8_multiplier, quantize_value with float_div / float_mul, correctly rounded, never contracted),
// so a row's bits are per_token_quant's (int8) and kernels::quantize_fp8_per_token's (fp8).
//
// Contracts the launcher guarantees: a valid KvCacheParams with tokens >= 1 and num_slots >= 1,
// and a plan from plan_kv_cache for it (plan.vector only where kv_cache_vector_access holds).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "csrc/common/kv_cache.h"
#include "csrc/cuda/common/codec.cuh"
#include "csrc/cuda/common/macros.cuh"
#include "csrc/cuda/common/vector.cuh"
#include "csrc/cuda/kv_cache/kv_cache.h"
#include "csrc/cuda/quantization/quantization.cuh"

namespace xllm_kernel::cuda::kernels {

// Threads per block at most (KvCachePlan::threads).
inline constexpr int kKvCacheMaxThreads = 256;

struct KvCacheArgs {
  KvCacheParams p;
  KvCachePlan plan;
};

// Copies one piece of kBytes (16, 4 or 2) from src to dst, both aligned to kBytes.
template <int kBytes>
XLLM_CUDA_HD void copy_piece(const unsigned char* src, unsigned char* dst) {
  if constexpr (kBytes == 16) {
    store16(dst, load16(src));
  } else {
    using Word = std::conditional_t<kBytes == 4, uint32_t, uint16_t>;
#ifdef __CUDA_ARCH__
    *reinterpret_cast<Word*>(dst) = *reinterpret_cast<const Word*>(src);
#else
    Word w;
    std::memcpy(&w, src, sizeof(w));
    std::memcpy(dst, &w, sizeof(w));
    if (host_store_observer != nullptr) host_store_observer(dst, sizeof(w));
#endif
  }
}

// Thread t's share of work item `item`.
template <int kBytes>
XLLM_CUDA_HD void run_item(const KvCacheArgs& a, int64_t item, int t) {
  const KvCacheParams& p = a.p;
  const KvCachePlan& plan = a.plan;
  const int64_t token = item * plan.tokens_per_block + t / plan.threads_per_token;
  if (token >= p.tokens) return;
  const int64_t slot = p.slot_mapping[token * p.slot_stride];
  if (slot < 0 || slot >= p.num_slots) return;  // padding, or out of range: skipped
  const int64_t block = slot / p.block_size, offset = slot - block * p.block_size;
  const int64_t es = p.dtype == DType::kFloat32 ? 4 : 2;  // element_size() is host-only
  const int64_t per_tensor = p.kv_heads * plan.pieces_per_head;
  // Element offsets of the token's rows; the cache row's heads are adjacent.
  const int64_t key_row = token * p.key_strides.token, value_row = token * p.value_strides.token;
  const int64_t key_slot = block * p.key_cache_block_stride + offset * p.kv_heads * p.head_size;
  const int64_t value_slot = block * p.value_cache_block_stride + offset * p.kv_heads * p.head_size;
  for (int64_t q = t % plan.threads_per_token; q < plan.pieces_per_token; q += plan.threads_per_token) {
    const bool is_value = q >= per_tensor;
    const int64_t r = is_value ? q - per_tensor : q;
    const int64_t h = r / plan.pieces_per_head, j = r - h * plan.pieces_per_head;
    const int64_t src = (is_value ? value_row + h * p.value_strides.head : key_row + h * p.key_strides.head) * es;
    const int64_t dst = ((is_value ? value_slot : key_slot) + h * p.head_size) * es;
    const auto* in = static_cast<const unsigned char*>(is_value ? p.value : p.key);
    auto* out = static_cast<unsigned char*>(is_value ? p.value_cache : p.key_cache);
    copy_piece<kBytes>(in + src + j * kBytes, out + dst + j * kBytes);
  }
}

// Block `block` of a grid of `grid` blocks, thread `t`: its items in grid-sized steps.
template <int kBytes>
XLLM_CUDA_HD void run_block(const KvCacheArgs& a, int64_t block, int64_t grid, int t) {
  for (int64_t item = block; item < a.plan.items; item += grid) run_item<kBytes>(a, item, t);
}

// Calls f(std::integral_constant<int, kBytes>{}) for the plan's piece size; `otherwise` for none.
template <class R, class F>
R dispatch_piece(const KvCachePlan& plan, R otherwise, F&& f) {
  switch (plan.piece_bytes) {
    case 16: return f(std::integral_constant<int, 16>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 2: return f(std::integral_constant<int, 2>{});
  }
  return otherwise;
}

// ---------------------------------------------------------------- quantized formats

using ::xllm_kernel::kernels::KvCacheFormat;

// Elements per piece of the quantized vector path: 16 one-byte codes fill one 16-byte store.
inline constexpr int kKvQuantPiece = 16;

// Where a row reads and writes. `scale`: kFp8E4M3, the tensor's scale (read); kInt8, the row's
// scale (written by lane 0).
template <class T>
struct KvQuantRow {
  const T* in = nullptr;
  uint8_t* out = nullptr;
  float* scale = nullptr;
};

// Row `row` of the plan (plan.rows of them), or false where its token is past the last one or
// its slot is skipped (negative or out of range).
template <class T>
XLLM_CUDA_HD bool kv_quant_row_at(const KvCacheParams& p, int64_t row, KvQuantRow<T>& r) {
  const int64_t per_token = 2 * p.kv_heads;
  const int64_t token = row / per_token;
  if (token >= p.tokens) return false;
  const int64_t slot = p.slot_mapping[token * p.slot_stride];
  if (slot < 0 || slot >= p.num_slots) return false;
  const int64_t rest = row - token * per_token;
  const bool is_value = rest >= p.kv_heads;
  const int64_t head = is_value ? rest - p.kv_heads : rest;
  const int64_t block = slot / p.block_size, offset = slot - block * p.block_size;
  const KvTokenStrides& in = is_value ? p.value_strides : p.key_strides;
  r.in = static_cast<const T*>(is_value ? p.value : p.key) + token * in.token + head * in.head;
  // One byte per cache element: element offsets are byte offsets.
  r.out = static_cast<uint8_t*>(is_value ? p.value_cache : p.key_cache) +
          block * (is_value ? p.value_cache_block_stride : p.key_cache_block_stride) +
          (offset * p.kv_heads + head) * p.head_size;
  float* scale = is_value ? p.value_scale : p.key_scale;
  if (p.format == KvCacheFormat::kInt8) {
    scale += block * (is_value ? p.value_scale_block_stride : p.key_scale_block_stride) + offset * p.kv_heads + head;
  }
  r.scale = scale;
  return true;
}

// Lane `lane` of `width`: the amax of its pieces (N elements each, at multiples of N).
template <class T, int N>
XLLM_CUDA_HD float kv_quant_partial_amax(const KvQuantRow<T>& r, int64_t head_size, int lane, int width) {
  float acc = 0.0f;
  for (int64_t e = int64_t{lane} * N; e < head_size; e += int64_t{width} * N) {
    float v[N];
    load<N>(r.in + e, v);
XLLM_CUDA_UNROLL
    for (int i = 0; i < N; ++i) acc = quant_max(acc, q_abs(v[i]));
  }
  return acc;
}

// Lane `lane` of `width`: its pieces quantized and stored.
template <class T, int N>
XLLM_CUDA_HD void kv_quant_store_lane(const KvQuantRow<T>& r, int64_t head_size, const RowQuant& q, int lane,
                                      int width) {
  for (int64_t e = int64_t{lane} * N; e < head_size; e += int64_t{width} * N) {
    float v[N];
    load<N>(r.in + e, v);
    if constexpr (N == kKvQuantPiece) {
      uint32_t u[4] = {0, 0, 0, 0};
XLLM_CUDA_UNROLL
      for (int i = 0; i < N; ++i) u[i / 4] |= static_cast<uint32_t>(quantize_value(q, v[i])) << (8 * (i % 4));
      store16(r.out + e, make_uint4(u[0], u[1], u[2], u[3]));
    } else {
      static_assert(N == 1, "pieces of 16 elements or one");
      r.out[e] = quantize_value(q, v[0]);
#ifndef __CUDA_ARCH__
      if (host_store_observer != nullptr) host_store_observer(r.out + e, 1);
#endif
    }
  }
}

// How the row's codes are made: fp8 e4m3(x / scale) with the given scale, int8 int8(x * (127 /
// amax)) (csrc/common/quantization.h's per-token formulas, the device's exact operations).
template <KvCacheFormat kFormat>
XLLM_CUDA_HD RowQuant kv_row_quant(float scale_or_amax) {
  RowQuant q;
  if constexpr (kFormat == KvCacheFormat::kFp8E4M3) {
    q.method = QuantMethod::kFp8Div;
    q.factor = scale_or_amax;
  } else {
    static_assert(kFormat == KvCacheFormat::kInt8, "a quantized format");
    q.method = QuantMethod::kInt8Mul;
    q.factor = int8_multiplier(scale_or_amax);
  }
  return q;
}

// The row program. Team: width(); max(f) reduces f(lane) over the group with quant_max (every lane
// gets the result); each(f) runs f(lane); leader(f) runs f once (lane 0).
template <KvCacheFormat kFormat, class T, int N, class Team>
XLLM_CUDA_HD void kv_quant_row(const KvCacheArgs& a, int64_t row, Team& team) {
  const KvCacheParams& p = a.p;
  KvQuantRow<T> r;
  if (!kv_quant_row_at<T>(p, row, r)) return;  // the same for every lane of the row
  const int width = team.width();
  RowQuant q;
  if constexpr (kFormat == KvCacheFormat::kInt8) {
    const float amax =
        team.max([&](int lane) { return kv_quant_partial_amax<T, N>(r, p.head_size, lane, width); });
    q = kv_row_quant<kFormat>(amax);
    team.leader([&] { *r.scale = int8_scale(amax); });
  } else {
    q = kv_row_quant<kFormat>(*r.scale);
  }
  team.each([&](int lane) { kv_quant_store_lane<T, N>(r, p.head_size, q, lane, width); });
}

// Group `group` (of plan.rows_per_block) of block `block` in a grid of `grid`: its rows in
// grid-sized steps of items.
template <KvCacheFormat kFormat, class T, int N, class Team>
XLLM_CUDA_HD void kv_quant_group(const KvCacheArgs& a, int64_t block, int64_t grid, int group, Team& team) {
  for (int64_t item = block; item < a.plan.items; item += grid) {
    kv_quant_row<kFormat, T, N>(a, item * a.plan.rows_per_block + group, team);
  }
}

// The device team: this thread's lane of its row's group of `width` adjacent lanes (a power of two
// <= 32, so a group never straddles warps). Only the group's lanes take part in its shuffles: the
// lanes of a row skip it together, and a block may hold fewer than 32 threads.
struct KvQuantDeviceTeam {
  int lane_ = 0, width_ = 0;
  unsigned mask_ = 0;

  XLLM_CUDA_HD int width() const { return width_; }

  template <class F>
  XLLM_CUDA_HD float max(F&& f) {
    float v = f(lane_);
#ifdef __CUDA_ARCH__
    for (int m = width_ / 2; m > 0; m /= 2) v = quant_max(v, __shfl_xor_sync(mask_, v, m, width_));
#endif
    return v;
  }

  template <class F>
  XLLM_CUDA_HD void each(F&& f) {
    f(lane_);
  }

  template <class F>
  XLLM_CUDA_HD void leader(F&& f) {
    if (lane_ == 0) f();
  }
};

// Calls f(std::integral_constant<KvCacheFormat, F>{}) for a quantized format; `otherwise` for
// kPlain or a value that is no format.
template <class R, class F>
R dispatch_kv_quant_format(KvCacheFormat format, R otherwise, F&& f) {
  switch (format) {
    case KvCacheFormat::kFp8E4M3: return f(std::integral_constant<KvCacheFormat, KvCacheFormat::kFp8E4M3>{});
    case KvCacheFormat::kInt8: return f(std::integral_constant<KvCacheFormat, KvCacheFormat::kInt8>{});
    case KvCacheFormat::kPlain: break;
  }
  return otherwise;
}

#ifdef __CUDACC__

template <int kBytes>
__global__ void __launch_bounds__(kKvCacheMaxThreads) reshape_and_cache_kernel(const __grid_constant__ KvCacheArgs a) {
  run_block<kBytes>(a, blockIdx.x, gridDim.x, static_cast<int>(threadIdx.x));
}

template <KvCacheFormat kFormat, class T, int N>
__global__ void __launch_bounds__(kKvCacheMaxThreads)
    reshape_and_cache_quant_kernel(const __grid_constant__ KvCacheArgs a) {
  const int width = a.plan.threads_per_row, t = static_cast<int>(threadIdx.x);
  KvQuantDeviceTeam team;
  team.lane_ = t % width;
  team.width_ = width;
  const int first = t % kWarp - team.lane_;  // the group's first lane within its warp
  team.mask_ = width == kWarp ? 0xFFFFFFFFu : ((1u << width) - 1u) << first;
  kv_quant_group<kFormat, T, N>(a, blockIdx.x, gridDim.x, t / width, team);
}

#endif  // __CUDACC__

}  // namespace xllm_kernel::cuda::kernels
