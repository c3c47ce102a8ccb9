// Selection rules of initialize() and explain(), on a test catalog with its own registry.
#include "xllm_kernel/runtime.h"

#include <gtest/gtest.h>

#include <thread>

#include "test/core/test_catalog.h"

namespace xllm_kernel::testing {
namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no error>";
}

#define EXPECT_ERROR_CONTAINS(stmt, text)               \
  do {                                                  \
    const std::string _e = error_of([&] { stmt; });     \
    EXPECT_NE(_e.find(text), std::string::npos) << _e;  \
  } while (0)

// alpha: cpu.native (20), cpu.torch (10), cpu.python (20, eager+graph, no module), cpu.vendor
// (unavailable module), cuda.native (no module), cuda.plugin (plugin not installed). beta:
// cpu.torch (10), cpu.native.graph (5, graph only).
class RuntimeTest : public ::testing::Test {
 protected:
  RuntimeTest() {
    module_native_ = BackendModule{.name = "test.native", .device = Device::kCpu, .solution = "native",
                                   .binding = "test", .implementations = {{.operation = &alpha(), .priority = 20}},
                                   .probe = [] { return ProbeResult::ok("test target"); }};
    module_native_graph_ = BackendModule{
        .name = "test.native_graph", .device = Device::kCpu, .solution = "native", .binding = "test",
        .execution_modes = {ExecutionMode::kGraph},
        .implementations = {{.operation = &beta(), .variant = "graph", .priority = 5}}};
    module_torch_ = BackendModule{
        .name = "test.torch", .device = Device::kCpu, .solution = "torch", .binding = "test",
        .implementations = {{.operation = &alpha(), .priority = 10}, {.operation = &beta(), .priority = 10}}};
    module_missing_ = BackendModule{.name = "test.vendor", .device = Device::kCpu, .solution = "vendor",
                                    .binding = "test", .implementations = {{.operation = &alpha(), .priority = 99}},
                                    .probe = [] { return ProbeResult::missing("libvendor.so (not found)"); }};
    module_unregistered_ = BackendModule{.name = "test.unregistered", .device = Device::kCpu,
                                         .solution = "unregistered", .binding = "test",
                                         .implementations = {{.operation = &alpha()}},
                                         .probe = [] { return ProbeResult::missing("libvendor.so (not found)"); }};
    module_plugin_ = BackendModule{.name = "test.plugin", .device = Device::kCuda, .solution = "plugin",
                                   .binding = "test", .implementations = {{.operation = &alpha()}},
                                   .plugin = "libxllm_kernel_no_such_plugin.so"};
    group_ = Group{"test", {&alpha(), &beta()},
                   {&module_native_, &module_native_graph_, &module_torch_, &module_missing_, &module_unregistered_,
                    &module_plugin_}};
    add(alpha(), "cpu.native.alpha", alpha_contract(), Device::kCpu, "native", 20, &plus1);
    add(alpha(), "cpu.torch.alpha", alpha_contract(), Device::kCpu, "torch", 10, &plus2);
    add(alpha(), "cpu.python.alpha", alpha_contract(), Device::kCpu, "python", 20, &plus3,
        {ExecutionMode::kEager, ExecutionMode::kGraph});
    // Registered although its module's dependency is missing: excluded with the module's reason.
    add(alpha(), "cpu.vendor.alpha", alpha_contract(), Device::kCpu, "vendor", 99, &plus3);
    add(alpha(), "cuda.native.alpha", alpha_contract(), Device::kCuda, "native", 20, &plus1);
    add(beta(), "cpu.torch.beta", beta_contract(), Device::kCpu, "torch", 10, &times2);
    add(beta(), "cpu.native.beta.graph", beta_contract(), Device::kCpu, "native", 5, &times3, {ExecutionMode::kGraph},
        "graph");
    runtime_ = std::make_unique<Runtime>(registry_, std::vector<const Group*>{&group_}, /*publish=*/true);
  }
  ~RuntimeTest() override { runtime_->reset_for_testing(); }

  // Registers like the library does: a kernel a test module declares carries that module.
  void add(const TypedOperation<UnaryFn>& op, const std::string& name, const OpContract& contract, Device device,
           const std::string& solution, int priority, UnaryFn* fn, std::vector<ExecutionMode> modes = {ExecutionMode::kEager},
           const std::string& variant = "") {
    KernelSpec s = spec(name, contract, device, solution, priority, std::move(modes), variant);
    for (const BackendModule* m : group_.modules) {
      for (const Implementation& impl : m->implementations) {
        if (m->implementation_name(impl) == name) s.module = m;
      }
    }
    registry_.add(op, s,
                  KernelFunction<UnaryFn>([](const void* ctx, int x) { return reinterpret_cast<UnaryFn*>(const_cast<void*>(ctx))(x); },
                                          reinterpret_cast<const void*>(fn)));
  }

  std::shared_ptr<const Bindings> init(InitializeOptions options = {}, Device device = Device::kCpu) {
    return runtime_->initialize(device, options);
  }

  Registry registry_;
  BackendModule module_native_, module_native_graph_, module_torch_, module_missing_, module_unregistered_,
      module_plugin_;
  Group group_;
  std::unique_ptr<Runtime> runtime_;
};

TEST_F(RuntimeTest, SelectsHighestPriorityThenName) {
  auto b = init({{"alpha"}});
  // native and python tie at 20; "cpu.native.alpha" < "cpu.python.alpha". vendor (99) is excluded.
  EXPECT_EQ(b->at("alpha").spec().name, "cpu.native.alpha");
  EXPECT_EQ(b->at("alpha").detail(), "test target");
  EXPECT_EQ(b->at("alpha").function<UnaryFn>()(1), 2);
}

TEST_F(RuntimeTest, PublishesToTheOperationForTheServingPath) {
  EXPECT_ERROR_CONTAINS(alpha().call(Device::kCpu, 1), "device cpu is not initialized");
  init({{"alpha"}});
  EXPECT_EQ(alpha().call(Device::kCpu, 1), 2);
  EXPECT_EQ(alpha().prepared(Device::kCpu)->spec().name, "cpu.native.alpha");
  EXPECT_EQ(alpha().prepared(Device::kCuda), nullptr);
  EXPECT_ERROR_CONTAINS(alpha().call(Device::kCuda, 1), "device cuda is not initialized");
  // beta was not requested.
  EXPECT_ERROR_CONTAINS(beta().call(Device::kCpu, 1), "beta: device cpu is not initialized");
}

TEST_F(RuntimeTest, EmptyOperationsMeansTheWholeCatalog) {
  auto b = init();
  EXPECT_EQ(b->operations(), (std::vector<std::string>{"alpha", "beta"}));
  EXPECT_EQ(b->at("beta").spec().name, "cpu.torch.beta");
  EXPECT_ERROR_CONTAINS(b->at("gamma"), "operation 'gamma' was not initialized");
}

TEST_F(RuntimeTest, FiltersByExecutionMode) {
  InitializeOptions options;
  options.mode = ExecutionMode::kGraph;
  auto b = init(options);
  EXPECT_EQ(b->at("alpha").spec().name, "cpu.python.alpha");
  EXPECT_EQ(b->at("beta").spec().name, "cpu.native.beta.graph");
  const Explanation ex = runtime_->explain(Device::kCpu, "alpha");
  for (const auto& c : ex.candidates) {
    if (c.name == "cpu.native.alpha") {
      EXPECT_EQ(c.verdict, Verdict::kExcluded);
      EXPECT_EQ(c.reason, "unsupported mode graph (supports eager)");
    }
  }
}

TEST_F(RuntimeTest, FiltersByDevice) {
  // cuda: the only registered kernel is cuda.native.alpha; the plugin module is not installed.
  auto b = init({{"alpha"}}, Device::kCuda);
  EXPECT_EQ(b->at("alpha").spec().name, "cuda.native.alpha");
  const Explanation ex = runtime_->explain(Device::kCuda, "alpha");
  bool saw_plugin = false;
  for (const auto& c : ex.candidates) {
    EXPECT_EQ(c.name.rfind("cuda.", 0), 0u) << c.name;
    if (c.name == "cuda.plugin.alpha") {
      saw_plugin = true;
      EXPECT_EQ(c.verdict, Verdict::kExcluded);
      EXPECT_NE(c.reason.find("plugin libxllm_kernel_no_such_plugin.so is not installed"), std::string::npos) << c.reason;
    }
  }
  EXPECT_TRUE(saw_plugin);
}

TEST_F(RuntimeTest, MissingDependencyExcludesWithReason) {
  const Explanation ex = runtime_->explain(Device::kCpu, "alpha");
  ASSERT_TRUE(ex.selected());
  EXPECT_EQ(ex.selected()->name, "cpu.native.alpha");
  int seen = 0;
  for (const auto& c : ex.candidates) {
    if (c.name == "cpu.vendor.alpha" || c.name == "cpu.unregistered.alpha") {
      ++seen;
      EXPECT_EQ(c.verdict, Verdict::kExcluded);
      EXPECT_EQ(c.reason, "missing dependency: libvendor.so (not found)");
    }
  }
  EXPECT_EQ(seen, 2);  // also the declared implementation that never registered
}

TEST_F(RuntimeTest, ExplainGivesEveryCandidateInOrder) {
  const Explanation ex = runtime_->explain(Device::kCpu, "alpha");
  std::vector<std::string> names;
  for (const auto& c : ex.candidates) names.push_back(c.name);
  EXPECT_EQ(names, (std::vector<std::string>{"cpu.native.alpha", "cpu.python.alpha", "cpu.torch.alpha",
                                             "cpu.vendor.alpha", "cpu.unregistered.alpha"}));
  EXPECT_EQ(ex.candidates[1].verdict, Verdict::kLowerPriority);
  EXPECT_EQ(ex.candidates[1].reason, "same priority, name orders after cpu.native.alpha");
  EXPECT_EQ(ex.candidates[2].reason, "priority 10 < 20");
  const std::string text = ex.to_string();
  EXPECT_NE(text.find("cpu.native.alpha"), std::string::npos);
  EXPECT_NE(text.find("selected"), std::string::npos);
  EXPECT_NE(text.find("excluded: missing dependency: libvendor.so"), std::string::npos) << text;
}

TEST_F(RuntimeTest, OverrideByFullName) {
  auto b = init({{"alpha"}, {{"alpha", "cpu.torch.alpha"}}});
  EXPECT_EQ(b->at("alpha").spec().name, "cpu.torch.alpha");
  EXPECT_EQ(alpha().call(Device::kCpu, 1), 3);
  const Explanation ex = runtime_->explain(Device::kCpu, "alpha");
  EXPECT_EQ(ex.override_target, "cpu.torch.alpha");
  EXPECT_EQ(ex.override_source, "argument");
  for (const auto& c : ex.candidates) {
    if (c.name == "cpu.native.alpha") {
      EXPECT_EQ(c.verdict, Verdict::kNotOverridden);
      EXPECT_NE(c.reason.find("override selects cpu.torch.alpha (argument)"), std::string::npos) << c.reason;
    }
  }
}

TEST_F(RuntimeTest, OverrideBySolution) {
  auto b = init({{"alpha"}, {{"alpha", "python"}}});
  EXPECT_EQ(b->at("alpha").spec().name, "cpu.python.alpha");
}

TEST_F(RuntimeTest, EnvironmentOverrideBeatsArgument) {
  ScopedEnv env("XLLM_KERNEL_OVERRIDE_ALPHA", "torch");
  auto b = init({{"alpha"}, {{"alpha", "cpu.python.alpha"}}});
  EXPECT_EQ(b->at("alpha").spec().name, "cpu.torch.alpha");
  const Explanation ex = runtime_->explain(Device::kCpu, "alpha");
  EXPECT_EQ(ex.override_source, "environment XLLM_KERNEL_OVERRIDE_ALPHA");
  EXPECT_NE(ex.to_string().find("override 'torch' from environment XLLM_KERNEL_OVERRIDE_ALPHA"), std::string::npos);
}

TEST_F(RuntimeTest, UnknownOverrideNamesClosest) {
  EXPECT_ERROR_CONTAINS(init({{"alpha"}, {{"alpha", "cpu.natve.alpha"}}}), "closest: cpu.native.alpha");
  EXPECT_ERROR_CONTAINS(init({{"alpha"}, {{"alpha", "nativ"}}}), "neither an implementation nor a solution");
  // Nothing was published by the failed attempts.
  EXPECT_EQ(runtime_->bindings(Device::kCpu), nullptr);
  EXPECT_EQ(alpha().prepared(Device::kCpu), nullptr);
}

TEST_F(RuntimeTest, OverrideOfExcludedTargetGivesItsReason) {
  EXPECT_ERROR_CONTAINS(init({{"alpha"}, {{"alpha", "cpu.vendor.alpha"}}}),
                        "names an excluded implementation: missing dependency: libvendor.so (not found)");
  EXPECT_ERROR_CONTAINS(init({{"alpha"}, {{"alpha", "vendor"}}}), "every implementation of that solution is excluded");
  InitializeOptions graph{{"alpha"}, {{"alpha", "cpu.torch.alpha"}}, ExecutionMode::kGraph};
  EXPECT_ERROR_CONTAINS(init(graph), "unsupported mode graph");
  EXPECT_ERROR_CONTAINS(init({{"alpha"}, {{"alpha", "cuda.native.alpha"}}}), "an implementation for device cuda");
}

TEST_F(RuntimeTest, UnknownOperationNamesClosest) {
  EXPECT_ERROR_CONTAINS(init({{"alpah"}}), "unknown operation 'alpah'; closest: alpha");
  EXPECT_ERROR_CONTAINS(init({{"alpha"}, {{"bta", "torch"}}}), "unknown operation 'bta'");
  EXPECT_ERROR_CONTAINS(init({{"alpha"}, {{"beta", "torch"}}}), "not among the requested operations");
  EXPECT_ERROR_CONTAINS(runtime_->explain(Device::kCpu, "gamma"), "unknown operation 'gamma'");
}

TEST_F(RuntimeTest, SameConfigurationReturnsSameBindings) {
  auto a = init({{"beta", "alpha"}});
  auto b = init({{"alpha", "beta", "alpha"}});  // order and repetition do not matter
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(runtime_->bindings(Device::kCpu).get(), a.get());
}

TEST_F(RuntimeTest, DifferentConfigurationIsAnErrorNamingTheDifference) {
  init({{"alpha"}});
  EXPECT_ERROR_CONTAINS(init({{"alpha", "beta"}}), "operations [alpha] then [alpha, beta]");
  EXPECT_ERROR_CONTAINS(init({{"alpha"}, {{"alpha", "torch"}}}), "overrides {} then {alpha=torch (argument)}");
  EXPECT_ERROR_CONTAINS(init({{"alpha"}, {}, ExecutionMode::kGraph}), "mode eager then graph");
  EXPECT_ERROR_CONTAINS(init({{"alpha"}, {}, ExecutionMode::kGraph}), "restart the worker");
  {
    ScopedEnv env("XLLM_KERNEL_OVERRIDE_ALPHA", "torch");
    EXPECT_ERROR_CONTAINS(init({{"alpha"}}), "environment XLLM_KERNEL_OVERRIDE_ALPHA");
  }
  // Another device is configured independently.
  EXPECT_NO_THROW(init({{"alpha"}}, Device::kCuda));
}

TEST_F(RuntimeTest, AllOrNothing) {
  // beta has no eager implementation once its only eager one is overridden away to graph-only.
  EXPECT_ERROR_CONTAINS(init({{"alpha", "beta"}, {{"beta", "cpu.native.beta.graph"}}}),
                        "unsupported mode eager (supports graph)");
  EXPECT_EQ(runtime_->bindings(Device::kCpu), nullptr);
  EXPECT_EQ(alpha().prepared(Device::kCpu), nullptr);  // alpha prepared fine but was not published
  // A later, valid configuration still works.
  EXPECT_EQ(init({{"alpha", "beta"}})->size(), 2u);
}

// Batch invariance: only implementations that declare it are eligible; the others are excluded
// with their own code and reason; explain shows the property and the request.
TEST_F(RuntimeTest, BatchInvariantSelectsOnlyImplementationsThatDeclareIt) {
  KernelSpec invariant = spec("cpu.invariant.alpha", alpha_contract(), Device::kCpu, "invariant", 1);
  invariant.batch_invariant = true;
  registry_.add(alpha(), invariant, KernelFunction<UnaryFn>::of<&plus3>());
  InitializeOptions options{{"alpha"}};
  options.batch_invariant = true;
  auto b = init(options);
  EXPECT_EQ(b->at("alpha").spec().name, "cpu.invariant.alpha");
  EXPECT_TRUE(b->at("alpha").spec().batch_invariant);
  const Explanation ex = runtime_->explain(Device::kCpu, "alpha");
  EXPECT_TRUE(ex.batch_invariant);
  ASSERT_TRUE(ex.selected());
  EXPECT_TRUE(ex.selected()->batch_invariant);
  int excluded = 0;
  for (const auto& c : ex.candidates) {
    if (c.name == "cpu.native.alpha" || c.name == "cpu.torch.alpha") {
      EXPECT_EQ(c.rejection, Rejection::kNotBatchInvariant) << c.name;
      EXPECT_NE(c.reason.find("not batch-invariant"), std::string::npos) << c.reason;
      EXPECT_FALSE(c.batch_invariant);
      ++excluded;
    }
  }
  EXPECT_EQ(excluded, 2);
  EXPECT_NE(ex.to_string().find("(eager, batch-invariant)"), std::string::npos) << ex.to_string();
  EXPECT_NE(ex.to_string().find("test, batch-invariant  selected"), std::string::npos) << ex.to_string();
  EXPECT_STREQ(to_string(Rejection::kNotBatchInvariant), "not_batch_invariant");
  // Asking again without it is another configuration.
  EXPECT_ERROR_CONTAINS(init({{"alpha"}}), "batch_invariant true then false");
  // Without the request the default selection is unchanged.
  runtime_->reset_for_testing();
  EXPECT_EQ(init({{"alpha"}})->at("alpha").spec().name, "cpu.native.alpha");
}

// Every operation without a batch-invariant implementation is named, each with its candidates.
TEST_F(RuntimeTest, BatchInvariantFailureNamesEveryOperationWithItsReasons) {
  InitializeOptions options;
  options.batch_invariant = true;
  std::string e = "<no error>";
  try {
    init(options);
  } catch (const std::exception& error) {
    e = error.what();
  }
  EXPECT_NE(e.find("2 operations have no eligible implementation (batch invariance was asked for)"), std::string::npos) << e;
  EXPECT_NE(e.find("alpha: no eligible implementation on cpu in eager mode that is batch-invariant"), std::string::npos) << e;
  EXPECT_NE(e.find("beta: no eligible implementation on cpu in eager mode that is batch-invariant"), std::string::npos) << e;
  EXPECT_NE(e.find("cpu.torch.beta"), std::string::npos) << e;
  EXPECT_EQ(runtime_->bindings(Device::kCpu), nullptr);
}

TEST_F(RuntimeTest, BatchInvariantFromTheEnvironment) {
  {
    ScopedEnv env("XLLM_KERNEL_BATCH_INVARIANT", "maybe");
    EXPECT_ERROR_CONTAINS(init({{"alpha"}}), "XLLM_KERNEL_BATCH_INVARIANT must be 1, true, yes, on, 0, false, no or off, got 'maybe'");
  }
  {
    ScopedEnv env("XLLM_KERNEL_BATCH_INVARIANT", "0");
    EXPECT_EQ(init({{"alpha"}})->at("alpha").spec().name, "cpu.native.alpha");
  }
  runtime_->reset_for_testing();
  ScopedEnv env("XLLM_KERNEL_BATCH_INVARIANT", "True");
  EXPECT_ERROR_CONTAINS(init({{"alpha"}}), "alpha: no eligible implementation on cpu in eager mode that is batch-invariant");
}

TEST_F(RuntimeTest, FreezesTheDeviceOnInitialize) {
  init({{"alpha"}});
  EXPECT_ERROR_CONTAINS(add(alpha(), "cpu.late.alpha", alpha_contract(), Device::kCpu, "late", 1, &plus1), "frozen");
  EXPECT_NO_THROW(add(alpha(), "cuda.late.alpha", alpha_contract(), Device::kCuda, "late", 1, &plus1));
}

TEST_F(RuntimeTest, ConcurrentInitializeAgrees) {
  std::vector<std::shared_ptr<const Bindings>> results(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] { results[i] = runtime_->initialize(Device::kCpu, InitializeOptions{{"alpha", "beta"}}); });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) EXPECT_EQ(r.get(), results[0].get());
}

TEST_F(RuntimeTest, ContractVersionMismatchIsExcluded) {
  static const OpContract old_alpha{"alpha", 0, "alpha(int x) -> int", {}, false, NumericalMode::kExact, "", ""};
  add(alpha(), "cpu.old.alpha", old_alpha, Device::kCpu, "old", 100, &plus3);
  auto b = init({{"alpha"}});
  EXPECT_EQ(b->at("alpha").spec().name, "cpu.native.alpha");
  const Explanation ex = runtime_->explain(Device::kCpu, "alpha");
  bool seen = false;
  for (const auto& c : ex.candidates) {
    if (c.name == "cpu.old.alpha") {
      seen = true;
      EXPECT_NE(c.reason.find("contract mismatch: implements version 0"), std::string::npos) << c.reason;
    }
  }
  EXPECT_TRUE(seen);
}

TEST_F(RuntimeTest, RegistrationErrorsPropagateFromInitialize) {
  registry_.record_error("register_kernel(cpu.broken.alpha): boom");
  EXPECT_ERROR_CONTAINS(init(), "an implementation failed to register: register_kernel(cpu.broken.alpha): boom");
}

TEST_F(RuntimeTest, NoEligibleImplementationListsCandidates) {
  Registry empty;
  Runtime rt(empty, {&group_}, /*publish=*/false);
  EXPECT_ERROR_CONTAINS(rt.initialize(Device::kNpu, InitializeOptions{{"alpha"}}),
                        "alpha: no eligible implementation on npu in eager mode");
}

TEST_F(RuntimeTest, RejectionCodesStandBesideTheReasons) {
  const Explanation ex = runtime_->explain(Device::kCpu, "alpha");
  int checked = 0;
  for (const auto& c : ex.candidates) {
    if (c.verdict != Verdict::kExcluded) {
      EXPECT_EQ(c.rejection, Rejection::kNone) << c.name;
      continue;
    }
    EXPECT_EQ(c.rejection, Rejection::kMissingDependency) << c.name;
    ++checked;
  }
  EXPECT_EQ(checked, 2);
  InitializeOptions graph;
  graph.mode = ExecutionMode::kGraph;
  for (const auto& c : runtime_->explain(Device::kCpu, "alpha", graph).candidates) {
    if (c.name == "cpu.native.alpha") EXPECT_EQ(c.rejection, Rejection::kUnsupportedMode);
  }
  EXPECT_STREQ(to_string(Rejection::kUnsupported), "unsupported");
}

// An implementation's own supports probe (an ISA, a compute capability) excludes it alone, with
// its reason; its module's other implementations stay eligible.
TEST(RuntimeSupports, ImplementationProbeExcludesOnlyThatImplementation) {
  static const BackendModule module{
      .name = "test.isa", .device = Device::kCpu, .solution = "native", .binding = "test",
      .implementations = {{.operation = &alpha(), .priority = 30,
                           .supports = [] { return ProbeResult::missing("needs AVX-512 (this CPU: AVX2)"); }},
                          {.operation = &alpha(), .variant = "avx2", .priority = 20,
                           .supports = [] { return ProbeResult::ok("AVX2"); }}},
      .probe = [] { return ProbeResult::ok("module ok"); }};
  static const Group group{"isa", {&alpha()}, {&module}};
  Registry r;
  for (const Implementation& impl : module.implementations) {
    r.add(alpha(), module.spec(impl), KernelFunction<UnaryFn>::of<&plus1>());
  }
  Runtime rt(r, {&group}, /*publish=*/false);
  const Explanation ex = rt.explain(Device::kCpu, "alpha");
  ASSERT_EQ(ex.candidates.size(), 2u);
  EXPECT_EQ(ex.candidates[0].name, "cpu.native.alpha.avx2");
  EXPECT_EQ(ex.candidates[0].verdict, Verdict::kSelected);
  EXPECT_EQ(ex.candidates[0].detail, "module ok, AVX2");
  EXPECT_EQ(ex.candidates[1].name, "cpu.native.alpha");
  EXPECT_EQ(ex.candidates[1].rejection, Rejection::kUnsupported);
  EXPECT_EQ(ex.candidates[1].reason, "unsupported here: needs AVX-512 (this CPU: AVX2)");
  EXPECT_EQ(rt.initialize(Device::kCpu, {{"alpha"}})->at("alpha").spec().name, "cpu.native.alpha.avx2");
}

// explain() loads only the modules that declare the operation it explains.
TEST(RuntimeModules, ExplainLoadsOnlyTheModulesOfItsOperation) {
  static int alpha_probes = 0, beta_probes = 0;
  static const BackendModule a{.name = "test.a", .device = Device::kCpu, .solution = "native", .binding = "test",
                               .implementations = {{.operation = &alpha()}},
                               .probe = [] { ++alpha_probes; return ProbeResult::ok(); }};
  static const BackendModule b{.name = "test.b", .device = Device::kCpu, .solution = "native", .binding = "test",
                               .implementations = {{.operation = &beta()}},
                               .probe = [] { ++beta_probes; return ProbeResult::ok(); }};
  static const Group group{"ab", {&alpha(), &beta()}, {&a, &b}};
  Registry r;
  Runtime rt(r, {&group}, /*publish=*/false);
  rt.explain(Device::kCpu, "alpha");
  rt.explain(Device::kCpu, "alpha");
  EXPECT_EQ(alpha_probes, 1);  // probed once
  EXPECT_EQ(beta_probes, 0);
  rt.explain(Device::kCpu, "beta");
  EXPECT_EQ(beta_probes, 1);
}

}  // namespace
}  // namespace xllm_kernel::testing
