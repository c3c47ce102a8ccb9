// Torch-free CPU kernel of the rotary embedding. This translation unit is compiled once per
// Highway target (foreach_target) and the entry point picks the best one at runtime.
#include "csrc/cpu/rotary/rotary.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

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
// No NaN guard in the rounding: every NaN reaching it has a zero lower half (see FillAngles).
HWY_INLINE void LoadPairs(const bfloat16_t* p, VF& even, VF& odd) { LoadEvenOdd(p, even, odd); }
HWY_INLINE void StorePairs(VF even, VF odd, bfloat16_t* p) { StoreEvenOdd</*kNaNPayload=*/false>(even, odd, p); }

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

// ---------------------------------------------------------------- the angles of one token
// cos and sin of a token's position are read by every head of the token, so they are put once per
// token (per chunk of kChunkPairs pairs) into a float32 stack buffer, in the order the heads read
// them: the conversion of a bf16/f16 cache and the reordering for the even/odd form are paid once
// per token instead of once per head.
//
// Layouts for `pairs` pairs (cos of pair i is cos_sin_cache[pos][i], sin is [pos][half + i]):
//   plain:    cos[0, pairs) | sin[0, pairs)
//   even/odd: per block of 2N pairs, cos of the even pairs | cos of the odd ones | sin even | sin
//             odd (N each: the lanes LoadPairs gives for a bf16 NeoX half), then the last
//             pairs % 2N pairs in the plain layout.
//
// bf16 outputs (kSanitize): a NaN of the cache is stored with its lower 16 bits cleared (and the
// quiet bit set). Then every NaN reaching a bf16 store has a zero lower half: NaNs of bf16 inputs
// have one, the FPU's default NaN too, and arithmetic passes one of its operands' NaNs on. The
// rounding needs no NaN guard (it cannot carry a payload into the exponent), and the stored bf16
// bits are those the guarded rounding gives.

constexpr size_t kChunkPairs = 256;  // rot_dim up to 512 in one pass
constexpr size_t kAnglesFloats = 2 * kChunkPairs + 2 * kMaxLanes;  // + the tails' full vectors

HWY_INLINE VF QuietLowClearedNaN(VF v) {
  const DU du;
  const VU bits = hn::BitCast(du, v);
  const VU nan = hn::Or(hn::And(bits, hn::Set(du, 0xFFFF0000u)), hn::Set(du, 0x00400000u));
  return hn::BitCast(DF(), hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), nan, bits));
}

template <bool kSanitize>
HWY_INLINE void PutAngle(VF v, float* p) {
  hn::StoreU(kSanitize ? QuietLowClearedNaN(v) : v, DF(), p);
}

// `count` values of v (cos or sin) at out[0, count), converted to float32; a tail is stored as a
// full vector (zero-padded), so up to N - 1 floats past out + count are written too.
template <bool kSanitize, typename C>
HWY_INLINE void FillRow(const C* HWY_RESTRICT v, size_t count, float* HWY_RESTRICT out) {
  const size_t n = hn::Lanes(DF());
  size_t i = 0;
  for (; i + n <= count; i += n) PutAngle<kSanitize>(LoadF(v + i), out + i);
  if (i < count) PutAngle<kSanitize>(LoadTail(v + i, count - i), out + i);
}

// The plain layout: cos at out[0, count), then sin at out[count, 2 count) (written second, over
// what the cos tail spilled).
template <bool kSanitize, typename C>
HWY_INLINE void FillPlain(const C* HWY_RESTRICT cos, const C* HWY_RESTRICT sin, size_t count, float* HWY_RESTRICT out) {
  FillRow<kSanitize>(cos, count, out);
  FillRow<kSanitize>(sin, count, out + count);
}

template <bool kEvenOdd, bool kSanitize, typename C>
HWY_INLINE void FillAngles(const C* HWY_RESTRICT cos, const C* HWY_RESTRICT sin, size_t pairs, float* HWY_RESTRICT out) {
  size_t i = 0;
  if constexpr (kEvenOdd) {
    const size_t n = hn::Lanes(DF());
    VF even, odd;
    for (; i + 2 * n <= pairs; i += 2 * n, out += 4 * n) {
      LoadPairs(cos + i, even, odd);
      PutAngle<kSanitize>(even, out);
      PutAngle<kSanitize>(odd, out + n);
      LoadPairs(sin + i, even, odd);
      PutAngle<kSanitize>(even, out + 2 * n);
      PutAngle<kSanitize>(odd, out + 3 * n);
    }
  }
  FillPlain<kSanitize>(cos + i, sin + i, pairs - i, out);
}

// ---------------------------------------------------------------- one head

// NeoX, plain angles: x1[i] pairs with x2[i] for i < pairs (x2 = x1 + half: no overlap).
template <typename T>
HWY_INLINE void NeoxPlain(T* HWY_RESTRICT x1, T* HWY_RESTRICT x2, const float* HWY_RESTRICT angles, size_t pairs) {
  const size_t n = hn::Lanes(DF());
  const float* cos = angles;
  const float* sin = angles + pairs;
  size_t i = 0;
  VF o1, o2;
  for (; i + n <= pairs; i += n) {
    Rotate(LoadF(x1 + i), LoadF(x2 + i), LoadF(cos + i), LoadF(sin + i), o1, o2);
    StoreF(o1, x1 + i);
    StoreF(o2, x2 + i);
  }
  if (i < pairs) {
    const size_t rest = pairs - i;
    Rotate(LoadTail(x1 + i, rest), LoadTail(x2 + i, rest), LoadF(cos + i), LoadF(sin + i), o1, o2);
    StoreTail(o1, x1 + i, rest);
    StoreTail(o2, x2 + i, rest);
  }
}

// NeoX of `pairs` pairs: x1[i] with x2[i], angles in the layout FillAngles<kEvenOdd> made. bf16
// in even/odd form: 2N pairs per step, one load and one store per half, no widening shuffles.
template <bool kEvenOdd, typename T>
HWY_INLINE void NeoxHead(T* HWY_RESTRICT x1, T* HWY_RESTRICT x2, const float* HWY_RESTRICT angles, size_t pairs) {
  size_t i = 0;
  if constexpr (kEvenOdd) {
    const size_t n = hn::Lanes(DF());
    VF x1e, x1o, x2e, x2o, o1e, o1o, o2e, o2o;
    for (; i + 2 * n <= pairs; i += 2 * n, angles += 4 * n) {
      LoadPairs(x1 + i, x1e, x1o);
      LoadPairs(x2 + i, x2e, x2o);
      const VF ce = hn::LoadU(DF(), angles), co = hn::LoadU(DF(), angles + n);
      const VF se = hn::LoadU(DF(), angles + 2 * n), so = hn::LoadU(DF(), angles + 3 * n);
      Rotate(x1e, x2e, ce, se, o1e, o2e);
      Rotate(x1o, x2o, co, so, o1o, o2o);
      StorePairs(o1e, o1o, x1 + i);
      StorePairs(o2e, o2o, x2 + i);
    }
  }
  if (i < pairs) NeoxPlain(x1 + i, x2 + i, angles, pairs - i);
}

// GPT-J: x[2i] pairs with x[2i + 1], plain angles.
template <typename T>
HWY_INLINE void GptjHead(T* HWY_RESTRICT x, const float* HWY_RESTRICT angles, size_t pairs) {
  const size_t n = hn::Lanes(DF());
  const float* cos = angles;
  const float* sin = angles + pairs;
  size_t i = 0;
  VF even, odd, o1, o2;
  for (; i + n <= pairs; i += n) {
    LoadPairs(x + 2 * i, even, odd);
    Rotate(even, odd, LoadF(cos + i), LoadF(sin + i), o1, o2);
    StorePairs(o1, o2, x + 2 * i);
  }
  if (i < pairs) {
    // The last pairs through a zero-padded buffer of N pairs: nothing past the head is touched.
    const size_t rest = pairs - i;
    alignas(64) unsigned char buf[2 * kMaxLanes * sizeof(T)] = {};
    std::memcpy(buf, x + 2 * i, 2 * rest * sizeof(T));
    LoadPairs(reinterpret_cast<const T*>(buf), even, odd);
    Rotate(even, odd, LoadF(cos + i), LoadF(sin + i), o1, o2);
    StorePairs(o1, o2, reinterpret_cast<T*>(buf));
    std::memcpy(x + 2 * i, buf, 2 * rest * sizeof(T));
  }
}

// ---------------------------------------------------------------- tokens

// One token's heads of query or key: the first head's elements, the heads and their stride.
template <typename T>
struct TokenHeads {
  T* x = nullptr;
  int64_t heads = 0;
  int64_t head_stride = 0;
};

// A chunk of a head's rotated pairs: pairs [first, first + pairs) of half = rot_dim / 2 (NeoX: x[i]
// with x[half + i]; GPT-J: x[2i] with x[2i + 1]), and their angles as FillAngles put them.
struct PairChunk {
  size_t half = 0;
  size_t first = 0;
  size_t pairs = 0;
  const float* angles = nullptr;
};

// The chunk's pairs of every head of one token.
template <bool kNeox, bool kEvenOdd, typename T>
HWY_INLINE void Heads(const TokenHeads<T>& token, const PairChunk& chunk) {
  T* const x = token.x;
  const int64_t heads = token.heads, head_stride = token.head_stride;
  const size_t half = chunk.half, first = chunk.first, pairs = chunk.pairs;
  const float* const angles = chunk.angles;
  for (int64_t h = 0; h < heads; ++h) {
    T* head = x + h * head_stride;
    if constexpr (kNeox) {
      NeoxHead<kEvenOdd>(head + first, head + half + first, angles, pairs);
    } else {
      GptjHead(head + 2 * first, angles, pairs);
    }
  }
}

template <bool kNeox, typename T, typename C>
void TokensT(const RotaryParams& p, int64_t begin, int64_t end) {
  // bf16 NeoX halves in even/odd form; bf16 outputs round without a NaN guard (FillAngles).
  constexpr bool kBf16 = std::is_same_v<T, bfloat16_t>;
  constexpr bool kEvenOdd = kNeox && kBf16 && HWY_TARGET != HWY_SCALAR;
  const size_t half = static_cast<size_t>(p.rot_dim / 2);
  const C* cache = static_cast<const C*>(p.cos_sin_cache);
  T* query = static_cast<T*>(p.query);
  T* key = static_cast<T*>(p.key);
  alignas(64) float angles[kAnglesFloats];
  for (int64_t t = begin; t < end; ++t) {
    const int64_t pos = p.positions[t * p.position_stride];
    if (pos < 0 || pos >= p.max_position) continue;  // see rotary.h: never outside the cache
    const C* row = cache + pos * p.cache_stride;
    for (size_t first = 0; first < half; first += kChunkPairs) {
      const size_t pairs = std::min(kChunkPairs, half - first);
      FillAngles<kEvenOdd, kBf16>(row + first, row + half + first, pairs, angles);
      const PairChunk chunk{.half = half, .first = first, .pairs = pairs, .angles = angles};
      Heads<kNeox, kEvenOdd>(TokenHeads<T>{.x = query + t * p.query_token_stride,
                                           .heads = p.query_heads,
                                           .head_stride = p.query_head_stride},
                             chunk);
      if (key != nullptr) {
        Heads<kNeox, kEvenOdd>(
            TokenHeads<T>{.x = key + t * p.key_token_stride, .heads = p.key_heads, .head_stride = p.key_head_stride},
            chunk);
      }
    }
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

// Defence only: the bridge validates dtypes, shapes, positions and pointers before calling.
Status Check(const RotaryParams& p, int64_t begin, int64_t end) {
  if (!kernels::valid_dtype(p.dtype)) return Status::invalid("rotary_embedding: unknown dtype");
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
