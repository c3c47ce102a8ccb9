// Boxed kernels (the path Python kernels take) compete in selection and are called through the
// same typed binding as native ones.
#include "xllm_kernel/boxing.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <optional>
#include <tuple>

#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing {
namespace {

KernelSpec boxed_spec(const std::string& op, const OpContract& contract, int priority) {
  return KernelSpec{"cpu.python." + op, &contract, Device::kCpu, {ExecutionMode::kEager}, "test", "python", "", "boxed", priority};
}

TEST(Boxing, BoxedKernelsAreSelectedAndCalledThroughTypedBindings) {
  Registry r;
  // rms_norm: returns input * 2 (a recognisable value, not the real semantics).
  add_boxed_kernel(r, rms_norm_operation(), boxed_spec("rms_norm", rms_norm_contract(), 50), [](torch::jit::Stack& s) {
    ASSERT_EQ(s.size(), 3u);
    EXPECT_DOUBLE_EQ(s[2].toDouble(), 1e-6);
    at::Tensor out = s[0].toTensor() * 2;
    s.clear();
    s.emplace_back(out);
  });
  // fused: writes both mutated arguments in place, returns nothing.
  add_boxed_kernel(r, fused_add_rms_norm_operation(), boxed_spec("fused_add_rms_norm", fused_add_rms_norm_contract(), 50),
                   [](torch::jit::Stack& s) {
                     at::Tensor input = s[0].toTensor(), residual = s[1].toTensor();
                     residual.add_(input);
                     input.fill_(7);
                     s.clear();
                   });
  // layer_norm: the optional bias arrives as None or a tensor.
  add_boxed_kernel(r, layer_norm_operation(), boxed_spec("layer_norm", layer_norm_contract(), 50), [](torch::jit::Stack& s) {
    at::Tensor out = s[2].isNone() ? s[0].toTensor().clone() : s[0].toTensor() + s[2].toTensor();
    s.clear();
    s.emplace_back(out);
  });
  Runtime rt(r, {&normalization_group()}, /*publish_to_operations=*/false);
  auto b = rt.initialize(Device::kCpu, {});
  EXPECT_EQ(b->at("rms_norm").spec().name, "cpu.python.rms_norm");

  at::Tensor x = at::arange(6, at::kFloat).reshape({2, 3}), w = at::ones({3});
  EXPECT_TRUE(at::equal(b->at("rms_norm").function<RmsNormFn>()(x, w, 1e-6), x * 2));
  at::Tensor input = x.clone(), residual = at::ones({2, 3});
  b->at("fused_add_rms_norm").function<FusedAddRmsNormFn>()(input, residual, w, 1e-6);
  EXPECT_TRUE(at::equal(residual, x + 1));
  EXPECT_TRUE(at::equal(input, at::full({2, 3}, 7.0f)));
  EXPECT_TRUE(at::equal(b->at("layer_norm").function<LayerNormFn>()(x, w, std::nullopt, 1e-5), x));
  EXPECT_TRUE(at::equal(b->at("layer_norm").function<LayerNormFn>()(x, w, at::ones({3}), 1e-5), x + 1));
}

TEST(Boxing, ResultCountIsChecked) {
  Registry r;
  add_boxed_kernel(r, rms_norm_operation(), boxed_spec("rms_norm", rms_norm_contract(), 50),
                   [](torch::jit::Stack& s) { s.clear(); });
  Runtime rt(r, {&normalization_group()}, false);
  auto b = rt.initialize(Device::kCpu, {{"rms_norm"}});
  EXPECT_THROW(b->at("rms_norm").function<RmsNormFn>()(at::ones({1, 2}), at::ones({2}), 0.0), c10::Error);
}

// The reverse direction: a native binding called with IValues in schema order (the Python
// package's PreparedKernel.function), mutations reaching the caller's tensors.
TEST(Boxing, PreparedBindingsAreCallableWithABoxedStack) {
  Registry r;  // the built-in kernels, in a registry this test may freeze
  for (const auto& k : registry().kernels()) r.add(*k->operation, k->spec, k->function);
  Runtime rt(r, {&normalization_group()}, /*publish_to_operations=*/false);
  auto b = rt.initialize(Device::kCpu, {});
  for (const Operation* op : normalization_group().operations) ASSERT_NE(op->boxed_caller(), nullptr) << op->name();

  at::Tensor x = at::randn({2, 8}), w = at::rand({8}) + 0.5;
  torch::jit::Stack stack{x, w, 1e-6};
  rms_norm_operation().boxed_caller()(b->at("rms_norm").erased(), stack);
  ASSERT_EQ(stack.size(), 1u);
  EXPECT_TRUE(at::allclose(stack[0].toTensor(), b->at("rms_norm").function<RmsNormFn>()(x, w, 1e-6)));

  at::Tensor input = x.clone(), residual = at::ones({2, 8});
  stack = {input, residual, w, 1e-6};
  fused_add_rms_norm_operation().boxed_caller()(b->at("fused_add_rms_norm").erased(), stack);
  EXPECT_TRUE(stack.empty());
  EXPECT_TRUE(at::equal(residual, x + 1));
  EXPECT_TRUE(at::allclose(input, b->at("rms_norm").function<RmsNormFn>()(x + 1, w, 1e-6)));

  stack = {x, w, c10::IValue(), 1e-5};
  layer_norm_operation().boxed_caller()(b->at("layer_norm").erased(), stack);
  EXPECT_TRUE(at::allclose(stack[0].toTensor(), b->at("layer_norm").function<LayerNormFn>()(x, w, std::nullopt, 1e-5)));

  stack = {x, w};
  EXPECT_THROW(rms_norm_operation().boxed_caller()(b->at("rms_norm").erased(), stack), c10::Error);
  stack = {x, w, 1e-6};
  EXPECT_THROW(rms_norm_operation().boxed_caller()(b->at("layer_norm").erased(), stack), std::logic_error);
}

// A tuple return ("-> (Tensor, Tensor)") is one stack entry per element, as the dispatcher leaves
// it, in both directions; ScalarType and Tensor? arguments box and unbox.
using PairFn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor& x, at::ScalarType dtype,
                                                  const std::optional<at::Tensor>& bound);

const OpContract& pair_contract() {
  static const OpContract c{"pair_of", 1, "pair_of(Tensor x, ScalarType dtype, Tensor? bound) -> (Tensor a, Tensor b)",
                            {}, false, NumericalMode::kExact, "", ""};
  return c;
}

std::tuple<at::Tensor, at::Tensor> native_pair(const at::Tensor& x, at::ScalarType dtype,
                                               const std::optional<at::Tensor>& bound) {
  return {x.to(dtype), bound.has_value() ? x + *bound : x};
}

TEST(Boxing, TupleResultsAreOneStackEntryPerElement) {
  static const TypedOperation<PairFn> op(pair_contract(), &boxed_function<PairFn>, &call_boxed<PairFn>);
  Registry r;
  add_boxed_kernel(r, op, boxed_spec("pair_of", pair_contract(), 50), [](torch::jit::Stack& s) {
    ASSERT_EQ(s.size(), 3u);
    const at::Tensor x = s[0].toTensor();
    const auto dtype = s[1].toScalarType();
    const at::Tensor a = x.to(dtype), b = s[2].isNone() ? x * 0 : x + s[2].toTensor();
    s.clear();
    s.emplace_back(a);
    s.emplace_back(b);
  });
  const auto k = r.find("cpu.python.pair_of");
  ASSERT_NE(k, nullptr);
  const PreparedKernel prepared(k->spec, k->function, "");
  const at::Tensor x = at::arange(4, at::kFloat);
  auto [a, b] = prepared.function<PairFn>()(x, at::kInt, std::nullopt);
  EXPECT_EQ(a.scalar_type(), at::kInt);
  EXPECT_TRUE(at::equal(b, x * 0));
  std::tie(a, b) = prepared.function<PairFn>()(x, at::kHalf, at::ones({1}));
  EXPECT_EQ(a.scalar_type(), at::kHalf);
  EXPECT_TRUE(at::equal(b, x + 1));

  // The other direction: a typed binding called with a stack leaves both results on it.
  const ErasedFunction typed = ErasedFunction::from(KernelFunction<PairFn>::of<&native_pair>());
  torch::jit::Stack stack{x, static_cast<int64_t>(at::kDouble), at::full({1}, 2.0f)};
  op.boxed_caller()(typed, stack);
  ASSERT_EQ(stack.size(), 2u);
  EXPECT_EQ(stack[0].toTensor().scalar_type(), at::kDouble);
  EXPECT_TRUE(at::equal(stack[1].toTensor(), x + 2));

  // A kernel leaving one result for a pair is an error naming the count.
  Registry wrong;
  add_boxed_kernel(wrong, op, boxed_spec("pair_of", pair_contract(), 50), [](torch::jit::Stack& s) {
    const at::Tensor x = s[0].toTensor();
    s.clear();
    s.emplace_back(x);
  });
  const auto w = wrong.find("cpu.python.pair_of");
  const PreparedKernel bad(w->spec, w->function, "");
  EXPECT_THROW(bad.function<PairFn>()(x, at::kInt, std::nullopt), c10::Error);
}

TEST(Boxing, OperationsWithoutBoxerRejectBoxedKernels) {
  static const OpContract c{"plain", 1, "plain(int x) -> int", {}, false, NumericalMode::kExact, "", ""};
  static const TypedOperation<int(int)> plain(c);
  Registry r;
  KernelSpec s{"cpu.python.plain", &c, Device::kCpu, {ExecutionMode::kEager}, "", "python", "", "boxed", 1};
  EXPECT_THROW(add_boxed_kernel(r, plain, s, [](torch::jit::Stack&) {}), std::invalid_argument);
}

}  // namespace
}  // namespace xllm_kernel::testing
