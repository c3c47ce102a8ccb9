// Groups added at run time (the path of operations declared in Python): contracts checked when
// they are made, the catalog's names kept unique, a module's probe deciding exclusion, boxed
// kernels selected and called through the binding and through torch.ops.xllm_kernel.<op>.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include "xllm_kernel/boxing.h"
#include "xllm_kernel/xllm_kernel.h"

namespace xllm_kernel::testing {
namespace {

OpContract contract(const std::string& name, const std::string& schema, std::vector<std::string> mutates = {}) {
  return OpContract{.operation = name, .version = 1, .schema = schema, .mutates = std::move(mutates),
                    .numerical_mode = NumericalMode::kExact};
}

void expect_invalid(const std::function<void()>& fn, const std::string& fragment) {
  try {
    fn();
    ADD_FAILURE() << "expected std::invalid_argument containing: " << fragment;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(AddedGroups, ContractsAreCheckedWhenMade) {
  expect_invalid([] { make_boxed_operation(contract("added_x", "added_x(Tensor(a!) input) -> ()")); },
                 "mutates [] disagrees with the schema, which writes [input]");
  expect_invalid([] { make_boxed_operation(contract("added_x", "added_y(Tensor input) -> Tensor")); },
                 "the schema must be named 'added_x'");
  expect_invalid([] { make_boxed_operation(contract("added_x", "added_x(Tensr input) -> Tensor")); }, "does not parse");
  expect_invalid([] { make_boxed_operation(contract("added_x", "added_x")); }, "has no argument list");
  expect_invalid([] { make_boxed_operation(contract("Added", "Added(Tensor input) -> Tensor")); }, "lower_snake_case");
  OpContract versionless = contract("added_x", "added_x(Tensor input) -> Tensor");
  versionless.version = 0;
  expect_invalid([&] { make_boxed_operation(versionless); }, "version must be >= 1");
}

TEST(AddedGroups, NamesStayUniqueAcrossTheCatalog) {
  expect_invalid([] { add_group("activation", {}, {}); }, "already has a group of that name");
  expect_invalid([] { add_group("added_dup", {&rms_norm_operation()}, {}); }, "must come from make_boxed_operation");
  const Operation& op = make_boxed_operation(contract("rms_norm", "rms_norm(Tensor input) -> Tensor"));
  expect_invalid([&] { add_group("added_dup", {&op}, {}); }, "already has an operation 'rms_norm'");
  BackendModule module{.name = "activation.native_cpu", .device = Device::kCpu, .solution = "test"};
  expect_invalid([&] { add_group("added_dup", {}, {module}); }, "already has a backend module");
  BackendModule again{.name = "added_dup.module", .device = Device::kCpu, .solution = "native",
                      .implementations = {{.operation = &silu_and_mul_operation()}}};
  expect_invalid([&] { add_group("added_dup", {}, {again}); }, "declares cpu.native.silu_and_mul, which the catalog");
  for (const Group* g : builtin_groups()) EXPECT_NE(g->name, "added_dup");
}

TEST(AddedGroups, BoxedOperationsAreSelectedAndDispatched) {
  const Operation& scale = make_boxed_operation(contract("added_scale", "added_scale(Tensor input, float alpha) -> Tensor"));
  BackendModule present{.name = "added.present", .device = Device::kCpu, .solution = "boxed", .binding = "test",
                        .implementations = {{.operation = &scale, .priority = 10}},
                        .probe = [] { return ProbeResult::ok("present"); }};
  BackendModule absent{.name = "added.absent", .device = Device::kCpu, .solution = "absent", .binding = "test",
                       .implementations = {{.operation = &scale, .priority = 90}},
                       .probe = [] { return ProbeResult::missing("python module absent cannot be imported"); }};
  const Group& group = add_group("added_test_group", {&scale}, {present, absent});
  EXPECT_EQ(group.modules.size(), 2u);
  bool listed = false;
  for (const Group* g : builtin_groups()) listed |= g == &group;
  EXPECT_TRUE(listed);

  Registry r;
  KernelSpec spec{.name = "cpu.boxed.added_scale", .contract = &scale.contract(), .device = Device::kCpu,
                  .solution = "boxed", .binding = "test", .priority = 10, .module = group.modules[0]};
  add_boxed_kernel(r, scale, spec, [](torch::jit::Stack& s) {
    at::Tensor out = s[0].toTensor() * s[1].toDouble();
    s.clear();
    s.emplace_back(out);
  });
  Runtime rt(r, std::vector<const Group*>{&group}, /*publish_to_operations=*/true);
  auto b = rt.initialize(Device::kCpu, {{"added_scale"}});
  EXPECT_EQ(b->at("added_scale").spec().name, "cpu.boxed.added_scale");
  Explanation ex = rt.explain(Device::kCpu, "added_scale");
  ASSERT_EQ(ex.candidates.size(), 2u);
  EXPECT_EQ(ex.candidates[0].detail, "present");
  EXPECT_EQ(ex.candidates[1].name, "cpu.absent.added_scale");
  EXPECT_EQ(ex.candidates[1].rejection, Rejection::kMissingDependency);

  at::Tensor x = at::arange(4, at::kFloat);
  torch::jit::Stack stack{x, 3.0};
  scale.boxed_caller()(b->at("added_scale").erased(), stack);
  ASSERT_EQ(stack.size(), 1u);
  EXPECT_TRUE(at::equal(stack[0].toTensor(), x * 3));

  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow("xllm_kernel::added_scale", "");
  torch::jit::Stack via_torch{x, 2.0};
  handle.callBoxed(via_torch);
  ASSERT_EQ(via_torch.size(), 1u);
  EXPECT_TRUE(at::equal(via_torch[0].toTensor(), x * 2));
  rt.reset_for_testing();  // unpublishes: the dispatcher now says the device is not initialized
  torch::jit::Stack after{x, 2.0};
  EXPECT_THROW(handle.callBoxed(after), std::exception);
}

}  // namespace
}  // namespace xllm_kernel::testing
