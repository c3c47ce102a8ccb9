// One body per check of a normalization bridge, for every device: the CPU tests (test/ops) and
// the CUDA tests (test/cuda) call the same functions with their device, so the two cannot drift.
// Inputs are drawn on the CPU (fixed seeds) and moved; references are computed on the CPU in
// float64; every check also asserts that nothing outside the written views changed.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "test/ops/common/registered.h"
#include "test/ops/normalization/grid.h"
#include "test/ops/normalization/reference.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing::normalization {

enum class Layout { kContiguous, kRowStrided, kUnmergeable3d, kMisaligned };
inline const Layout kLayouts[] = {Layout::kContiguous, Layout::kRowStrided, Layout::kUnmergeable3d,
                                  Layout::kMisaligned};

inline const char* name_of(Layout l) {
  switch (l) {
    case Layout::kContiguous: return "contiguous";
    case Layout::kRowStrided: return "row-strided";
    case Layout::kUnmergeable3d: return "3-D unmergeable";
    case Layout::kMisaligned: return "starts at element 1";
  }
  return "?";
}

inline at::Tensor host(const at::Tensor& t) { return t.to(at::kCPU); }

// The [tokens, hidden] view (or [tokens, 2, hidden]) of `buffer` in `layout`.
inline at::Tensor view_of(const at::Tensor& buffer, Layout layout, int64_t tokens, int64_t hidden) {
  switch (layout) {
    case Layout::kContiguous: return buffer;
    case Layout::kRowStrided: return buffer.narrow(1, 0, hidden);
    case Layout::kUnmergeable3d: return buffer.narrow(1, 0, 2).narrow(2, 0, hidden);  // strides cannot merge
    case Layout::kMisaligned: return buffer.narrow(0, 1, tokens * hidden).view({tokens, hidden});
  }
  return buffer;
}

// A view in `layout` over a padded buffer on `device`, filled with randn + offset; the whole
// buffer is returned too, to check what lies outside the view.
struct Input {
  at::Tensor view, buffer;
};
inline Input make_input(int64_t tokens, int64_t hidden, at::ScalarType dtype, Layout layout, double offset, int pad,
                        at::Device device) {
  at::Tensor buffer;
  switch (layout) {
    case Layout::kContiguous: buffer = at::randn({tokens, hidden}); break;
    case Layout::kRowStrided: buffer = at::randn({tokens, hidden + pad}); break;
    case Layout::kUnmergeable3d: buffer = at::randn({tokens, 3, hidden + pad}); break;
    case Layout::kMisaligned: buffer = at::randn({tokens * hidden + 1}); break;
  }
  buffer = buffer.add_(offset).to(dtype).to(device);
  return {view_of(buffer, layout, tokens, hidden), buffer};
}

inline std::string case_of(int64_t tokens, int64_t hidden, at::ScalarType w, Layout l) {
  return case_name(tokens, hidden, w, name_of(l));
}

// A new output on the input's device, of its shape and dtype, contiguous.
inline void expect_new_output(const at::Tensor& out, const at::Tensor& input) {
  EXPECT_EQ(out.device(), input.device());
  EXPECT_EQ(out.sizes(), input.sizes());
  EXPECT_EQ(out.scalar_type(), input.scalar_type());
  EXPECT_TRUE(out.is_contiguous());
}

// ---- values over the grid (kTokens x kHidden x weight dtype x layout) ----

inline void check_rms_norm_grid(const std::string& impl, at::ScalarType dtype, at::Device device) {
  auto fn = function_of<RmsNormFn>(impl);
  const Tolerance tol = tolerance_for(dtype);
  at::manual_seed(1);
  for (int64_t tokens : kTokens)
    for (int64_t hidden : kHidden)
      for (at::ScalarType wdtype : {dtype, at::kFloat})
        for (Layout layout : kLayouts) {
          SCOPED_TRACE(case_of(tokens, hidden, wdtype, layout));
          Input in = make_input(tokens, hidden, dtype, layout, /*offset=*/4, /*pad=*/5, device);
          const at::Tensor before = in.buffer.clone();
          const at::Tensor w = make_weight(hidden, wdtype, device);
          const at::Tensor out = fn(in.view, w, 1e-6);
          expect_new_output(out, in.view);
          EXPECT_LE(headroom(host(out), reference_rms_norm(host(in.view), host(w), 1e-6), tol), 1.0);
          EXPECT_TRUE(at::equal(in.buffer, before)) << "input was modified";
        }
}

inline void check_fused_add_rms_norm_grid(const std::string& impl, at::ScalarType dtype, at::Device device) {
  auto fn = function_of<FusedAddRmsNormFn>(impl);
  const Tolerance tol = tolerance_for(dtype);
  at::manual_seed(2);
  for (int64_t tokens : kTokens)
    for (int64_t hidden : kHidden)
      for (at::ScalarType wdtype : {dtype, at::kFloat})
        for (Layout layout : kLayouts) {
          SCOPED_TRACE(case_of(tokens, hidden, wdtype, layout));
          Input in = make_input(tokens, hidden, dtype, layout, /*offset=*/2, /*pad=*/5, device);
          // Other strides for the residual (and contiguous where the input is misaligned).
          const Layout res_layout = layout == Layout::kMisaligned ? Layout::kContiguous : layout;
          Input res = make_input(tokens, hidden, dtype, res_layout, /*offset=*/3, /*pad=*/3, device);
          at::Tensor in_buffer = in.buffer.clone(), res_buffer = res.buffer.clone();
          const at::Tensor w = make_weight(hidden, wdtype, device);
          // The residual is the correctly rounded sum: bitwise.
          const FusedAddRmsNormReference want = reference_fused_add_rms_norm(in.view, res.view, w, 1e-5);
          fn(in.view, res.view, w, 1e-5);
          EXPECT_TRUE(at::equal(host(res.view), want.residual)) << "residual is not the rounded sum";
          EXPECT_LE(headroom(host(in.view), want.input, tol), 1.0);
          // Nothing outside the views was written.
          view_of(in_buffer, layout, tokens, hidden).copy_(in.view);
          view_of(res_buffer, res_layout, tokens, hidden).copy_(res.view);
          EXPECT_TRUE(at::equal(in.buffer, in_buffer)) << "wrote outside input";
          EXPECT_TRUE(at::equal(res.buffer, res_buffer)) << "wrote outside residual";
        }
}

// Input and residual as the two halves of each row of one buffer (strided, so torch's overlap
// checks say TooHard): disjoint, so the call is valid and matches the reference.
inline void check_fused_add_rms_norm_halves_of_one_buffer(const std::string& impl, at::Device device) {
  auto fn = function_of<FusedAddRmsNormFn>(impl);
  at::manual_seed(3);
  const int64_t tokens = 7, hidden = 40;
  const at::Tensor buf = at::randn({tokens, 2 * hidden}, at::kBFloat16).to(device);
  at::Tensor input = buf.narrow(1, 0, hidden), residual = buf.narrow(1, hidden, hidden);
  const at::Tensor w = make_weight(hidden, at::kBFloat16, device);
  const FusedAddRmsNormReference want = reference_fused_add_rms_norm(input, residual, w, 1e-5);
  fn(input, residual, w, 1e-5);
  EXPECT_TRUE(at::equal(host(residual), want.residual)) << impl << ": residual is not the rounded sum";
  EXPECT_LE(headroom(host(input), want.input, tolerance_for(at::kBFloat16)), 1.0) << impl;
}

inline void check_layer_norm_grid(const std::string& impl, at::ScalarType dtype, at::Device device) {
  auto fn = function_of<LayerNormFn>(impl);
  const Tolerance tol = tolerance_for(dtype);
  at::manual_seed(3);
  for (int64_t tokens : kTokens)
    for (int64_t hidden : kHidden)
      for (at::ScalarType wdtype : {dtype, at::kFloat})
        for (Layout layout : kLayouts)
          for (bool with_bias : {false, true}) {
            SCOPED_TRACE(case_of(tokens, hidden, wdtype, layout) + (with_bias ? " bias" : " no bias"));
            // A large offset: E[x^2] - E[x]^2 or half-precision sums would fail here.
            Input in = make_input(tokens, hidden, dtype, layout, /*offset=*/50, /*pad=*/5, device);
            const at::Tensor before = in.buffer.clone();
            const at::Tensor w = make_weight(hidden, wdtype, device);
            std::optional<at::Tensor> b, b_host;
            if (with_bias) {
              b_host = at::randn({hidden}).to(wdtype);
              b = b_host->to(device);
            }
            const at::Tensor out = fn(in.view, w, b, 1e-5);
            expect_new_output(out, in.view);
            EXPECT_LE(headroom(host(out), reference_layer_norm(host(in.view), host(w), b_host, 1e-5), tol), 1.0);
            EXPECT_TRUE(at::equal(in.buffer, before)) << "input was modified";
          }
}

// Rows 2^31 + 16 elements apart (4 GiB of bfloat16 reserved per tensor, two rows touched), every
// implementation of the three operations in `implementations_of(operation)`. Returns false
// (having checked nothing) where the memory cannot be reserved.
inline bool check_row_stride_beyond_2_to_31(at::Device device,
                                            const std::function<std::vector<std::string>(const std::string&)>& implementations_of) {
  const int64_t hidden = 64, stride = (int64_t{1} << 31) + 16;
  at::Tensor storage, r_storage;
  try {
    storage = at::empty({stride + hidden}, at::TensorOptions().dtype(at::kBFloat16).device(device));
    r_storage = at::empty({stride + hidden}, at::TensorOptions().dtype(at::kBFloat16).device(device));
  } catch (const c10::Error&) {
    return false;
  }
  at::Tensor x = storage.as_strided({2, hidden}, {stride, 1});
  x.copy_(at::randn({2, hidden}) + 1);
  const at::Tensor w = make_weight(hidden, at::kFloat, device);
  const Tolerance tol = tolerance_for(at::kBFloat16);
  for (const auto& impl : implementations_of("rms_norm")) {
    SCOPED_TRACE(impl);
    EXPECT_LE(headroom(host(function_of<RmsNormFn>(impl)(x, w, 1e-6)), reference_rms_norm(host(x), host(w), 1e-6), tol),
              1.0);
  }
  for (const auto& impl : implementations_of("layer_norm")) {
    SCOPED_TRACE(impl);
    EXPECT_LE(headroom(host(function_of<LayerNormFn>(impl)(x, w, std::nullopt, 1e-6)),
                       reference_layer_norm(host(x), host(w), std::nullopt, 1e-6), tol),
              1.0);
  }
  for (const auto& impl : implementations_of("fused_add_rms_norm")) {
    SCOPED_TRACE(impl);
    at::Tensor xi = x.clone();  // contiguous input, huge-stride residual
    at::Tensor r = r_storage.as_strided({2, hidden}, {stride, 1});
    r.copy_(at::randn({2, hidden}));
    const FusedAddRmsNormReference want = reference_fused_add_rms_norm(xi, r, w, 1e-6);
    function_of<FusedAddRmsNormFn>(impl)(xi, r, w, 1e-6);
    EXPECT_TRUE(at::equal(host(r), want.residual));
    EXPECT_LE(headroom(host(xi), want.input, tol), 1.0);
  }
  return true;
}

// ---- argument errors: every implementation names the op, the argument, expected and given ----

struct BadCase {
  std::string what;
  std::function<void(const std::string& impl)> call;
  std::string expected;  // a substring of the message
};

// The device an implementation on `device` refuses, and how messages name both.
struct Devices {
  at::Device device;
  at::Device other;    // meta beside the CPU, the CPU beside a GPU
  std::string name;    // "cpu", "cuda:0"
  std::string type;    // "cpu", "cuda"
  std::string other_name;
};
inline Devices devices_for(at::Device device) {
  const at::Device other = device.is_cpu() ? at::Device(at::kMeta) : at::Device(at::kCPU);
  return {device, other, device.str(), c10::DeviceTypeName(device.type(), /*lower_case=*/true), other.str()};
}

inline std::vector<BadCase> rms_norm_bad_cases(at::Device device) {
  const Devices d = devices_for(device);
  const auto on = [device](const at::Tensor& t) { return t.to(device); };
  const at::Tensor x = on(at::randn({4, 16}, at::kBFloat16)), w = on(at::ones({16}, at::kBFloat16));
  auto call = [](at::Tensor input, at::Tensor weight, double eps) {
    return [=](const std::string& impl) { function_of<RmsNormFn>(impl)(input, weight, eps); };
  };
  return {
      {"double input", call(x.to(at::kDouble), w, 1e-6), "rms_norm: input must be float32, bfloat16 or float16, got float64"},
      {"int input", call(on(at::ones({4, 16}, at::kInt)), w, 1e-6), "rms_norm: input must be float32, bfloat16 or float16, got int32"},
      {"weight dtype", call(x, w.to(at::kHalf), 1e-6), "rms_norm: weight must be float32 or bfloat16 (the input's dtype), got float16"},
      {"weight length", call(x, on(at::ones({15}, at::kBFloat16)), 1e-6), "rms_norm: weight must have 16 elements (hidden size, the input's last dimension), got 15"},
      {"weight 2-D", call(x, on(at::ones({1, 16}, at::kBFloat16)), 1e-6), "rms_norm: weight must be 1-D [hidden], got shape [1, 16]"},
      {"weight device", call(x, w.to(d.other), 1e-6),
       "rms_norm: weight must be on " + d.name + " (the input's device), got " + d.other_name},
      {"input device", call(x.to(d.other), w.to(d.other), 1e-6),
       "rms_norm: input must be on " + d.type + " for this implementation, got " + d.other_name},
      {"last dim stride", call(on(at::randn({16, 4}, at::kBFloat16)).t(), w, 1e-6),
       "rms_norm: input's last dimension must be contiguous (stride 1), got stride 4"},
      {"hidden 0", call(on(at::randn({4, 0}, at::kBFloat16)), on(at::ones({0}, at::kBFloat16)), 1e-6),
       "rms_norm: hidden size (input's last dimension) must be >= 1, got 0"},
      {"0-D input", call(on(at::ones({}, at::kBFloat16)), w, 1e-6), "rms_norm: input must have at least 1 dimension"},
      {"negative eps", call(x, w, -1e-6), "rms_norm: eps must be finite and >= 0, got -1e-06"},
      {"nan eps", call(x, w, std::nan("")), "rms_norm: eps must be finite and >= 0, got nan"},
      {"inf eps", call(x, w, INFINITY), "rms_norm: eps must be finite and >= 0, got inf"},
      {"undefined weight", call(x, at::Tensor(), 1e-6), "rms_norm: weight must be a defined tensor"},
  };
}

inline std::vector<BadCase> fused_add_rms_norm_bad_cases(at::Device device) {
  const Devices d = devices_for(device);
  // By value: the overlap cases below call it after this function has returned.
  const auto on = [device](const at::Tensor& t) { return t.to(device); };
  const at::Tensor x = on(at::randn({4, 16}, at::kHalf)), w = on(at::ones({16}, at::kFloat));
  auto call = [](at::Tensor input, at::Tensor residual, at::Tensor weight, double eps) {
    return [=](const std::string& impl) mutable { function_of<FusedAddRmsNormFn>(impl)(input, residual, weight, eps); };
  };
  return {
      {"residual dtype", call(x.clone(), x.to(at::kFloat), w, 1e-6), "fused_add_rms_norm: residual must have input's dtype float16, got float32"},
      {"residual shape", call(x.clone(), on(at::randn({4, 8}, at::kHalf)), w, 1e-6),
       "fused_add_rms_norm: residual must have input's shape [4, 16], got [4, 8]"},
      {"residual last stride", call(x.clone(), on(at::randn({16, 4}, at::kHalf)).t(), w, 1e-6),
       "residual's last dimension must be contiguous"},
      {"residual device", call(x.clone(), x.to(d.other), w, 1e-6),
       "fused_add_rms_norm: residual must be on " + d.name + " (the input's device), got " + d.other_name},
      {"same tensor", [x, w](const std::string& impl) mutable {
         at::Tensor a = x.clone();
         function_of<FusedAddRmsNormFn>(impl)(a, a, w, 1e-6);
       }, "fused_add_rms_norm: input and residual must not share memory"},
      {"expanded residual", call(x.clone(), on(at::randn({1, 16}, at::kHalf)).expand({4, 16}), w, 1e-6),
       "fused_add_rms_norm: residual is written in place and must not have overlapping elements"},
      // Not dense, so torch's overlap checks say TooHard; the rows decide.
      {"overlapping slices of one buffer", [on, w](const std::string& impl) {
         const at::Tensor buf = on(at::randn({4, 24}, at::kHalf));
         at::Tensor input = buf.narrow(1, 0, 16), residual = buf.narrow(1, 8, 16);
         function_of<FusedAddRmsNormFn>(impl)(input, residual, w, 1e-6);
       }, "fused_add_rms_norm: input and residual must not share memory"},
      {"rows overlapping each other", [on, x, w](const std::string& impl) {
         const at::Tensor buf = on(at::randn({48}, at::kHalf));
         at::Tensor input = buf.as_strided({4, 16}, {8, 1}), residual = x.clone();
         function_of<FusedAddRmsNormFn>(impl)(input, residual, w, 1e-6);
       }, "fused_add_rms_norm: input is written in place and must not have overlapping elements"},
      {"weight length", call(x.clone(), x.clone(), on(at::ones({17})), 1e-6), "fused_add_rms_norm: weight must have 16 elements (hidden size, the input's last dimension), got 17"},
      {"bfloat16 weight with half input", call(x.clone(), x.clone(), on(at::ones({16}, at::kBFloat16)), 1e-6),
       "fused_add_rms_norm: weight must be float32 or float16 (the input's dtype), got bfloat16"},
      {"negative eps", call(x.clone(), x.clone(), w, -1), "fused_add_rms_norm: eps must be finite and >= 0, got -1"},
  };
}

inline std::vector<BadCase> layer_norm_bad_cases(at::Device device) {
  const Devices d = devices_for(device);
  const auto on = [device](const at::Tensor& t) { return t.to(device); };
  const at::Tensor x = on(at::randn({4, 16})), w = on(at::ones({16}));
  auto call = [](at::Tensor input, at::Tensor weight, std::optional<at::Tensor> bias, double eps) {
    return [=](const std::string& impl) { function_of<LayerNormFn>(impl)(input, weight, bias, eps); };
  };
  return {
      {"bias length", call(x, w, on(at::ones({3})), 1e-5), "layer_norm: bias must have 16 elements (hidden size, the input's last dimension), got 3"},
      {"bias dtype differs from weight", call(x.to(at::kBFloat16), w, on(at::ones({16}, at::kBFloat16)), 1e-5),
       "layer_norm: bias must have weight's dtype float32, got bfloat16"},
      {"bias dtype", call(x, w, on(at::ones({16}, at::kDouble)), 1e-5), "layer_norm: bias must be float32, got float64"},
      {"bias device", call(x, w, w.to(d.other), 1e-5),
       "layer_norm: bias must be on " + d.name + " (the input's device), got " + d.other_name},
      {"weight length", call(x, on(at::ones({4})), std::nullopt, 1e-5), "layer_norm: weight must have 16 elements (hidden size, the input's last dimension), got 4"},
      {"double input", call(x.to(at::kDouble), w, std::nullopt, 1e-5), "layer_norm: input must be float32, bfloat16 or float16, got float64"},
      {"nan eps", call(x, w, std::nullopt, NAN), "layer_norm: eps must be finite and >= 0, got nan"},
  };
}

// Every case against every implementation in `implementations` (at least two: torch and native).
inline void expect_errors(const std::vector<std::string>& implementations, const std::vector<BadCase>& cases) {
  ASSERT_GE(implementations.size(), 2u);
  for (const auto& impl : implementations)
    for (const auto& c : cases) {
      const std::string e = error_message([&] { c.call(impl); });
      EXPECT_NE(e.find(c.expected), std::string::npos) << impl << " / " << c.what << ": " << e;
    }
}

}  // namespace xllm_kernel::testing::normalization
