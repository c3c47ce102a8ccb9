// Torch-free host tests of csrc/cuda/kv_cache: every block and thread of the plan that
// plan_kv_cache picks runs on the CPU (kernels::run_block, the same code the device runs), with
// the piece size the launcher would pick, against expected caches built here byte by byte. They
// check that the addressed slots hold the inputs' bits, that every byte of a written row is
// stored exactly once and nothing else is (the host build's store observer), that negative and
// out-of-range slots write nothing (the slot mapping ends at an inaccessible page: no slot is read
// past the last token), that 16-byte accesses happen exactly on the vector path and
// only at aligned addresses (the host load16/store16 throw otherwise), the plan's rules, and the
// launcher's argument checks.
//
// The quantized formats (float8_e4m3fn, int8): every row group of the plan runs its row program
// (kernels::kv_quant_group, the device's code) with a team that runs each pass for every lane in
// turn and reduces the amax across lanes; the caches and int8 scales must hold, bit for bit, what
// csrc/common/quantization.h's host functions give for each (token, head) row (per_token_quant's
// int8 formulas, quantize_fp8_per_token), rows holding NaN, infinities, zeros, -0 and values past
// the fp8 range included, and every other byte and scale unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "csrc/common/quantization.h"
#include "csrc/cuda/kv_cache/kv_cache.cuh"
#include "csrc/cuda/kv_cache/kv_cache.h"
#include "test/csrc/common/guarded_memory.h"
#include "test/csrc/common/kernel_params.h"
#include "test/cuda/common/host_buffers.h"
#include "test/cuda/launcher_status.h"

namespace xllm_kernel::cuda {
namespace {

using kernels::KvCacheArgs;
using ::xllm_kernel::kernels::KvCacheFormat;

constexpr int kSms = 132;

// A 64-byte aligned buffer of `size` random bytes (host_buffers.h).
AlignedBytes random_bytes(size_t size, std::mt19937& rng) {
  AlignedBytes b(size);
  for (size_t i = 0; i < size; ++i) b.get()[i] = static_cast<unsigned char>(rng());
  return b;
}

// Which bytes were stored, how often, and the sizes of the stores.
struct StoreLog {
  const unsigned char* base[2] = {};  // key_cache, value_cache
  std::vector<int> count[2];          // stores of each byte
  int64_t elsewhere = 0;              // bytes stored outside both
  std::map<size_t, int64_t> sizes;
};
thread_local StoreLog* g_log = nullptr;
void observe(const void* p, size_t bytes) {
  g_log->sizes[bytes] += 1;
  const auto* q = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < bytes; ++i) {
    bool found = false;
    for (int c = 0; c < 2; ++c) {
      if (q + i >= g_log->base[c] && q + i < g_log->base[c] + g_log->count[c].size()) {
        g_log->count[c][q + i - g_log->base[c]] += 1;
        found = true;
      }
    }
    if (!found) ++g_log->elsewhere;
  }
}

struct Case {
  DType dtype;
  int64_t tokens, kv_heads, head_size, block_size, num_blocks;
  int64_t head_pad = 0, block_pad = 0, misalign = 0;  // in elements
};

void run_case(const Case& c, std::mt19937& rng, bool expect_vector) {
  SCOPED_TRACE("tokens " + std::to_string(c.tokens) + " heads " + std::to_string(c.kv_heads) + " head_size " +
               std::to_string(c.head_size) + " dtype " + std::to_string(static_cast<int>(c.dtype)) + " misalign " +
               std::to_string(c.misalign));
  const int64_t es = ::xllm_kernel::kernels::element_size(c.dtype);
  const int64_t head_stride = c.head_size + c.head_pad, token_stride = c.kv_heads * head_stride;
  const int64_t row = c.kv_heads * c.head_size, block = c.block_size * row + c.block_pad;
  const int64_t slots = c.num_blocks * c.block_size;
  const AlignedBytes key = random_bytes((c.tokens * token_stride + c.misalign) * es, rng),
                     value = random_bytes((c.tokens * token_stride + c.misalign) * es, rng);
  const AlignedBytes kc = random_bytes((c.num_blocks * block + c.misalign) * es, rng),
                     vc = random_bytes((c.num_blocks * block + c.misalign) * es, rng);
  std::vector<int64_t> perm(slots);
  for (int64_t i = 0; i < slots; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  // Every 4th token padding; every 5th out of range (the GPU's skip), one of them far out.
  std::vector<int64_t> slot(c.tokens);
  for (int64_t t = 0; t < c.tokens; ++t) {
    slot[t] = t % 4 == 3 ? -7 : t % 5 == 4 ? (t == 4 ? INT64_MAX : slots + t) : perm[t % slots];
  }
  std::vector<unsigned char> want_k = kc.copy(), want_v = vc.copy();
  std::vector<int> want_stores_k(kc.size(), 0), want_stores_v(vc.size(), 0);
  for (int64_t t = 0; t < c.tokens; ++t) {
    if (slot[t] < 0 || slot[t] >= slots) continue;
    const int64_t b = slot[t] / c.block_size, o = slot[t] % c.block_size;
    for (int64_t h = 0; h < c.kv_heads; ++h) {
      for (int64_t i = 0; i < c.head_size * es; ++i) {
        const int64_t dst = (c.misalign + b * block + o * row + h * c.head_size) * es + i;
        const int64_t src = (c.misalign + t * token_stride + h * head_stride) * es + i;
        want_k[dst] = key.get()[src];
        want_v[dst] = value.get()[src];
        want_stores_k[dst] += 1;
        want_stores_v[dst] += 1;
      }
    }
  }
  KvCacheParams p;
  p.dtype = c.dtype;
  p.tokens = c.tokens;
  p.kv_heads = c.kv_heads;
  p.head_size = c.head_size;
  p.block_size = c.block_size;
  p.num_slots = slots;
  p.key = key.get() + c.misalign * es;
  p.key_strides = {token_stride, head_stride};
  p.value = value.get() + c.misalign * es;
  p.value_strides = {token_stride, head_stride};
  p.key_cache = kc.get() + c.misalign * es;
  p.key_cache_block_stride = block;
  p.value_cache = vc.get() + c.misalign * es;
  p.value_cache_block_stride = block;
  test::GuardedArray<int64_t> guarded_slots(slot);  // ends at a guard page: no slot read past the last token
  ASSERT_TRUE(guarded_slots.ok());
  p.slot_mapping = guarded_slots.data();
  p.slot_stride = 1;
  KvCacheArgs args;
  args.p = p;
  args.plan = plan_kv_cache(p, kSms);
  ASSERT_GT(args.plan.blocks, 0);
  EXPECT_EQ(args.plan.vector, expect_vector);
  EXPECT_EQ(args.plan.piece_bytes, expect_vector ? 16 : es);
  StoreLog log;
  log.base[0] = kc.get();
  log.base[1] = vc.get();
  log.count[0].assign(kc.size(), 0);
  log.count[1].assign(vc.size(), 0);
  g_log = &log;
  kernels::host_store_observer = &observe;
  const bool ran = kernels::dispatch_piece(args.plan, false, [&](auto bytes) {
    for (int64_t b = 0; b < args.plan.blocks; ++b) {
      for (int t = 0; t < args.plan.threads; ++t) {
        kernels::run_block<decltype(bytes)::value>(args, b, args.plan.blocks, t);
      }
    }
    return true;
  });
  kernels::host_store_observer = nullptr;
  g_log = nullptr;
  ASSERT_TRUE(ran);
  EXPECT_EQ(kc.copy(), want_k);
  EXPECT_EQ(vc.copy(), want_v);
  EXPECT_EQ(log.count[0], want_stores_k) << "stores per key_cache byte";
  EXPECT_EQ(log.count[1], want_stores_v) << "stores per value_cache byte";
  EXPECT_EQ(log.elsewhere, 0) << "bytes stored outside the caches";
  for (const auto& [size, n] : log.sizes) EXPECT_EQ(static_cast<int64_t>(size), args.plan.piece_bytes) << n;
}

TEST(KvCacheHost, EveryBlockAndThreadOfThePlanWritesExactlyTheAddressedRows) {
  std::mt19937 rng(11);
  const DType dtypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
  for (DType dtype : dtypes) {
    SCOPED_TRACE(static_cast<int>(dtype));
    for (int64_t head_size : {64, 80, 96, 128, 256}) {
      for (int64_t heads : {8, 1}) {
        run_case({dtype, 45, heads, head_size, 16, 4}, rng, /*expect_vector=*/true);
        run_case({dtype, 3, heads, head_size, 32, 1}, rng, true);
      }
    }
    // Heads not adjacent and blocks beyond one block apart, still 16-byte aligned.
    run_case({dtype, 20, 4, 64, 16, 3, 8, 64}, rng, true);
    // Rows not a multiple of 16 bytes, or misaligned bases or strides: element pieces.
    run_case({dtype, 20, 2, 3, 8, 6}, rng, false);
    run_case({dtype, 20, 8, 128, 16, 3, 0, 0, 1}, rng, false);
    run_case({dtype, 20, 2, 64, 16, 3, 1, 0}, rng, false);
    run_case({dtype, 20, 2, 64, 16, 3, 0, 1}, rng, false);
  }
  // One token, one slot.
  run_case({DType::kBFloat16, 1, 8, 128, 16, 1}, rng, true);
}

TEST(KvCacheHost, PlanRules) {
  KvCacheParams p;
  alignas(16) static unsigned char buf[64];
  static const int64_t slot = 0;
  p.dtype = DType::kBFloat16;
  p.tokens = 8192;
  p.kv_heads = 8;
  p.head_size = 128;
  p.block_size = 16;
  p.num_slots = 4096 * 16;
  p.key = p.value = buf;
  p.key_cache = p.value_cache = buf;
  p.key_strides = p.value_strides = {8 * 128, 128};
  p.key_cache_block_stride = p.value_cache_block_stride = 16 * 8 * 128;
  p.slot_mapping = &slot;
  p.slot_stride = 1;
  KvCachePlan plan = plan_kv_cache(p, kSms);
  EXPECT_TRUE(plan.vector);
  EXPECT_EQ(plan.pieces_per_head, 16);
  EXPECT_EQ(plan.pieces_per_token, 256);  // 2 x 8 x 16: one 16-byte piece per thread
  EXPECT_EQ(plan.threads_per_token, 256);
  EXPECT_EQ(plan.tokens_per_block, 1);
  EXPECT_EQ(plan.items, 8192);
  EXPECT_EQ(plan.blocks, 8192);
  // Few pieces per token: several tokens per block, up to 256 threads.
  p.kv_heads = 1;
  p.head_size = 64;
  p.key_strides = p.value_strides = {64, 64};
  plan = plan_kv_cache(p, kSms);
  EXPECT_EQ(plan.pieces_per_token, 16);
  EXPECT_EQ(plan.threads_per_token, 16);
  EXPECT_EQ(plan.tokens_per_block, 16);
  EXPECT_EQ(plan.threads, 256);
  EXPECT_EQ(plan.items, 512);
  // One token: a block of one token's threads.
  p.tokens = 1;
  plan = plan_kv_cache(p, kSms);
  EXPECT_EQ(plan.tokens_per_block, 1);
  EXPECT_EQ(plan.threads, 16);
  EXPECT_EQ(plan.blocks, 1);
  // More pieces than 256 threads: threads stride over them; the grid is capped at 16 waves.
  p.tokens = 1 << 22;
  p.kv_heads = 8;
  p.head_size = 256;
  p.dtype = DType::kFloat32;
  p.key_strides = p.value_strides = {8 * 256, 256};
  plan = plan_kv_cache(p, kSms);
  EXPECT_EQ(plan.pieces_per_token, 2 * 8 * 64);
  EXPECT_EQ(plan.threads_per_token, 256);
  EXPECT_EQ(plan.blocks, kSms * 8 * 16);
  // Scalar path for a row of 6 bytes.
  p.head_size = 3;
  p.dtype = DType::kFloat16;
  p.key_strides = p.value_strides = {8 * 3, 3};
  plan = plan_kv_cache(p, kSms);
  EXPECT_FALSE(plan.vector);
  EXPECT_EQ(plan.piece_bytes, 2);
  EXPECT_EQ(plan.pieces_per_token, 2 * 8 * 3);
  EXPECT_EQ(plan.threads_per_token, 64);
  // Nothing to do: no plan.
  p.tokens = 0;
  EXPECT_EQ(plan_kv_cache(p, kSms).blocks, 0);
}

TEST(KvCacheHost, LauncherRejectsInvalidParametersWithoutTouchingTheDevice) {
  alignas(16) static unsigned char buf[64];
  static const int64_t slot = 0;
  KvCacheParams good = test::OneSlotKvCache(DType::kFloat16, 8, buf, buf, buf, &slot);
  good.key_strides = good.value_strides = {8, 8};
  good.slot_mapping = &slot;
  good.slot_stride = 1;
  EXPECT_GT(plan_kv_cache(good, kSms).blocks, 0);
  auto bad = [&](auto change, const char* reason) {
    SCOPED_TRACE(reason);
    KvCacheParams p = good;
    change(p);
    EXPECT_TRUE(rejected(reshape_and_cache(p, nullptr), reason));
    EXPECT_EQ(plan_kv_cache(p, kSms).blocks, 0);
  };
  bad([](KvCacheParams& p) { p.dtype = static_cast<DType>(7); }, "unknown dtype");
  bad([](KvCacheParams& p) { p.head_size = 0; }, "must be >= 1");
  bad([](KvCacheParams& p) { p.kv_heads = 0; }, "must be >= 1");
  bad([](KvCacheParams& p) { p.block_size = 0; }, "must be >= 1");
  bad([](KvCacheParams& p) { p.tokens = -1; }, "tokens and num_slots must be >= 0");
  bad([](KvCacheParams& p) { p.num_slots = -1; }, "tokens and num_slots must be >= 0");
  bad([](KvCacheParams& p) { p.key = nullptr; }, "null pointer");
  bad([](KvCacheParams& p) { p.slot_mapping = nullptr; }, "null pointer");
  bad([](KvCacheParams& p) { p.key_strides.token = -8; }, "negative stride");
  bad([](KvCacheParams& p) {
    p.tokens = int64_t{1} << 40;
    p.key_strides.token = int64_t{1} << 40;
  }, "beyond int64");
  // Zero tokens or no slots: success without a launch (no device needed).
  KvCacheParams none = good;
  none.tokens = 0;
  EXPECT_TRUE(accepted(reshape_and_cache(none, nullptr)));
  none = good;
  none.num_slots = 0;
  EXPECT_TRUE(accepted(reshape_and_cache(none, nullptr)));
  // Valid parameters without a usable device: the runtime's error, nothing launched.
  if (!cuda_device_present()) EXPECT_TRUE(device_failure(reshape_and_cache(good, nullptr)));
}

// ---------------------------------------------------------------- quantized formats

// A row group on the host: each pass runs for every lane in turn; max reduces the lanes' partials
// with quant_max (exact, so the order is the device's too).
struct HostQuantTeam {
  int width_ = 0;
  int width() const { return width_; }
  template <class F>
  float max(F&& f) {
    float v = f(0);
    for (int lane = 1; lane < width_; ++lane) v = kernels::quant_max(v, f(lane));
    return v;
  }
  template <class F>
  void each(F&& f) {
    for (int lane = 0; lane < width_; ++lane) f(lane);
  }
  template <class F>
  void leader(F&& f) {
    f();
  }
};

// Every block and row group of the plan, on the host.
void run_quant_plan(const KvCacheArgs& a) {
  const bool ran = kernels::dispatch_kv_quant_format(a.p.format, false, [&](auto format) {
    return kernels::dispatch_dtype(a.p.dtype, false, [&](auto element) {
      constexpr KvCacheFormat kFormat = decltype(format)::value;
      using T = typename decltype(element)::type;
      HostQuantTeam team{a.plan.threads_per_row};
      for (int64_t b = 0; b < a.plan.blocks; ++b) {
        for (int g = 0; g < a.plan.rows_per_block; ++g) {
          if (a.plan.vector) {
            kernels::kv_quant_group<kFormat, T, kernels::kKvQuantPiece>(a, b, a.plan.blocks, g, team);
          } else {
            kernels::kv_quant_group<kFormat, T, 1>(a, b, a.plan.blocks, g, team);
          }
        }
      }
      return true;
    });
  });
  ASSERT_TRUE(ran);
}

struct QuantCase {
  KvCacheFormat format;
  DType dtype;
  int64_t tokens, kv_heads, head_size, block_size, num_blocks;
  int64_t head_pad = 0, block_pad = 0, misalign = 0;  // input head padding, cache block padding, misalignment (elements)
  float fp8_scale = 0.05f;                            // the fp8 caches' scale (key's; value's is twice it)
};

// The value of token t's row element: mostly normal values, and per row kind special ones.
double quant_input(int64_t t, int64_t h, int64_t e, int64_t head_size, std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  switch ((t * 7 + h) % 9) {
    case 1: return e == head_size / 2 ? std::numeric_limits<double>::quiet_NaN() : normal(rng);  // a NaN
    case 2: return e == 0 ? std::numeric_limits<double>::infinity() : normal(rng);              // +inf
    case 3: return e % 2 ? -0.0 : 0.0;                                                            // zeros
    case 4: return e == 1 % head_size ? -std::numeric_limits<double>::infinity() : normal(rng) * 1e4;  // -inf, large
    case 5: return normal(rng) * 1e-6;  // tiny: fp8 subnormals and zeros
    default: return normal(rng) * 3;
  }
}

void run_quant_case(const QuantCase& c, std::mt19937& rng, bool expect_vector) {
  SCOPED_TRACE(std::string(kv_cache_format_name(c.format)) + " " + name_of(c.dtype) + " tokens " +
               std::to_string(c.tokens) + " heads " + std::to_string(c.kv_heads) + " head_size " +
               std::to_string(c.head_size) + " misalign " + std::to_string(c.misalign) + " fp8 scale " +
               std::to_string(c.fp8_scale));
  const bool int8 = c.format == KvCacheFormat::kInt8;
  const int64_t es = ::xllm_kernel::kernels::element_size(c.dtype);
  const int64_t head_stride = c.head_size + c.head_pad, token_stride = c.kv_heads * head_stride;
  const int64_t row = c.kv_heads * c.head_size, block = c.block_size * row + c.block_pad;
  const int64_t slots = c.num_blocks * c.block_size;
  Buffer key(c.dtype, c.tokens * token_stride + c.misalign), value(c.dtype, c.tokens * token_stride + c.misalign);
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t h = 0; h < c.kv_heads; ++h) {
      for (int64_t e = 0; e < c.head_size; ++e) {
        const int64_t at = c.misalign + t * token_stride + h * head_stride + e;
        key.set(at, quant_input(t, h, e, c.head_size, rng));
        value.set(at, quant_input(t + 3, h, e, c.head_size, rng));
      }
    }
  }
  const AlignedBytes kc = random_bytes(c.num_blocks * block + c.misalign, rng),
                     vc = random_bytes(c.num_blocks * block + c.misalign, rng);
  // int8 scales: [num_blocks, block_size, kv_heads], blocks 3 floats apart beyond their rows.
  const int64_t scale_block = c.block_size * c.kv_heads + 3;
  std::vector<float> key_scales(c.num_blocks * scale_block, 12345.0f), value_scales(key_scales);
  float fp8_scales[2] = {c.fp8_scale, 2 * c.fp8_scale};
  std::vector<int64_t> perm(slots);
  for (int64_t i = 0; i < slots; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int64_t> slot(c.tokens);
  for (int64_t t = 0; t < c.tokens; ++t) {
    slot[t] = t % 4 == 3 ? -7 : t % 5 == 4 ? (t == 4 ? INT64_MAX : slots + t) : perm[t % slots];
  }
  // The expected caches and scales, row by row from the header's host arithmetic.
  std::vector<unsigned char> want_k = kc.copy(), want_v = vc.copy();
  std::vector<float> want_ks = key_scales, want_vs = value_scales;
  std::vector<int> want_stores_k(kc.size(), 0), want_stores_v(vc.size(), 0);
  for (int64_t t = 0; t < c.tokens; ++t) {
    if (slot[t] < 0 || slot[t] >= slots) continue;
    const int64_t b = slot[t] / c.block_size, o = slot[t] % c.block_size;
    for (int tensor = 0; tensor < 2; ++tensor) {
      const Buffer& in = tensor == 0 ? key : value;
      std::vector<unsigned char>& want = tensor == 0 ? want_k : want_v;
      std::vector<int>& stores = tensor == 0 ? want_stores_k : want_stores_v;
      for (int64_t h = 0; h < c.kv_heads; ++h) {
        const int64_t src = c.misalign + t * token_stride + h * head_stride;
        const int64_t dst = c.misalign + b * block + (o * c.kv_heads + h) * c.head_size;
        float amax = 0.0f;
        for (int64_t e = 0; e < c.head_size; ++e) {
          amax = ::xllm_kernel::kernels::quant_max(amax, std::fabs(static_cast<float>(in.get(src + e))));
        }
        const float m = ::xllm_kernel::kernels::int8_per_token_multiplier(amax);
        if (int8) {
          (tensor == 0 ? want_ks : want_vs)[b * scale_block + o * c.kv_heads + h] =
              ::xllm_kernel::kernels::int8_per_token_scale(amax);
        }
        for (int64_t e = 0; e < c.head_size; ++e) {
          const float x = static_cast<float>(in.get(src + e));
          want[dst + e] = int8 ? static_cast<unsigned char>(::xllm_kernel::kernels::quantize_int8_per_token(x, m))
                               : ::xllm_kernel::kernels::quantize_fp8_per_token(x, fp8_scales[tensor]);
          stores[dst + e] += 1;
        }
      }
    }
  }
  KvCacheParams p;
  p.dtype = c.dtype;
  p.tokens = c.tokens;
  p.kv_heads = c.kv_heads;
  p.head_size = c.head_size;
  p.block_size = c.block_size;
  p.num_slots = slots;
  p.key = key.at(c.misalign);
  p.key_strides = {token_stride, head_stride};
  p.value = value.at(c.misalign);
  p.value_strides = {token_stride, head_stride};
  p.key_cache = kc.get() + c.misalign;
  p.key_cache_block_stride = block;
  p.value_cache = vc.get() + c.misalign;
  p.value_cache_block_stride = block;
  test::GuardedArray<int64_t> guarded_slots(slot);
  ASSERT_TRUE(guarded_slots.ok());
  p.slot_mapping = guarded_slots.data();
  p.slot_stride = 1;
  p.format = c.format;
  if (int8) {
    p.key_scale = key_scales.data();
    p.value_scale = value_scales.data();
    p.key_scale_block_stride = p.value_scale_block_stride = scale_block;
  } else {
    p.key_scale = &fp8_scales[0];
    p.value_scale = &fp8_scales[1];
  }
  KvCacheArgs args;
  args.p = p;
  args.plan = plan_kv_cache(p, kSms);
  ASSERT_GT(args.plan.blocks, 0);
  EXPECT_EQ(args.plan.vector, expect_vector);
  EXPECT_EQ(args.plan.piece_bytes, expect_vector ? 16 : 1);
  StoreLog log;
  log.base[0] = kc.get();
  log.base[1] = vc.get();
  log.count[0].assign(kc.size(), 0);
  log.count[1].assign(vc.size(), 0);
  g_log = &log;
  kernels::host_store_observer = &observe;
  run_quant_plan(args);
  kernels::host_store_observer = nullptr;
  g_log = nullptr;
  EXPECT_EQ(kc.copy(), want_k);
  EXPECT_EQ(vc.copy(), want_v);
  // Scales bit for bit (NaN the canonical quiet NaN).
  // (no memcmp of an empty vector: its data() may be null)
  EXPECT_TRUE(key_scales.empty() || std::memcmp(key_scales.data(), want_ks.data(), key_scales.size() * 4) == 0)
      << "key_scale";
  EXPECT_TRUE(value_scales.empty() || std::memcmp(value_scales.data(), want_vs.data(), value_scales.size() * 4) == 0)
      << "value_scale";
  EXPECT_EQ(std::memcmp(&fp8_scales[0], &c.fp8_scale, 4), 0) << "an fp8 scale is only read";
  EXPECT_EQ(log.count[0], want_stores_k) << "stores per key_cache byte";
  EXPECT_EQ(log.count[1], want_stores_v) << "stores per value_cache byte";
  EXPECT_EQ(log.elsewhere, 0) << "bytes stored outside the caches";
  for (const auto& [size, n] : log.sizes) EXPECT_EQ(static_cast<int64_t>(size), args.plan.piece_bytes) << n;
}

TEST(KvCacheHost, QuantizedRowsEqualTheHeadersArithmeticBitForBit) {
  std::mt19937 rng(21);
  const DType dtypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
  for (KvCacheFormat format : {KvCacheFormat::kFp8E4M3, KvCacheFormat::kInt8}) {
    for (DType dtype : dtypes) {
      for (int64_t head_size : {64, 80, 128, 256, 576}) {
        run_quant_case({format, dtype, 45, 8, head_size, 16, 4}, rng, /*expect_vector=*/true);
        run_quant_case({format, dtype, 3, 1, head_size, 32, 1}, rng, true);
      }
      // Heads not adjacent and blocks beyond one block apart, still aligned.
      run_quant_case({format, dtype, 20, 4, 64, 16, 3, 8, 64}, rng, true);
      // head_size not a multiple of 16, misaligned bases or strides: element pieces.
      run_quant_case({format, dtype, 20, 2, 3, 8, 6}, rng, false);
      run_quant_case({format, dtype, 20, 2, 1, 8, 6}, rng, false);
      run_quant_case({format, dtype, 20, 8, 40, 16, 3}, rng, false);
      run_quant_case({format, dtype, 20, 8, 128, 16, 3, 0, 0, 1}, rng, false);
      run_quant_case({format, dtype, 20, 2, 64, 16, 3, 0, 8}, rng, false);
      run_quant_case({format, dtype, 20, 2, 64, 16, 3, 1, 0}, rng, false);
    }
  }
  // One token, one slot.
  run_quant_case({KvCacheFormat::kInt8, DType::kBFloat16, 1, 8, 128, 16, 1}, rng, true);
}

// The fp8 scale is read on the device and never checked: 0, NaN, a tiny one (saturation) and a
// negative one follow IEEE arithmetic in e4m3(x / scale).
TEST(KvCacheHost, QuantizedFp8ScalesAreUsedAsGiven) {
  std::mt19937 rng(22);
  for (float scale : {1.0f, 1.0f / 3, 1e-3f, 0.0f, -0.5f, std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity()}) {
    run_quant_case({KvCacheFormat::kFp8E4M3, DType::kBFloat16, 12, 2, 64, 16, 2, 0, 0, 0, scale}, rng, true);
    run_quant_case({KvCacheFormat::kFp8E4M3, DType::kFloat32, 12, 2, 5, 16, 2, 0, 0, 0, scale}, rng, false);
  }
}

TEST(KvCacheHost, QuantizedPlanRules) {
  KvCacheParams p;
  alignas(16) static unsigned char buf[64];
  alignas(16) static float scales[4];
  static const int64_t slot = 0;
  p.dtype = DType::kBFloat16;
  p.tokens = 8192;
  p.kv_heads = 8;
  p.head_size = 128;
  p.block_size = 16;
  p.num_slots = 4096 * 16;
  p.key = p.value = buf;
  p.key_cache = p.value_cache = buf;
  p.key_strides = p.value_strides = {8 * 128, 128};
  p.key_cache_block_stride = p.value_cache_block_stride = 16 * 8 * 128;
  p.slot_mapping = &slot;
  p.slot_stride = 1;
  p.format = KvCacheFormat::kInt8;
  p.key_scale = p.value_scale = scales;
  p.key_scale_block_stride = p.value_scale_block_stride = 16 * 8;
  // bf16 8 x 128 into int8: rows of 8 pieces of 16 elements, 8 lanes each, 32 rows a block.
  KvCachePlan plan = plan_kv_cache(p, kSms);
  EXPECT_TRUE(plan.vector);
  EXPECT_EQ(plan.piece_bytes, 16);
  EXPECT_EQ(plan.pieces_per_head, 8);
  EXPECT_EQ(plan.pieces_per_token, 2 * 8 * 8);
  EXPECT_EQ(plan.rows, 8192 * 2 * 8);
  EXPECT_EQ(plan.threads_per_row, 8);
  EXPECT_EQ(plan.rows_per_block, 32);
  EXPECT_EQ(plan.threads, 256);
  EXPECT_EQ(plan.items, 8192 * 2 * 8 / 32);
  EXPECT_EQ(plan.threads_per_token, 0);
  EXPECT_EQ(plan.tokens_per_block, 0);
  EXPECT_EQ(plan.blocks, std::min<int64_t>(plan.items, kSms * 8 * 16));
  // fp8, the same shape: the same plan (the format changes the arithmetic, not the shape).
  p.format = KvCacheFormat::kFp8E4M3;
  EXPECT_EQ(plan_kv_cache(p, kSms).threads_per_row, 8);
  // One token of one head: a block of 2 rows (key, value), fewer threads than a warp.
  p.tokens = 1;
  p.kv_heads = 1;
  p.key_strides = p.value_strides = {128, 128};
  plan = plan_kv_cache(p, kSms);
  EXPECT_EQ(plan.rows, 2);
  EXPECT_EQ(plan.rows_per_block, 2);
  EXPECT_EQ(plan.threads, 16);
  EXPECT_EQ(plan.blocks, 1);
  // Large heads: at most one warp per row, lanes stride over the pieces.
  p.head_size = 576;
  p.key_strides = p.value_strides = {576, 576};
  plan = plan_kv_cache(p, kSms);
  EXPECT_EQ(plan.pieces_per_head, 36);
  EXPECT_EQ(plan.threads_per_row, 32);
  // Element pieces for a head_size not a multiple of 16 (an fp32 head of 4 elements is 16 bytes,
  // but only 4 cache bytes).
  p.dtype = DType::kFloat32;
  p.head_size = 4;
  p.key_strides = p.value_strides = {4, 4};
  plan = plan_kv_cache(p, kSms);
  EXPECT_FALSE(plan.vector);
  EXPECT_EQ(plan.piece_bytes, 1);
  EXPECT_EQ(plan.threads_per_row, 4);
  // A cache block stride that is not a multiple of 16 bytes: element pieces.
  p.head_size = 128;
  p.key_strides = p.value_strides = {128, 128};
  p.key_cache_block_stride = 16 * 128 + 8;
  EXPECT_FALSE(plan_kv_cache(p, kSms).vector);
  p.key_cache_block_stride = 16 * 128 + 16;
  EXPECT_TRUE(plan_kv_cache(p, kSms).vector);
}

TEST(KvCacheHost, QuantizedLauncherRejectsInvalidParametersWithoutTouchingTheDevice) {
  alignas(16) static unsigned char buf[64];
  alignas(16) static float scales[4];
  static const int64_t slot = 0;
  for (KvCacheFormat format : {KvCacheFormat::kFp8E4M3, KvCacheFormat::kInt8}) {
    SCOPED_TRACE(kv_cache_format_name(format));
    KvCacheParams good = test::OneSlotKvCache(DType::kFloat16, 16, buf, buf, buf, &slot);
    good.key_strides = good.value_strides = {16, 16};
    good.slot_stride = 1;
    good.format = format;
    good.key_scale = scales;
    good.value_scale = scales + 2;
    good.key_scale_block_stride = good.value_scale_block_stride = 1;
    EXPECT_GT(plan_kv_cache(good, kSms).blocks, 0);
    auto bad = [&](auto change, const char* reason) {
      SCOPED_TRACE(reason);
      KvCacheParams p = good;
      change(p);
      EXPECT_TRUE(rejected(reshape_and_cache(p, nullptr), reason));
      EXPECT_EQ(plan_kv_cache(p, kSms).blocks, 0);
    };
    bad([](KvCacheParams& p) { p.key_scale = nullptr; }, "null pointer");
    bad([](KvCacheParams& p) { p.value_scale = nullptr; }, "null pointer");
    bad([](KvCacheParams& p) { p.format = static_cast<KvCacheFormat>(5); }, "unknown cache format");
    if (format == KvCacheFormat::kInt8) {
      bad([](KvCacheParams& p) { p.key_scale_block_stride = -1; }, "negative stride");
      bad([](KvCacheParams& p) { p.value_scale_block_stride = -1; }, "negative stride");
      bad([](KvCacheParams& p) {
        p.num_slots = int64_t{1} << 40;
        p.key_scale_block_stride = int64_t{1} << 40;
      }, "beyond int64");
    } else {
      // An fp8 call never reads the int8 scale strides.
      KvCacheParams p = good;
      p.key_scale_block_stride = -1;
      EXPECT_GT(plan_kv_cache(p, kSms).blocks, 0);
    }
    // Null scales are fine where nothing is written.
    KvCacheParams none = good;
    none.tokens = 0;
    none.key_scale = none.value_scale = nullptr;
    EXPECT_TRUE(accepted(reshape_and_cache(none, nullptr)));
    if (!cuda_device_present()) EXPECT_TRUE(device_failure(reshape_and_cache(good, nullptr)));
  }
  // The plain format never reads the scale fields.
  KvCacheParams plain = test::OneSlotKvCache(DType::kFloat16, 8, buf, buf, buf, &slot);
  plain.key_strides = plain.value_strides = {8, 8};
  plain.slot_stride = 1;
  plain.key_scale_block_stride = -1;
  EXPECT_GT(plan_kv_cache(plain, kSms).blocks, 0);
}

}  // namespace
}  // namespace xllm_kernel::cuda
