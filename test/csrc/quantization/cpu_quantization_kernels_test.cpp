// Torch-free tests of the quantization arithmetic (csrc/common/quantization.h) and of the CPU
// kernels (csrc/cpu/quantization), on every Highway target this CPU can run:
//   - the float32 -> float8_e4m3fn and -> int8 / int32 roundings, exhaustively over every bf16 and
//     f16 value and densely around every rounding boundary, against float64 references written
//     here (the scalar functions of the header, and the kernels' SIMD forms through static_quant
//     with scale 1, where q = e4m3(x), int8(x) or int8(int32(x) + azp)), and a stratified float32
//     sweep of the SIMD e4m3 conversions against the header's scalar one;
//   - the per-token fp8 quotient (a division-free exact form on targets with fma, and for bf16
//     rows on AVX512_VBMI CPUs a 128-byte table per row, run with the tables and without) against
//     quantize_fp8_per_token for every bf16 and f16 value and the e4m3 boundaries, times scales
//     over the whole range;
//   - every kernel and scheme against a scalar reference of the contract's float32 arithmetic
//     (tolerance 0 on q, scale and azp), on hidden {17, 1024, 1025, 1026, 5137, 8193} x tokens
//     {1, 7, 300}, contiguous and strided, streamed and not, with ties, zero rows and outliers;
//     round trips within half a step;
//   - the fused kernels equal rms_norm / fused_add_rms_norm / silu_and_mul followed by quant, bit
//     for bit (the residual too);
//   - non-finite rows, zero rows, zero ranges; rows past 2^31 elements; no reads past a row end,
//     no writes outside the rows; concurrent row ranges; argument checks.
#include "csrc/cpu/quantization/quantization.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "csrc/common/quantization.h"
#include "csrc/cpu/activation/activation.h"
#include "csrc/cpu/normalization/normalization.h"
#include "hwy/targets.h"
#include "test/csrc/common/cpu_test_support.h"

namespace xllm_kernel::cpu {
namespace {

using namespace test;  // NOLINT: the element codecs, targets and guarded memory of the kernel tests
namespace kq = kernels;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr uint32_t kCanonicalNaN = 0x7FC00000u;

// The bf16 byte-table path as the CPU has it (AVX512_VBMI), or off (the feature taken away) while in
// scope.
class ByteTablesScope {
 public:
  explicit ByteTablesScope(bool enabled) : scope_(Allowed(enabled)) {}

 private:
  static CpuFeatures Allowed(bool enabled) {
    CpuFeatures f = probed_cpu_features();
    f.avx512_vbmi = f.avx512_vbmi && enabled;
    return f;
  }
  ScopedCpuFeatures scope_;
};

// The table settings to run: both for per-token fp8 of bf16 rows (the tables' only use), else on.
std::vector<bool> TableSettings(bool bf16_fp8) { return bf16_fp8 ? std::vector<bool>{true, false} : std::vector<bool>{true}; }

// ---------------------------------------------------------------- float64 references
// Independent of csrc/common/quantization.h: e4m3 values from the format's definition, rounding by
// comparing exact float64 distances (Fp8Value, Fp8Positives, Fp8Nearest: cpu_test_support.h),
// integers by float64 nearbyint (ties to even).

int RefInt8(double v) {
  if (std::isnan(v)) return 0;
  const double r = std::nearbyint(v);
  return r < -128.0 ? -128 : r > 127.0 ? 127 : static_cast<int>(r);
}

int64_t RefInt32(double v) {
  if (std::isnan(v)) return 0;
  const double r = std::nearbyint(v);
  return r < -2147483648.0 ? INT32_MIN : r > 2147483647.0 ? INT32_MAX : static_cast<int64_t>(r);
}

int RefInt8Azp(double v, int32_t azp) {
  const int64_t s = RefInt32(v) + azp;
  return static_cast<int>(std::clamp<int64_t>(s, -128, 127));
}

// ---------------------------------------------------------------- methods and the row reference

// The schemes the tests run, with the options that change the arithmetic.
enum class Method { kFp8PerToken, kFp8PerTokenUb, kInt8PerToken, kInt8Azp, kFp8Static, kInt8Static, kInt8AzpStatic };

constexpr Method kMethods[] = {Method::kFp8PerToken, Method::kFp8PerTokenUb, Method::kInt8PerToken, Method::kInt8Azp,
                               Method::kFp8Static,   Method::kInt8Static,    Method::kInt8AzpStatic};

const char* Name(Method m) {
  switch (m) {
    case Method::kFp8PerToken: return "fp8_per_token";
    case Method::kFp8PerTokenUb: return "fp8_per_token_ub";
    case Method::kInt8PerToken: return "int8_per_token";
    case Method::kInt8Azp: return "int8_azp";
    case Method::kFp8Static: return "fp8_static";
    case Method::kInt8Static: return "int8_static";
    case Method::kInt8AzpStatic: return "int8_azp_static";
  }
  return "?";
}

bool IsFp8(Method m) { return m == Method::kFp8PerToken || m == Method::kFp8PerTokenUb || m == Method::kFp8Static; }
bool IsStatic(Method m) { return m == Method::kFp8Static || m == Method::kInt8Static || m == Method::kInt8AzpStatic; }
bool HasAzp(Method m) { return m == Method::kInt8Azp || m == Method::kInt8AzpStatic; }

// The constants a method may use: scale_ub, the static scale and zero point.
struct Constants {
  float ub = 1.0f;
  float scale = 1.0f;
  int32_t azp = 0;
};

struct RefRow {
  std::vector<uint8_t> q;
  float scale = 0.0f;
  int32_t azp = 0;
};

// The contract's float32 arithmetic with the reference roundings. x: the row's values (exact in
// float32).
RefRow RefQuantRow(Method m, const std::vector<float>& x, const Constants& c) {
  RefRow r;
  r.q.resize(x.size());
  bool nan = false;
  float amax = 0.0f, mn = kInf, mx = -kInf;
  for (float v : x) {
    nan |= std::isnan(v);
    amax = std::max(amax, std::fabs(v));
    // -0 below +0, as the contract orders them.
    if (v < mn || (v == mn && std::signbit(v))) mn = v;
    if (v > mx || (v == mx && !std::signbit(v))) mx = v;
  }
  switch (m) {
    case Method::kFp8PerToken:
    case Method::kFp8PerTokenUb: {
      const bool ub = m == Method::kFp8PerTokenUb;
      float s;
      if (nan || (ub && std::isnan(c.ub))) {
        s = kNaN;
      } else {
        s = std::max((ub ? std::min(amax, c.ub) : amax) / 448.0f, 1.0f / (448.0f * 512.0f));
      }
      r.scale = s;
      for (size_t j = 0; j < x.size(); ++j) r.q[j] = Fp8Nearest(x[j] / s);
      break;
    }
    case Method::kInt8PerToken: {
      const float a = nan ? kNaN : amax;
      r.scale = a / 127.0f;
      const float mult = a == 0.0f ? 0.0f : 127.0f / a;
      for (size_t j = 0; j < x.size(); ++j) r.q[j] = static_cast<uint8_t>(RefInt8(x[j] * mult));
      break;
    }
    case Method::kInt8Azp: {
      if (nan) mn = mx = kNaN;
      const float s = (mx - mn) / 255.0f;
      r.scale = s;
      r.azp = static_cast<int32_t>(RefInt32(-128.0f - mn / s));
      const float mult = 1.0f / s;
      for (size_t j = 0; j < x.size(); ++j) r.q[j] = static_cast<uint8_t>(RefInt8Azp(x[j] * mult, r.azp));
      break;
    }
    case Method::kFp8Static: {
      const float inv = 1.0f / c.scale;
      for (size_t j = 0; j < x.size(); ++j) r.q[j] = Fp8Nearest(x[j] * inv);
      break;
    }
    case Method::kInt8Static:
      for (size_t j = 0; j < x.size(); ++j) r.q[j] = static_cast<uint8_t>(RefInt8(x[j] / c.scale));
      break;
    case Method::kInt8AzpStatic: {
      const float inv = 1.0f / c.scale;
      for (size_t j = 0; j < x.size(); ++j) r.q[j] = static_cast<uint8_t>(RefInt8Azp(x[j] * inv, c.azp));
      break;
    }
  }
  return r;
}

// Same bits, where a NaN scale must be the canonical NaN.
bool SameScale(float want, float got) {
  if (std::isnan(want)) return F32Bits(got) == kCanonicalNaN;
  return F32Bits(want) == F32Bits(got);
}

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%X", v);
  return buf;
}

// ---------------------------------------------------------------- layouts

// Rows of 1 or 2 dimensions.
struct Shape {
  int ndim = 1;
  int64_t sizes[2] = {0, 1};
  int64_t rows() const { return ndim == 1 ? sizes[0] : sizes[0] * sizes[1]; }
};

Shape MakeShape(int64_t rows, bool two_d) {
  Shape s;
  if (!two_d || rows < 4) {
    s.sizes[0] = rows;
    return s;
  }
  // {outer, inner}, both > 1 where rows allows, so that the strides cannot merge.
  s.ndim = 2;
  int64_t inner = 2;
  for (int64_t k = 3; k * k <= rows; ++k) {
    if (rows % k == 0) inner = k;
  }
  if (rows % inner != 0) inner = 1;
  s.sizes[0] = rows / inner;
  s.sizes[1] = inner;
  return s;
}

// Rows of `width` elements with their own padding: `pad` elements between rows, `gap` more
// between outer rows, `lead` before the first (so rows need not be aligned); sentinels around
// them (sentinel_rows.h).
using Tensor = SentinelRows;

Tensor MakeTensor(size_t elem, const Shape& s, int64_t width, int64_t pad, int64_t gap, int64_t lead) {
  return MakeSentinelRows(elem, s.ndim, s.sizes, width, width + pad, gap, lead);
}

void SetStrides(const Tensor& t, const Shape& s, kq::RowStrides& strides) {
  for (int d = 0; d < s.ndim; ++d) strides.s[d] = t.strides[d];
}

// The q, scale and azp tensors of a call, with their own layouts.
struct Outputs {
  Tensor out, scale, azp;
};

Outputs MakeOutputs(const Shape& s, int64_t hidden, bool padded, int64_t out_lead) {
  return Outputs{MakeTensor(1, s, hidden, padded ? 5 : 0, padded ? 11 : 0, out_lead),
                 MakeTensor(4, s, 1, padded ? 1 : 0, padded ? 3 : 0, 0),
                 MakeTensor(4, s, 1, padded ? 2 : 0, padded ? 1 : 0, 0)};
}

// p's scheme, quantized type and constants for a method (pointers into c).
void SetMethod(Method m, const Constants& c, kq::QuantParams& p) {
  p.qdtype = IsFp8(m) ? QuantDType::kFloat8E4M3 : QuantDType::kInt8;
  p.scheme = IsStatic(m) ? QuantScheme::kStatic : m == Method::kInt8Azp ? QuantScheme::kPerTokenAzp : QuantScheme::kPerToken;
  p.scale_ub = m == Method::kFp8PerTokenUb ? &c.ub : nullptr;
  p.static_scale = IsStatic(m) ? &c.scale : nullptr;
  p.static_azp = m == Method::kInt8AzpStatic ? &c.azp : nullptr;
}

void SetOutputs(Outputs& o, const Shape& s, kq::QuantParams& p) {
  p.out = o.out.data();
  SetStrides(o.out, s, p.out_strides);
  p.scale_out = static_cast<float*>(o.scale.data());
  SetStrides(o.scale, s, p.scale_strides);
  p.azp_out = static_cast<int32_t*>(o.azp.data());
  SetStrides(o.azp, s, p.azp_strides);
}

kq::QuantParams BaseParams(DType t, const Shape& s, int64_t hidden) {
  kq::QuantParams p;
  p.dtype = t;
  p.hidden = hidden;
  p.shape.rows = s.rows();
  p.shape.ndim = s.ndim;
  for (int d = 0; d < s.ndim; ++d) p.shape.sizes[d] = s.sizes[d];
  return p;
}

// Runs k over [0, rows) in three ranges (the cursors must start mid-tensor).
template <class K>
void RunInRanges(K k, const kq::QuantParams& p) {
  const int64_t rows = p.shape.rows, cut1 = rows / 3, cut2 = 2 * rows / 3;
  ASSERT_EQ(k(p, 0, cut1), Status::kOk);
  ASSERT_EQ(k(p, cut1, cut2), Status::kOk);
  ASSERT_EQ(k(p, cut2, rows), Status::kOk);
}

// Compares one call's outputs with the reference rows; reports the first few mismatches.
void ExpectRows(Method m, const Outputs& o, const std::vector<RefRow>& want, const char* what) {
  int64_t bad_q = 0, bad_s = 0, bad_z = 0;
  for (size_t r = 0; r < want.size(); ++r) {
    const unsigned char* q = o.out.row(static_cast<int64_t>(r));
    for (size_t j = 0; j < want[r].q.size(); ++j) {
      if (q[j] != want[r].q[j] && bad_q++ < 5) {
        ADD_FAILURE() << what << " row " << r << " col " << j << ": q " << Hex(q[j]) << " want " << Hex(want[r].q[j]);
      }
    }
    if (IsStatic(m)) continue;
    float s;
    std::memcpy(&s, o.scale.row(static_cast<int64_t>(r)), 4);
    if (!SameScale(want[r].scale, s) && bad_s++ < 5) {
      ADD_FAILURE() << what << " row " << r << ": scale " << s << " (" << Hex(F32Bits(s)) << ") want " << want[r].scale
                    << " (" << Hex(F32Bits(want[r].scale)) << ")";
    }
    if (m == Method::kInt8Azp) {
      int32_t z;
      std::memcpy(&z, o.azp.row(static_cast<int64_t>(r)), 4);
      if (z != want[r].azp && bad_z++ < 5) ADD_FAILURE() << what << " row " << r << ": azp " << z << " want " << want[r].azp;
    }
  }
  EXPECT_EQ(bad_q, 0) << what;
  EXPECT_EQ(bad_s, 0) << what;
  EXPECT_EQ(bad_z, 0) << what;
  ExpectGuardsIntact(o.out, "out");
  ExpectGuardsIntact(o.scale, "scale");
  ExpectGuardsIntact(o.azp, "azp");
}

// ---------------------------------------------------------------- sweeps

// Float32 values around every e4m3 rounding boundary: each midpoint between consecutive values
// (0 and 2^-9 included, and 464 between 448 and the missing 480), the values themselves, the
// normal/subnormal boundary 2^-6, 2^-10 and 2^-11, each with its neighbours up to `ulps` float32
// ulps away, both signs; plus saturation, infinities, NaN (payloads, both signs), float32
// subnormals and zeros.
std::vector<float> E4m3Sweep(int ulps) {
  std::vector<double> centers;
  const std::vector<double>& t = Fp8Positives();
  for (size_t c = 0; c < t.size(); ++c) {
    centers.push_back(t[c]);
    if (c + 1 < t.size()) centers.push_back(0.5 * (t[c] + t[c + 1]));
  }
  for (double v : {464.0, 480.0, 0x1p-6, 0x1p-10, 0x1p-11, 0x1p-12, 1e30, 3.4028234663852886e38}) centers.push_back(v);
  std::vector<float> out;
  for (double c : centers) {
    const float f = static_cast<float>(c);  // every center is a float32
    for (int k = -ulps; k <= ulps; ++k) {
      const uint32_t bits = F32Bits(f);
      if (k < 0 && bits < static_cast<uint32_t>(-k)) continue;
      const float v = F32FromBits(bits + k);
      if (std::isnan(v)) continue;
      out.push_back(v);
      out.push_back(-v);
    }
  }
  for (uint32_t bits : {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x7FFFFFFFu, 0xFFFFFFFFu,
                        0x00000001u, 0x80000001u, 0x007FFFFFu, 0x00000000u, 0x80000000u}) {
    out.push_back(F32FromBits(bits));
  }
  return out;
}

// Float32 values around every int8 (and int32) rounding boundary: k + 1/2 for k in [-140, 140],
// the integers, with neighbours up to `ulps` ulps; the int32 saturation boundaries; +-inf, NaN.
std::vector<float> IntSweep(int ulps) {
  std::vector<float> centers;
  for (int k = -140; k <= 140; ++k) {
    centers.push_back(static_cast<float>(k));
    centers.push_back(static_cast<float>(k) + 0.5f);
  }
  for (float v : {2147483648.0f, 2147483520.0f, -2147483648.0f, 8388608.0f, 8388607.5f, 16777216.0f, 1e20f}) {
    centers.push_back(v);
    centers.push_back(-v);
  }
  std::vector<float> out;
  for (float c : centers) {
    for (int k = -ulps; k <= ulps; ++k) {
      const float v = c == 0.0f ? F32FromBits(static_cast<uint32_t>(std::abs(k))) * (k < 0 ? -1.0f : 1.0f)
                                : F32FromBits(F32Bits(c) + k);
      if (!std::isnan(v)) out.push_back(v);
    }
  }
  for (float v : {kInf, -kInf, kNaN, -kNaN, 3.4028234663852886e38f, -3.4028234663852886e38f}) out.push_back(v);
  return out;
}

// Every bf16 (or f16) bit pattern as float32.
std::vector<float> AllHalfValues(DType t) {
  std::vector<float> out(65536);
  for (uint32_t i = 0; i < 65536; ++i) out[i] = DecodeBits(t, i);
  return out;
}

// The zero points the integer sweeps use.
constexpr int32_t kAzps[] = {0, 1, -1, 5, -128, 127, 255, -255, 100000, -100000, INT32_MIN, INT32_MAX, INT32_MIN + 100, INT32_MAX - 100};

// ---------------------------------------------------------------- the scalar arithmetic

TEST(QuantScalar, E4m3ValuesRoundTrip) {
  for (int c = 0; c < 256; ++c) {
    const float v = kq::float_from_float8_e4m3fn(static_cast<uint8_t>(c));
    const double want = Fp8Value(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(v)) << Hex(c);
      EXPECT_EQ(kq::float8_e4m3fn_from_float(v), 0x7F) << Hex(c);
      continue;
    }
    EXPECT_EQ(static_cast<double>(v), want) << Hex(c);
    EXPECT_EQ(std::signbit(v), (c & 0x80) != 0) << Hex(c);
    EXPECT_EQ(kq::float8_e4m3fn_from_float(v), c) << Hex(c);
  }
  EXPECT_EQ(Fp8Value(static_cast<uint8_t>(0x7E)), 448.0);
  EXPECT_EQ(Fp8Value(static_cast<uint8_t>(0x01)), 0x1p-9);
  EXPECT_EQ(Fp8Value(static_cast<uint8_t>(0x08)), 0x1p-6);
}

TEST(QuantScalar, E4m3EveryHalfValueAndBoundary) {
  std::vector<std::vector<float>> sets = {AllHalfValues(DType::kBFloat16), AllHalfValues(DType::kFloat16), E4m3Sweep(64)};
  int64_t bad = 0, count = 0;
  for (const auto& set : sets) {
    for (float v : set) {
      ++count;
      const uint8_t got = kq::float8_e4m3fn_from_float(v), want = Fp8Nearest(v);
      if (got != want && bad++ < 10) ADD_FAILURE() << "v " << v << " (" << Hex(F32Bits(v)) << "): " << Hex(got) << " want " << Hex(want);
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(count, 131072 + 20000);
  // Spot checks of the reference itself.
  EXPECT_EQ(Fp8Nearest(464.0), 0x7E);           // the tie above 448 goes to 448 (even), as saturation
  EXPECT_EQ(Fp8Nearest(432.0), 0x7E);           // tie between 416 (0x7D) and 448 (0x7E): even
  EXPECT_EQ(Fp8Nearest(0x1p-10), 0x00);         // half the smallest subnormal: tie to 0
  EXPECT_EQ(Fp8Nearest(0x1.000002p-10), 0x01);  // just above it
  EXPECT_EQ(Fp8Nearest(3 * 0x1p-10), 0x02);     // 1.5 * 2^-9: tie between 1 and 2 -> 2
  EXPECT_EQ(Fp8Nearest(-kInf), 0xFE);
  EXPECT_EQ(Fp8Nearest(-0.0), 0x80);
}

TEST(QuantScalar, IntegerRoundingAndSaturation) {
  const std::vector<float> sweep = IntSweep(64);
  int64_t bad = 0;
  for (float v : sweep) {
    if (kq::int8_from_float(v) != RefInt8(v) && bad++ < 10) ADD_FAILURE() << "int8(" << v << ") = " << int(kq::int8_from_float(v));
    if (kq::int32_from_float(v) != RefInt32(v) && bad++ < 10) ADD_FAILURE() << "int32(" << v << ") = " << kq::int32_from_float(v);
    for (int32_t azp : kAzps) {
      if (kq::int8_from_float_azp(v, azp) != RefInt8Azp(v, azp) && bad++ < 10) {
        ADD_FAILURE() << "int8(int32(" << v << ") + " << azp << ") = " << int(kq::int8_from_float_azp(v, azp));
      }
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(kq::int8_from_float(2.5f), 2);
  EXPECT_EQ(kq::int8_from_float(-2.5f), -2);
  EXPECT_EQ(kq::int8_from_float(127.5f), 127);
  EXPECT_EQ(kq::int8_from_float(-128.5f), -128);
  EXPECT_EQ(kq::int32_from_float(2147483648.0f), INT32_MAX);
  EXPECT_EQ(kq::int32_from_float(-kInf), INT32_MIN);
  EXPECT_EQ(kq::int8_from_float_azp(kInf, INT32_MIN), -1);  // 2^31 - 1 - 2^31
}

TEST(QuantScalar, RowParameters) {
  // fp8: min(amax, ub) / 448, at least 1 / (448 * 512).
  const float ub = 10.0f;
  EXPECT_EQ(kq::fp8_per_token_scale(448.0f, nullptr), 1.0f);
  EXPECT_EQ(kq::fp8_per_token_scale(896.0f, &ub), 10.0f / 448.0f);
  EXPECT_EQ(kq::fp8_per_token_scale(0.0f, nullptr), 1.0f / 229376.0f);
  EXPECT_EQ(kq::fp8_min_scale(), 1.0f / 229376.0f);
  EXPECT_EQ(kq::fp8_per_token_scale(kInf, nullptr), kInf);
  EXPECT_EQ(kq::fp8_per_token_scale(kInf, &ub), 10.0f / 448.0f);
  EXPECT_EQ(F32Bits(kq::fp8_per_token_scale(kNaN, nullptr)), kCanonicalNaN);
  const float nan_ub = -kNaN;
  EXPECT_EQ(F32Bits(kq::fp8_per_token_scale(1.0f, &nan_ub)), kCanonicalNaN);
  // int8.
  EXPECT_EQ(kq::int8_per_token_scale(127.0f), 1.0f);
  EXPECT_EQ(kq::int8_per_token_multiplier(0.0f), 0.0f);
  EXPECT_EQ(kq::int8_per_token_multiplier(kInf), 0.0f);
  EXPECT_EQ(kq::int8_per_token_multiplier(3.0f), 127.0f / 3.0f);
  EXPECT_EQ(F32Bits(kq::int8_per_token_scale(kNaN)), kCanonicalNaN);
  // int8 azp: [-128, 127] is scale 1 and azp 0; a zero range and NaN as the header says.
  kq::Int8AzpParams a = kq::int8_azp_params(-128.0f, 127.0f);
  EXPECT_EQ(a.scale, 1.0f);
  EXPECT_EQ(a.multiplier, 1.0f);
  EXPECT_EQ(a.azp, 0);
  a = kq::int8_azp_params(0.0f, 2.0f);
  EXPECT_EQ(a.scale, 2.0f / 255.0f);
  EXPECT_EQ(a.azp, -128);
  a = kq::int8_azp_params(2.5f, 2.5f);
  EXPECT_EQ(a.scale, 0.0f);
  EXPECT_EQ(a.azp, INT32_MIN);
  EXPECT_EQ(kq::quantize_int8_azp(2.5f, a.multiplier, a.azp), -1);
  a = kq::int8_azp_params(-2.5f, -2.5f);
  EXPECT_EQ(a.azp, INT32_MAX);
  EXPECT_EQ(kq::quantize_int8_azp(-2.5f, a.multiplier, a.azp), -1);
  a = kq::int8_azp_params(0.0f, 0.0f);
  EXPECT_EQ(a.azp, 0);
  EXPECT_EQ(kq::quantize_int8_azp(0.0f, a.multiplier, a.azp), 0);
  a = kq::int8_azp_params(kNaN, 1.0f);
  EXPECT_EQ(F32Bits(a.scale), kCanonicalNaN);
  EXPECT_EQ(a.azp, 0);
  EXPECT_EQ(kq::quantize_int8_azp(1.0f, a.multiplier, a.azp), 0);
}

// ---------------------------------------------------------------- the SIMD conversions

// static_quant of one f32 row (or a row of dtype t holding exactly these values) with scale 1:
// q = e4m3(x), int8(x) or int8(int32(x) + azp). Split into rows of `hidden` (the last one
// shorter) with out rows starting `lead` bytes past a line, so the main loop, the partial
// vectors and (with stream) the unaligned head all see every value.
std::vector<uint8_t> StaticOfValues(Method m, DType t, const std::vector<float>& values, int32_t azp, int64_t hidden,
                                    int64_t lead, bool stream) {
  const int64_t n = static_cast<int64_t>(values.size());
  const int64_t rows = (n + hidden - 1) / hidden;
  std::vector<unsigned char, LineAligned<unsigned char>> in((rows * hidden) * ElemSize(t)), out(rows * hidden + lead + 64);
  for (int64_t i = 0; i < rows * hidden; ++i) StoreBits(t, in.data(), i, EncodeBits(t, i < n ? values[i] : 0.0f));
  Constants c;
  c.scale = 1.0f;
  c.azp = azp;
  kq::QuantParams p = BaseParams(t, MakeShape(rows, false), hidden);
  SetMethod(m, c, p);
  p.input = in.data();
  p.input_strides.s[0] = hidden;
  p.out = out.data() + lead;
  p.out_strides.s[0] = hidden;
  p.stream_out = stream;
  EXPECT_EQ(quant(p, 0, rows), Status::kOk);
  return std::vector<uint8_t>(out.begin() + lead, out.begin() + lead + n);
}

struct SweepSet {
  const char* name;
  DType dtype;  // the input dtype the values are fed as (all exact in it)
  std::vector<float> values;
};

std::vector<SweepSet> ConversionSets(bool integer) {
  std::vector<SweepSet> sets;
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    sets.push_back({t == DType::kBFloat16 ? "every bf16" : "every f16", t, AllHalfValues(t)});
    sets.push_back({t == DType::kBFloat16 ? "every bf16 as f32" : "every f16 as f32", DType::kFloat32, AllHalfValues(t)});
  }
  sets.push_back({integer ? "int sweep" : "e4m3 sweep", DType::kFloat32, integer ? IntSweep(64) : E4m3Sweep(64)});
  return sets;
}

TEST(QuantConversions, E4m3OnEveryTarget) {
  ASSERT_FALSE(KernelTargets().empty());
  const std::vector<SweepSet> sets = ConversionSets(false);
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (const SweepSet& set : sets) {
      SCOPED_TRACE(std::string(hwy::TargetName(target)) + " " + set.name);
      std::vector<uint8_t> want(set.values.size());
      for (size_t i = 0; i < want.size(); ++i) want[i] = Fp8Nearest(set.values[i]);
      // One long row; rows of 1000 (streamed, out misaligned by 3); rows of 17.
      for (auto [hidden, lead, stream] : {std::tuple<int64_t, int64_t, bool>{int64_t(set.values.size()), 0, false},
                                          {1000, 3, true}, {17, 1, false}}) {
        const std::vector<uint8_t> got = StaticOfValues(Method::kFp8Static, set.dtype, set.values, 0, hidden, lead, stream);
        int64_t bad = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          if (got[i] != want[i] && bad++ < 5) {
            ADD_FAILURE() << "hidden " << hidden << " v " << set.values[i] << " (" << Hex(F32Bits(set.values[i]))
                          << "): " << Hex(got[i]) << " want " << Hex(want[i]);
          }
        }
        EXPECT_EQ(bad, 0) << "hidden " << hidden;
      }
    }
  }
}

TEST(QuantConversions, Int8OnEveryTarget) {
  const std::vector<SweepSet> sets = ConversionSets(true);
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (const SweepSet& set : sets) {
      // int8(x), then int8(int32(x) + azp) for every zero point.
      std::vector<int32_t> azps = {0};
      azps.insert(azps.end(), std::begin(kAzps), std::end(kAzps));
      for (size_t a = 0; a < azps.size(); ++a) {
        const Method m = a == 0 ? Method::kInt8Static : Method::kInt8AzpStatic;
        const int32_t azp = azps[a];
        SCOPED_TRACE(std::string(hwy::TargetName(target)) + " " + set.name + " " + Name(m) + " azp " + std::to_string(azp));
        std::vector<uint8_t> want(set.values.size());
        for (size_t i = 0; i < want.size(); ++i) {
          want[i] = static_cast<uint8_t>(a == 0 ? RefInt8(set.values[i]) : RefInt8Azp(set.values[i], azp));
        }
        for (auto [hidden, lead, stream] : {std::tuple<int64_t, int64_t, bool>{int64_t(set.values.size()), 0, false},
                                            {1000, 3, true}, {17, 1, false}}) {
          if (a > 2 && hidden != int64_t(set.values.size())) continue;  // the layouts once are enough
          const std::vector<uint8_t> got = StaticOfValues(m, set.dtype, set.values, azp, hidden, lead, stream);
          int64_t bad = 0;
          for (size_t i = 0; i < want.size(); ++i) {
            if (got[i] != want[i] && bad++ < 5) {
              ADD_FAILURE() << "hidden " << hidden << " v " << set.values[i] << ": " << int(int8_t(got[i])) << " want "
                            << int(int8_t(want[i]));
            }
          }
          EXPECT_EQ(bad, 0) << "hidden " << hidden;
        }
      }
    }
  }
}

// Per-token quant of rows that each hold `amax` once (at a varying position) and otherwise the
// given values (all with |v| <= amax): with amax 448 the fp8 scale is exactly 1, with amax 127 the
// int8 multiplier is exactly 1, so q = e4m3(v) or int8(v) through the per-token kernels' own
// conversions (those for rows whose amax bounds the quotients). Returns q of the values, in order.
std::vector<uint8_t> PerTokenOfValues(Method m, DType t, const std::vector<float>& values, float amax, int64_t hidden,
                                      bool stream) {
  const int64_t per_row = hidden - 1;
  const int64_t n = static_cast<int64_t>(values.size());
  const int64_t rows = (n + per_row - 1) / per_row;
  std::vector<unsigned char, LineAligned<unsigned char>> in(rows * hidden * ElemSize(t)), out(rows * hidden + 64);
  std::vector<float> scale(rows);
  std::vector<int64_t> where(rows);
  for (int64_t r = 0; r < rows; ++r) {
    where[r] = (r * 37) % hidden;
    int64_t k = r * per_row;
    for (int64_t j = 0; j < hidden; ++j) {
      const float v = j == where[r] ? (r % 2 ? -amax : amax) : k < n ? values[k++] : 0.0f;
      StoreBits(t, in.data(), r * hidden + j, EncodeBits(t, v));
    }
  }
  Constants c;
  kq::QuantParams p = BaseParams(t, MakeShape(rows, false), hidden);
  SetMethod(m, c, p);
  p.input = in.data();
  p.input_strides.s[0] = hidden;
  p.out = out.data();
  p.out_strides.s[0] = hidden;
  p.scale_out = scale.data();
  p.scale_strides.s[0] = 1;
  p.stream_out = stream;
  EXPECT_EQ(quant(p, 0, rows), Status::kOk);
  std::vector<uint8_t> q;
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(scale[r], 1.0f) << "row " << r;
    for (int64_t j = 0; j < hidden; ++j) {
      if (j != where[r] && static_cast<int64_t>(q.size()) < n) q.push_back(out[r * hidden + j]);
    }
  }
  return q;
}

TEST(QuantConversions, PerTokenRowsOnEveryTarget) {
  // fp8: every bf16 and f16 value and the boundary sweep with |v| <= 448 (NaN excluded); int8:
  // the integer sweep with |v| <= 127.
  std::vector<SweepSet> fp8, int8;
  for (const SweepSet& set : ConversionSets(false)) {
    SweepSet in_range{set.name, set.dtype, {}};
    for (float v : set.values) {
      if (std::fabs(v) <= 448.0f) in_range.values.push_back(v);
    }
    fp8.push_back(in_range);
  }
  for (const SweepSet& set : ConversionSets(true)) {
    SweepSet in_range{set.name, set.dtype, {}};
    for (float v : set.values) {
      if (std::fabs(v) <= 127.0f) in_range.values.push_back(v);
    }
    int8.push_back(in_range);
  }
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (int k = 0; k < 2; ++k) {
      const Method m = k == 0 ? Method::kFp8PerToken : Method::kInt8PerToken;
      for (const SweepSet& set : k == 0 ? fp8 : int8) {
        SCOPED_TRACE(std::string(hwy::TargetName(target)) + " " + Name(m) + " " + set.name);
        std::vector<uint8_t> want(set.values.size());
        for (size_t i = 0; i < want.size(); ++i) {
          want[i] = k == 0 ? Fp8Nearest(set.values[i]) : static_cast<uint8_t>(RefInt8(set.values[i]));
        }
        for (bool tables : TableSettings(k == 0 && set.dtype == DType::kBFloat16)) {
          ByteTablesScope tables_scope(tables);
          for (auto [hidden, stream] : {std::pair<int64_t, bool>{4097, false}, {1000, true}, {18, false}}) {
            const std::vector<uint8_t> got =
                PerTokenOfValues(m, set.dtype, set.values, k == 0 ? 448.0f : 127.0f, hidden, stream);
            ASSERT_EQ(got.size(), want.size());
            int64_t bad = 0;
            for (size_t i = 0; i < want.size(); ++i) {
              if (got[i] != want[i] && bad++ < 5) {
                ADD_FAILURE() << "hidden " << hidden << (tables ? "" : " (no tables)") << " v " << set.values[i] << " ("
                              << Hex(F32Bits(set.values[i])) << "): " << Hex(got[i]) << " want " << Hex(want[i]);
              }
            }
            EXPECT_EQ(bad, 0) << "hidden " << hidden;
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------- fp8 per-token quotients

// Per-token fp8 quant of f32 (or dtype t) rows that each hold `amax` once (at a varying position)
// and otherwise `values` (all with |v| <= amax, exact in t), so every row's scale is
// fp8_per_token_scale(amax): the kernels' x / scale for a chosen scale. Checks each row's scale
// and returns q of the values, in order.
std::vector<uint8_t> Fp8OfValuesWithAmax(DType t, const std::vector<float>& values, float amax, int64_t hidden) {
  const int64_t per_row = hidden - 1;
  const int64_t n = static_cast<int64_t>(values.size());
  const int64_t rows = std::max<int64_t>(1, (n + per_row - 1) / per_row);
  std::vector<unsigned char, LineAligned<unsigned char>> in(rows * hidden * ElemSize(t)), out(rows * hidden);
  std::vector<float> scale(rows);
  std::vector<int64_t> where(rows);
  for (int64_t r = 0, k = 0; r < rows; ++r) {
    where[r] = (r * 53) % hidden;
    for (int64_t j = 0; j < hidden; ++j) {
      const float v = j == where[r] ? (r % 2 ? -amax : amax) : k < n ? values[k++] : 0.0f;
      StoreBits(t, in.data(), r * hidden + j, EncodeBits(t, v));
    }
  }
  Constants c;
  kq::QuantParams p = BaseParams(t, MakeShape(rows, false), hidden);
  SetMethod(Method::kFp8PerToken, c, p);
  p.input = in.data();
  p.input_strides.s[0] = hidden;
  p.out = out.data();
  p.out_strides.s[0] = hidden;
  p.scale_out = scale.data();
  p.scale_strides.s[0] = 1;
  EXPECT_EQ(quant(p, 0, rows), Status::kOk);
  const float want_scale = kq::fp8_per_token_scale(amax, nullptr);
  std::vector<uint8_t> q;
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(F32Bits(scale[r]), F32Bits(want_scale)) << "row " << r;
    for (int64_t j = 0; j < hidden; ++j) {
      if (j != where[r] && static_cast<int64_t>(q.size()) < n) q.push_back(out[r * hidden + j]);
    }
  }
  return q;
}

// An amax whose fp8 scale RN(amax / 448) is s, or 0 if no float32 gives it (near 448 s, the
// quotients of consecutive floats are a little more than one ulp of s apart where s's significand
// is above 8/7).
float AmaxForScale(float s) {
  const float guess = s * 448.0f;
  for (int k = 0; k <= 4; ++k) {
    for (int sign : {1, -1}) {
      const float a = F32FromBits(F32Bits(guess) + sign * k);
      if (std::isfinite(a) && F32Bits(kq::fp8_per_token_scale(a, nullptr)) == F32Bits(s)) return a;
    }
  }
  return 0.0f;
}

// The amaxes (so the scales) the quotient tests use: the smallest scale 1 / 229376 (amax <=
// 2^-9); scales with significands next to 1 and 2 (all ones too) over the exponent range; amaxes
// at e4m3 and float32-division ties times powers of 2; random ones over the exponent range.
std::vector<float> QuotientAmaxes(bool bf16_exact) {
  std::vector<float> out = {0x1p-10f, 0x1p-9f, 448.0f, 1.0f, 127.0f};
  std::mt19937 rng(20261201);
  for (int e = -17; e <= 118; e += 3) {
    for (uint32_t sig : {0u, 1u, 2u, 3u, 0x7FFFFFu, 0x7FFFFEu, 0x7FFFFDu, 0x400000u, 0x124925u, 0x492492u}) {
      const float s = F32FromBits((static_cast<uint32_t>(e + 127) << 23) | sig);
      const float a = AmaxForScale(s);
      if (a != 0.0f) out.push_back(a);
    }
    for (float tie : {464.0f, 432.0f, 0.75f * 0x1p-9f, 7.5f, 1.0625f, 449.0f, 447.0f}) out.push_back(std::ldexp(tie, e));
  }
  for (int k = 0; k < 120; ++k) {
    const int e = static_cast<int>(rng() % 136) - 10;  // amax in [2^-10, 2^126)
    out.push_back(F32FromBits((static_cast<uint32_t>(e + 127) << 23) | (rng() & 0x7FFFFFu)));
  }
  if (bf16_exact) {
    for (float& a : out) a = DecodeBits(DType::kBFloat16, EncodeBits(DType::kBFloat16, a));
  }
  return out;
}

// Float32 values whose quotients by s sit at, and up to `ulps` ulps around, every e4m3 rounding
// boundary and value (E4m3Sweep's centers) below 448, both signs; |x| <= amax.
std::vector<float> BoundariesTimesScale(float s, float amax, int ulps) {
  std::vector<float> out;
  const std::vector<double>& t = Fp8Positives();
  std::vector<double> centers = {0x1p-10, 0x1p-11, 0x1p-12, 448.0 * (1 + 0x1p-23)};
  for (size_t c = 0; c < t.size(); ++c) {
    centers.push_back(t[c]);
    if (c + 1 < t.size()) centers.push_back(0.5 * (t[c] + t[c + 1]));
  }
  for (double c : centers) {
    const float x = static_cast<float>(c * static_cast<double>(s));
    for (int k = -ulps; k <= ulps; ++k) {
      const uint32_t bits = F32Bits(x);
      if (k < 0 && bits < static_cast<uint32_t>(-k)) continue;
      const float v = F32FromBits(bits + k);
      if (std::fabs(v) <= amax) {
        out.push_back(v);
        out.push_back(-v);
      }
    }
  }
  return out;
}

// The per-token fp8 kernels compute x / scale without a division on targets with fma
// (DivideByScale): the e4m3 bits must be those of the true quotient, e4m3(x / scale) as
// quantize_fp8_per_token computes it, for every input. Every bf16 and every f16 value (those
// within the row's amax) and the boundary sweeps, times the scales of QuotientAmaxes, in f32 rows;
// every bf16 (f16) value in bf16 (f16) rows with bf16-exact amaxes; on every target.
TEST(QuantConversions, Fp8PerTokenQuotientsOnEveryTarget) {
  const std::vector<float> all_bf16 = AllHalfValues(DType::kBFloat16), all_f16 = AllHalfValues(DType::kFloat16);
  const std::vector<int64_t> targets = KernelTargets();
  int64_t bad = 0, checked = 0, cases = 0;
  auto check = [&](DType t, float amax, const std::vector<float>& from) {
    std::vector<float> values;
    for (float v : from) {
      if (std::fabs(v) <= amax) values.push_back(v);  // NaN and values above amax left out
    }
    const float s = kq::fp8_per_token_scale(amax, nullptr);
    std::vector<uint8_t> want;
    for (float v : values) want.push_back(kq::quantize_fp8_per_token(v, s));
    ++cases;
    for (int64_t target : targets) {
      TargetScope scope(target);
      // bf16 rows take the byte tables where the CPU has AVX512_VBMI; the quotient path as well.
      for (bool tables : TableSettings(t == DType::kBFloat16)) {
        ByteTablesScope tables_scope(tables);
        const std::vector<uint8_t> got = Fp8OfValuesWithAmax(t, values, amax, 4097);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          if (got[i] != want[i] && bad++ < 10) {
            ADD_FAILURE() << hwy::TargetName(target) << (tables ? "" : " (no tables) ") << " " << ShortName(t) << " x "
                          << values[i] << " (" << Hex(F32Bits(values[i])) << ") / scale " << s << " ("
                          << Hex(F32Bits(s)) << "): " << Hex(got[i]) << " want " << Hex(want[i]);
          }
        }
        checked += static_cast<int64_t>(got.size());
      }
    }
  };
  for (float amax : QuotientAmaxes(false)) {
    check(DType::kFloat32, amax, all_bf16);
    check(DType::kFloat32, amax, all_f16);
    check(DType::kFloat32, amax, BoundariesTimesScale(kq::fp8_per_token_scale(amax, nullptr), amax, 8));
  }
  for (float amax : QuotientAmaxes(true)) {
    check(DType::kBFloat16, amax, all_bf16);
    const float h = DecodeBits(DType::kFloat16, EncodeBits(DType::kFloat16, amax));
    if (h >= 0x1p-10f && h <= 65504.0f) check(DType::kFloat16, h, all_f16);
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(cases, 1500);
  EXPECT_GT(checked, int64_t{50000000} * static_cast<int64_t>(targets.size()));
}

// Float32 bit patterns through the SIMD conversions against float8_e4m3fn_from_float, a dense
// stratified sweep (every float takes minutes here): every 97th pattern (all signs, exponents,
// NaN payloads; 44 million), and for every sign, exponent and top 3 mantissa bits the low 20 bits
// within 40 of 0, 0x80000 (the e4m3 normal midpoint) and 0xFFFFF. Static quant with scale 1 (the
// general conversion: e4m3(x * 1) = e4m3(x)); per-token rows with amax 448 (scale 1: the in-range
// conversion after the quotient) for |x| <= 448. On every target.
TEST(QuantConversions, E4m3StratifiedFloat32) {
  std::vector<uint32_t> bits;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 97) bits.push_back(static_cast<uint32_t>(b));
  for (uint32_t top = 0; top < (1u << 12); ++top) {  // sign, exponent, 3 mantissa bits
    for (uint32_t center : {0u, 0x80000u, 0xFFFFFu}) {
      for (int k = -40; k <= 40; ++k) {
        const int64_t low = static_cast<int64_t>(center) + k;
        if (low >= 0 && low <= 0xFFFFF) bits.push_back((top << 20) | static_cast<uint32_t>(low));
      }
    }
  }
  constexpr int64_t kHidden = 4096;
  constexpr int64_t kChunk = kHidden * 1024;
  std::vector<float, LineAligned<float>> in(kChunk), ptin(2 * kChunk);
  std::vector<uint8_t, LineAligned<uint8_t>> out(2 * kChunk), want(kChunk), ptwant(2 * kChunk);
  std::vector<float> scale(2 * kChunk / kHidden);
  const float one = 1.0f;
  int64_t bad = 0, checked_static = 0, checked_in_range = 0;
  for (size_t base = 0; base < bits.size(); base += kChunk) {
    const int64_t n = std::min<int64_t>(kChunk, static_cast<int64_t>(bits.size() - base));
    const int64_t rows = (n + kHidden - 1) / kHidden;
    int64_t m = 0;  // in-range values, after a 448 leading each row
    for (int64_t i = 0; i < rows * kHidden; ++i) {
      in[i] = i < n ? F32FromBits(bits[base + i]) : 0.0f;
      want[i] = kq::float8_e4m3fn_from_float(in[i]);
      if (!(std::fabs(in[i]) <= 448.0f)) continue;
      if (m % kHidden == 0) ptin[m++] = 448.0f;
      ptwant[m] = want[i];
      ptin[m++] = in[i];
    }
    const int64_t ptrows = (m + kHidden - 1) / kHidden;
    for (int64_t i = m; i < ptrows * kHidden; ++i) ptin[i] = 0.0f, ptwant[i] = 0;
    for (int64_t target : KernelTargets()) {
      TargetScope scope(target);
      kq::QuantParams p = BaseParams(DType::kFloat32, MakeShape(rows, false), kHidden);
      p.qdtype = QuantDType::kFloat8E4M3;
      p.scheme = QuantScheme::kStatic;
      p.static_scale = &one;
      p.input = in.data();
      p.input_strides.s[0] = kHidden;
      p.out = out.data();
      p.out_strides.s[0] = kHidden;
      ASSERT_EQ(quant(p, 0, rows), Status::kOk);
      for (int64_t i = 0; i < n; ++i) {
        if (out[i] != want[i] && bad++ < 10) {
          ADD_FAILURE() << hwy::TargetName(target) << " static " << Hex(F32Bits(in[i])) << ": " << Hex(out[i]) << " want "
                        << Hex(want[i]);
        }
      }
      checked_static += n;
      p = BaseParams(DType::kFloat32, MakeShape(ptrows, false), kHidden);
      p.qdtype = QuantDType::kFloat8E4M3;
      p.scheme = QuantScheme::kPerToken;
      p.input = ptin.data();
      p.input_strides.s[0] = kHidden;
      p.out = out.data();
      p.out_strides.s[0] = kHidden;
      p.scale_out = scale.data();
      p.scale_strides.s[0] = 1;
      ASSERT_EQ(quant(p, 0, ptrows), Status::kOk);
      for (int64_t i = 0; i < m; ++i) {
        if (i % kHidden == 0) continue;  // the 448 leading the row
        if (out[i] != ptwant[i] && bad++ < 10) {
          ADD_FAILURE() << hwy::TargetName(target) << " per-token " << Hex(F32Bits(ptin[i])) << ": " << Hex(out[i])
                        << " want " << Hex(ptwant[i]);
        }
        ++checked_in_range;
      }
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(checked_static, int64_t{44000000});
  EXPECT_GT(checked_in_range, int64_t{11000000});
}

// ---------------------------------------------------------------- kernels against the reference

// Fills row r of a tensor of dtype t with generated values (stored rounded to t) and returns them.
// Rows cycle through kinds: random values of a per-row magnitude, the method's ties (the row's
// amax makes the scale exactly 1 and the elements sit on rounding midpoints), a zero row, a row
// with one outlier, a row of one repeated value.
std::vector<float> FillRow(Method m, DType t, unsigned char* row, int64_t hidden, int64_t r, std::mt19937& rng) {
  std::vector<float> v(hidden);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  const int max_exp = t == DType::kFloat16 ? 10 : 30;
  const int kind = static_cast<int>(r % 6);
  const std::vector<double>& e4m3 = Fp8Positives();
  for (int64_t j = 0; j < hidden; ++j) {
    float x;
    switch (kind) {
      case 1: {  // ties: fp8 midpoints with amax 448; int8 k + 1/2 with amax 127 (azp: min -128, max 127)
        if (IsFp8(m)) {
          const size_t k = rng() % (e4m3.size() - 1);
          x = static_cast<float>(0.5 * (e4m3[k] + e4m3[k + 1])) * (rng() & 1 ? -1.0f : 1.0f);
          if (j == 0) x = 448.0f;
          if (j == 1 && m == Method::kFp8PerTokenUb) x = 1000.0f;  // above the bound (448 in these rows)
        } else {
          x = static_cast<float>(static_cast<int>(rng() % 255) - 128) + 0.5f;
          if (j == 0) x = 127.0f;
          if (j == 1) x = -128.0f;
        }
        break;
      }
      case 2: x = 0.0f; break;
      case 3: x = j == hidden / 2 ? 1000.0f * unit(rng) : 0.01f * unit(rng); break;
      case 4: x = 3.0f; break;
      default: {
        const int e = static_cast<int>(rng() % (2 * max_exp + 1)) - max_exp;
        x = std::ldexp(unit(rng), e);
        break;
      }
    }
    v[j] = DecodeBits(t, EncodeBits(t, x));
    StoreBits(t, row, j, EncodeBits(t, x));
  }
  return v;
}

Constants MakeConstants(Method m, uint32_t seed) {
  Constants c;
  c.ub = seed % 3 == 0 ? 448.0f : 0.37f;  // 448: the tie rows keep scale 1 (their amax is above it)
  c.scale = seed % 2 == 0 ? 1.0f : 0.0123f;
  c.azp = seed % 2 == 0 ? 0 : static_cast<int32_t>(seed % 200) - 100;
  (void)m;
  return c;
}

// The round trip of a finite row: |dequantized - x| within half a step (plus the float32
// roundings of the scale and the quotient, a few 2^-24 relative).
void ExpectRoundTrip(Method m, const std::vector<float>& x, const RefRow& r, const Constants& c, int64_t row) {
  if (!(m == Method::kFp8PerToken || m == Method::kInt8PerToken || m == Method::kInt8Azp)) return;
  for (float v : x) {
    if (!std::isfinite(v)) return;
  }
  const double s = r.scale;
  if (!(s > 0.0) || !std::isfinite(s)) return;
  int64_t bad = 0;
  for (size_t j = 0; j < x.size(); ++j) {
    double deq, half_step;
    if (m == Method::kFp8PerToken) {
      deq = Fp8Value(r.q[j]) * s;
      const double a = std::fabs(x[j] / s);
      half_step = (a < 0x1p-6 ? 0x1p-10 : std::ldexp(1.0, std::ilogb(std::min(a, 448.0)) - 4)) * s;
    } else {
      deq = (static_cast<int8_t>(r.q[j]) - (m == Method::kInt8Azp ? r.azp : 0)) * s;
      half_step = 0.5 * s;
    }
    const double tol = half_step + 8 * 0x1p-24 * (std::fabs(x[j]) + s);
    if (!(std::fabs(deq - x[j]) <= tol) && bad++ < 3) {
      ADD_FAILURE() << Name(m) << " row " << row << " col " << j << ": x " << x[j] << " dequantized " << deq << " tol " << tol;
    }
  }
  (void)c;
}

// One method, dtype and shape: the reference once, then every target (streamed or not) against it.
void CheckQuantCase(Method m, DType t, int64_t rows, int64_t hidden, bool strided, bool stream, uint32_t seed) {
  SCOPED_TRACE(std::string(Name(m)) + " " + ShortName(t) + " rows " + std::to_string(rows) + " hidden " +
               std::to_string(hidden) + (strided ? " strided" : "") + (stream ? " streamed" : ""));
  const Shape s = MakeShape(rows, strided);
  Tensor in = MakeTensor(ElemSize(t), s, hidden, strided ? 3 : 0, strided ? 7 : 0, strided ? 1 : 0);
  std::mt19937 rng(seed);
  const Constants c = MakeConstants(m, seed);
  std::vector<RefRow> want;
  for (int64_t r = 0; r < s.rows(); ++r) {
    const std::vector<float> x = FillRow(m, t, in.row(r), hidden, r, rng);
    want.push_back(RefQuantRow(m, x, c));
    ExpectRoundTrip(m, x, want.back(), c, r);
  }
  const auto in_before = in.bytes;
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    Outputs o = MakeOutputs(s, hidden, strided, strided ? 3 : 0);
    kq::QuantParams p = BaseParams(t, s, hidden);
    SetMethod(m, c, p);
    p.input = in.data();
    SetStrides(in, s, p.input_strides);
    SetOutputs(o, s, p);
    p.stream_out = stream;
    RunInRanges(quant, p);
    ExpectRows(m, o, want, hwy::TargetName(target));
    EXPECT_TRUE(in.bytes == in_before) << "input was modified";
    if (::testing::Test::HasFailure()) return;
  }
}

class QuantReference : public ::testing::TestWithParam<Method> {};

TEST_P(QuantReference, EveryShapeDTypeAndTarget) {
  const Method m = GetParam();
  uint32_t seed = 1 + 1000 * static_cast<uint32_t>(m);
  int case_index = 0;
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (int64_t hidden : {17, 1024, 1025, 1026, 5137, 8193}) {
      for (int64_t tokens : {1, 7, 300}) {
        const bool strided = case_index % 2 == 1, stream = case_index % 3 != 0;
        ++case_index;
        CheckQuantCase(m, t, tokens, hidden, strided, stream, seed++);
        if (HasFailure()) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllMethods, QuantReference, ::testing::ValuesIn(kMethods),
                         [](const ::testing::TestParamInfo<Method>& info) { return std::string(Name(info.param)); });

TEST(QuantReference, NoRows) {
  for (Method m : kMethods) {
    Constants c;
    kq::QuantParams p = BaseParams(DType::kBFloat16, MakeShape(0, false), 64);
    SetMethod(m, c, p);
    EXPECT_EQ(quant(p, 0, 0), Status::kOk) << Name(m);  // null tensors: nothing is touched
    EXPECT_EQ(rms_norm_quant(p, 0, 0), Status::kOk) << Name(m);
    EXPECT_EQ(fused_add_rms_norm_quant(p, 0, 0), Status::kOk) << Name(m);
    EXPECT_EQ(silu_and_mul_quant(p, 0, 0), Status::kOk) << Name(m);
  }
}

// ---------------------------------------------------------------- special rows

// quant of one row of raw dtype-t bits with method m; returns q, scale, azp.
RefRow QuantOneRowBits(Method m, DType t, const std::vector<uint32_t>& bits, const Constants& c) {
  const int64_t hidden = static_cast<int64_t>(bits.size());
  std::vector<unsigned char> in(hidden * ElemSize(t));
  for (int64_t j = 0; j < hidden; ++j) StoreBits(t, in.data(), j, bits[j]);
  RefRow r;
  r.q.assign(hidden, 0xA5);
  kq::QuantParams p = BaseParams(t, MakeShape(1, false), hidden);
  SetMethod(m, c, p);
  p.input = in.data();
  p.input_strides.s[0] = hidden;
  p.out = r.q.data();
  p.out_strides.s[0] = hidden;
  p.scale_out = &r.scale;
  p.azp_out = &r.azp;
  EXPECT_EQ(quant(p, 0, 1), Status::kOk);
  return r;
}

// The same for float32 values, stored rounded to t.
RefRow QuantOneRow(Method m, DType t, const std::vector<float>& x, const Constants& c) {
  std::vector<uint32_t> bits;
  for (float v : x) bits.push_back(EncodeBits(t, v));
  return QuantOneRowBits(m, t, bits, c);
}

std::vector<uint8_t> Bytes(std::initializer_list<int> v) {
  std::vector<uint8_t> out;
  for (int b : v) out.push_back(static_cast<uint8_t>(b));
  return out;
}

// Hand-written expectations of the non-finite rules (csrc/common/quantization.h), for rows short
// and long (the special values then sit in the main loop), every dtype that holds them and every
// target.
TEST(QuantSpecialValues, NonFiniteRowsFollowTheHeader) {
  struct Case {
    const char* what;
    Method m;
    std::vector<float> x;
    float ub, scale;
    int32_t azp;
    uint32_t want_scale_bits;  // per-token methods
    int32_t want_azp;
    std::vector<uint8_t> want_q;
    bool f32_only;  // values a half dtype cannot hold
  };
  const float s_ub = 6.0f / 448.0f;
  const std::vector<Case> cases = {
      {"fp8 NaN row", Method::kFp8PerToken, {1.0f, kNaN, -2.0f}, 0, 0, 0, kCanonicalNaN, 0, Bytes({0x7F, 0x7F, 0x7F}), false},
      {"fp8 -NaN row", Method::kFp8PerToken, {-kNaN, 0.0f}, 0, 0, 0, kCanonicalNaN, 0, Bytes({0x7F, 0x7F}), false},
      {"fp8 NaN scale_ub", Method::kFp8PerTokenUb, {1.0f, 2.0f}, kNaN, 0, 0, kCanonicalNaN, 0, Bytes({0x7F, 0x7F}), false},
      {"fp8 inf row", Method::kFp8PerToken, {1.0f, kInf, -kInf, -3.0f}, 0, 0, 0, F32Bits(kInf), 0,
       Bytes({0x00, 0x7F, 0x7F, 0x80}), false},
      {"fp8 inf row, scale_ub 6", Method::kFp8PerTokenUb, {1.0f, kInf, -kInf, -3.0f}, 6.0f, 0, 0, F32Bits(s_ub), 0,
       {Fp8Nearest(1.0f / s_ub), 0x7E, 0xFE, Fp8Nearest(-3.0f / s_ub)}, false},
      {"fp8 inf row, scale_ub inf", Method::kFp8PerTokenUb, {1.0f, kInf, -kInf, -3.0f}, kInf, 0, 0, F32Bits(kInf), 0,
       Bytes({0x00, 0x7F, 0x7F, 0x80}), false},
      {"fp8 zero row", Method::kFp8PerToken, {0.0f, -0.0f, 0.0f}, 0, 0, 0, F32Bits(1.0f / 229376.0f), 0,
       Bytes({0x00, 0x80, 0x00}), false},
      {"int8 NaN row", Method::kInt8PerToken, {1.0f, kNaN}, 0, 0, 0, kCanonicalNaN, 0, Bytes({0, 0}), false},
      {"int8 inf row", Method::kInt8PerToken, {1.0f, kInf, -kInf}, 0, 0, 0, F32Bits(kInf), 0, Bytes({0, 0, 0}), false},
      {"int8 tiny amax (multiplier 127 / amax is inf)", Method::kInt8PerToken, {1e-39f, -5e-40f, 0.0f}, 0, 0, 0,
       F32Bits(1e-39f / 127.0f), 0, Bytes({127, 0x80, 0}), true},
      {"int8 zero row", Method::kInt8PerToken, {0.0f, -0.0f}, 0, 0, 0, 0, 0, Bytes({0, 0}), false},
      {"azp NaN row", Method::kInt8Azp, {1.0f, kNaN, -1.0f}, 0, 0, 0, kCanonicalNaN, 0, Bytes({0, 0, 0}), false},
      {"azp zero row", Method::kInt8Azp, {0.0f, 0.0f}, 0, 0, 0, 0, 0, Bytes({0, 0}), false},
      {"azp zero range c > 0", Method::kInt8Azp, {2.5f, 2.5f}, 0, 0, 0, 0, INT32_MIN, Bytes({0xFF, 0xFF}), false},
      {"azp zero range c < 0", Method::kInt8Azp, {-2.5f, -2.5f}, 0, 0, 0, 0, INT32_MAX, Bytes({0xFF, 0xFF}), false},
      {"azp -inf and 1", Method::kInt8Azp, {-kInf, 1.0f}, 0, 0, 0, F32Bits(kInf), 0, Bytes({0, 0}), false},
      {"azp 1 and inf", Method::kInt8Azp, {1.0f, kInf}, 0, 0, 0, F32Bits(kInf), -128, Bytes({0x80, 0x80}), false},
      {"azp range overflows to inf", Method::kInt8Azp, {-3e38f, 3e38f}, 0, 0, 0, F32Bits(kInf), -128, Bytes({0x80, 0x80}),
       true},
      {"fp8 static", Method::kFp8Static, {kNaN, kInf, -kInf, 1e30f, 0.25f, -0.0f}, 0, 0.5f, 0, 0, 0,
       {0x7F, 0x7E, 0xFE, 0x7E, Fp8Nearest(0.5), 0x80}, true},
      {"fp8 static scale 0", Method::kFp8Static, {0.0f, 1.0f, -1.0f}, 0, 0.0f, 0, 0, 0, Bytes({0x7F, 0x7E, 0xFE}), false},
      {"int8 static", Method::kInt8Static, {kNaN, kInf, -kInf, 100.0f, -100.0f, 1.25f}, 0, 0.5f, 0, 0, 0,
       Bytes({0, 127, 0x80, 127, 0x80, 2}), false},
      {"int8 static scale 0", Method::kInt8Static, {0.0f, 1.0f, -1.0f}, 0, 0.0f, 0, 0, 0, Bytes({0, 127, 0x80}), false},
      {"int8 static azp", Method::kInt8AzpStatic, {kNaN, kInf, -kInf, 117.5f, -138.5f, 2.5f}, 0, 1.0f, 10, 0, 0,
       Bytes({10, 127, 0x80, 127, 0x80, 12}), false},
      {"int8 static azp INT32_MAX", Method::kInt8AzpStatic, {1e10f, -1e10f, 0.0f}, 0, 1.0f, INT32_MAX, 0, 0,
       Bytes({127, 0xFF, 127}), true},  // -1e10: int32 -2^31, plus 2^31 - 1 is -1
  };
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (const Case& cs : cases) {
      for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
        if (cs.f32_only && t != DType::kFloat32) continue;
        for (int64_t copies : {int64_t{1}, int64_t{40}}) {
          SCOPED_TRACE(std::string(hwy::TargetName(target)) + " " + cs.what + " " + ShortName(t) + " x" + std::to_string(copies));
          std::vector<float> x;
          std::vector<uint8_t> want;
          for (int64_t k = 0; k < copies; ++k) {
            x.insert(x.end(), cs.x.begin(), cs.x.end());
            want.insert(want.end(), cs.want_q.begin(), cs.want_q.end());
          }
          Constants c;
          c.ub = cs.ub;
          c.scale = cs.scale;
          c.azp = cs.azp;
          const RefRow got = QuantOneRow(cs.m, t, x, c);
          EXPECT_EQ(got.q, want);
          if (!IsStatic(cs.m)) {
            EXPECT_EQ(Hex(F32Bits(got.scale)), Hex(cs.want_scale_bits));
          }
          if (cs.m == Method::kInt8Azp) {
            EXPECT_EQ(got.azp, cs.want_azp);
          }
          // The reference agrees (it implements the same rules independently).
          std::vector<float> rounded = x;
          for (float& v : rounded) v = DecodeBits(t, EncodeBits(t, v));
          const RefRow ref = RefQuantRow(cs.m, rounded, c);
          EXPECT_EQ(ref.q, want);
          if (!IsStatic(cs.m)) {
            EXPECT_TRUE(SameScale(ref.scale, got.scale));
          }
        }
      }
    }
  }
}

TEST(QuantSpecialValues, NaNPayloadsAndSignsInHalfRows) {
  // NaN payloads a blind bf16 rounding would carry into the sign, in every position of a row.
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (DType t : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
      for (Method m : kMethods) {
        for (int64_t pos : {0, 5, 16, 63, 64, 99}) {
          std::vector<float> x(100, 1.5f);
          std::vector<uint32_t> bits(100, EncodeBits(t, 1.5f));
          bits[pos] = t == DType::kFloat32 ? 0xFFFFFFFFu : 0xFFFFu;
          x[pos] = DecodeBits(t, bits[pos]);
          Constants c;
          c.ub = 3.0f;
          c.scale = 0.25f;
          c.azp = 3;
          const RefRow got = QuantOneRowBits(m, t, bits, c);
          const RefRow want = RefQuantRow(m, x, c);
          EXPECT_EQ(got.q, want.q) << hwy::TargetName(target) << " " << Name(m) << " " << ShortName(t) << " pos " << pos;
          if (!IsStatic(m)) {
            EXPECT_TRUE(SameScale(want.scale, got.scale)) << Name(m);
          }
          if (m == Method::kInt8Azp) {
            EXPECT_EQ(got.azp, want.azp);
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------- fused = composition

enum class Producer { kRmsNorm, kFusedAdd, kSilu };

const char* Name(Producer prod) {
  switch (prod) {
    case Producer::kRmsNorm: return "rms_norm";
    case Producer::kFusedAdd: return "fused_add_rms_norm";
    case Producer::kSilu: return "silu_and_mul";
  }
  return "?";
}

Status RunFused(Producer prod, const kq::QuantParams& p, int64_t b, int64_t e) {
  switch (prod) {
    case Producer::kRmsNorm: return rms_norm_quant(p, b, e);
    case Producer::kFusedAdd: return fused_add_rms_norm_quant(p, b, e);
    case Producer::kSilu: return silu_and_mul_quant(p, b, e);
  }
  return Status::invalid("?");
}

// The same three row ranges as RunInRanges.
void Ranges(int64_t rows, int64_t (&cuts)[4]) {
  cuts[0] = 0;
  cuts[1] = rows / 3;
  cuts[2] = 2 * rows / 3;
  cuts[3] = rows;
}

// Inputs of a fused case: input rows (2 * hidden wide for silu_and_mul), residual, weight.
struct FusedInputs {
  Shape shape;
  int64_t hidden = 0;
  DType dtype = DType::kFloat32, weight_dtype = DType::kFloat32;
  Tensor in, res;
  std::vector<unsigned char> w;
  double eps = 1e-6;
};

FusedInputs MakeFusedInputs(Producer prod, Method m, DType t, DType wt, int64_t rows, int64_t hidden, bool strided,
                            uint32_t seed) {
  FusedInputs f;
  f.shape = MakeShape(rows, strided);
  f.hidden = hidden;
  f.dtype = t;
  f.weight_dtype = wt;
  const int64_t width = prod == Producer::kSilu ? 2 * hidden : hidden;
  f.in = MakeTensor(ElemSize(t), f.shape, width, strided ? 3 : 0, strided ? 7 : 0, strided ? 1 : 0);
  f.res = MakeTensor(ElemSize(t), f.shape, hidden, strided ? 2 : 0, strided ? 4 : 0, strided ? 2 : 0);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> wdist(0.5f, 1.5f), unit(-1.0f, 1.0f);
  f.w.resize(hidden * ElemSize(wt));
  for (int64_t j = 0; j < hidden; ++j) Store(wt, f.w.data(), j, wdist(rng));
  for (int64_t r = 0; r < f.shape.rows(); ++r) {
    FillRow(m, t, f.in.row(r), width, r, rng);
    for (int64_t j = 0; j < hidden; ++j) Store(t, f.res.row(r), j, 4.0f * unit(rng));
  }
  // A NaN and an infinity in some rows (of the input; the residual's sum carries them).
  const int64_t n = f.shape.rows();
  if (n > 2) StoreBits(t, f.in.row(n - 1), hidden / 3, t == DType::kFloat32 ? 0x7FFFFFFFu : 0x7FFFu);
  if (n > 3) Store(t, f.in.row(1), 0, -kInf);
  return f;
}

// out, scale, azp (and the residual) of the fused kernel and of the composition, byte for byte.
void CheckFusedCase(Producer prod, Method m, DType t, DType wt, int64_t rows, int64_t hidden, bool strided, bool stream,
                    uint32_t seed) {
  SCOPED_TRACE(std::string(Name(prod)) + " + " + Name(m) + " " + ShortName(t) + "_w" + ShortName(wt) + " rows " +
               std::to_string(rows) + " hidden " + std::to_string(hidden) + (strided ? " strided" : "") +
               (stream ? " streamed" : ""));
  const FusedInputs f = MakeFusedInputs(prod, m, t, wt, rows, hidden, strided, seed);
  const Shape& s = f.shape;
  const Constants c = MakeConstants(m, seed);
  int64_t cuts[4];
  Ranges(s.rows(), cuts);
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    SCOPED_TRACE(hwy::TargetName(target));
    // The fused kernel.
    Tensor in_f = f.in, res_f = f.res;
    Outputs of = MakeOutputs(s, hidden, strided, strided ? 5 : 0);
    kq::QuantParams p = BaseParams(t, s, hidden);
    SetMethod(m, c, p);
    p.input = in_f.data();
    SetStrides(in_f, s, p.input_strides);
    p.residual = res_f.data();
    SetStrides(res_f, s, p.residual_strides);
    p.weight = f.w.data();
    p.weight_dtype = wt;
    p.eps = f.eps;
    SetOutputs(of, s, p);
    p.stream_out = stream;
    for (int k = 0; k < 3; ++k) ASSERT_EQ(RunFused(prod, p, cuts[k], cuts[k + 1]), Status::kOk);

    // The composition: the existing kernel into `mid` (or in place for fused_add_rms_norm), then quant.
    Tensor in_c = f.in, res_c = f.res;
    Tensor mid = MakeTensor(ElemSize(t), s, hidden, 0, 0, 0);
    Tensor* normalized = &mid;
    if (prod == Producer::kSilu) {
      ActivationParams ap;
      ap.dtype = t;
      ap.d = hidden;
      ap.shape = p.shape;
      ap.input = in_c.data();
      SetStrides(in_c, s, ap.input_strides);
      ap.out = mid.data();
      SetStrides(mid, s, ap.out_strides);
      ap.stream_out = stream;
      for (int k = 0; k < 3; ++k) ASSERT_EQ(silu_and_mul(ap, cuts[k], cuts[k + 1]), Status::kOk);
    } else {
      NormParams np;
      np.dtype = t;
      np.weight_dtype = wt;
      np.rows = s.rows();
      np.hidden = hidden;
      np.row_ndim = s.ndim;
      for (int d = 0; d < s.ndim; ++d) {
        np.row_sizes[d] = s.sizes[d];
        np.input_strides[d] = in_c.strides[d];
        np.out_strides[d] = mid.strides[d];
        np.residual_strides[d] = res_c.strides[d];
      }
      np.input = in_c.data();
      np.weight = f.w.data();
      np.eps = f.eps;
      np.stream_out = stream;
      if (prod == Producer::kFusedAdd) {
        np.residual = res_c.data();
        normalized = &in_c;
        for (int k = 0; k < 3; ++k) ASSERT_EQ(fused_add_rms_norm(np, cuts[k], cuts[k + 1]), Status::kOk);
      } else {
        np.out = mid.data();
        for (int k = 0; k < 3; ++k) ASSERT_EQ(rms_norm(np, cuts[k], cuts[k + 1]), Status::kOk);
      }
    }
    Outputs oc = MakeOutputs(s, hidden, strided, strided ? 5 : 0);
    kq::QuantParams q = BaseParams(t, s, hidden);
    SetMethod(m, c, q);
    q.input = normalized->data();
    SetStrides(*normalized, s, q.input_strides);
    SetOutputs(oc, s, q);
    RunInRanges(quant, q);

    int64_t differ = 0;
    for (int64_t r = 0; r < s.rows(); ++r) {
      differ += std::memcmp(of.out.row(r), oc.out.row(r), hidden) != 0;
      if (!IsStatic(m)) differ += std::memcmp(of.scale.row(r), oc.scale.row(r), 4) != 0;
      if (m == Method::kInt8Azp) differ += std::memcmp(of.azp.row(r), oc.azp.row(r), 4) != 0;
    }
    EXPECT_EQ(differ, 0) << "rows where the fused kernel and the composition differ";
    EXPECT_TRUE(of.out.bytes == oc.out.bytes && of.scale.bytes == oc.scale.bytes && of.azp.bytes == oc.azp.bytes)
        << "the fused kernel's outputs (padding included) differ from the composition's";
    if (prod == Producer::kFusedAdd) {
      EXPECT_TRUE(res_f.bytes == res_c.bytes) << "residual differs";
    }
    EXPECT_TRUE(in_f.bytes == f.in.bytes) << "input was modified";
    if (prod != Producer::kFusedAdd) {
      EXPECT_TRUE(res_f.bytes == f.res.bytes) << "residual was touched";
    }
    ExpectGuardsIntact(of.out, "out");
    ExpectGuardsIntact(res_f, "residual");
    if (::testing::Test::HasFailure()) return;
  }
}

struct DTypePair {
  DType dtype, weight_dtype;
};

constexpr DTypePair kNormDTypes[] = {{DType::kFloat32, DType::kFloat32},   {DType::kBFloat16, DType::kFloat32},
                                     {DType::kBFloat16, DType::kBFloat16}, {DType::kFloat16, DType::kFloat32},
                                     {DType::kFloat16, DType::kFloat16}};

class QuantFused : public ::testing::TestWithParam<Producer> {};

TEST_P(QuantFused, EqualsTheComposition) {
  const Producer prod = GetParam();
  uint32_t seed = 7 + 100 * static_cast<uint32_t>(prod);
  int case_index = 0;
  // 1 and 7 rows: row ranges below PreparedWeights::kMinRows (weights as given); 12 and 300:
  // weights converted first.
  const int64_t shapes[][2] = {{1, 17}, {7, 1025}, {12, 4096}, {3, 5137}, {2, 8193}, {300, 64}, {12, 1026}};
  for (const DTypePair& dt : kNormDTypes) {
    if (prod == Producer::kSilu && dt.weight_dtype != DType::kFloat32) continue;  // no weights
    for (Method m : kMethods) {
      for (const auto& sh : shapes) {
        const bool strided = case_index % 2 == 0, stream = case_index % 3 == 1;
        ++case_index;
        CheckFusedCase(prod, m, dt.dtype, dt.weight_dtype, sh[0], sh[1], strided, stream, seed++);
        if (HasFailure()) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllProducers, QuantFused,
                         ::testing::Values(Producer::kRmsNorm, Producer::kFusedAdd, Producer::kSilu),
                         [](const ::testing::TestParamInfo<Producer>& info) { return std::string(Name(info.param)); });

// ---------------------------------------------------------------- memory

TEST(QuantMemory, RowsPast2To31Elements) {
  // Rows {2, 3} whose outer stride is > 2^31 elements, in the input, the residual and out; only
  // the touched pages get committed. quant against the reference, the fused kernels against
  // their composition on the same views.
  const int64_t hidden = 1024 + 7;
  const int64_t inner = 2 * hidden + 5;  // room for silu_and_mul's 2 * hidden
  const int64_t outer = (int64_t{1} << 31) + 3 * inner + 17;
  const int64_t span = outer + 2 * inner + 2 * hidden;
  for (DType t : {DType::kBFloat16, DType::kFloat32, DType::kFloat16}) {
    SCOPED_TRACE(ShortName(t));
    GuardedRegion gx(span * ElemSize(t)), gr(span * ElemSize(t)), gq(span), gq2(span);
    if (!gx.ok() || !gr.ok() || !gq.ok() || !gq2.ok()) GTEST_SKIP() << "cannot reserve the virtual address space";
    char* x = gx.tail(span * ElemSize(t));
    char* res = gr.tail(span * ElemSize(t));
    unsigned char* q = reinterpret_cast<unsigned char*>(gq.tail(span));
    unsigned char* q2 = reinterpret_cast<unsigned char*>(gq2.tail(span));
    std::vector<int64_t> offsets;
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t k = 0; k < 3; ++k) offsets.push_back(i * outer + k * inner);
    }
    std::vector<unsigned char> w(hidden * 4);
    for (int64_t j = 0; j < hidden; ++j) Store(DType::kFloat32, w.data(), j, 1.0f + (j % 4) * 0.25f);
    auto fill = [&] {
      for (int64_t r = 0; r < 6; ++r) {
        for (int64_t j = 0; j < 2 * hidden; ++j) Store(t, x, offsets[r] + j, 10.0f * (r + 1) + (j % 17) - 8.0f);
        for (int64_t j = 0; j < hidden; ++j) Store(t, res, offsets[r] + j, 0.5f * (j % 5) - r);
      }
    };
    kq::QuantParams p;
    p.dtype = t;
    p.hidden = hidden;
    p.shape.rows = 6;
    p.shape.ndim = 2;
    p.shape.sizes[0] = 2;
    p.shape.sizes[1] = 3;
    p.input_strides.s[0] = p.residual_strides.s[0] = p.out_strides.s[0] = outer;
    p.input_strides.s[1] = p.residual_strides.s[1] = p.out_strides.s[1] = inner;
    p.scale_strides.s[0] = 3;
    p.scale_strides.s[1] = 1;
    p.azp_strides = p.scale_strides;
    p.weight = w.data();
    p.eps = 1e-6;
    for (Method m : {Method::kFp8PerToken, Method::kInt8Azp, Method::kInt8Static}) {
      SCOPED_TRACE(Name(m));
      const Constants c = MakeConstants(m, 3);
      SetMethod(m, c, p);
      std::vector<float> scale(6), scale2(6);
      std::vector<int32_t> azp(6), azp2(6);
      p.scale_out = scale.data();
      p.azp_out = azp.data();
      // quant against the reference (starting after row 0: the cursor must find row 1 mid-tensor).
      fill();
      p.input = x;
      p.out = q;
      ASSERT_EQ(quant(p, 0, 1), Status::kOk);
      ASSERT_EQ(quant(p, 1, 6), Status::kOk);
      int64_t bad = 0;
      for (int64_t r = 0; r < 6; ++r) {
        std::vector<float> v(hidden);
        for (int64_t j = 0; j < hidden; ++j) v[j] = static_cast<float>(Load(t, x, offsets[r] + j));
        const RefRow want = RefQuantRow(m, v, c);
        bad += std::memcmp(want.q.data(), q + offsets[r], hidden) != 0;
        if (!IsStatic(m)) bad += !SameScale(want.scale, scale[r]);
        if (m == Method::kInt8Azp) bad += want.azp != azp[r];
      }
      EXPECT_EQ(bad, 0) << "quant rows differ from the reference";
      // The fused kernels against the composition.
      for (Producer prod : {Producer::kRmsNorm, Producer::kFusedAdd, Producer::kSilu}) {
        SCOPED_TRACE(Name(prod));
        fill();
        p.input = x;
        p.residual = res;
        p.out = q;
        p.scale_out = scale.data();
        p.azp_out = azp.data();
        ASSERT_EQ(RunFused(prod, p, 0, 6), Status::kOk);
        std::vector<unsigned char> res_fused(6 * hidden * ElemSize(t));
        for (int64_t r = 0; r < 6; ++r) {
          std::memcpy(res_fused.data() + r * hidden * ElemSize(t), res + offsets[r] * ElemSize(t), hidden * ElemSize(t));
        }
        fill();
        std::vector<unsigned char> mid(6 * hidden * ElemSize(t));
        if (prod == Producer::kSilu) {
          ActivationParams ap;
          ap.dtype = t;
          ap.d = hidden;
          ap.shape = p.shape;
          ap.input = x;
          ap.input_strides = p.input_strides;
          ap.out = mid.data();
          ap.out_strides.s[0] = 3 * hidden;
          ap.out_strides.s[1] = hidden;
          ASSERT_EQ(silu_and_mul(ap, 0, 6), Status::kOk);
        } else {
          NormParams np;
          np.dtype = t;
          np.rows = 6;
          np.hidden = hidden;
          np.row_ndim = 2;
          np.row_sizes[0] = 2;
          np.row_sizes[1] = 3;
          np.input_strides[0] = np.residual_strides[0] = outer;
          np.input_strides[1] = np.residual_strides[1] = inner;
          np.out_strides[0] = 3 * hidden;
          np.out_strides[1] = hidden;
          np.input = x;
          np.weight = w.data();
          np.eps = 1e-6;
          if (prod == Producer::kFusedAdd) {
            np.residual = res;
            ASSERT_EQ(fused_add_rms_norm(np, 0, 6), Status::kOk);
            for (int64_t r = 0; r < 6; ++r) {
              std::memcpy(mid.data() + r * hidden * ElemSize(t), x + offsets[r] * ElemSize(t), hidden * ElemSize(t));
              EXPECT_EQ(std::memcmp(res_fused.data() + r * hidden * ElemSize(t), res + offsets[r] * ElemSize(t),
                                    hidden * ElemSize(t)),
                        0)
                  << "residual row " << r;
            }
          } else {
            np.out = mid.data();
            ASSERT_EQ(rms_norm(np, 0, 6), Status::kOk);
          }
        }
        kq::QuantParams pc = p;
        pc.input = mid.data();
        pc.input_strides.s[0] = 3 * hidden;
        pc.input_strides.s[1] = hidden;
        pc.out = q2;
        pc.scale_out = scale2.data();
        pc.azp_out = azp2.data();
        ASSERT_EQ(quant(pc, 0, 6), Status::kOk);
        int64_t differ = 0;
        for (int64_t r = 0; r < 6; ++r) {
          differ += std::memcmp(q + offsets[r], q2 + offsets[r], hidden) != 0;
          if (!IsStatic(m)) differ += F32Bits(scale[r]) != F32Bits(scale2[r]);
          if (m == Method::kInt8Azp) differ += azp[r] != azp2[r];
        }
        EXPECT_EQ(differ, 0) << "the fused kernel differs from the composition";
      }
    }
  }
}

TEST(QuantMemory, NoReadOrWritePastRowEnd) {
  // Input, residual and out rows, the weight, the scalars and the scale and zero-point outputs end
  // right before an inaccessible page: reading or writing past any of them crashes. Every width up
  // to 3 full AVX-512 byte vectors and some more.
  std::vector<int64_t> widths;
  for (int64_t h = 1; h <= 70; ++h) widths.push_back(h);
  for (int64_t h : {127, 128, 129, 191, 192, 193, 255, 257}) widths.push_back(h);
  for (int64_t target : KernelTargets()) {
    TargetScope scope(target);
    for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      for (Method m : kMethods) {
        for (int64_t hidden : widths) {
          SCOPED_TRACE(std::string(hwy::TargetName(target)) + " " + ShortName(t) + " " + Name(m) + " hidden " +
                       std::to_string(hidden));
          const size_t es = ElemSize(t);
          // Two rows back to back, the second ending at the guard (silu_and_mul: 2 * hidden wide).
          GuardedRegion gx(4 * hidden * es), gr(2 * hidden * es), gq(2 * hidden);
          ASSERT_TRUE(gx.ok() && gr.ok() && gq.ok());
          // The weight, the scalars and the per-row scale and zero-point outputs end at guard pages
          // too.
          GuardedArray<float> w(std::vector<float>(hidden, 1.0f)), scale(std::vector<float>(2));
          GuardedArray<int32_t> azp(std::vector<int32_t>(2));
          const Constants c = MakeConstants(m, static_cast<uint32_t>(hidden));
          GuardedArray<float> ub(&c.ub, 1), static_scale(&c.scale, 1);
          GuardedArray<int32_t> static_azp(&c.azp, 1);
          ASSERT_TRUE(w.ok() && scale.ok() && azp.ok() && ub.ok() && static_scale.ok() && static_azp.ok());
          kq::QuantParams p = BaseParams(t, MakeShape(2, false), hidden);
          SetMethod(m, c, p);
          if (p.scale_ub != nullptr) p.scale_ub = ub.data();
          if (p.static_scale != nullptr) p.static_scale = static_scale.data();
          if (p.static_azp != nullptr) p.static_azp = static_azp.data();
          p.residual_strides.s[0] = p.out_strides.s[0] = hidden;
          p.scale_strides.s[0] = p.azp_strides.s[0] = 1;
          p.scale_out = scale.data();
          p.azp_out = azp.data();
          p.weight = w.data();
          p.eps = 1e-6;
          for (bool stream : {false, true}) {
            p.stream_out = stream;
            for (Producer prod : {Producer::kRmsNorm, Producer::kFusedAdd, Producer::kSilu}) {
              const int64_t width = prod == Producer::kSilu ? 2 * hidden : hidden;
              char* x = gx.tail(2 * width * es);
              for (int64_t j = 0; j < 2 * width; ++j) Store(t, x, j, 0.25f * (j % 7) - 0.5f);
              char* r = gr.tail(2 * hidden * es);
              for (int64_t j = 0; j < 2 * hidden; ++j) Store(t, r, j, 1.0f);
              p.input = x;
              p.input_strides.s[0] = width;
              p.residual = r;
              p.out = gq.tail(2 * hidden);
              ASSERT_EQ(RunFused(prod, p, 0, 2), Status::kOk) << Name(prod);
            }
            char* x = gx.tail(2 * hidden * es);
            std::vector<float> rows[2];
            for (int64_t j = 0; j < 2 * hidden; ++j) rows[j / hidden].push_back(static_cast<float>(Store(t, x, j, 0.3f * j - 2.0f)));
            p.input = x;
            p.input_strides.s[0] = hidden;
            unsigned char* q = reinterpret_cast<unsigned char*>(gq.tail(2 * hidden));
            p.out = q;
            ASSERT_EQ(quant(p, 0, 2), Status::kOk);
            for (int k = 0; k < 2; ++k) {
              const RefRow want = RefQuantRow(m, rows[k], c);
              EXPECT_EQ(std::memcmp(want.q.data(), q + k * hidden, hidden), 0) << "row " << k;
            }
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------- threads and arguments

TEST(QuantThreads, DisjointRangesConcurrently) {
  // Two threads on disjoint row ranges (as the bridges split them) give the single call's bytes.
  const int64_t rows = 64, hidden = 1000;
  for (Producer prod : {Producer::kRmsNorm, Producer::kFusedAdd, Producer::kSilu}) {
    for (Method m : {Method::kFp8PerToken, Method::kInt8Azp}) {
      SCOPED_TRACE(std::string(Name(prod)) + " " + Name(m));
      const FusedInputs f = MakeFusedInputs(prod, m, DType::kBFloat16, DType::kFloat32, rows, hidden, false, 5);
      const Constants c = MakeConstants(m, 5);
      Tensor res1 = f.res, res2 = f.res;
      Outputs o1 = MakeOutputs(f.shape, hidden, false, 0), o2 = MakeOutputs(f.shape, hidden, false, 0);
      auto params = [&](Tensor& res, Outputs& o) {
        kq::QuantParams p = BaseParams(DType::kBFloat16, f.shape, hidden);
        SetMethod(m, c, p);
        p.input = f.in.data();
        SetStrides(f.in, f.shape, p.input_strides);
        p.residual = res.data();
        SetStrides(res, f.shape, p.residual_strides);
        p.weight = f.w.data();
        p.eps = f.eps;
        SetOutputs(o, f.shape, p);
        return p;
      };
      const kq::QuantParams p1 = params(res1, o1), p2 = params(res2, o2);
      ASSERT_EQ(RunFused(prod, p1, 0, rows), Status::kOk);
      Status s_a, s_b;
      std::thread a([&] { s_a = RunFused(prod, p2, 0, 29); });
      std::thread b([&] { s_b = RunFused(prod, p2, 29, rows); });
      a.join();
      b.join();
      EXPECT_EQ(s_a, Status::kOk);
      EXPECT_EQ(s_b, Status::kOk);
      EXPECT_TRUE(o1.out.bytes == o2.out.bytes && o1.scale.bytes == o2.scale.bytes && o1.azp.bytes == o2.azp.bytes);
      EXPECT_TRUE(res1.bytes == res2.bytes);
    }
  }
}

TEST(QuantArguments, RejectsInvalidParams) {
  std::vector<unsigned char> in(64 * 4), out(64), w(64 * 4), res(64 * 4);
  float scale = 1.0f, scale_out[1];
  int32_t azp = 0, azp_out[1];
  auto valid = [&] {
    kq::QuantParams p = BaseParams(DType::kFloat32, MakeShape(1, false), 16);
    p.qdtype = QuantDType::kInt8;
    p.scheme = QuantScheme::kPerToken;
    p.input = in.data();
    p.input_strides.s[0] = 16;
    p.out = out.data();
    p.out_strides.s[0] = 16;
    p.scale_out = scale_out;
    p.azp_out = azp_out;
    p.weight = w.data();
    p.residual = res.data();
    p.residual_strides.s[0] = 16;
    p.eps = 1e-6;
    return p;
  };
  for (Producer prod : {Producer::kRmsNorm, Producer::kFusedAdd, Producer::kSilu}) {
    auto run = [&](const kq::QuantParams& p) { return RunFused(prod, p, 0, 1); };
    EXPECT_EQ(quant(valid(), 0, 1), Status::kOk);
    EXPECT_EQ(run(valid()), Status::kOk) << Name(prod);
    struct Bad {
      const char* what;
      void (*edit)(kq::QuantParams&);
      bool norm_only;
    };
    const Bad bad[] = {
        {"dtype", [](kq::QuantParams& p) { p.dtype = static_cast<DType>(7); }, false},
        {"qdtype", [](kq::QuantParams& p) { p.qdtype = static_cast<QuantDType>(5); }, false},
        {"scheme", [](kq::QuantParams& p) { p.scheme = static_cast<QuantScheme>(9); }, false},
        {"azp with fp8", [](kq::QuantParams& p) { p.scheme = QuantScheme::kPerTokenAzp; p.qdtype = QuantDType::kFloat8E4M3; }, false},
        {"hidden 0", [](kq::QuantParams& p) { p.hidden = 0; }, false},
        {"hidden 2^61", [](kq::QuantParams& p) { p.hidden = int64_t{1} << 61; }, false},
        {"ndim 0", [](kq::QuantParams& p) { p.shape.ndim = 0; }, false},
        {"rows", [](kq::QuantParams& p) { p.shape.rows = 2; }, false},
        {"null input", [](kq::QuantParams& p) { p.input = nullptr; }, false},
        {"null out", [](kq::QuantParams& p) { p.out = nullptr; }, false},
        {"null scale_out", [](kq::QuantParams& p) { p.scale_out = nullptr; }, false},
        {"null azp_out", [](kq::QuantParams& p) { p.scheme = QuantScheme::kPerTokenAzp; p.azp_out = nullptr; }, false},
        {"null static scale", [](kq::QuantParams& p) { p.scheme = QuantScheme::kStatic; p.static_scale = nullptr; }, false},
        {"scale_ub with int8", [](kq::QuantParams& p) { static const float ub = 1.0f; p.scale_ub = &ub; }, false},
        {"static azp with fp8",
         [](kq::QuantParams& p) {
           static const float s = 1.0f;
           static const int32_t z = 0;
           p.scheme = QuantScheme::kStatic;
           p.qdtype = QuantDType::kFloat8E4M3;
           p.static_scale = &s;
           p.static_azp = &z;
         },
         false},
        {"weight dtype", [](kq::QuantParams& p) { p.weight_dtype = DType::kBFloat16; }, true},
        {"eps NaN", [](kq::QuantParams& p) { p.eps = std::nan(""); }, true},
        {"eps < 0", [](kq::QuantParams& p) { p.eps = -1.0; }, true},
        {"null weight", [](kq::QuantParams& p) { p.weight = nullptr; }, true},
    };
    for (const Bad& b : bad) {
      kq::QuantParams p = valid();
      b.edit(p);
      EXPECT_EQ(quant(p, 0, 1), b.norm_only ? Status::kOk : Status::kInvalidArgument) << "quant: " << b.what;
      const bool applies = !b.norm_only || prod != Producer::kSilu;
      EXPECT_EQ(run(p), applies ? Status::kInvalidArgument : Status::kOk) << Name(prod) << ": " << b.what;
    }
    kq::QuantParams p = valid();
    p.residual = nullptr;
    EXPECT_EQ(run(p), prod == Producer::kFusedAdd ? Status::kInvalidArgument : Status::kOk) << Name(prod) << ": null residual";
    p = valid();
    EXPECT_EQ(RunFused(prod, p, 0, 2), Status::kInvalidArgument) << "row_end past rows";
    EXPECT_EQ(RunFused(prod, p, 1, 0), Status::kInvalidArgument) << "row_begin > row_end";
    // Valid static and azp parameters.
    p = valid();
    p.scheme = QuantScheme::kStatic;
    p.static_scale = &scale;
    p.static_azp = &azp;
    p.scale_out = nullptr;
    EXPECT_EQ(run(p), Status::kOk);
  }
}

}  // namespace
}  // namespace xllm_kernel::cpu
