#include "xllm_kernel/registry.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "test/core/test_catalog.h"
#include "xllm_kernel/catalog.h"

namespace xllm_kernel::testing {
namespace {

template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Registry, AddsAndFinds) {
  Registry r;
  r.add(alpha(), spec("cpu.native.alpha", alpha_contract(), Device::kCpu, "native", 1),
        KernelFunction<UnaryFn>::of<&plus1>());
  EXPECT_EQ(r.size(), 1u);
  auto k = r.find("cpu.native.alpha");
  ASSERT_TRUE(k);
  EXPECT_EQ(k->operation, &alpha());
  EXPECT_EQ(r.find("cpu.native.beta"), nullptr);
}

TEST(Registry, RejectsDuplicateName) {
  Registry r;
  r.add(alpha(), spec("cpu.native.alpha", alpha_contract(), Device::kCpu, "native", 1),
        KernelFunction<UnaryFn>::of<&plus1>());
  const std::string e = error_of([&] {
    r.add(alpha(), spec("cpu.native.alpha", alpha_contract(), Device::kCpu, "native", 5),
          KernelFunction<UnaryFn>::of<&plus2>());
  });
  EXPECT_NE(e.find("already registered"), std::string::npos) << e;
  EXPECT_EQ(r.size(), 1u);
}

TEST(Registry, RejectsRegistrationAfterFreezeOfThatDeviceOnly) {
  Registry r;
  r.freeze(Device::kCpu);
  const std::string e = error_of([&] {
    r.add(alpha(), spec("cpu.native.alpha", alpha_contract(), Device::kCpu, "native", 1),
          KernelFunction<UnaryFn>::of<&plus1>());
  });
  EXPECT_NE(e.find("frozen"), std::string::npos) << e;
  // Another device's implementations may still register until that device initializes.
  EXPECT_NO_THROW(r.add(alpha(), spec("cuda.native.alpha", alpha_contract(), Device::kCuda, "native", 1),
                        KernelFunction<UnaryFn>::of<&plus1>()));
  EXPECT_TRUE(r.frozen(Device::kCpu));
  EXPECT_FALSE(r.frozen(Device::kCuda));
}

TEST(Registry, RejectsNameThatContradictsFields) {
  Registry r;
  for (const char* bad : {"cuda.native.alpha", "cpu.torch.alpha", "cpu.native.beta", "cpu.native.alpha.v2", "alpha"}) {
    const std::string e = error_of([&] {
      r.add(alpha(), spec(bad, alpha_contract(), Device::kCpu, "native", 1), KernelFunction<UnaryFn>::of<&plus1>());
    });
    EXPECT_NE(e.find("must be 'cpu.native.alpha'"), std::string::npos) << bad << ": " << e;
  }
  // A variant is the optional last segment and must match the field.
  EXPECT_NO_THROW(r.add(alpha(), spec("cpu.native.alpha.v2", alpha_contract(), Device::kCpu, "native", 1, {ExecutionMode::kEager}, "v2"),
                        KernelFunction<UnaryFn>::of<&plus1>()));
}

TEST(Registry, RejectsContractOfAnotherOperation) {
  Registry r;
  const std::string e = error_of([&] {
    r.add(alpha(), spec("cpu.native.alpha", beta_contract(), Device::kCpu, "native", 1), KernelFunction<UnaryFn>::of<&plus1>());
  });
  EXPECT_NE(e.find("contract is for operation 'beta'"), std::string::npos) << e;
}

double wrong_signature(double x) { return x; }

TEST(Registry, RejectsCallableWithAnotherSignature) {
  Registry r;
  const std::string e = error_of([&] {
    r.add(static_cast<const Operation&>(alpha()), spec("cpu.native.alpha", alpha_contract(), Device::kCpu, "native", 1),
          ErasedFunction::from(KernelFunction<double(double)>::of<&wrong_signature>()));
  });
  EXPECT_NE(e.find("signature does not match"), std::string::npos) << e;
}

TEST(Registry, RejectsEmptyFields) {
  Registry r;
  KernelSpec s = spec("cpu.native.alpha", alpha_contract(), Device::kCpu, "native", 1);
  s.execution_modes.clear();
  EXPECT_NE(error_of([&] { r.add(alpha(), s, KernelFunction<UnaryFn>::of<&plus1>()); }).find("execution_modes"),
            std::string::npos);
  s = spec("cpu.native.alpha", alpha_contract(), Device::kCpu, "native", 1);
  s.contract = nullptr;
  EXPECT_NE(error_of([&] { r.add(alpha(), s, KernelFunction<UnaryFn>::of<&plus1>()); }).find("contract must be set"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              r.add(alpha(), spec("cpu.native.alpha", alpha_contract(), Device::kCpu, "native", 1), KernelFunction<UnaryFn>());
            }).find("function must not be null"),
            std::string::npos);
}

TEST(Registry, KernelFunctionCallsThroughThunkWithContext) {
  struct Offset {
    int k;
  };
  static const Offset offset{40};
  KernelFunction<UnaryFn> fn([](const void* ctx, int x) { return x + static_cast<const Offset*>(ctx)->k; }, &offset);
  EXPECT_EQ(fn(2), 42);
  EXPECT_EQ(KernelFunction<UnaryFn>::of<&times3>()(5), 15);
}

// Static registration survives linking: this binary links the library and sees its kernels.
TEST(Registry, ProcessRegistryIsPopulatedByStaticRegistration) {
  EXPECT_GE(registry().size(), 6u);
  EXPECT_TRUE(registry().errors().empty());
  for (const char* name : {"cpu.torch.rms_norm", "cpu.native.rms_norm", "cpu.torch.fused_add_rms_norm",
                           "cpu.native.fused_add_rms_norm", "cpu.torch.layer_norm", "cpu.native.layer_norm"}) {
    EXPECT_TRUE(registry().find(name)) << name;
  }
  // Every implementation the library registers is declared by a module of its group (explain can
  // list it even when its dependency is missing), and its spec is the declaration's.
  for (const auto& k : registry().kernels()) {
    auto [module, impl] = find_declaration(k->spec.name);
    ASSERT_NE(module, nullptr) << k->spec.name;
    EXPECT_EQ(k->spec.module, module) << k->spec.name;
    EXPECT_EQ(k->spec.priority, impl->priority) << k->spec.name;
    EXPECT_EQ(k->spec.device, module->device) << k->spec.name;
  }
}

// A registration that names no declaration of its module is recorded as an error (initialize()
// rethrows it), never a silently probe-less kernel.
TEST(Registry, UndeclaredImplementationIsAnError) {
  static const BackendModule module{.name = "test.undeclared", .device = Device::kCpu, .solution = "native",
                                    .binding = "test"};
  const size_t errors = registry().errors().size();
  detail::ImplementationRegistrar::add(module, alpha(), ErasedFunction::from(KernelFunction<UnaryFn>::of<&plus1>()), "");
  const auto now = registry().errors();
  ASSERT_EQ(now.size(), errors + 1);
  EXPECT_NE(now.back().find("module test.undeclared declares no such implementation"), std::string::npos) << now.back();
  EXPECT_FALSE(registry().find("cpu.native.alpha"));
  registry().clear_errors_for_testing();
}

TEST(Strings, ParseDeviceAndMode) {
  EXPECT_EQ(parse_device("cpu"), Device::kCpu);
  EXPECT_EQ(parse_device("cuda:1"), Device::kCuda);
  EXPECT_EQ(parse_device("npu"), Device::kNpu);
  EXPECT_NE(error_of([] { parse_device("tpu"); }).find("expected cpu, cuda or npu, got 'tpu'"), std::string::npos);
  EXPECT_EQ(parse_execution_mode("graph"), ExecutionMode::kGraph);
  EXPECT_NE(error_of([] { parse_execution_mode("aclgraph"); }).find("expected eager or graph"), std::string::npos);
}

}  // namespace
}  // namespace xllm_kernel::testing
