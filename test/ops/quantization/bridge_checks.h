// One body per check of the quantization bridges, for every device: the CPU tests (test/ops) call
// them with the CPU, a CUDA test can call the same functions with a GPU. `solution` names the
// implementations checked ("cpu.native", "cuda.torch": the operations are `<solution>.<op>`, and
// the fused operations' compositions use the same solution's rms_norm, fused_add_rms_norm,
// silu_and_mul, per_token_quant and static_quant). Inputs are drawn on the CPU and moved; expected
// values come from the suites' float64 reference (src/ops/quantization/suites/reference.h). The
// numerics suites cover the full grid.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "src/ops/quantization/suites/reference.h"
#include "test/ops/common/bits.h"
#include "test/ops/common/registered.h"
#include "xllm_kernel/ops/activation.h"
#include "xllm_kernel/ops/normalization.h"
#include "xllm_kernel/ops/quantization.h"

namespace xllm_kernel::testing::quantization {

namespace ref = xllm_kernel::numerics::quantization;

inline constexpr double kEps = 1e-6;
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
inline constexpr float kInf = std::numeric_limits<float>::infinity();

// The operations of the family.
inline const std::vector<std::string>& operations() {
  static const std::vector<std::string> ops{per_token_quant_contract().operation,
                                            per_token_quant_int8_azp_contract().operation,
                                            static_quant_contract().operation,
                                            rms_norm_per_token_quant_contract().operation,
                                            fused_add_rms_norm_per_token_quant_contract().operation,
                                            rms_norm_static_quant_contract().operation,
                                            fused_add_rms_norm_static_quant_contract().operation,
                                            silu_and_mul_per_token_quant_contract().operation};
  return ops;
}

template <class Sig>
KernelFunction<Sig> fn(const std::string& solution, const std::string& op) {
  return function_of<Sig>(solution + "." + op);
}

inline std::optional<at::Tensor> opt(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// A q tensor's bits on the CPU as uint8 [rows, width].
inline at::Tensor bits(const at::Tensor& q) { return q.to(at::kCPU).contiguous().view(at::kByte).reshape({-1, q.size(-1)}); }
inline at::Tensor rows32(const at::Tensor& t) { return t.to(at::kCPU).contiguous().reshape({-1}); }

// [tokens, width] of dtype in a layout: "contiguous", "strided" (rows width + 5 apart) or "3d"
// ([tokens, 2, width] views whose leading dimensions do not merge), on `device`.
inline at::Tensor laid_out(const at::Tensor& values, const std::string& layout, at::ScalarType dtype,
                           at::Device device) {
  const int64_t t = values.size(0), w = values.size(1);
  if (layout == "contiguous") return values.to(dtype).to(device);
  if (layout == "strided") {
    at::Tensor base = at::zeros({t, w + 5}, at::TensorOptions().dtype(dtype).device(device));
    return base.narrow(1, 0, w).copy_(values);
  }
  at::Tensor base = at::zeros({t, 3, w + 5}, at::TensorOptions().dtype(dtype).device(device));
  at::Tensor view = base.narrow(1, 0, 2).narrow(2, 0, w);
  view.select(1, 0).copy_(values);
  view.select(1, 1).copy_(values.mul(-0.5));
  return view;
}

// The results of one operation of `solution` on the given arguments (q first; then scale and azp
// where the scheme has them). residual is written by the fused_add operations.
struct Args {
  at::Tensor input, residual, weight, scale, azp, scale_ub;
  at::ScalarType dtype = at::kChar;
};

inline std::vector<at::Tensor> run(const std::string& solution, const std::string& op, Args& a) {
  using V = std::vector<at::Tensor>;
  auto two = [](const std::tuple<at::Tensor, at::Tensor>& r) { return V{std::get<0>(r), std::get<1>(r)}; };
  if (op == "per_token_quant") return two(fn<PerTokenQuantFn>(solution, op)(a.input, a.dtype, opt(a.scale_ub)));
  if (op == "per_token_quant_int8_azp") {
    auto [q, s, z] = fn<PerTokenQuantInt8AzpFn>(solution, op)(a.input);
    return {q, s, z};
  }
  if (op == "static_quant") return {fn<StaticQuantFn>(solution, op)(a.input, a.scale, a.dtype, opt(a.azp))};
  if (op == "rms_norm_per_token_quant") {
    return two(fn<RmsNormPerTokenQuantFn>(solution, op)(a.input, a.weight, kEps, a.dtype, opt(a.scale_ub)));
  }
  if (op == "fused_add_rms_norm_per_token_quant") {
    return two(fn<FusedAddRmsNormPerTokenQuantFn>(solution, op)(a.input, a.residual, a.weight, kEps, a.dtype,
                                                                 opt(a.scale_ub)));
  }
  if (op == "rms_norm_static_quant") {
    return {fn<RmsNormStaticQuantFn>(solution, op)(a.input, a.weight, kEps, a.scale, a.dtype, opt(a.azp))};
  }
  if (op == "fused_add_rms_norm_static_quant") {
    return {fn<FusedAddRmsNormStaticQuantFn>(solution, op)(a.input, a.residual, a.weight, kEps, a.scale, a.dtype,
                                                           opt(a.azp))};
  }
  return two(fn<SiluAndMulPerTokenQuantFn>(solution, op)(a.input, a.dtype, opt(a.scale_ub)));
}

// The composition of a fused operation from the same solution's operations (the results as run's).
inline std::vector<at::Tensor> run_composition(const std::string& solution, const std::string& op, Args& a) {
  at::Tensor produced;
  if (op.rfind("fused_add_rms_norm_", 0) == 0) {
    produced = a.input.clone();
    fn<FusedAddRmsNormFn>(solution, "fused_add_rms_norm")(produced, a.residual, a.weight, kEps);
  } else if (op.rfind("rms_norm_", 0) == 0) {
    produced = fn<RmsNormFn>(solution, "rms_norm")(a.input, a.weight, kEps);
  } else {
    produced = fn<SiluAndMulFn>(solution, "silu_and_mul")(a.input);
  }
  Args q = a;
  q.input = produced;
  return run(solution, op.find("static") != std::string::npos ? "static_quant" : "per_token_quant", q);
}

inline bool fused(const std::string& op) { return op != "per_token_quant" && op != "per_token_quant_int8_azp" && op != "static_quant"; }
inline bool is_static(const std::string& op) { return op.find("static") != std::string::npos; }
inline bool is_azp(const std::string& op) { return op == "per_token_quant_int8_azp"; }

// Valid arguments of `op` on `device`: tokens x hidden rows (silu_and_mul: 2 * hidden wide) of
// `values` (float64 [tokens, width]; drawn when undefined), in `layout`.
inline Args make_args(const std::string& op, int64_t tokens, int64_t hidden, at::ScalarType dtype, bool fp8,
                      bool bound, const std::string& layout, at::Device device, at::Tensor values = {}) {
  const int64_t width = op.rfind("silu", 0) == 0 ? 2 * hidden : hidden;
  if (!values.defined()) values = at::randn({tokens, width}, at::kDouble).mul_(2);
  Args a;
  a.dtype = is_azp(op) ? at::kChar : fp8 ? at::kFloat8_e4m3fn : at::kChar;
  a.input = laid_out(values, layout, dtype, device);
  if (op.rfind("fused_add", 0) == 0) a.residual = laid_out(at::randn({tokens, width}, at::kDouble), layout, dtype, device);
  if (op.find("rms_norm") != std::string::npos) a.weight = (at::randn({hidden}, at::kDouble) * 0.5 + 1).to(dtype).to(device);
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
  if (is_static(op)) {
    a.scale = at::full({1}, fp8 ? 0.01 : 0.03, f32);
    if (bound && !fp8) a.azp = at::full({1}, 3, at::TensorOptions().dtype(at::kInt).device(device));
  } else if (bound && fp8 && !is_azp(op)) {
    a.scale_ub = at::full({1}, fused(op) ? 1.5 : 3.0, f32);
  }
  return a;
}

// A copy whose written tensors (input, residual) are copies with their layout (padding included).
inline at::Tensor copy_with_layout(const at::Tensor& t) {
  const int64_t n = static_cast<int64_t>(t.storage().nbytes()) / t.element_size();
  at::Tensor whole = at::empty({n}, t.options());
  whole.copy_(at::empty({0}, t.options()).set_(t.storage(), 0, {n}, {1}));
  return whole.as_strided(t.sizes(), t.strides(), t.storage_offset());
}

inline Args copy_args(const Args& a) {
  Args c = a;
  if (a.input.defined()) c.input = copy_with_layout(a.input);
  if (a.residual.defined()) c.residual = copy_with_layout(a.residual);
  return c;
}

// The reference check of one call's results (a fused operation's rows as an interval, as the suite).
inline ref::RowCheck reference_check(const std::string& op, const Args& before, const std::vector<at::Tensor>& got,
                                     at::ScalarType dtype) {
  ref::SchemeArgs s;
  s.scheme = is_azp(op) ? ref::Scheme::kPerTokenAzp : is_static(op) ? ref::Scheme::kStatic : ref::Scheme::kPerToken;
  s.fp8 = before.dtype == at::kFloat8_e4m3fn;
  if (before.scale_ub.defined()) s.scale_ub = before.scale_ub.to(at::kCPU).item<float>();
  if (before.scale.defined()) s.scale = before.scale.to(at::kCPU).item<float>();
  if (before.azp.defined()) s.azp = before.azp.to(at::kCPU).item<int32_t>();
  s.zero_sign_free = op.rfind("silu", 0) == 0;
  const int64_t hidden = got[0].size(-1);
  at::Tensor rows;
  double delta = 0;
  if (op.rfind("fused_add", 0) == 0) {
    const at::Tensor sum = (before.input.to(at::kCPU).to(at::kFloat) + before.residual.to(at::kCPU).to(at::kFloat)).to(dtype);
    rows = ref::reference_rms_norm(ref::rows_f64(sum), before.weight, kEps);
  } else if (op.rfind("rms_norm", 0) == 0) {
    rows = ref::reference_rms_norm(ref::rows_f64(before.input), before.weight, kEps);
  } else if (op.rfind("silu", 0) == 0) {
    rows = ref::reference_silu_and_mul(ref::rows_f64(before.input));
  } else {
    rows = ref::rows_f64(before.input);
  }
  if (fused(op)) delta = op.rfind("silu", 0) == 0 ? ref::silu_and_mul_delta(dtype) : ref::rms_norm_delta(hidden);
  at::Tensor lo = rows, hi = rows;
  if (fused(op)) std::tie(lo, hi) = ref::rounding_interval(rows, dtype, delta);
  return ref::check_rows(s, lo.contiguous(), hi.contiguous(), bits(got[0]), got.size() > 1 ? rows32(got[1]) : at::Tensor(),
                         got.size() > 2 ? rows32(got[2]) : at::Tensor());
}

inline std::string describe(const ref::RowCheck& r) {
  std::string s = std::to_string(r.mismatches) + " mismatches, " + std::to_string(r.round_trip_failures) + " round trips failed";
  for (const auto& f : r.failures) s += "\n  " + f;
  return s;
}

// Every operation x dtype x scheme x layout against the reference; strided and 3d rows give the
// contiguous rows' bits; fused operations equal their composition bit for bit (residual too).
inline void check_against_reference(const std::string& solution, at::Device device) {
  for (const auto& op : operations()) {
    for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      for (const bool fp8 : {false, true}) {
        if (is_azp(op) && fp8) continue;
        for (const bool bound : {false, true}) {
          const int64_t tokens = 6, hidden = 133;
          const int64_t width = op.rfind("silu", 0) == 0 ? 2 * hidden : hidden;
          const at::Tensor values = at::randn({tokens, width}, at::kDouble).mul_(2);
          const at::Tensor residual = at::randn({tokens, width}, at::kDouble);
          const at::Tensor weight = (at::randn({hidden}, at::kDouble) * 0.5 + 1).to(dtype).to(device);
          std::vector<at::Tensor> contiguous_q;
          for (const std::string layout : {"contiguous", "strided", "3d"}) {
            const std::string what = solution + "." + op + " " + c10::toString(dtype) + (fp8 ? " fp8" : " int8") +
                                     (bound ? " bound" : "") + " " + layout;
            Args a = make_args(op, tokens, hidden, dtype, fp8, bound, layout, device, values);
            if (a.residual.defined()) a.residual = laid_out(residual, layout, dtype, device);
            if (a.weight.defined()) a.weight = weight;
            if (layout == "3d") {
              a.input = laid_out(values, layout, dtype, device);  // its second half differs
            }
            const Args before = copy_args(a);
            const std::vector<at::Tensor> got = run(solution, op, a);
            const ref::RowCheck r = reference_check(op, before, got, dtype);
            EXPECT_EQ(r.mismatches + r.round_trip_failures, 0) << what << ": " << describe(r);
            EXPECT_TRUE(same_bits(a.input, before.input)) << what << ": input was written";
            if (layout == "contiguous") contiguous_q = got;
            if (layout == "strided") {
              for (size_t k = 0; k < got.size(); ++k) EXPECT_TRUE(same_bits(got[k], contiguous_q[k])) << what << ": result " << k;
            }
            if (fused(op)) {
              Args c = copy_args(before);
              const std::vector<at::Tensor> composed = run_composition(solution, op, c);
              ASSERT_EQ(composed.size(), got.size()) << what;
              for (size_t k = 0; k < got.size(); ++k) {
                EXPECT_TRUE(same_bits(got[k], composed[k])) << what << ": result " << k << " differs from the composition";
              }
              if (a.residual.defined()) {
                EXPECT_TRUE(same_bits(a.residual, c.residual)) << what << ": residual differs from fused_add_rms_norm's";
              }
            }
          }
        }
      }
    }
  }
}

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// The non-finite rules: a NaN row (a negative NaN too) has the scale 0x7FC00000, fp8 q 0x7F, int8 q
// 0, azp 0; a row with +-inf has amax inf (fp8 scale inf: finite elements +-0, the infinities NaN;
// with a finite scale_ub +-448; int8 scale inf, q 0); zero rows their fixed scales; each against
// the reference too.
inline void check_non_finite(const std::string& solution, at::Device device) {
  const int64_t hidden = 40;
  at::Tensor v = at::randn({6, hidden}, at::kDouble);
  v[0][3] = kNaN;
  v[1][5] = kInf;
  v[2][7] = -kInf;
  v[3].zero_();
  v[4][0] = -std::numeric_limits<double>::quiet_NaN();
  v[5][1] = kInf;
  v[5][2] = -kInf;
  for (const auto& op : {std::string("per_token_quant"), std::string("per_token_quant_int8_azp"), std::string("static_quant")}) {
    for (const bool fp8 : {false, true}) {
      if (is_azp(op) && fp8) continue;
      for (const bool bound : {false, true}) {
        const std::string what = solution + "." + op + (fp8 ? " fp8" : " int8") + (bound ? " bound" : "");
        Args a = make_args(op, 6, hidden, at::kBFloat16, fp8, bound, "contiguous", device, v);
        const Args before = copy_args(a);
        const std::vector<at::Tensor> got = run(solution, op, a);
        const ref::RowCheck r = reference_check(op, before, got, at::kBFloat16);
        EXPECT_EQ(r.mismatches + r.round_trip_failures, 0) << what << ": " << describe(r);
        const at::Tensor q = bits(got[0]);
        for (const int64_t row : {int64_t{0}, int64_t{4}}) {
          for (int64_t i = 0; i < hidden; ++i) {
            if (is_static(op)) continue;
            ASSERT_EQ(q[row][i].item<uint8_t>(), fp8 ? 0x7F : 0) << what << " NaN row " << row << " element " << i;
          }
          if (!is_static(op)) EXPECT_EQ(bits_of(rows32(got[1])[row].item<float>()), 0x7FC00000u) << what;
          if (is_azp(op)) EXPECT_EQ(rows32(got[2])[row].item<int32_t>(), 0) << what;
        }
        if (op == "per_token_quant") {
          const float s1 = rows32(got[1])[1].item<float>();
          if (fp8 && !bound) {
            EXPECT_TRUE(std::isinf(s1)) << what;
            EXPECT_EQ(q[1][5].item<uint8_t>(), 0x7F) << what << ": inf / inf";
            EXPECT_EQ(q[1][0].item<uint8_t>() & 0x7F, 0) << what << ": finite / inf";
          } else if (fp8) {
            EXPECT_EQ(q[1][5].item<uint8_t>(), 0x7E) << what << ": +inf saturates";
            EXPECT_EQ(q[2][7].item<uint8_t>(), 0xFE) << what << ": -inf saturates";
          } else {
            EXPECT_TRUE(std::isinf(s1)) << what;
            for (int64_t i = 0; i < hidden; ++i) EXPECT_EQ(q[1][i].item<uint8_t>(), 0) << what;
          }
          const float s3 = rows32(got[1])[3].item<float>();
          EXPECT_EQ(s3, fp8 ? 1.0f / (448.0f * 512.0f) : 0.0f) << what << ": zero row";
        }
      }
    }
  }
}

// Rows past 2^31 elements: a two-row view whose second row starts 2^31 + 3 elements into its
// storage (allocated, not touched: only the two rows are written), for every operation without a
// producer and rms_norm_per_token_quant, against the reference and the contiguous copy.
inline void check_large_offsets(const std::string& solution, at::Device device) {
  const int64_t hidden = 96, stride = (int64_t{1} << 31) + 3;
  at::Tensor storage = at::empty({stride + hidden}, at::TensorOptions().dtype(at::kBFloat16).device(device));
  at::Tensor view = storage.as_strided({2, hidden}, {stride, 1});
  const at::Tensor values = at::randn({2, hidden}, at::kDouble);
  view.copy_(values);
  for (const std::string op : {"per_token_quant", "per_token_quant_int8_azp", "static_quant", "rms_norm_per_token_quant"}) {
    for (const bool fp8 : {false, true}) {
      if (is_azp(op) && fp8) continue;
      Args a = make_args(op, 2, hidden, at::kBFloat16, fp8, false, "contiguous", device, values);
      Args far = a;
      far.input = view;
      const std::vector<at::Tensor> got = run(solution, op, far);
      const std::vector<at::Tensor> want = run(solution, op, a);
      for (size_t k = 0; k < got.size(); ++k) EXPECT_TRUE(same_bits(got[k], want[k])) << solution << "." << op << " result " << k;
      const ref::RowCheck r = reference_check(op, a, got, at::kBFloat16);
      EXPECT_EQ(r.mismatches, 0) << op << ": " << describe(r);
    }
  }
}

// Errors name the operation and the argument: the quantized dtype, scale_ub with int8, azp with
// fp8, a scale of two elements or the wrong dtype, a residual of another shape, an odd gated width.
inline void check_errors(const std::string& solution, at::Device device) {
  auto expect = [&](const std::string& op, const std::function<void()>& call, const std::string& argument) {
    const std::string m = error_message(call);
    EXPECT_NE(m.find(op), std::string::npos) << solution << "." << op << ": " << m;
    EXPECT_NE(m.find(argument), std::string::npos) << solution << "." << op << " (" << argument << "): " << m;
  };
  for (const auto& op : operations()) {
    if (is_azp(op)) continue;
    Args a = make_args(op, 3, 16, at::kBFloat16, false, false, "contiguous", device);
    Args b = a;
    b.dtype = at::kFloat;
    expect(op, [&] { run(solution, op, b); }, "dtype");
    b.dtype = at::kByte;
    expect(op, [&] { run(solution, op, b); }, "dtype");
    if (is_static(op)) {
      Args c = a;
      c.dtype = at::kFloat8_e4m3fn;
      c.azp = at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(device));
      expect(op, [&] { run(solution, op, c); }, "azp");
      Args d = a;
      d.scale = at::ones({2}, d.scale.options());
      expect(op, [&] { run(solution, op, d); }, "scale");
      d.scale = at::ones({1}, d.scale.options().dtype(at::kDouble));
      expect(op, [&] { run(solution, op, d); }, "scale");
    } else {
      Args c = a;
      c.scale_ub = at::ones({1}, at::TensorOptions().dtype(at::kFloat).device(device));
      expect(op, [&] { run(solution, op, c); }, "scale_ub");  // with int8
      c.dtype = at::kFloat8_e4m3fn;
      c.scale_ub = at::ones({3}, c.scale_ub.options());
      expect(op, [&] { run(solution, op, c); }, "scale_ub");
    }
    if (a.residual.defined()) {
      Args c = a;
      c.residual = at::zeros({4, 16}, a.input.options());
      expect(op, [&] { run(solution, op, c); }, "residual");
    }
    if (op.rfind("silu", 0) == 0) {
      Args c = a;
      c.input = at::zeros({3, 33}, a.input.options());
      expect(op, [&] { run(solution, op, c); }, "input");
    }
  }
}

// Zero rows give empty results of the right shapes.
inline void check_empty(const std::string& solution, at::Device device) {
  for (const auto& op : operations()) {
    if (op.rfind("fused_add", 0) == 0) continue;
    Args a = make_args(op, 0, 16, at::kHalf, true, true, "contiguous", device);
    const std::vector<at::Tensor> got = run(solution, op, a);
    EXPECT_EQ(got[0].numel(), 0) << op;
    EXPECT_EQ(got[0].size(-1), 16) << op;
    if (got.size() > 1) EXPECT_EQ(got[1].sizes(), (std::vector<int64_t>{0, 1})) << op;
  }
}

inline void check_bridge(const std::string& solution, at::Device device) {
  check_against_reference(solution, device);
  check_non_finite(solution, device);
  check_errors(solution, device);
  check_empty(solution, device);
}

}  // namespace xllm_kernel::testing::quantization
