// The platform a family is declared with (src/ops/common/family.h): the standard modules built from
// a table, declared operations and the dispatcher kernels they register, and the contract check
// every group's operations pass when the group registers.
#include "src/ops/common/family.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/library.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "src/core/contract_check.h"
#include "src/ops/common/registration.h"
#include "test/ops/common/registered.h"
#include "xllm_kernel/catalog.h"

namespace xllm_kernel::testing {
namespace {

using PairFn = at::Tensor(const at::Tensor& a, const at::Tensor& b);

const OpContract& pair_contract() {
  static const OpContract contract{.operation = "family_test_pair",
                                   .schema = "family_test_pair(Tensor a, Tensor b) -> Tensor",
                                   .semantics = "a + 2 b, for tests"};
  return contract;
}

at::Tensor pair_fake(const at::Tensor& a, const at::Tensor& b) { return at::empty({a.size(0) + 100}, a.options()); }

// b (argument 1) picks the device.
const family::DeclaredOperation<PairFn>& pair() {
  static const family::DeclaredOperation<PairFn> op(pair_contract(), &pair_fake, /*device_argument=*/1);
  return op;
}

at::Tensor pair_kernel(const at::Tensor& a, const at::Tensor& b) { return a + b.mul(2); }

TEST(FamilyModules, StandardRowsFromATable) {
  const Operation& op = pair();
  const family::StandardModules m =
      family::standard_modules({.family = "fam", .operations = {&op}, .domain = "float32 [n]"});
  EXPECT_EQ(m.torch_cpu.name, "fam.torch_cpu");
  EXPECT_EQ(m.native_cpu.name, "fam.native_cpu");
  EXPECT_EQ(m.torch_cuda.name, "fam.torch_cuda");
  EXPECT_EQ(m.native_cuda.name, "fam.native_cuda");
  EXPECT_FALSE(m.torch_npu.has_value());

  EXPECT_EQ(m.torch_cpu.device, Device::kCpu);
  EXPECT_EQ(m.native_cuda.device, Device::kCuda);
  EXPECT_EQ(m.torch_cpu.binding, "aten");
  EXPECT_EQ(m.native_cpu.binding, "highway");
  EXPECT_EQ(m.native_cuda.binding, "cuda");
  EXPECT_EQ(m.native_cpu.solution, "native");
  EXPECT_EQ(m.torch_cuda.solution, "torch");
  // Probes: none for torch on the CPU; the native modules and torch on CUDA have theirs.
  EXPECT_FALSE(static_cast<bool>(m.torch_cpu.probe));
  EXPECT_TRUE(static_cast<bool>(m.native_cpu.probe));
  EXPECT_TRUE(static_cast<bool>(m.torch_cuda.probe));
  EXPECT_TRUE(static_cast<bool>(m.native_cuda.probe));
  EXPECT_EQ(m.native_cuda.plugin, "libxllm_kernel_cuda.so");
  EXPECT_TRUE(m.torch_cpu.plugin.empty());
  EXPECT_EQ(m.torch_cpu.execution_modes, std::vector<ExecutionMode>{ExecutionMode::kEager});
  const std::vector<ExecutionMode> both{ExecutionMode::kEager, ExecutionMode::kGraph};
  EXPECT_EQ(m.torch_cuda.execution_modes, both);
  EXPECT_EQ(m.native_cuda.execution_modes, both);

  ASSERT_EQ(m.native_cpu.implementations.size(), 1u);
  EXPECT_EQ(m.native_cpu.implementations[0].operation, &op);
  EXPECT_EQ(m.native_cpu.implementations[0].priority, family::kNativePriority);
  EXPECT_EQ(m.torch_cpu.implementations[0].priority, family::kTorchPriority);
  EXPECT_GT(family::kNativePriority, family::kTorchPriority);
  EXPECT_EQ(m.torch_cpu.implementations[0].input_domain, "cpu tensors, float32 [n]");
  EXPECT_EQ(m.torch_cuda.implementations[0].input_domain, "cuda tensors, float32 [n]");
  EXPECT_EQ(m.native_cuda.implementations[0].input_domain, "cuda tensors (sm_80+), float32 [n]");
  EXPECT_EQ(m.native_cpu.implementation_name(m.native_cpu.implementations[0]), "cpu.native.family_test_pair");

  const Group g = m.group();
  EXPECT_EQ(g.name, "fam");
  ASSERT_EQ(g.operations.size(), 1u);
  ASSERT_EQ(g.modules.size(), 4u);
  EXPECT_EQ(g.modules[0], &m.torch_cpu);
  EXPECT_EQ(g.modules[3], &m.native_cuda);
}

TEST(FamilyModules, TableOverridesAndTheNpuModule) {
  const Operation& op = pair();
  const family::StandardModules m = family::standard_modules(
      {.family = "fam",
       .operations = {&op},
       .domain = "d",
       .torch_cuda_modes = {ExecutionMode::kEager},
       .torch_cuda_note = "eager: synchronizes",
       .npu_implementations = {{.operation = &op, .input_domain = "npu tensors", .priority = 7}}});
  EXPECT_EQ(m.torch_cuda.execution_modes, std::vector<ExecutionMode>{ExecutionMode::kEager});
  EXPECT_EQ(m.torch_cuda.implementations[0].input_domain, "cuda tensors (eager: synchronizes), d");
  ASSERT_TRUE(m.torch_npu.has_value());
  EXPECT_EQ(m.torch_npu->name, "fam.torch_npu");
  EXPECT_EQ(m.torch_npu->device, Device::kNpu);
  EXPECT_EQ(m.torch_npu->binding, "torch_npu");
  EXPECT_EQ(m.torch_npu->plugin, "libxllm_kernel_npu.so");
  EXPECT_TRUE(static_cast<bool>(m.torch_npu->probe));
  ASSERT_EQ(m.torch_npu->implementations.size(), 1u);
  EXPECT_EQ(m.torch_npu->implementations[0].priority, 7);
  const Group g = m.group();
  ASSERT_EQ(g.modules.size(), 5u);
  EXPECT_EQ(g.modules[4], &*m.torch_npu);
}

TEST(DeclaredOperation, RejectsADeviceArgumentThatIsNoTensor) {
  using Fn = at::Tensor(int64_t n, const at::Tensor& t);
  static const OpContract c{.operation = "family_test_bad", .schema = "family_test_bad(int n, Tensor t) -> Tensor"};
  auto fake = +[](int64_t, const at::Tensor& t) { return t; };
  EXPECT_NE(error_message([&] { family::DeclaredOperation<Fn> op(c, fake, 0); }).find(
                "family_test_bad: device_argument 0 is not a tensor argument"),
            std::string::npos);
  EXPECT_NE(error_message([&] { family::DeclaredOperation<Fn> op(c, fake, 2); }).find("device_argument 2"),
            std::string::npos);
  EXPECT_NE(error_message([&] { family::DeclaredOperation<Fn> op(c, nullptr, 1); }).find("needs a fake kernel"),
            std::string::npos);
  EXPECT_EQ(error_message([&] { family::DeclaredOperation<Fn> op(c, fake, 1); }), "<no error>");
}

// The operation's schema and its dispatcher kernels, in a fragment of their own (the catalog never
// sees this operation).
void define_pair() {
  static torch::Library* fragment = [] {
    auto* f = new torch::Library(torch::Library::FRAGMENT, "xllm_kernel", std::nullopt, __FILE__, __LINE__);
    f->def(torch::schema(pair().contract().schema.c_str()));
    if (pair().dispatcher_kernels() == nullptr) throw std::logic_error("no dispatcher kernels");
    pair().dispatcher_kernels()(pair(), *f);
    return f;
  }();
  (void)fragment;
}

TEST(DeclaredOperation, DispatcherKernelsCallTheFakeAndThePreparedBinding) {
  define_pair();
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow("xllm_kernel::family_test_pair", "");
  auto typed = handle.typed<PairFn>();

  // Meta: the fake's metadata, no data.
  const at::Tensor meta = at::empty({3}, at::TensorOptions().device(at::kMeta));
  EXPECT_EQ(typed.call(meta, meta).size(0), 103);

  // CPU before a binding is published: the operation's "not initialized" error.
  const at::Tensor a = at::ones({3}), b = at::ones({3});
  EXPECT_NE(error_message([&] { typed.call(a, b); }).find("family_test_pair"), std::string::npos);

  KernelSpec spec{.name = "cpu.test.family_test_pair", .contract = &pair_contract(), .device = Device::kCpu};
  const PreparedKernel prepared(spec, ErasedFunction::from(KernelFunction<PairFn>::of<&pair_kernel>()), "");
  pair().publish(Device::kCpu, &prepared);
  EXPECT_EQ(typed.call(a, b)[0].item<float>(), 3.0f);  // torch.ops reaches the binding
  EXPECT_EQ(pair()(a, b)[0].item<float>(), 3.0f);      // and so does the C++ API

  // The device argument (b) decides: an undefined b is an error naming the operation.
  EXPECT_NE(error_message([&] { pair()(a, at::Tensor()); }).find("family_test_pair: input must be a defined tensor"),
            std::string::npos);
  pair().publish(Device::kCpu, nullptr);
}

TEST(NamedRegistration, TheWrittenNameMustBeTheModulesName) {
  const Operation& op = pair();
  const family::StandardModules m =
      family::standard_modules({.family = "fam", .operations = {&op}, .domain = "float32 [n]"});
  EXPECT_EQ(family::registered_variant("cpu.native.family_test_pair", m.native_cpu, op), "");
  EXPECT_EQ(family::registered_variant("cuda.torch.family_test_pair", m.torch_cuda, op), "");
  EXPECT_EQ(family::registered_variant("cpu.native.family_test_pair.blocked", m.native_cpu, op), "blocked");
  // Another module, device, operation or a name the operation's only begins: each fails, naming both.
  for (const char* wrong : {"cpu.torch.family_test_pair", "cuda.native.family_test_pair", "cpu.native.family_test_pai",
                            "cpu.native.family_test_pair_x", "cpu.native.family_test_pair.", "cpu.native.rms_norm"}) {
    try {
      family::registered_variant(wrong, m.native_cpu, op);
      ADD_FAILURE() << wrong << " was accepted for cpu.native.family_test_pair";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(wrong), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("cpu.native.family_test_pair["), std::string::npos) << e.what();
    }
  }
}

TEST(ContractCheck, MutatesMustBeTheSchemasWrittenArguments) {
  OpContract c{.operation = "family_test_inplace", .schema = "family_test_inplace(Tensor(a!) x, Tensor y) -> ()"};
  EXPECT_NE(error_message([&] { detail::check_contract(c); }).find("mutates [] disagrees with the schema, which writes [x]"),
            std::string::npos);
  c.mutates = {"y"};
  EXPECT_NE(error_message([&] { detail::check_contract(c); }).find("which writes [x]"), std::string::npos);
  c.mutates = {"x"};
  EXPECT_EQ(error_message([&] { detail::check_contract(c); }), "<no error>");
  c.schema = "other_name(Tensor(a!) x, Tensor y) -> ()";
  EXPECT_NE(error_message([&] { detail::check_contract(c); }).find("the schema must be named 'family_test_inplace'"),
            std::string::npos);
}

TEST(ContractCheck, EveryCatalogOperationPassesIt) {
  ASSERT_FALSE(builtin_operations().empty());
  for (const Operation* op : builtin_operations()) {
    SCOPED_TRACE(op->name());
    EXPECT_EQ(error_message([&] { detail::check_contract(op->contract()); }), "<no error>");
    // The library's operations register their dispatcher kernels through their declaration.
    EXPECT_NE(op->dispatcher_kernels(), nullptr);
  }
}

}  // namespace
}  // namespace xllm_kernel::testing
