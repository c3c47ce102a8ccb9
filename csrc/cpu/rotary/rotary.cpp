// Torch-free CPU kernel of the rotary embedding. This translation unit is compiled once per
// Highway target (foreach_target) and the entry point picks the best one at runtime.
#include "csrc/cpu/rotary/rotary.h"

#include <cstddef>
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "csrc/cpu/rotary/rotary.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "csrc/cpu/common/convert-inl.h"

HWY_BEFORE_NAMESPACE();
namespace xllm_kernel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// (x1, x2) rotated by the angle whose cosine and sine are (c, s), in float32.
HWY_INLINE void Rotate(VF x1, VF x2, VF c, VF s, VF& o1, VF& o2) {
  o1 = hn::MulSub(x1, c, hn::Mul(x2, s));  // x1 c - x2 s
  o2 = hn::MulAdd(x2, c, hn::Mul(x1, s));  // x2 c + x1 s
}

// ---------------------------------------------------------------- interleaved pairs
// N consecutive pairs (2N elements) as two float32 vectors: the even elements and the odd ones,
// lane j holding pair j. Stores round once to T and write the 2N elements back in memory order.

HWY_INLINE void LoadPairs(const float* p, VF& even, VF& odd) { hn::LoadInterleaved2(DF(), p, even, odd); }
HWY_INLINE void StorePairs(VF even, VF odd, float* p) { hn::StoreInterleaved2(even, odd, DF(), p); }

// bf16 pairs are u32 lanes: the even element is the lower half (convert-inl.h's even/odd form).
HWY_INLINE void LoadPairs(const bfloat16_t* p, VF& even, VF& odd) { LoadEvenOdd(p, even, odd); }
HWY_INLINE void StorePairs(VF even, VF odd, bfloat16_t* p) { StoreEvenOdd</*kNaNPayload=*/true>(even, odd, p); }

// f16 pairs likewise, through the exact integer codecs (no reordering shuffles).
HWY_INLINE void LoadPairs(const float16_t* p, VF& even, VF& odd) {
  const DU du;
  const VU u = hn::LoadU(du, reinterpret_cast<const uint32_t*>(p));
  even = F32FromF16Bits(hn::And(u, hn::Set(du, 0xFFFFu)));
  odd = F32FromF16Bits(hn::ShiftRight<16>(u));
}
HWY_INLINE void StorePairs(VF even, VF odd, float16_t* p) {
  const VU u = hn::Or(F16BitsFromF32(even), hn::ShiftLeft<16>(F16BitsFromF32(odd)));
  hn::StoreU(u, DU(), reinterpret_cast<uint32_t*>(p));
}

// ---------------------------------------------------------------- one head

// NeoX: x[i] pairs with x[half + i]. The two halves never overlap (i + N <= half).
template <typename T, typename C>
HWY_INLINE void NeoxHead(T* HWY_RESTRICT x, const C* HWY_RESTRICT cos, const C* HWY_RESTRICT sin, size_t half) {
  const size_t n = hn::Lanes(DF());
  T* x2 = x + half;
  size_t i = 0;
  VF o1, o2;
  for (; i + n <= half; i += n) {
    Rotate(LoadF(x + i), LoadF(x2 + i), LoadF(cos + i), LoadF(sin + i), o1, o2);
    StoreF(o1, x + i);
    StoreF(o2, x2 + i);
  }
  if (i < half) {
    const size_t rest = half - i;
    Rotate(LoadTail(x + i, rest), LoadTail(x2 + i, rest), LoadTail(cos + i, rest), LoadTail(sin + i, rest), o1, o2);
    StoreTail(o1, x + i, rest);
    StoreTail(o2, x2 + i, rest);
  }
}

// GPT-J: x[2i] pairs with x[2i + 1].
template <typename T, typename C>
HWY_INLINE void GptjHead(T* HWY_RESTRICT x, const C* HWY_RESTRICT cos, const C* HWY_RESTRICT sin, size_t half) {
  const size_t n = hn::Lanes(DF());
  size_t i = 0;
  VF even, odd, o1, o2;
  for (; i + n <= half; i += n) {
    LoadPairs(x + 2 * i, even, odd);
    Rotate(even, odd, LoadF(cos + i), LoadF(sin + i), o1, o2);
    StorePairs(o1, o2, x + 2 * i);
  }
  if (i < half) {
    // The last pairs through a zero-padded buffer of N pairs: nothing past the head is touched.
    const size_t rest = half - i;
    alignas(64) unsigned char buf[2 * kMaxLanes * sizeof(T)] = {};
    std::memcpy(buf, x + 2 * i, 2 * rest * sizeof(T));
    LoadPairs(reinterpret_cast<const T*>(buf), even, odd);
    Rotate(even, odd, LoadTail(cos + i, rest), LoadTail(sin + i, rest), o1, o2);
    StorePairs(o1, o2, reinterpret_cast<T*>(buf));
    std::memcpy(x + 2 * i, buf, 2 * rest * sizeof(T));
  }
}

// ---------------------------------------------------------------- tokens

template <bool kNeox, typename T, typename C>
HWY_INLINE void Heads(T* x, int64_t heads, int64_t head_stride, const C* cos, const C* sin, size_t half) {
  for (int64_t h = 0; h < heads; ++h) {
    if constexpr (kNeox) {
      NeoxHead(x + h * head_stride, cos, sin, half);
    } else {
      GptjHead(x + h * head_stride, cos, sin, half);
    }
  }
}

template <bool kNeox, typename T, typename C>
void TokensT(const RotaryParams& p, int64_t begin, int64_t end) {
  const size_t half = static_cast<size_t>(p.rot_dim / 2);
  const C* cache = static_cast<const C*>(p.cos_sin_cache);
  T* query = static_cast<T*>(p.query);
  T* key = static_cast<T*>(p.key);
  for (int64_t t = begin; t < end; ++t) {
    const int64_t pos = p.positions[t * p.position_stride];
    if (pos < 0 || pos >= p.max_position) continue;  // see rotary.h: never outside the cache
    const C* cos = cache + pos * p.cache_stride;
    const C* sin = cos + half;
    Heads<kNeox>(query + t * p.query_token_stride, p.query_heads, p.query_head_stride, cos, sin, half);
    if (key != nullptr) Heads<kNeox>(key + t * p.key_token_stride, p.key_heads, p.key_head_stride, cos, sin, half);
  }
}

template <typename T, typename C>
void TokensTC(const RotaryParams& p, int64_t begin, int64_t end) {
  if (p.is_neox) {
    TokensT<true, T, C>(p, begin, end);
  } else {
    TokensT<false, T, C>(p, begin, end);
  }
}

template <typename T>
void TokensTyped(const RotaryParams& p, int64_t begin, int64_t end) {
  if (p.cache_dtype == DType::kFloat32) {
    TokensTC<T, float>(p, begin, end);
  } else {
    TokensTC<T, T>(p, begin, end);  // the cache in the query's dtype (checked before)
  }
}

void RotaryTokens(const RotaryParams& p, int64_t begin, int64_t end) {
  switch (p.dtype) {
    case DType::kFloat32: return TokensTyped<float>(p, begin, end);
    case DType::kBFloat16: return TokensTyped<bfloat16_t>(p, begin, end);
    case DType::kFloat16: return TokensTyped<float16_t>(p, begin, end);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace xllm_kernel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace xllm_kernel::cpu {

HWY_EXPORT(RotaryTokens);

namespace {

bool valid_dtype(DType t) { return t == DType::kFloat32 || t == DType::kBFloat16 || t == DType::kFloat16; }

// Defence only: the bridge validates dtypes, shapes, positions and pointers before calling.
Status Check(const RotaryParams& p, int64_t begin, int64_t end) {
  if (!valid_dtype(p.dtype)) return Status::invalid("rotary_embedding: unknown dtype");
  if (p.cache_dtype != DType::kFloat32 && p.cache_dtype != p.dtype) {
    return Status::invalid("rotary_embedding: cache dtype must be float32 or the query's dtype");
  }
  if (p.rot_dim < 2 || p.rot_dim % 2 != 0 || p.rot_dim > p.head_size) {
    return Status::invalid("rotary_embedding: rot_dim must be even and in [2, head_size]");
  }
  if (p.query_heads < 1 || p.key_heads < 0 || (p.key == nullptr) != (p.key_heads == 0)) {
    return Status::invalid("rotary_embedding: query needs >= 1 head; key null exactly when it has 0 heads");
  }
  if (p.tokens < 0 || begin < 0 || begin > end || end > p.tokens) {
    return Status::invalid("rotary_embedding: token range not within [0, tokens]");
  }
  if (p.max_position < 0) return Status::invalid("rotary_embedding: max_position must be >= 0");
  if (begin < end && (p.positions == nullptr || p.query == nullptr || p.cos_sin_cache == nullptr)) {
    return Status::invalid("rotary_embedding: null positions, query or cache");
  }
  return Status::ok();
}

}  // namespace

Status rotary_embedding(const RotaryParams& p, int64_t token_begin, int64_t token_end) {
  const Status s = Check(p, token_begin, token_end);
  if (s.is_ok() && token_begin < token_end) HWY_DYNAMIC_DISPATCH(RotaryTokens)(p, token_begin, token_end);
  return s;
}

}  // namespace xllm_kernel::cpu
#endif  // HWY_ONCE
