// Every registered normalization implementation (not only the selected one) against the float64
// reference over the grid of the issue, plus every argument error.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>

#include "test/ops/normalization/grid.h"
#include "test/ops/normalization/reference.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing {
namespace {

enum class Layout { kContiguous, kRowStrided, kUnmergeable3d };
const char* name_of(Layout l) {
  return l == Layout::kContiguous ? "contiguous" : l == Layout::kRowStrided ? "row-strided" : "3-D unmergeable";
}

// A [tokens, hidden] (or [tokens, 2, hidden]) view in `layout` over a padded buffer, filled with
// randn * scale + offset. The whole buffer is returned too, to check that padding is untouched.
struct Input {
  at::Tensor view, buffer;
};
Input make_input(int64_t tokens, int64_t hidden, at::ScalarType dtype, Layout layout, double offset, int pad) {
  const auto f = at::TensorOptions().dtype(at::kFloat);
  at::Tensor buffer;
  at::Tensor view;
  switch (layout) {
    case Layout::kContiguous:
      buffer = at::randn({tokens, hidden}, f);
      view = buffer;
      break;
    case Layout::kRowStrided:
      buffer = at::randn({tokens, hidden + pad}, f);
      view = buffer.narrow(1, 0, hidden);
      break;
    case Layout::kUnmergeable3d:
      // strides [3 (hidden + pad), hidden + pad, 1]: the two leading dims cannot merge.
      buffer = at::randn({tokens, 3, hidden + pad}, f);
      view = buffer.narrow(1, 0, 2).narrow(2, 0, hidden);
      break;
  }
  buffer.add_(offset);
  buffer = buffer.to(dtype);
  switch (layout) {
    case Layout::kContiguous: view = buffer; break;
    case Layout::kRowStrided: view = buffer.narrow(1, 0, hidden); break;
    case Layout::kUnmergeable3d: view = buffer.narrow(1, 0, 2).narrow(2, 0, hidden); break;
  }
  return {view, buffer};
}

at::Tensor make_weight(int64_t hidden, at::ScalarType dtype) {
  return ::xllm_kernel::testing::make_weight(hidden, dtype, at::kCPU);
}

std::string case_name(int64_t tokens, int64_t hidden, at::ScalarType w, Layout l) {
  return ::xllm_kernel::testing::case_name(tokens, hidden, w, name_of(l));
}

std::vector<std::string> implementations_of(const std::string& operation) {
  return registered_implementations(operation, Device::kCpu);
}

std::vector<ImplAndDtype> params_for(const std::string& operation) {
  return ::xllm_kernel::testing::params_for(implementations_of(operation));
}

class RmsNormImpl : public ::testing::TestWithParam<ImplAndDtype> {};
class FusedAddRmsNormImpl : public ::testing::TestWithParam<ImplAndDtype> {};
class LayerNormImpl : public ::testing::TestWithParam<ImplAndDtype> {};

TEST_P(RmsNormImpl, MatchesFloat64ReferenceOverGrid) {
  const auto [impl, dtype] = GetParam();
  auto fn = function_of<RmsNormFn>(impl);
  const Tolerance tol = tolerance_for(dtype);
  at::manual_seed(1);
  for (int64_t tokens : kTokens)
    for (int64_t hidden : kHidden)
      for (at::ScalarType wdtype : {dtype, at::kFloat})
        for (Layout layout : {Layout::kContiguous, Layout::kRowStrided, Layout::kUnmergeable3d}) {
          SCOPED_TRACE(case_name(tokens, hidden, wdtype, layout));
          Input in = make_input(tokens, hidden, dtype, layout, /*offset=*/4, /*pad=*/5);
          at::Tensor before = in.buffer.clone();
          at::Tensor w = make_weight(hidden, wdtype);
          at::Tensor out = fn(in.view, w, 1e-6);
          ASSERT_EQ(out.sizes(), in.view.sizes());
          ASSERT_EQ(out.scalar_type(), dtype);
          ASSERT_TRUE(out.is_contiguous());
          EXPECT_LE(headroom(out, reference_rms_norm(in.view, w, 1e-6), tol), 1.0);
          EXPECT_TRUE(at::equal(in.buffer, before)) << "input was modified";
        }
}

TEST_P(FusedAddRmsNormImpl, MatchesFloat64ReferenceOverGrid) {
  const auto [impl, dtype] = GetParam();
  auto fn = function_of<FusedAddRmsNormFn>(impl);
  const Tolerance tol = tolerance_for(dtype);
  at::manual_seed(2);
  for (int64_t tokens : kTokens)
    for (int64_t hidden : kHidden)
      for (at::ScalarType wdtype : {dtype, at::kFloat})
        for (Layout layout : {Layout::kContiguous, Layout::kRowStrided, Layout::kUnmergeable3d}) {
          SCOPED_TRACE(case_name(tokens, hidden, wdtype, layout));
          Input in = make_input(tokens, hidden, dtype, layout, /*offset=*/2, /*pad=*/5);
          Input res = make_input(tokens, hidden, dtype, layout, /*offset=*/3, /*pad=*/3);  // other strides
          at::Tensor in_buffer = in.buffer.clone(), res_buffer = res.buffer.clone();
          at::Tensor w = make_weight(hidden, wdtype);
          // residual <- round(input + residual): the sum of two values of this dtype is exact in
          // float64, so one rounding gives the bitwise expected value.
          at::Tensor want_residual = (in.view.to(at::kDouble) + res.view.to(at::kDouble)).to(dtype);
          at::Tensor want_input = reference_rms_norm(want_residual, w, 1e-5);
          fn(in.view, res.view, w, 1e-5);
          EXPECT_TRUE(at::equal(res.view, want_residual)) << "residual is not the rounded sum";
          EXPECT_LE(headroom(in.view, want_input, tol), 1.0);
          // Nothing outside the views was written.
          in_buffer.as_strided(in.view.sizes(), in.view.strides()).copy_(in.view);
          res_buffer.as_strided(res.view.sizes(), res.view.strides()).copy_(res.view);
          EXPECT_TRUE(at::equal(in.buffer, in_buffer)) << "wrote outside input";
          EXPECT_TRUE(at::equal(res.buffer, res_buffer)) << "wrote outside residual";
        }
}

TEST_P(LayerNormImpl, MatchesFloat64ReferenceOverGrid) {
  const auto [impl, dtype] = GetParam();
  auto fn = function_of<LayerNormFn>(impl);
  const Tolerance tol = tolerance_for(dtype);
  at::manual_seed(3);
  for (int64_t tokens : kTokens)
    for (int64_t hidden : kHidden)
      for (at::ScalarType wdtype : {dtype, at::kFloat})
        for (Layout layout : {Layout::kContiguous, Layout::kRowStrided, Layout::kUnmergeable3d})
          for (bool with_bias : {false, true}) {
            SCOPED_TRACE(case_name(tokens, hidden, wdtype, layout) + (with_bias ? " bias" : " no bias"));
            // A large offset: E[x^2] - E[x]^2 or half-precision sums would fail here.
            Input in = make_input(tokens, hidden, dtype, layout, /*offset=*/50, /*pad=*/5);
            at::Tensor w = make_weight(hidden, wdtype);
            std::optional<at::Tensor> b;
            if (with_bias) b = at::randn({hidden}).to(wdtype);
            at::Tensor out = fn(in.view, w, b, 1e-5);
            ASSERT_EQ(out.sizes(), in.view.sizes());
            ASSERT_EQ(out.scalar_type(), dtype);
            EXPECT_LE(headroom(out, reference_layer_norm(in.view, w, b, 1e-5), tol), 1.0);
          }
}

INSTANTIATE_TEST_SUITE_P(All, RmsNormImpl, ::testing::ValuesIn(params_for("rms_norm")), param_name);
INSTANTIATE_TEST_SUITE_P(All, FusedAddRmsNormImpl, ::testing::ValuesIn(params_for("fused_add_rms_norm")), param_name);
INSTANTIATE_TEST_SUITE_P(All, LayerNormImpl, ::testing::ValuesIn(params_for("layer_norm")), param_name);

// Rows 2^31 + 16 elements apart (4 GiB of bfloat16 reserved, two rows touched).
TEST(NormalizationLargeStride, RowStrideBeyond2To31Elements) {
  const int64_t hidden = 64, stride = (int64_t{1} << 31) + 16;
  at::Tensor storage = at::empty({stride + hidden}, at::kBFloat16);
  at::Tensor x = storage.as_strided({2, hidden}, {stride, 1});
  at::Tensor r_storage = at::empty({stride + hidden}, at::kBFloat16);
  x.copy_(at::randn({2, hidden}) + 1);
  at::Tensor w = make_weight(hidden, at::kFloat);
  const Tolerance tol = tolerance_for(at::kBFloat16);
  for (const auto& impl : implementations_of("rms_norm")) {
    SCOPED_TRACE(impl);
    EXPECT_LE(headroom(function_of<RmsNormFn>(impl)(x, w, 1e-6), reference_rms_norm(x, w, 1e-6), tol), 1.0);
  }
  for (const auto& impl : implementations_of("layer_norm")) {
    SCOPED_TRACE(impl);
    EXPECT_LE(headroom(function_of<LayerNormFn>(impl)(x, w, std::nullopt, 1e-6),
                       reference_layer_norm(x, w, std::nullopt, 1e-6), tol),
              1.0);
  }
  for (const auto& impl : implementations_of("fused_add_rms_norm")) {
    SCOPED_TRACE(impl);
    at::Tensor xi = x.clone();  // contiguous input, huge-stride residual
    at::Tensor r = r_storage.as_strided({2, hidden}, {stride, 1});
    r.copy_(at::randn({2, hidden}));
    at::Tensor want_r = (xi.to(at::kDouble) + r.to(at::kDouble)).to(at::kBFloat16);
    function_of<FusedAddRmsNormFn>(impl)(xi, r, w, 1e-6);
    EXPECT_TRUE(at::equal(r, want_r));
    EXPECT_LE(headroom(xi, reference_rms_norm(want_r, w, 1e-6), tol), 1.0);
  }
}

// ---- errors: every implementation names the op, the argument, expected and given ----

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no error>";
}

struct BadCase {
  std::string what;
  std::function<void(const std::string& impl)> call;
  std::vector<std::string> expected;  // substrings of the message
};

std::vector<BadCase> rms_bad_cases() {
  const at::Tensor x = at::randn({4, 16}, at::kBFloat16), w = at::ones({16}, at::kBFloat16);
  auto call = [](at::Tensor input, at::Tensor weight, double eps) {
    return [=](const std::string& impl) { function_of<RmsNormFn>(impl)(input, weight, eps); };
  };
  return {
      {"double input", call(x.to(at::kDouble), w, 1e-6), {"rms_norm: input must be float32, bfloat16 or float16, got float64"}},
      {"int input", call(at::ones({4, 16}, at::kInt), w, 1e-6), {"rms_norm: input must be float32, bfloat16 or float16, got int32"}},
      {"weight dtype", call(x, w.to(at::kHalf), 1e-6), {"rms_norm: weight must be float32 or bfloat16 (the input's dtype), got float16"}},
      {"weight length", call(x, at::ones({15}, at::kBFloat16), 1e-6), {"rms_norm: weight must have 16 elements (hidden size), got 15"}},
      {"weight 2-D", call(x, at::ones({1, 16}, at::kBFloat16), 1e-6), {"rms_norm: weight must be 1-D [hidden], got shape [1, 16]"}},
      {"weight device", call(x, at::ones({16}, at::TensorOptions().dtype(at::kBFloat16).device(at::kMeta)), 1e-6),
       {"rms_norm: weight must be on cpu (the input's device), got meta"}},
      {"input device", call(x.to(at::kMeta), w.to(at::kMeta), 1e-6), {"rms_norm: input must be on cpu for this implementation, got meta"}},
      {"last dim stride", call(at::randn({16, 4}, at::kBFloat16).t(), w, 1e-6),
       {"rms_norm: input's last dimension must be contiguous (stride 1), got stride 4"}},
      {"hidden 0", call(at::randn({4, 0}, at::kBFloat16), at::ones({0}, at::kBFloat16), 1e-6),
       {"rms_norm: hidden size (input's last dimension) must be >= 1, got 0"}},
      {"0-D input", call(at::ones({}, at::kBFloat16), w, 1e-6), {"rms_norm: input must have at least 1 dimension"}},
      {"negative eps", call(x, w, -1e-6), {"rms_norm: eps must be finite and >= 0, got -1e-06"}},
      {"nan eps", call(x, w, std::nan("")), {"rms_norm: eps must be finite and >= 0, got nan"}},
      {"inf eps", call(x, w, INFINITY), {"rms_norm: eps must be finite and >= 0, got inf"}},
      {"undefined weight", call(x, at::Tensor(), 1e-6), {"rms_norm: weight must be a defined tensor"}},
  };
}

std::vector<BadCase> fused_bad_cases() {
  const at::Tensor x = at::randn({4, 16}, at::kHalf), w = at::ones({16}, at::kFloat);
  auto call = [](at::Tensor input, at::Tensor residual, at::Tensor weight, double eps) {
    return [=](const std::string& impl) mutable { function_of<FusedAddRmsNormFn>(impl)(input, residual, weight, eps); };
  };
  return {
      {"residual dtype", call(x.clone(), x.to(at::kFloat), w, 1e-6), {"fused_add_rms_norm: residual must have input's dtype float16, got float32"}},
      {"residual shape", call(x.clone(), at::randn({4, 8}, at::kHalf), w, 1e-6),
       {"fused_add_rms_norm: residual must have input's shape [4, 16], got [4, 8]"}},
      {"residual last stride", call(x.clone(), at::randn({16, 4}, at::kHalf).t(), w, 1e-6),
       {"residual's last dimension must be contiguous"}},
      {"same tensor", [x, w](const std::string& impl) mutable {
         at::Tensor a = x.clone();
         function_of<FusedAddRmsNormFn>(impl)(a, a, w, 1e-6);
       }, {"fused_add_rms_norm: input and residual must not share memory"}},
      {"expanded residual", call(x.clone(), at::randn({1, 16}, at::kHalf).expand({4, 16}), w, 1e-6),
       {"fused_add_rms_norm: residual is written in place and must not have overlapping elements"}},
      {"weight length", call(x.clone(), x.clone(), at::ones({17}), 1e-6), {"fused_add_rms_norm: weight must have 16 elements (hidden size), got 17"}},
      {"bfloat16 weight with half input", call(x.clone(), x.clone(), at::ones({16}, at::kBFloat16), 1e-6),
       {"fused_add_rms_norm: weight must be float32 or float16 (the input's dtype), got bfloat16"}},
      {"negative eps", call(x.clone(), x.clone(), w, -1), {"fused_add_rms_norm: eps must be finite and >= 0, got -1"}},
  };
}

std::vector<BadCase> layer_bad_cases() {
  const at::Tensor x = at::randn({4, 16}), w = at::ones({16});
  auto call = [](at::Tensor input, at::Tensor weight, std::optional<at::Tensor> bias, double eps) {
    return [=](const std::string& impl) { function_of<LayerNormFn>(impl)(input, weight, bias, eps); };
  };
  return {
      {"bias length", call(x, w, at::ones({3}), 1e-5), {"layer_norm: bias must have 16 elements (hidden size), got 3"}},
      {"bias dtype differs from weight", call(x.to(at::kBFloat16), w, at::ones({16}, at::kBFloat16), 1e-5),
       {"layer_norm: bias must have weight's dtype float32, got bfloat16"}},
      {"bias dtype", call(x, w, at::ones({16}, at::kDouble), 1e-5), {"layer_norm: bias must be float32, got float64"}},
      {"weight length", call(x, at::ones({4}), std::nullopt, 1e-5), {"layer_norm: weight must have 16 elements (hidden size), got 4"}},
      {"double input", call(x.to(at::kDouble), w, std::nullopt, 1e-5), {"layer_norm: input must be float32, bfloat16 or float16, got float64"}},
      {"nan eps", call(x, w, std::nullopt, NAN), {"layer_norm: eps must be finite and >= 0, got nan"}},
  };
}

void expect_errors(const std::string& operation, const std::vector<BadCase>& cases) {
  const auto impls = implementations_of(operation);
  ASSERT_GE(impls.size(), 2u);
  for (const auto& impl : impls)
    for (const auto& c : cases) {
      const std::string e = error_of([&] { c.call(impl); });
      for (const auto& part : c.expected) EXPECT_NE(e.find(part), std::string::npos) << impl << " / " << c.what << ": " << e;
    }
}

TEST(NormalizationErrors, RmsNorm) { expect_errors("rms_norm", rms_bad_cases()); }
TEST(NormalizationErrors, FusedAddRmsNorm) { expect_errors("fused_add_rms_norm", fused_bad_cases()); }
TEST(NormalizationErrors, LayerNorm) { expect_errors("layer_norm", layer_bad_cases()); }

// ---- the public API through the process-wide runtime ----

class PublicApi : public ::testing::Test {
 protected:
  void SetUp() override { runtime().reset_for_testing(); }
  void TearDown() override { runtime().reset_for_testing(); }
};

TEST_F(PublicApi, CallBeforeInitializeIsAnError) {
  at::Tensor x = at::randn({2, 8}), w = at::ones({8});
  const std::string e = error_of([&] { ops::rms_norm(x, w, 1e-6); });
  EXPECT_NE(e.find("rms_norm: device cpu is not initialized; call xllm_kernel::initialize(\"cpu\")"), std::string::npos) << e;
}

TEST_F(PublicApi, SelectsNativeAndExplainShowsSimdTarget) {
  auto b = initialize("cpu");
  EXPECT_EQ(b->size(), builtin_operations().size());
  for (const char* op : {"rms_norm", "fused_add_rms_norm", "layer_norm"}) {
    EXPECT_EQ(b->at(op).spec().solution, "native") << op;
    const Explanation ex = explain("cpu", op);
    ASSERT_TRUE(ex.selected());
    EXPECT_FALSE(ex.selected()->detail.empty());  // the SIMD target, e.g. AVX2
    EXPECT_EQ(ex.selected()->binding, "highway");
    ASSERT_EQ(ex.candidates.size(), 2u);
    EXPECT_EQ(ex.candidates[1].verdict, Verdict::kLowerPriority);
  }
  at::Tensor x = at::randn({3, 40}, at::kBFloat16), w = at::ones({40});
  EXPECT_LE(headroom(ops::rms_norm(x, w, 1e-6), reference_rms_norm(x, w, 1e-6), tolerance_for(at::kBFloat16)), 1.0);
  // The binding's function and the public API agree bitwise.
  EXPECT_TRUE(at::equal(b->at("rms_norm").function<RmsNormFn>()(x, w, 1e-6), ops::rms_norm(x, w, 1e-6)));
}

TEST_F(PublicApi, OverrideSelectsTorchSolution) {
  auto b = initialize("cpu", {"layer_norm"}, {{"layer_norm", "torch"}});
  EXPECT_EQ(b->at("layer_norm").spec().name, "cpu.torch.layer_norm");
  EXPECT_EQ(layer_norm_operation().prepared(Device::kCpu)->spec().name, "cpu.torch.layer_norm");
}

TEST_F(PublicApi, CpuHasNoGraphMode) {
  const std::string e = error_of([] { initialize("cpu", {"rms_norm"}, {}, "graph"); });
  EXPECT_NE(e.find("rms_norm: no eligible implementation on cpu in graph mode"), std::string::npos) << e;
  EXPECT_NE(e.find("unsupported mode graph (supports eager)"), std::string::npos) << e;
}

TEST_F(PublicApi, UninitializedDeviceOfInputIsReported) {
  initialize("cpu");
  at::Tensor x = at::randn({2, 8}, at::TensorOptions().device(at::kMeta));
  const std::string e = error_of([&] { ops::rms_norm(x, x[0], 1e-6); });
  EXPECT_NE(e.find("rms_norm: input must be on cpu, cuda or npu, got meta"), std::string::npos) << e;
}

}  // namespace
}  // namespace xllm_kernel::testing
