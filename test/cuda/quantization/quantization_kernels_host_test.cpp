// Torch-free host tests of csrc/cuda/quantization: every block, group and lane of the plans that
// plan_quant picks runs on the CPU (kernels::quant_group_rows with a team that runs each pass for
// every lane in turn and sums in the device's butterfly order), against
//   - a reference written here from csrc/common/quantization.h's element functions (amax, min and
//     max folded in order, the header's scales and conversions), for every operation, scheme,
//     quantized dtype and input dtype, over tails, strided and misaligned rows, non-finite rows,
//     zero rows, constant rows and ties; nothing outside the rows is written;
//   - the composition of the CUDA kernels it fuses, run on the host the same way: rms_norm,
//     fused_add_rms_norm (csrc/cuda/normalization) and silu_and_mul (csrc/cuda/activation) into a
//     tensor, then quant on it: the same bits (codes, scales, zero points, the updated residual).
// Plus the plans (vector or element path, the normalization's launch shape) and the launchers'
// rejections with their reasons. The device-only parts (the warp and block reductions, the grid)
// run on a GPU in test/cuda/quantization/quantization_cuda_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "csrc/common/quantization.h"
#include "csrc/cuda/activation/activation.cuh"
#include "csrc/cuda/activation/activation.h"
#include "csrc/cuda/normalization/normalization.cuh"
#include "csrc/cuda/normalization/normalization.h"
#include "csrc/cuda/quantization/quantization.cuh"
#include "csrc/cuda/quantization/quantization.h"
#include "test/cuda/common/group_sum.h"
#include "test/cuda/common/host_buffers.h"
#include "test/cuda/element_codec.h"
#include "test/cuda/launcher_status.h"

namespace xllm_kernel::cuda {
namespace {

namespace hk = ::xllm_kernel::kernels;  // the header's arithmetic
using kernels::QuantArgs;
using ::xllm_kernel::cuda::name_of;  // the dtype's (test/cuda/element_codec.h), beside this file's own

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ---- the host "launch" (group sums in the device's order: test/cuda/common/group_sum.h) --------

// A group on the host: each pass runs for every lane in turn (the reduction is the barrier).
struct HostTeam {
  int w;
  int width() const { return w; }
  template <class F>
  float sum(F&& f) {
    std::vector<float> partials(w);
    for (int l = 0; l < w; ++l) partials[l] = f(l);
    return group_sum(partials);
  }
  template <class F>
  float max(F&& f) {
    float acc = 0.0f;
    for (int l = 0; l < w; ++l) acc = hk::quant_max(acc, f(l));
    return acc;
  }
  template <class F>
  kernels::MinMax minmax(F&& f) {
    kernels::MinMax acc{kInf, -kInf};
    for (int l = 0; l < w; ++l) acc = kernels::combine(acc, f(l));
    return acc;
  }
  template <class F>
  void each(F&& f) {
    for (int l = 0; l < w; ++l) f(l);
  }
  template <class F>
  void leader(F&& f) {
    f();
  }
  void sync() {}
};

template <QuantProducer kOp>
void run_quant_typed(const QuantArgs& a) {
  const QuantPlan& plan = a.plan;
  const bool ran = kernels::dispatch_quant_types<kOp>(a.p, false, [&](auto element, auto weight) {
    using T = typename decltype(element)::type;
    using W = typename decltype(weight)::type;
    for (int64_t b = 0; b < plan.blocks; ++b) {
      if (plan.warp_per_row) {
        const int warps = plan.threads / 32;
        for (int w = 0; w < warps; ++w) {
          HostTeam team{32};
          kernels::quant_group_rows<kOp, T, W>(a, b * warps + w, plan.blocks * warps, team);
        }
      } else {
        HostTeam team{plan.threads};
        kernels::quant_group_rows<kOp, T, W>(a, b, plan.blocks, team);
      }
    }
    return true;
  });
  EXPECT_TRUE(ran);
}

// Runs every block of plan_quant(p, op, sm_count) on the host, as the launcher would launch it.
QuantPlan run_quant_host(QuantProducer op, const QuantParams& p, int sm_count) {
  QuantArgs a;
  a.p = p;
  a.plan = plan_quant(p, op, sm_count);
  a.eps = static_cast<float>(p.eps);
  a.weights_aligned = kernels::aligned16(p.weight);
  EXPECT_GT(a.plan.threads, 0);
  EXPECT_EQ(a.plan.threads % 32, 0);
  EXPECT_EQ(a.plan.width, a.plan.warp_per_row ? 32 : a.plan.threads);
  switch (op) {
    case QuantProducer::kInput: run_quant_typed<QuantProducer::kInput>(a); break;
    case QuantProducer::kRmsNorm: run_quant_typed<QuantProducer::kRmsNorm>(a); break;
    case QuantProducer::kFusedAddRmsNorm: run_quant_typed<QuantProducer::kFusedAddRmsNorm>(a); break;
    case QuantProducer::kSiluAndMul: run_quant_typed<QuantProducer::kSiluAndMul>(a); break;
  }
  return a.plan;
}

// The CUDA rms_norm / fused_add_rms_norm kernels on the host, with the group width their
// launcher's plan_launch gives.
template <kernels::Op kOp, class T, class W>
void run_norm_rows(const kernels::KernelArgs& a, int width) {
  using P = kernels::Program<kOp>;
  HostTeam team{width};
  for (int64_t row = 0; row < a.p.rows; ++row) {
    const kernels::Row<T, W> r = kernels::make_row<kOp, T, W>(a, row);
    float totals[1] = {0.0f};
    totals[0] = team.sum([&](int lane) { return P::partial(0, r, lane, width, totals); });
    for (int lane = 0; lane < width; ++lane) P::finish(r, lane, width, totals, a.eps);
  }
}

void run_norm_host(kernels::Op op, const NormParams& p, int sm_count) {
  kernels::KernelArgs a;
  a.p = p;
  a.eps = static_cast<float>(p.eps);
  a.weights_aligned = kernels::aligned16(p.weight) && kernels::aligned16(p.bias);
  const LaunchPlan lp = plan_launch(p.rows, p.hidden, hk::element_size(p.dtype), sm_count);
  const int width = lp.warp_per_row ? 32 : lp.threads;
  const bool f32w = p.weight_dtype == DType::kFloat32;
  auto run = [&](auto element) {
    using T = typename decltype(element)::type;
    if (op == kernels::Op::kRmsNorm) {
      if (f32w) {
        run_norm_rows<kernels::Op::kRmsNorm, T, float>(a, width);
      } else {
        run_norm_rows<kernels::Op::kRmsNorm, T, T>(a, width);
      }
    } else {
      if (f32w) {
        run_norm_rows<kernels::Op::kFusedAddRmsNorm, T, float>(a, width);
      } else {
        run_norm_rows<kernels::Op::kFusedAddRmsNorm, T, T>(a, width);
      }
    }
    return true;
  };
  kernels::dispatch_dtype(p.dtype, false, run);
}

// The CUDA silu_and_mul kernel on the host: every block and thread of its plan.
void run_silu_host(const ActivationParams& p, int sm_count) {
  kernels::ActivationArgs a;
  a.p = p;
  a.plan = plan_activation(p, sm_count);
  const bool ran = kernels::dispatch_variant<kernels::Act::kSilu>(a, false, [&](auto variant) {
    using V = decltype(variant);
    for (int64_t b = 0; b < a.plan.blocks; ++b) {
      for (int t = 0; t < a.plan.threads; ++t) {
        kernels::run_block<V::act, typename V::type, V::piece, V::per_thread>(a, b, a.plan.blocks, t);
      }
    }
    return true;
  });
  EXPECT_TRUE(ran);
}

// ---- the reference (csrc/common/quantization.h's element functions, in order) -------------------

// What a test asks for: the scheme, the quantized type and the static or bound parameters.
struct Method {
  const char* name;
  QuantScheme scheme;
  QuantDType qdtype;
  bool has_ub = false;
  float ub = 0.0f;
  float static_scale = 0.0f;
  bool has_azp = false;
  int32_t azp = 0;
};

const std::vector<Method>& methods() {
  static const std::vector<Method> m = {
      {"fp8 per-token", QuantScheme::kPerToken, QuantDType::kFloat8E4M3},
      {"fp8 per-token scale_ub 0.75", QuantScheme::kPerToken, QuantDType::kFloat8E4M3, true, 0.75f},
      {"fp8 per-token scale_ub NaN", QuantScheme::kPerToken, QuantDType::kFloat8E4M3, true, kNaN},
      {"int8 per-token", QuantScheme::kPerToken, QuantDType::kInt8},
      {"int8 per-token azp", QuantScheme::kPerTokenAzp, QuantDType::kInt8},
      {"fp8 static 0.0371", QuantScheme::kStatic, QuantDType::kFloat8E4M3, false, 0, 0.0371f},
      {"fp8 static 1 (ties)", QuantScheme::kStatic, QuantDType::kFloat8E4M3, false, 0, 1.0f},
      {"int8 static 0.0371", QuantScheme::kStatic, QuantDType::kInt8, false, 0, 0.0371f},
      {"int8 static 0.5 (ties)", QuantScheme::kStatic, QuantDType::kInt8, false, 0, 0.5f},
      {"int8 static 0", QuantScheme::kStatic, QuantDType::kInt8, false, 0, 0.0f},
      {"int8 static azp -7", QuantScheme::kStatic, QuantDType::kInt8, false, 0, 0.0371f, true, -7},
      {"int8 static azp 2^31-1", QuantScheme::kStatic, QuantDType::kInt8, false, 0, 0.25f, true, 2147483647},
  };
  return m;
}

struct RefRow {
  std::vector<uint8_t> codes;
  float scale = 0.0f;
  int32_t azp = 0;
};

RefRow reference_row(const std::vector<float>& x, const Method& m) {
  RefRow r;
  r.codes.resize(x.size());
  if (m.scheme == QuantScheme::kStatic) {
    const float s = m.static_scale;
    for (size_t i = 0; i < x.size(); ++i) {
      if (m.qdtype == QuantDType::kFloat8E4M3) {
        r.codes[i] = hk::quantize_fp8_static(x[i], 1.0f / s);
      } else if (m.has_azp) {
        r.codes[i] = static_cast<uint8_t>(hk::quantize_int8_azp(x[i], 1.0f / s, m.azp));
      } else {
        r.codes[i] = static_cast<uint8_t>(hk::quantize_int8_static(x[i], s));
      }
    }
    return r;
  }
  if (m.scheme == QuantScheme::kPerTokenAzp) {
    float mn = kInf, mx = -kInf;
    for (float v : x) {
      if (std::isnan(v) || std::isnan(mn)) {
        mn = mx = hk::quant_nan();
        continue;
      }
      if (v < mn || (v == mn && std::signbit(v))) mn = v;
      if (v > mx || (v == mx && !std::signbit(v))) mx = v;
    }
    const hk::Int8AzpParams ap = hk::int8_azp_params(mn, mx);
    r.scale = ap.scale;
    r.azp = ap.azp;
    for (size_t i = 0; i < x.size(); ++i) r.codes[i] = static_cast<uint8_t>(hk::quantize_int8_azp(x[i], ap.multiplier, ap.azp));
    return r;
  }
  float amax = 0.0f;
  for (float v : x) amax = hk::quant_max(amax, std::fabs(v));
  if (m.qdtype == QuantDType::kFloat8E4M3) {
    r.scale = hk::fp8_per_token_scale(amax, m.has_ub ? &m.ub : nullptr);
    for (size_t i = 0; i < x.size(); ++i) r.codes[i] = hk::quantize_fp8_per_token(x[i], r.scale);
  } else {
    r.scale = hk::int8_per_token_scale(amax);
    const float mult = hk::int8_per_token_multiplier(amax);
    for (size_t i = 0; i < x.size(); ++i) r.codes[i] = static_cast<uint8_t>(hk::quantize_int8_per_token(x[i], mult));
  }
  return r;
}

// ---- tensors ------------------------------------------------------------------------------------

enum class Layout { kContiguous, kAlignedPadding, kOddPadding, kMisaligned, kUnmergeable3d };
const char* name_of(Layout l) {
  switch (l) {
    case Layout::kContiguous: return "contiguous";
    case Layout::kAlignedPadding: return "aligned row padding";
    case Layout::kOddPadding: return "row stride +5";
    case Layout::kMisaligned: return "input starts at element 1";
    case Layout::kUnmergeable3d: return "3-D unmergeable";
  }
  return "?";
}
const char* name_of(QuantProducer op) {
  switch (op) {
    case QuantProducer::kInput: return "quant";
    case QuantProducer::kRmsNorm: return "rms_norm_quant";
    case QuantProducer::kFusedAddRmsNorm: return "fused_add_rms_norm_quant";
    case QuantProducer::kSiluAndMul: return "silu_and_mul_quant";
  }
  return "?";
}

int64_t round_up16(int64_t n) { return (n + 15) / 16 * 16; }

// One tensor of the rows: its first element, strides over the row dimensions, elements in all.
struct Tensor {
  DType dtype = DType::kFloat32;
  int64_t esize = 4;
  int64_t offset = 0;
  RowStrides strides;
  AlignedBytes bytes;
  unsigned char* base() const { return bytes.get() + offset * esize; }
};

struct Shape {
  RowShape shape;
  int64_t row_offset(const RowStrides& s, int64_t row) const {
    int64_t off = 0;
    for (int d = shape.ndim - 1; d >= 0; --d) {
      off += row % shape.sizes[d] * s.s[d];
      row /= shape.sizes[d];
    }
    return off;
  }
};

// A tensor of [rows..., width] elements of `esize` bytes in `layout`; `fill` for every byte.
Tensor make_tensor(const Shape& s, Layout l, DType dtype, int64_t esize, int64_t width, bool lead, unsigned char fill) {
  Tensor t;
  t.dtype = dtype;
  t.esize = esize;
  int64_t row_stride = width;
  switch (l) {
    case Layout::kContiguous: break;
    case Layout::kAlignedPadding: row_stride = round_up16(width) + 16; break;
    case Layout::kOddPadding: row_stride = width + 5; break;
    case Layout::kMisaligned: t.offset = lead ? 1 : 0; break;
    case Layout::kUnmergeable3d: row_stride = width + 3; break;
  }
  if (l == Layout::kUnmergeable3d) {
    t.strides.s[0] = 3 * row_stride;
    t.strides.s[1] = row_stride;
  } else {
    t.strides.s[0] = row_stride;
  }
  int64_t last = t.offset;
  for (int d = 0; d < s.shape.ndim; ++d) last += (s.shape.sizes[d] - 1) * t.strides.s[d];
  t.bytes = AlignedBytes(static_cast<size_t>((last + width + 16) * esize), fill);
  return t;
}

Shape make_shape(Layout l, int64_t tokens) {
  Shape s;
  if (l == Layout::kUnmergeable3d) {
    s.shape.ndim = 2;
    s.shape.sizes[0] = tokens;
    s.shape.sizes[1] = 2;
    s.shape.rows = tokens * 2;
  } else {
    s.shape.ndim = 1;
    s.shape.sizes[0] = tokens;
    s.shape.rows = tokens;
  }
  return s;
}

void set_elem(const Tensor& t, int64_t i, float v) { from_double(t.base() + i * t.esize, t.dtype, v); }
float get_elem(const Tensor& t, int64_t i) { return static_cast<float>(to_double(t.base() + i * t.esize, t.dtype)); }

// Row `row` of a tensor with `n` elements: its kind by row number (random of several magnitudes,
// NaN, +-inf, zeros with -0, a constant, ties), `salt` varying the values.
void fill_row(const Tensor& t, int64_t start, int64_t n, int64_t row, std::mt19937& rng, int salt) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int kind = static_cast<int>((row + salt) % 11);  // 1..6 special, the others random
  const float magnitude = std::ldexp(1.0f, static_cast<int>(row % 5) * 3 - 6);
  for (int64_t i = 0; i < n; ++i) {
    float v = normal(rng) * magnitude;
    switch (kind) {
      case 1: if (i == n / 2) v = kNaN; break;
      case 2: if (i == n / 3) v = kInf; if (i == n - 1 && n > 1) v = -kInf; break;
      case 3: v = (i % 2) ? -0.0f : 0.0f; break;
      case 4: v = (row % 2) ? 1.5f : -0.25f; break;
      case 5: v = static_cast<float>(static_cast<int>(i % 13) - 6) * 0.25f + ((i % 3) ? 0.0f : 0.03125f); break;
      case 6: v = std::ldexp(static_cast<float>(i % 9) - 4.0f, -9); break;  // fp8 subnormal range
      default: break;
    }
    set_elem(t, start + i, v);
  }
}

// ---- the cases ----------------------------------------------------------------------------------

struct Case {
  QuantProducer op;
  DType dtype;
  DType weight_dtype;
  int64_t tokens, hidden;
  Layout layout;
  int sm_count;
  std::string describe(const Method& m) const {
    return std::string(name_of(op)) + " " + m.name + " " + name_of(dtype) + " w=" + name_of(weight_dtype) +
           " tokens=" + std::to_string(tokens) + " hidden=" + std::to_string(hidden) + " " + name_of(layout) +
           " sms=" + std::to_string(sm_count);
  }
};

// Everything one run needs; the kernel's tensors and the side tensors.
struct Problem {
  Shape s;
  Tensor input, residual, out, scale, azp;
  AlignedBytes weight;
  float static_scale = 0.0f, ub = 0.0f;
  int32_t static_azp = 0;
  QuantParams p;
};

constexpr unsigned char kSentinel = 0xA5;

std::unique_ptr<Problem> make_problem(const Case& c, const Method& m, uint32_t seed) {
  auto pr = std::make_unique<Problem>();
  Problem& P = *pr;
  std::mt19937 rng(seed);
  P.s = make_shape(c.layout, c.tokens);
  const int64_t esize = hk::element_size(c.dtype);
  const int64_t in_width = c.op == QuantProducer::kSiluAndMul ? 2 * c.hidden : c.hidden;
  P.input = make_tensor(P.s, c.layout, c.dtype, esize, in_width, true, 0);
  P.out = make_tensor(P.s, c.layout == Layout::kMisaligned ? Layout::kContiguous : c.layout, c.dtype, 1, c.hidden, false,
                      kSentinel);
  P.residual = make_tensor(P.s, c.layout, c.dtype, esize, c.hidden, false, 0);
  // scale and azp: [rows..., 1] with their own strides.
  P.scale.esize = 4;
  P.azp.esize = 4;
  P.scale.strides.s[0] = c.layout == Layout::kUnmergeable3d ? 5 : 2;
  P.scale.strides.s[1] = 2;
  P.azp.strides.s[0] = c.layout == Layout::kUnmergeable3d ? 3 : 1;
  P.azp.strides.s[1] = 1;
  P.scale.bytes = AlignedBytes(static_cast<size_t>(4 * (P.s.shape.rows * 5 + 8)), kSentinel);
  P.azp.bytes = AlignedBytes(static_cast<size_t>(4 * (P.s.shape.rows * 3 + 8)), kSentinel);
  for (int64_t row = 0; row < P.s.shape.rows; ++row) {
    fill_row(P.input, P.s.row_offset(P.input.strides, row), in_width, row, rng, 0);
    fill_row(P.residual, P.s.row_offset(P.residual.strides, row), c.hidden, row, rng, 3);
  }
  const int64_t wsize = hk::element_size(c.weight_dtype);
  P.weight = AlignedBytes(static_cast<size_t>(c.hidden * wsize));
  std::uniform_real_distribution<float> wdist(0.5f, 1.5f);
  for (int64_t i = 0; i < c.hidden; ++i) from_double(P.weight.get() + i * wsize, c.weight_dtype, wdist(rng));

  QuantParams& p = P.p;
  p.dtype = c.dtype;
  p.qdtype = m.qdtype;
  p.scheme = m.scheme;
  p.hidden = c.hidden;
  p.shape = P.s.shape;
  p.input = P.input.base();
  p.input_strides = P.input.strides;
  p.out = P.out.base();
  p.out_strides = P.out.strides;
  if (m.scheme != QuantScheme::kStatic) {
    p.scale_out = reinterpret_cast<float*>(P.scale.bytes.get());
    p.scale_strides = P.scale.strides;
  }
  if (m.scheme == QuantScheme::kPerTokenAzp) {
    p.azp_out = reinterpret_cast<int32_t*>(P.azp.bytes.get());
    p.azp_strides = P.azp.strides;
  }
  P.ub = m.ub;
  if (m.has_ub) p.scale_ub = &P.ub;
  P.static_scale = m.static_scale;
  P.static_azp = m.azp;
  if (m.scheme == QuantScheme::kStatic) p.static_scale = &P.static_scale;
  if (m.has_azp) p.static_azp = &P.static_azp;
  if (c.op == QuantProducer::kRmsNorm || c.op == QuantProducer::kFusedAddRmsNorm) {
    p.weight = P.weight.get();
    p.weight_dtype = c.weight_dtype;
    p.eps = 1e-5;
  }
  if (c.op == QuantProducer::kFusedAddRmsNorm) {
    p.residual = P.residual.base();
    p.residual_strides = P.residual.strides;
  }
  return pr;
}

// The produced rows (float32 of the dtype's values) of the composition: the CUDA producer kernel
// run on the host into an intermediate tensor (or in place), which `q` then quantizes. `q` is p
// with input pointing at the intermediate; residual (fused_add) is updated in `P`.
struct Composition {
  AlignedBytes intermediate;
  QuantParams q;
};

Composition compose(const Case& c, Problem& P) {
  Composition comp;
  comp.q = P.p;
  const int64_t esize = hk::element_size(c.dtype);
  const RowShape& sh = P.s.shape;
  // A contiguous [rows..., hidden] tensor (16-byte aligned start).
  RowStrides contiguous;
  {
    int64_t stride = c.hidden;
    for (int d = sh.ndim - 1; d >= 0; --d) {
      contiguous.s[d] = stride;
      stride *= sh.sizes[d];
    }
  }
  if (c.op == QuantProducer::kInput) return comp;
  if (c.op == QuantProducer::kSiluAndMul) {
    comp.intermediate = AlignedBytes(static_cast<size_t>(sh.rows * c.hidden * esize));
    ActivationParams a;
    a.dtype = c.dtype;
    a.d = c.hidden;
    a.shape = sh;
    a.input = P.p.input;
    a.input_strides = P.p.input_strides;
    a.out = comp.intermediate.get();
    a.out_strides = contiguous;
    run_silu_host(a, c.sm_count);
    comp.q.input = comp.intermediate.get();
    comp.q.input_strides = contiguous;
    return comp;
  }
  NormParams n;
  n.dtype = c.dtype;
  n.weight_dtype = c.weight_dtype;
  n.rows = sh.rows;
  n.hidden = c.hidden;
  n.row_ndim = sh.ndim;
  for (int d = 0; d < sh.ndim; ++d) {
    n.row_sizes[d] = sh.sizes[d];
    n.input_strides[d] = P.p.input_strides.s[d];
    n.residual_strides[d] = P.p.residual_strides.s[d];
    n.out_strides[d] = contiguous.s[d];
  }
  n.weight = P.p.weight;
  n.eps = P.p.eps;
  if (c.op == QuantProducer::kRmsNorm) {
    comp.intermediate = AlignedBytes(static_cast<size_t>(sh.rows * c.hidden * esize));
    n.input = P.p.input;
    n.out = comp.intermediate.get();
    run_norm_host(kernels::Op::kRmsNorm, n, c.sm_count);
    comp.q.input = comp.intermediate.get();
    comp.q.input_strides = contiguous;
  } else {
    n.input = P.p.input;  // written: the normalized row
    n.residual = P.p.residual;
    run_norm_host(kernels::Op::kFusedAddRmsNorm, n, c.sm_count);
  }
  comp.q.weight = nullptr;
  comp.q.residual = nullptr;
  return comp;
}

// Checks the kernel's outputs in `P` against the reference of the rows `values` (from `q`'s input).
void expect_outputs(const Case& c, const Method& m, const Problem& P, const QuantParams& q, const Tensor& in_layout) {
  const int64_t esize = hk::element_size(c.dtype);
  // Every byte of out: the reference inside the rows, the sentinel elsewhere.
  std::vector<unsigned char> expected_out(P.out.bytes.size(), kSentinel);
  int errors = 0;
  for (int64_t row = 0; row < P.s.shape.rows && errors < 5; ++row) {
    std::vector<float> x(c.hidden);
    const int64_t in_off = P.s.row_offset(q.input_strides, row);
    for (int64_t i = 0; i < c.hidden; ++i) {
      x[i] = static_cast<float>(to_double(static_cast<const unsigned char*>(q.input) + (in_off + i) * esize, c.dtype));
    }
    const RefRow ref = reference_row(x, m);
    const int64_t out_off = P.s.row_offset(P.out.strides, row);
    for (int64_t i = 0; i < c.hidden; ++i) expected_out[out_off + i] = ref.codes[i];
    if (m.scheme != QuantScheme::kStatic) {
      float got;
      std::memcpy(&got, P.scale.bytes.get() + 4 * P.s.row_offset(P.scale.strides, row), 4);
      if (bits_of(got) != bits_of(ref.scale)) {
        ADD_FAILURE() << "row " << row << ": scale " << got << " (0x" << std::hex << bits_of(got) << "), expected "
                      << ref.scale << " (0x" << bits_of(ref.scale) << std::dec << ")";
        ++errors;
      }
    }
    if (m.scheme == QuantScheme::kPerTokenAzp) {
      int32_t got;
      std::memcpy(&got, P.azp.bytes.get() + 4 * P.s.row_offset(P.azp.strides, row), 4);
      if (got != ref.azp) {
        ADD_FAILURE() << "row " << row << ": azp " << got << ", expected " << ref.azp;
        ++errors;
      }
    }
  }
  (void)in_layout;
  for (size_t i = 0; i < P.out.bytes.size() && errors < 5; ++i) {
    const unsigned char got = P.out.bytes.get()[i];
    if (got != expected_out[i]) {
      ADD_FAILURE() << "out byte " << i << ": 0x" << std::hex << int{got} << ", expected 0x" << int{expected_out[i]}
                    << std::dec;
      ++errors;
    }
  }
}

bool same_bytes(const AlignedBytes& a, const AlignedBytes& b) {
  return a.size() == b.size() && (a.size() == 0 || std::memcmp(a.get(), b.get(), a.size()) == 0);
}

// Runs `c` with method `m`: the fused kernel against the composition and the reference.
void run_case(const Case& c, const Method& m, uint32_t seed) {
  SCOPED_TRACE(c.describe(m));
  // The fused kernel.
  std::unique_ptr<Problem> fused = make_problem(c, m, seed);
  const QuantPlan plan = run_quant_host(c.op, fused->p, c.sm_count);
  if (c.op != QuantProducer::kInput) {
    // The composition, from the same inputs: producer kernel, then quant on its tensor.
    std::unique_ptr<Problem> comp_problem = make_problem(c, m, seed);
    Composition comp = compose(c, *comp_problem);
    run_quant_host(QuantProducer::kInput, comp.q, c.sm_count);
    EXPECT_TRUE(same_bytes(fused->out.bytes, comp_problem->out.bytes)) << "out differs from the composition";
    if (m.scheme != QuantScheme::kStatic) {
      EXPECT_TRUE(same_bytes(fused->scale.bytes, comp_problem->scale.bytes)) << "scale differs from the composition";
    }
    if (m.scheme == QuantScheme::kPerTokenAzp) {
      EXPECT_TRUE(same_bytes(fused->azp.bytes, comp_problem->azp.bytes)) << "azp differs from the composition";
    }
    if (c.op == QuantProducer::kFusedAddRmsNorm) {
      EXPECT_TRUE(same_bytes(fused->residual.bytes, comp_problem->residual.bytes))
          << "residual differs from fused_add_rms_norm's";
    }
    // The reference quantizes the composition's produced rows.
    expect_outputs(c, m, *fused, comp.q, comp_problem->input);
  } else {
    expect_outputs(c, m, *fused, fused->p, fused->input);
  }
  // The input is read only (fused_add: only the residual is written).
  std::unique_ptr<Problem> fresh = make_problem(c, m, seed);
  EXPECT_TRUE(same_bytes(fused->input.bytes, fresh->input.bytes)) << "input was written";
  (void)plan;
}

std::vector<DType> dtypes() { return {DType::kFloat32, DType::kBFloat16, DType::kFloat16}; }

// Every method, dtype and layout for one operation over shapes: tails (hidden not a multiple of
// 16), a single element, rows beyond one group, and SM counts giving warp-per-row and block plans.
void run_operation(QuantProducer op) {
  const bool norm = op == QuantProducer::kRmsNorm || op == QuantProducer::kFusedAddRmsNorm;
  struct Size {
    int64_t tokens, hidden;
    int sm_count;
  };
  const std::vector<Size> sizes = {{3, 1, 4}, {5, 40, 132}, {9, 64, 1}, {11, 333, 132}, {10, 1029, 2}, {3, 4096 + 24, 132}};
  const std::vector<Layout> layouts = {Layout::kContiguous, Layout::kAlignedPadding, Layout::kOddPadding,
                                       Layout::kMisaligned, Layout::kUnmergeable3d};
  uint32_t seed = 1;
  for (const Method& m : methods()) {
    for (DType dtype : dtypes()) {
      std::vector<DType> weights = {DType::kFloat32};
      if (norm && dtype != DType::kFloat32) weights.push_back(dtype);
      for (DType w : weights) {
        for (Layout l : layouts) {
          for (const Size& s : sizes) {
            // Keep the run short: the largest rows with two layouts only.
            if (s.hidden > 2000 && l != Layout::kContiguous && l != Layout::kOddPadding) continue;
            const Case c{op, dtype, w, s.tokens, s.hidden, l, s.sm_count};
            run_case(c, m, seed++);
            if (testing::Test::HasFailure()) return;
          }
        }
      }
    }
  }
}

TEST(CudaQuantizationHost, QuantEqualsReference) { run_operation(QuantProducer::kInput); }
TEST(CudaQuantizationHost, RmsNormQuantEqualsCompositionAndReference) { run_operation(QuantProducer::kRmsNorm); }
TEST(CudaQuantizationHost, FusedAddRmsNormQuantEqualsCompositionAndReference) {
  run_operation(QuantProducer::kFusedAddRmsNorm);
}
TEST(CudaQuantizationHost, SiluAndMulQuantEqualsCompositionAndReference) { run_operation(QuantProducer::kSiluAndMul); }

// The bits do not depend on the layout: the same values in every 2-D layout give the same codes,
// scales and zero points (the sums of squares take the same elements in the same order whether or
// not a row allows 16-byte access).
TEST(CudaQuantizationHost, ResultsDoNotDependOnTheLayout) {
  for (QuantProducer op : {QuantProducer::kInput, QuantProducer::kRmsNorm, QuantProducer::kFusedAddRmsNorm, QuantProducer::kSiluAndMul}) {
    for (DType dtype : dtypes()) {
      for (int64_t hidden : {int64_t{133}, int64_t{1029}, int64_t{256}}) {
        for (int mi : {0, 4}) {
          const Method& m = methods()[mi];
          std::vector<std::vector<uint8_t>> first_codes;
          std::vector<uint32_t> first_scales;
          for (Layout l : {Layout::kContiguous, Layout::kAlignedPadding, Layout::kOddPadding, Layout::kMisaligned}) {
            const Case c{op, dtype, DType::kFloat32, 9, hidden, l, 132};
            SCOPED_TRACE(c.describe(m));
            std::unique_ptr<Problem> P = make_problem(c, m, 42);
            run_quant_host(op, P->p, c.sm_count);
            for (int64_t row = 0; row < P->s.shape.rows; ++row) {
              const unsigned char* o = P->out.bytes.get() + P->s.row_offset(P->out.strides, row);
              std::vector<uint8_t> codes(o, o + hidden);
              uint32_t scale;
              std::memcpy(&scale, P->scale.bytes.get() + 4 * P->s.row_offset(P->scale.strides, row), 4);
              if (l == Layout::kContiguous) {
                first_codes.push_back(codes);
                first_scales.push_back(scale);
              } else {
                EXPECT_EQ(codes, first_codes[row]) << "row " << row;
                EXPECT_EQ(scale, first_scales[row]) << "row " << row;
              }
            }
          }
        }
      }
    }
  }
}

// Many rows over a small grid (blocks loop over rows; warps of a block take distinct rows).
TEST(CudaQuantizationHost, GridLoopsOverRows) {
  for (QuantProducer op : {QuantProducer::kInput, QuantProducer::kRmsNorm, QuantProducer::kFusedAddRmsNorm, QuantProducer::kSiluAndMul}) {
    for (const Case& c : {Case{op, DType::kBFloat16, DType::kFloat32, 1500, 24, Layout::kContiguous, 1},
                          Case{op, DType::kFloat16, DType::kFloat16, 400, 3000, Layout::kAlignedPadding, 1}}) {
      const QuantPlan plan = plan_quant(make_problem(c, methods()[0], 1)->p, op, c.sm_count);
      EXPECT_LT(plan.blocks * (plan.warp_per_row ? plan.threads / 32 : 1), c.tokens) << name_of(op);
      run_case(c, methods()[0], 7);
      run_case(c, methods()[4], 8);
    }
  }
}

// The device-side parameter functions (float_div etc. are __fdiv_rn, __fmul_rn, __fsub_rn there) equal
// the header's on values that exercise every branch.
TEST(CudaQuantizationHost, RowParametersEqualTheHeader) {
  const std::vector<float> values = {0.0f, -0.0f, 1.0f, 448.0f, 1e-30f, 1e30f, 3.4e38f, kInf, kNaN, 0.0371f, 127.0f, 1e-45f};
  for (float a : values) {
    for (const float* ub : {static_cast<const float*>(nullptr), &values[2], &values[8], &values[1]}) {
      EXPECT_EQ(bits_of(kernels::fp8_scale(a, ub)), bits_of(hk::fp8_per_token_scale(a, ub))) << a;
    }
    EXPECT_EQ(bits_of(kernels::int8_scale(a)), bits_of(hk::int8_per_token_scale(a))) << a;
    EXPECT_EQ(bits_of(kernels::int8_multiplier(a)), bits_of(hk::int8_per_token_multiplier(a))) << a;
    for (float b : values) {
      for (float mn : {a, -a}) {
        const hk::Int8AzpParams want = hk::int8_azp_params(mn, b);
        const hk::Int8AzpParams got = kernels::azp_params(mn, b);
        EXPECT_EQ(bits_of(got.scale), bits_of(want.scale)) << mn << " " << b;
        EXPECT_EQ(bits_of(got.multiplier), bits_of(want.multiplier)) << mn << " " << b;
        EXPECT_EQ(got.azp, want.azp) << mn << " " << b;
      }
      // min and max: commutative, -0 below +0, NaN propagates.
      EXPECT_EQ(bits_of(kernels::ordered_min(a, b)), bits_of(kernels::ordered_min(b, a)));
      EXPECT_EQ(bits_of(kernels::ordered_max(a, b)), bits_of(kernels::ordered_max(b, a)));
    }
  }
  EXPECT_EQ(bits_of(kernels::ordered_min(0.0f, -0.0f)), bits_of(-0.0f));
  EXPECT_EQ(bits_of(kernels::ordered_max(-0.0f, 0.0f)), bits_of(0.0f));
  EXPECT_EQ(bits_of(kernels::ordered_max(kNaN, 1.0f)), 0x7FC00000u);
  // Codes of every method on every float32 exponent and sign, against the header's functions.
  for (uint32_t e = 0; e < 256; ++e) {
    for (uint32_t mant : {0u, 1u, 0x80000u, 0x7FFFFFu, 0x100000u, 0x180000u}) {
      for (uint32_t sign : {0u, 0x80000000u}) {
        float x;
        const uint32_t u = sign | (e << 23) | mant;
        std::memcpy(&x, &u, 4);
        for (float s : {0.0371f, 1.0f, 0.0f, kInf}) {
          EXPECT_EQ(kernels::quantize_value({kernels::QuantMethod::kFp8Div, s, 0}, x), hk::quantize_fp8_per_token(x, s));
          EXPECT_EQ(kernels::quantize_value({kernels::QuantMethod::kFp8Mul, 1.0f / s, 0}, x),
                    hk::quantize_fp8_static(x, 1.0f / s));
          EXPECT_EQ(kernels::quantize_value({kernels::QuantMethod::kInt8Mul, s, 0}, x),
                    static_cast<uint8_t>(hk::quantize_int8_per_token(x, s)));
          EXPECT_EQ(kernels::quantize_value({kernels::QuantMethod::kInt8Div, s, 0}, x),
                    static_cast<uint8_t>(hk::quantize_int8_static(x, s)));
          EXPECT_EQ(kernels::quantize_value({kernels::QuantMethod::kInt8MulAzp, s, -100}, x),
                    static_cast<uint8_t>(hk::quantize_int8_azp(x, s, -100)));
        }
      }
    }
  }
}

// Offsets are int64 throughout: strides beyond 2^31 elements over eight leading dimensions, for
// every tensor a row addresses.
TEST(CudaQuantizationHost, RowOffsetsBeyond2To31AndEightDimensions) {
  QuantArgs a;
  QuantParams& p = a.p;
  p.hidden = 16;
  p.shape.ndim = 8;
  int64_t rows = 1;
  for (int d = 0; d < 8; ++d) {
    p.shape.sizes[d] = 2;
    rows *= 2;
    p.input_strides.s[d] = (int64_t{1} << 31) + (int64_t{1} << d);
    p.out_strides.s[d] = (int64_t{3} << 31) + d;
    p.scale_strides.s[d] = (int64_t{1} << 32) + 3 * d;
    p.azp_strides.s[d] = (int64_t{5} << 31) + 7 * d;
    p.residual_strides.s[d] = (int64_t{1} << 33) + 11 * d;
  }
  p.shape.rows = rows;
  // Pointer values only: nothing is dereferenced.
  const auto base = uintptr_t{1} << 44;
  p.input = reinterpret_cast<const void*>(base);
  p.out = reinterpret_cast<void*>(base);
  p.scale_out = reinterpret_cast<float*>(base);
  p.azp_out = reinterpret_cast<int32_t*>(base);
  p.residual = reinterpret_cast<void*>(base);
  for (int64_t row : {int64_t{0}, int64_t{1}, int64_t{37}, rows - 1}) {
    auto want = [&](const RowStrides& s) {
      int64_t off = 0;
      for (int d = 0; d < 8; ++d) off += (row >> (7 - d) & 1) * s.s[d];
      return off;
    };
    const auto r = kernels::make_quant_row<QuantProducer::kFusedAddRmsNorm, __half, float>(a, row);
    const auto* in = reinterpret_cast<const __half*>(base);
    EXPECT_EQ(r.input - in, want(p.input_strides)) << "row " << row;
    EXPECT_EQ(r.residual - in, want(p.residual_strides)) << "row " << row;
    EXPECT_EQ(r.out - reinterpret_cast<uint8_t*>(base), want(p.out_strides)) << "row " << row;
    EXPECT_EQ(r.scale - p.scale_out, want(p.scale_strides)) << "row " << row;
    EXPECT_EQ(r.azp - p.azp_out, want(p.azp_strides)) << "row " << row;
    const auto s = kernels::make_quant_row<QuantProducer::kSiluAndMul, float, float>(a, row);
    EXPECT_EQ(s.up - s.input, 16);
  }
}

// ---- plans --------------------------------------------------------------------------------------

TEST(CudaQuantizationHost, PlanVectorOrElementPath) {
  const Method& m = methods()[0];
  for (QuantProducer op : {QuantProducer::kInput, QuantProducer::kRmsNorm, QuantProducer::kFusedAddRmsNorm, QuantProducer::kSiluAndMul}) {
    for (DType dtype : dtypes()) {
      SCOPED_TRACE(std::string(name_of(op)) + " " + name_of(dtype));
      auto plan_of = [&](Layout l, int64_t hidden) {
        const Case c{op, dtype, DType::kFloat32, 4, hidden, l, 132};
        return plan_quant(make_problem(c, m, 1)->p, op, 132);
      };
      EXPECT_TRUE(plan_of(Layout::kContiguous, 64).vector);
      EXPECT_TRUE(plan_of(Layout::kAlignedPadding, 64).vector);
      EXPECT_TRUE(plan_of(Layout::kAlignedPadding, 100).vector == (op != QuantProducer::kSiluAndMul || (100 * hk::element_size(dtype)) % 16 == 0));
      EXPECT_FALSE(plan_of(Layout::kOddPadding, 64).vector);
      EXPECT_FALSE(plan_of(Layout::kMisaligned, 64).vector);
      EXPECT_FALSE(plan_of(Layout::kContiguous, 40).vector);  // out rows of 40 bytes
      EXPECT_FALSE(plan_of(Layout::kUnmergeable3d, 64).vector);
    }
  }
  // A misaligned weight (norms) or residual (fused_add) forbids it too.
  const Case c{QuantProducer::kFusedAddRmsNorm, DType::kBFloat16, DType::kBFloat16, 4, 64, Layout::kContiguous, 132};
  std::unique_ptr<Problem> P = make_problem(c, m, 1);
  QuantParams p = P->p;
  EXPECT_TRUE(quant_vector_access(p, QuantProducer::kFusedAddRmsNorm));
  p.weight = static_cast<const unsigned char*>(p.weight) + 2;
  EXPECT_FALSE(quant_vector_access(p, QuantProducer::kFusedAddRmsNorm));
  EXPECT_TRUE(quant_vector_access(p, QuantProducer::kInput));  // quant reads no weight
  p = P->p;
  p.residual = static_cast<unsigned char*>(p.residual) + 2;
  EXPECT_FALSE(quant_vector_access(p, QuantProducer::kFusedAddRmsNorm));
  EXPECT_TRUE(quant_vector_access(p, QuantProducer::kRmsNorm));
}

// The vector path stores 16 bytes at a time (and only at aligned addresses: the host store16
// throws otherwise); the element path stores single bytes.
TEST(CudaQuantizationHost, VectorPathStoresSixteenBytes) {
  static thread_local int64_t wide = 0, narrow = 0;
  kernels::host_store_observer = [](const void*, size_t bytes) { (bytes == 16 ? wide : narrow) += 1; };
  for (Layout l : {Layout::kAlignedPadding, Layout::kOddPadding}) {
    wide = narrow = 0;
    const Case c{QuantProducer::kInput, DType::kBFloat16, DType::kFloat32, 4, 64 + 3, l, 132};
    std::unique_ptr<Problem> P = make_problem(c, methods()[3], 1);
    const QuantPlan plan = run_quant_host(QuantProducer::kInput, P->p, 132);
    if (plan.vector) {
      EXPECT_EQ(wide, 4 * 4);    // 4 pieces of 16 per row
      EXPECT_EQ(narrow, 4 * 3);  // the tail
    } else {
      EXPECT_EQ(l, Layout::kOddPadding);
      EXPECT_EQ(wide, 0);
      EXPECT_EQ(narrow, 4 * 67);
    }
  }
  kernels::host_store_observer = nullptr;
}

TEST(CudaQuantizationHost, PlanIsTheNormalizationLaunchShape) {
  for (QuantProducer op : {QuantProducer::kInput, QuantProducer::kRmsNorm, QuantProducer::kFusedAddRmsNorm, QuantProducer::kSiluAndMul}) {
    for (int64_t tokens : {1, 7, 5000}) {
      for (int64_t hidden : {1, 128, 4096, 16384}) {
        for (int sms : {1, 132}) {
          const Case c{op, DType::kBFloat16, DType::kFloat32, 1, hidden, Layout::kContiguous, sms};
          std::unique_ptr<Problem> P = make_problem(c, methods()[0], 1);
          QuantParams p = P->p;
          p.shape.rows = tokens;  // the plan reads no memory
          p.shape.sizes[0] = tokens;
          const QuantPlan plan = plan_quant(p, op, sms);
          const LaunchPlan lp = plan_launch(tokens, hidden, 2, sms);
          SCOPED_TRACE(std::string(name_of(op)) + " tokens " + std::to_string(tokens) + " hidden " + std::to_string(hidden));
          EXPECT_EQ(plan.warp_per_row, lp.warp_per_row);
          EXPECT_EQ(plan.threads, lp.threads);
          EXPECT_EQ(plan.blocks, lp.blocks);
          EXPECT_EQ(plan.width, lp.warp_per_row ? 32 : lp.threads);
          EXPECT_EQ(plan.shared_bytes, lp.warp_per_row ? 0u : 6 * sizeof(float) * (lp.threads / 32));
          EXPECT_GE(plan.blocks, 1);
        }
      }
    }
  }
  // A short row over many rows: a warp per row; a long row: a block per row.
  QuantParams p;
  p.dtype = DType::kBFloat16;
  p.hidden = 128;
  p.shape.ndim = 1;
  p.shape.rows = p.shape.sizes[0] = 4096;
  unsigned char dummy[64];
  float scale[1];
  p.input = dummy;
  p.out = dummy;
  p.scale_out = scale;
  EXPECT_TRUE(plan_quant(p, QuantProducer::kInput, 132).warp_per_row);
  p.hidden = 8192;
  EXPECT_FALSE(plan_quant(p, QuantProducer::kInput, 132).warp_per_row);
  // Zero rows: no plan.
  p.shape.rows = p.shape.sizes[0] = 0;
  EXPECT_EQ(plan_quant(p, QuantProducer::kInput, 132).blocks, 0);
  EXPECT_EQ(plan_quant(p, QuantProducer::kInput, 132).threads, 0);
}

// ---- the launchers' checks ----------------------------------------------------------------------

Status launch(QuantProducer op, const QuantParams& p) {
  switch (op) {
    case QuantProducer::kInput: return quant(p, nullptr);
    case QuantProducer::kRmsNorm: return rms_norm_quant(p, nullptr);
    case QuantProducer::kFusedAddRmsNorm: return fused_add_rms_norm_quant(p, nullptr);
    case QuantProducer::kSiluAndMul: return silu_and_mul_quant(p, nullptr);
  }
  return Status::ok();
}

TEST(CudaQuantizationHost, LaunchersRejectWithReasons) {
  const Case c{QuantProducer::kFusedAddRmsNorm, DType::kBFloat16, DType::kFloat32, 4, 64, Layout::kContiguous, 132};
  std::unique_ptr<Problem> P = make_problem(c, methods()[0], 1);
  for (QuantProducer op : {QuantProducer::kInput, QuantProducer::kRmsNorm, QuantProducer::kFusedAddRmsNorm, QuantProducer::kSiluAndMul}) {
    SCOPED_TRACE(name_of(op));
    const bool norm = op == QuantProducer::kRmsNorm || op == QuantProducer::kFusedAddRmsNorm;
    auto bad = [&](auto mutate, const char* why) {
      QuantParams p = P->p;
      mutate(p);
      EXPECT_TRUE(rejected(launch(op, p), why)) << why;
      EXPECT_TRUE(rejected(check_quant(p, op), why)) << why;
      EXPECT_EQ(plan_quant(p, op, 132).blocks, 0);
    };
    bad([](QuantParams& p) { p.dtype = static_cast<DType>(7); }, "unknown dtype");
    bad([](QuantParams& p) { p.qdtype = static_cast<QuantDType>(9); }, "unknown quantized dtype");
    bad([](QuantParams& p) { p.scheme = static_cast<QuantScheme>(5); }, "unknown scheme");
    bad([](QuantParams& p) { p.scheme = QuantScheme::kPerTokenAzp; }, "kPerTokenAzp with float8_e4m3fn");
    bad([](QuantParams& p) { p.hidden = 0; }, "hidden must be in [1, 2^60)");
    bad([](QuantParams& p) { p.hidden = int64_t{1} << 61; }, "hidden must be in [1, 2^60)");
    bad([](QuantParams& p) { p.shape.ndim = 0; }, "ndim");
    bad([](QuantParams& p) { p.shape.rows = 5; }, "rows is not the product");
    bad([](QuantParams& p) { p.input = nullptr; }, "null input or out");
    bad([](QuantParams& p) { p.out = nullptr; }, "null input or out");
    bad([](QuantParams& p) { p.scale_out = nullptr; }, "null scale_out");
    bad([](QuantParams& p) {
      p.qdtype = QuantDType::kInt8;
      static const float ub = 1.0f;
      p.scale_ub = &ub;
    }, "scale_ub is for per-token float8_e4m3fn only");
    // The CPU kernels' check, now the launchers' too (csrc/common/quantization.h): the CUDA check
    // had no static_divide rule.
    bad([](QuantParams& p) { p.static_divide = true; }, "static_divide is for static float8_e4m3fn only");
    bad([](QuantParams& p) {
      p.scheme = QuantScheme::kPerTokenAzp;
      p.qdtype = QuantDType::kInt8;
      p.azp_out = nullptr;
    }, "null azp_out");
    bad([](QuantParams& p) {
      p.scheme = QuantScheme::kStatic;
      p.static_scale = nullptr;
    }, "null static_scale");
    bad([](QuantParams& p) {
      p.scheme = QuantScheme::kStatic;
      static const float s = 1.0f;
      static const int32_t z = 0;
      p.static_scale = &s;
      p.static_azp = &z;  // fp8
    }, "static_azp is for static int8 only");
    bad([](QuantParams& p) {
      p.shape.rows = p.shape.sizes[0] = int64_t{1} << 40;
      p.hidden = int64_t{1} << 30;
    }, "beyond int64");
    if (norm) {
      bad([](QuantParams& p) { p.weight = nullptr; }, "null weight");
      bad([](QuantParams& p) { p.weight_dtype = DType::kFloat16; }, "weight_dtype must be float32 or dtype");
      bad([](QuantParams& p) { p.eps = -1.0; }, "eps must be finite and >= 0");
      bad([](QuantParams& p) { p.eps = std::numeric_limits<double>::infinity(); }, "eps must be finite and >= 0");
    }
    if (op == QuantProducer::kFusedAddRmsNorm) bad([](QuantParams& p) { p.residual = nullptr; }, "null residual");
    // Zero rows: ok, nothing launched (null pointers allowed); valid parameters without a device:
    // the SM-count query fails.
    QuantParams empty = P->p;
    empty.shape.rows = empty.shape.sizes[0] = 0;
    empty.input = nullptr;
    empty.out = nullptr;
    empty.scale_out = nullptr;
    EXPECT_TRUE(accepted(launch(op, empty)));
    if (!cuda_device_present()) EXPECT_TRUE(device_failure(launch(op, P->p)));
  }
}

}  // namespace
}  // namespace xllm_kernel::cuda
