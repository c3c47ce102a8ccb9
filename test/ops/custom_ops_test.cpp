// torch.ops.xllm_kernel.*: schemas from the contracts, fakes on meta tensors, the CPU kernel
// routed to the prepared binding.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>
#include <gtest/gtest.h>

#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing {
namespace {

c10::OperatorHandle handle(const std::string& name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(("xllm_kernel::" + name).c_str(), "");
}

TEST(CustomOps, EveryCatalogOperationHasItsContractSchema) {
  for (const Operation* op : builtin_operations()) {
    const auto& schema = handle(op->name()).schema();
    const auto expected = torch::jit::parseSchema(op->contract().schema);
    EXPECT_EQ(schema.arguments().size(), expected.arguments().size()) << op->name();
    EXPECT_EQ(c10::toString(schema), "xllm_kernel::" + c10::toString(expected)) << op->name();
    // Mutated arguments are annotated Tensor(a!); returns never alias inputs (no annotation).
    for (const auto& arg : schema.arguments()) {
      const bool declared = std::find(op->contract().mutates.begin(), op->contract().mutates.end(), arg.name()) !=
                            op->contract().mutates.end();
      const bool written = arg.alias_info() != nullptr && arg.alias_info()->isWrite();
      EXPECT_EQ(declared, written) << op->name() << "." << arg.name();
    }
    for (const auto& ret : schema.returns()) EXPECT_EQ(ret.alias_info(), nullptr) << op->name();
    EXPECT_TRUE(handle(op->name()).hasKernelForDispatchKey(c10::DispatchKey::Meta))
        << op->name() << " has no fake (Meta) kernel";
    EXPECT_TRUE(handle(op->name()).hasKernelForDispatchKey(c10::DispatchKey::CPU)) << op->name();
  }
}

TEST(CustomOps, FakesGiveShapeDtypeAndDevice) {
  const auto meta = at::TensorOptions().device(at::kMeta);
  at::Tensor x = at::empty({5, 3, 4096}, meta.dtype(at::kBFloat16));
  at::Tensor w = at::empty({4096}, meta.dtype(at::kFloat));
  at::Tensor y = handle("rms_norm").typed<RmsNormFn>().call(x, w, 1e-6);
  EXPECT_EQ(y.sizes(), x.sizes());
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(y.is_meta());
  EXPECT_TRUE(y.is_contiguous());
  at::Tensor z = handle("layer_norm").typed<LayerNormFn>().call(x, w, w, 1e-5);
  EXPECT_EQ(z.sizes(), x.sizes());
  EXPECT_EQ(z.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(z.is_meta());
  at::Tensor r = at::empty({5, 3, 4096}, meta.dtype(at::kBFloat16));
  EXPECT_NO_THROW(handle("fused_add_rms_norm").typed<FusedAddRmsNormFn>().call(x, r, w, 1e-6));
  at::Tensor bad = at::empty({5, 4096}, meta.dtype(at::kBFloat16));
  EXPECT_THROW(handle("fused_add_rms_norm").typed<FusedAddRmsNormFn>().call(x, bad, w, 1e-6), c10::Error);
}

class CustomOpsCpu : public ::testing::Test {
 protected:
  void SetUp() override { runtime().reset_for_testing(); }
  void TearDown() override { runtime().reset_for_testing(); }
};

TEST_F(CustomOpsCpu, BeforeInitializeRaisesClearError) {
  at::Tensor x = at::randn({2, 8}), w = at::ones({8});
  try {
    handle("rms_norm").typed<RmsNormFn>().call(x, w, 1e-6);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("rms_norm: device cpu is not initialized"), std::string::npos) << e.what();
  }
}

TEST_F(CustomOpsCpu, RoutesToThePreparedBinding) {
  at::manual_seed(0);
  at::Tensor x = at::randn({4, 64}, at::kBFloat16), w = at::randn({64}), b = at::randn({64});
  for (const char* solution : {"native", "torch"}) {
    runtime().reset_for_testing();
    auto bindings = initialize("cpu", {}, {{"rms_norm", solution}, {"fused_add_rms_norm", solution}, {"layer_norm", solution}});
    SCOPED_TRACE(solution);
    EXPECT_TRUE(at::equal(handle("rms_norm").typed<RmsNormFn>().call(x, w, 1e-6),
                          bindings->at("rms_norm").function<RmsNormFn>()(x, w, 1e-6)));
    EXPECT_TRUE(at::equal(handle("layer_norm").typed<LayerNormFn>().call(x, w, b, 1e-5),
                          bindings->at("layer_norm").function<LayerNormFn>()(x, w, b, 1e-5)));
    at::Tensor x1 = x.clone(), r1 = x.flip(0).contiguous(), x2 = x.clone(), r2 = r1.clone();
    handle("fused_add_rms_norm").typed<FusedAddRmsNormFn>().call(x1, r1, w, 1e-6);
    bindings->at("fused_add_rms_norm").function<FusedAddRmsNormFn>()(x2, r2, w, 1e-6);
    EXPECT_TRUE(at::equal(x1, x2));
    EXPECT_TRUE(at::equal(r1, r2));
  }
}

}  // namespace
}  // namespace xllm_kernel::testing
