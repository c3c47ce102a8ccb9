// Selection's steps one at a time (src/core/selection.h): gather, check_availability, filter,
// choose, label, and select composing them. runtime_test.cpp covers them through initialize().
#include "src/core/selection.h"

#include <gtest/gtest.h>

#include "test/core/test_catalog.h"

namespace xllm_kernel::testing {
namespace {

using detail::CandidateEntry;
using detail::Choice;
using detail::ResolvedOverride;

std::vector<std::string> names_of(const std::vector<CandidateEntry>& entries) {
  std::vector<std::string> names;
  for (const auto& e : entries) names.push_back(e.candidate.name);
  return names;
}

std::vector<std::string> names_of(const std::vector<Candidate>& candidates) {
  std::vector<std::string> names;
  for (const auto& c : candidates) names.push_back(c.name);
  return names;
}

// alpha on cpu: native (20, module ok "test target"), torch (10), vendor (99, module missing),
// python (20, no module, eager + graph), old (100, contract version 0, no module); declared only:
// declared (module ok, never registered), unloaded (module never loaded). Elsewhere: cuda.native.alpha,
// cpu.torch.beta.
class SelectionTest : public ::testing::Test {
 protected:
  SelectionTest() {
    native_ = BackendModule{.name = "test.native", .device = Device::kCpu, .solution = "native", .binding = "simd",
                            .implementations = {{.operation = &alpha(), .priority = 20}},
                            .probe = [] { return ProbeResult::ok("test target"); }};
    torch_ = BackendModule{
        .name = "test.torch", .device = Device::kCpu, .solution = "torch", .binding = "aten",
        .implementations = {{.operation = &alpha(), .priority = 10}, {.operation = &beta(), .priority = 10}}};
    vendor_ = BackendModule{.name = "test.vendor", .device = Device::kCpu, .solution = "vendor", .binding = "test",
                            .implementations = {{.operation = &alpha(), .priority = 99}},
                            .probe = [] { return ProbeResult::missing("libvendor.so (not found)"); }};
    declared_ = BackendModule{.name = "test.declared", .device = Device::kCpu, .solution = "declared",
                              .binding = "test", .implementations = {{.operation = &alpha(), .variant = "v", .priority = 7}}};
    unloaded_ = BackendModule{.name = "test.unloaded", .device = Device::kCpu, .solution = "unloaded",
                              .binding = "test", .implementations = {{.operation = &alpha(), .priority = 3}}};
    cuda_ = BackendModule{.name = "test.cuda", .device = Device::kCuda, .solution = "native", .binding = "cuda",
                          .implementations = {{.operation = &alpha(), .priority = 20}}};
    group_ = Group{"test", {&alpha(), &beta()}, {&native_, &torch_, &vendor_, &declared_, &unloaded_, &cuda_}};
    add(alpha(), spec("cpu.native.alpha", alpha_contract(), Device::kCpu, "native", 20), &native_);
    add(alpha(), spec("cpu.torch.alpha", alpha_contract(), Device::kCpu, "torch", 10), &torch_);
    add(alpha(), spec("cpu.vendor.alpha", alpha_contract(), Device::kCpu, "vendor", 99), &vendor_);
    add(alpha(), spec("cpu.python.alpha", alpha_contract(), Device::kCpu, "python", 20,
                      {ExecutionMode::kEager, ExecutionMode::kGraph}), nullptr);
    add(alpha(), spec("cpu.old.alpha", old_alpha_, Device::kCpu, "old", 100), nullptr);
    add(alpha(), spec("cuda.native.alpha", alpha_contract(), Device::kCuda, "native", 20), &cuda_);
    add(beta(), spec("cpu.torch.beta", beta_contract(), Device::kCpu, "torch", 10), &torch_);
    for (const BackendModule* m : {&native_, &torch_, &vendor_, &declared_, &cuda_}) modules_.load(*m, "test");
  }

  void add(const TypedOperation<UnaryFn>& op, KernelSpec s, const BackendModule* module) {
    s.module = module;
    registry_.add(op, std::move(s), KernelFunction<UnaryFn>::of<&plus1>());
  }

  std::vector<CandidateEntry> filtered(ExecutionMode mode = ExecutionMode::kEager) {
    auto entries = detail::gather(Device::kCpu, alpha(), registry_.kernels(), {&group_});
    detail::filter(entries, alpha(), mode, modules_);
    return entries;
  }

  static const CandidateEntry& find(const std::vector<CandidateEntry>& entries, const std::string& name) {
    for (const auto& e : entries) {
      if (e.candidate.name == name) return e;
    }
    throw std::out_of_range(name);
  }

  static CandidateEntry entry(const std::string& name, const std::string& solution, int priority, bool eligible,
                              const std::string& reason = "") {
    CandidateEntry e;
    e.candidate = {.name = name, .solution = solution, .priority = priority, .reason = reason};
    e.eligible = eligible;
    return e;
  }

  const OpContract old_alpha_{"alpha", 0, "alpha(int x) -> int", {}, false, NumericalMode::kExact, "", ""};
  Registry registry_;
  BackendModule native_, torch_, vendor_, declared_, unloaded_, cuda_;
  Group group_;
  detail::ModuleLoader modules_;
};

TEST_F(SelectionTest, GatherTakesRegisteredKernelsThenDeclaredOnes) {
  const auto entries = detail::gather(Device::kCpu, alpha(), registry_.kernels(), {&group_});
  // Registration order, then the declared-only implementations by name; no other device or operation.
  EXPECT_EQ(names_of(entries), (std::vector<std::string>{"cpu.native.alpha", "cpu.torch.alpha", "cpu.vendor.alpha",
                                                         "cpu.python.alpha", "cpu.old.alpha", "cpu.declared.alpha.v",
                                                         "cpu.unloaded.alpha"}));
  for (const auto& e : entries) {
    EXPECT_FALSE(e.eligible) << e.candidate.name;
    EXPECT_EQ(e.candidate.verdict, Verdict::kExcluded) << e.candidate.name;
    EXPECT_EQ(e.candidate.rejection, Rejection::kNone) << e.candidate.name;
    EXPECT_TRUE(e.candidate.reason.empty()) << e.candidate.name;
    EXPECT_TRUE(e.candidate.detail.empty()) << e.candidate.name;
  }
  const auto& native = find(entries, "cpu.native.alpha");
  ASSERT_NE(native.kernel, nullptr);
  EXPECT_EQ(native.kernel->spec.name, "cpu.native.alpha");
  EXPECT_EQ(native.module, &native_);
  EXPECT_EQ(native.implementation, &native_.implementations[0]);
  EXPECT_EQ(native.candidate.solution, "native");
  EXPECT_EQ(native.candidate.binding, "test");  // the spec's binding, not the module's
  EXPECT_EQ(native.candidate.priority, 20);
  const auto& python = find(entries, "cpu.python.alpha");
  EXPECT_NE(python.kernel, nullptr);
  EXPECT_EQ(python.module, nullptr);
  EXPECT_EQ(python.implementation, nullptr);
  const auto& declared = find(entries, "cpu.declared.alpha.v");
  EXPECT_EQ(declared.kernel, nullptr);
  EXPECT_EQ(declared.module, &declared_);
  EXPECT_EQ(declared.implementation, &declared_.implementations[0]);
  EXPECT_EQ(declared.candidate.solution, "declared");
  EXPECT_EQ(declared.candidate.variant, "v");
  EXPECT_EQ(declared.candidate.binding, "test");
  EXPECT_EQ(declared.candidate.priority, 7);

  const auto cuda = detail::gather(Device::kCuda, alpha(), registry_.kernels(), {&group_});
  EXPECT_EQ(names_of(cuda), (std::vector<std::string>{"cuda.native.alpha"}));
  EXPECT_EQ(cuda[0].implementation, &cuda_.implementations[0]);
  EXPECT_TRUE(detail::gather(Device::kNpu, alpha(), registry_.kernels(), {&group_}).empty());
}

TEST_F(SelectionTest, CheckAvailabilityReadsTheModuleThenTheImplementationProbe) {
  Candidate none;
  EXPECT_TRUE(detail::check_availability(modules_, nullptr, nullptr, none));
  EXPECT_EQ(none.rejection, Rejection::kNone);
  EXPECT_EQ(none.detail, "");

  Candidate ok;
  EXPECT_TRUE(detail::check_availability(modules_, &native_, &native_.implementations[0], ok));
  EXPECT_EQ(ok.detail, "test target");
  EXPECT_EQ(ok.reason, "");

  Candidate missing;
  EXPECT_FALSE(detail::check_availability(modules_, &vendor_, &vendor_.implementations[0], missing));
  EXPECT_EQ(missing.rejection, Rejection::kMissingDependency);
  EXPECT_EQ(missing.reason, "missing dependency: libvendor.so (not found)");

  Candidate unloaded;  // a module never loaded has no probe result yet
  EXPECT_TRUE(detail::check_availability(modules_, &unloaded_, &unloaded_.implementations[0], unloaded));
  EXPECT_EQ(unloaded.rejection, Rejection::kNone);

  const BackendModule isa{.name = "test.isa", .device = Device::kCpu, .solution = "native", .binding = "test",
                          .implementations = {{.operation = &alpha(), .priority = 30,
                                               .supports = [] { return ProbeResult::missing("needs AVX-512"); }},
                                              {.operation = &alpha(), .variant = "avx2",
                                               .supports = [] { return ProbeResult::ok("AVX2"); }},
                                              {.operation = &alpha(), .variant = "plain",
                                               .supports = [] { return ProbeResult::ok(); }}},
                          .probe = [] { return ProbeResult::ok("module ok"); }};
  detail::ModuleLoader loader;
  loader.load(isa, "test");
  Candidate unsupported;
  EXPECT_FALSE(detail::check_availability(loader, &isa, &isa.implementations[0], unsupported));
  EXPECT_EQ(unsupported.rejection, Rejection::kUnsupported);
  EXPECT_EQ(unsupported.reason, "unsupported here: needs AVX-512");
  EXPECT_EQ(unsupported.detail, "module ok");
  Candidate avx2;
  EXPECT_TRUE(detail::check_availability(loader, &isa, &isa.implementations[1], avx2));
  EXPECT_EQ(avx2.detail, "module ok, AVX2");
  Candidate plain;
  EXPECT_TRUE(detail::check_availability(loader, &isa, &isa.implementations[2], plain));
  EXPECT_EQ(plain.detail, "module ok");
}

TEST_F(SelectionTest, FilterMarksEligibleOrGivesTheRejection) {
  const auto entries = filtered();
  EXPECT_TRUE(find(entries, "cpu.native.alpha").eligible);
  EXPECT_EQ(find(entries, "cpu.native.alpha").candidate.detail, "test target");
  EXPECT_TRUE(find(entries, "cpu.torch.alpha").eligible);
  EXPECT_TRUE(find(entries, "cpu.python.alpha").eligible);
  const auto& vendor = find(entries, "cpu.vendor.alpha").candidate;
  EXPECT_EQ(vendor.rejection, Rejection::kMissingDependency);
  EXPECT_EQ(vendor.reason, "missing dependency: libvendor.so (not found)");
  const auto& old = find(entries, "cpu.old.alpha").candidate;
  EXPECT_EQ(old.rejection, Rejection::kContractMismatch);
  EXPECT_EQ(old.reason, "contract mismatch: implements version 0 'alpha(int x) -> int', the operation is version 1");
  const auto& declared = find(entries, "cpu.declared.alpha.v").candidate;
  EXPECT_EQ(declared.rejection, Rejection::kNotRegistered);
  EXPECT_EQ(declared.reason, "declared by module test.declared but not registered");
  const auto& unloaded = find(entries, "cpu.unloaded.alpha").candidate;
  EXPECT_EQ(unloaded.rejection, Rejection::kNotRegistered);
  EXPECT_EQ(unloaded.reason, "module test.unloaded was not loaded");
  for (const char* name : {"cpu.vendor.alpha", "cpu.old.alpha", "cpu.declared.alpha.v", "cpu.unloaded.alpha"}) {
    EXPECT_FALSE(find(entries, name).eligible) << name;
  }
  // Filtering keeps the order it was given.
  EXPECT_EQ(names_of(entries), names_of(detail::gather(Device::kCpu, alpha(), registry_.kernels(), {&group_})));

  const auto graph = filtered(ExecutionMode::kGraph);
  const auto& native = find(graph, "cpu.native.alpha");
  EXPECT_FALSE(native.eligible);
  EXPECT_EQ(native.candidate.rejection, Rejection::kUnsupportedMode);
  EXPECT_EQ(native.candidate.reason, "unsupported mode graph (supports eager)");
  EXPECT_EQ(native.candidate.detail, "test target");  // availability ran first
  EXPECT_TRUE(find(graph, "cpu.python.alpha").eligible);
  // A missing dependency is reported before the mode.
  EXPECT_EQ(find(graph, "cpu.vendor.alpha").candidate.rejection, Rejection::kMissingDependency);
}

TEST_F(SelectionTest, ChooseSortsEligibleFirstThenPriorityThenName) {
  std::vector<CandidateEntry> entries{entry("cpu.b.alpha", "b", 10, true), entry("cpu.x.alpha", "x", 99, false, "r"),
                                      entry("cpu.c.alpha", "c", 20, true), entry("cpu.a.alpha", "a", 20, true),
                                      entry("cpu.w.alpha", "w", 5, false, "r")};
  const Choice choice = detail::choose(entries, alpha(), Device::kCpu, ExecutionMode::kEager, nullptr, registry_.kernels());
  EXPECT_EQ(names_of(entries),
            (std::vector<std::string>{"cpu.a.alpha", "cpu.c.alpha", "cpu.b.alpha", "cpu.x.alpha", "cpu.w.alpha"}));
  ASSERT_NE(choice.chosen, nullptr);
  EXPECT_EQ(choice.chosen, &entries[0]);
  EXPECT_EQ(choice.error, "");
}

TEST_F(SelectionTest, ChooseWithoutAnEligibleEntryFails) {
  std::vector<CandidateEntry> entries{entry("cpu.x.alpha", "x", 1, false, "r")};
  const Choice choice = detail::choose(entries, alpha(), Device::kNpu, ExecutionMode::kGraph, nullptr, registry_.kernels());
  EXPECT_EQ(choice.chosen, nullptr);
  EXPECT_EQ(choice.error, "alpha: no eligible implementation on npu in graph mode");
  std::vector<CandidateEntry> none;
  EXPECT_EQ(detail::choose(none, alpha(), Device::kCpu, ExecutionMode::kEager, nullptr, registry_.kernels()).error,
            "alpha: no eligible implementation on cpu in eager mode");
}

TEST_F(SelectionTest, ChooseFollowsAnOverrideByNameOrSolution) {
  auto entries = filtered();
  const auto choose = [&](const ResolvedOverride& o) {
    return detail::choose(entries, alpha(), Device::kCpu, ExecutionMode::kEager, &o, registry_.kernels());
  };
  Choice by_name = choose({"cpu.torch.alpha", "argument"});
  ASSERT_NE(by_name.chosen, nullptr);
  EXPECT_EQ(by_name.chosen->candidate.name, "cpu.torch.alpha");

  Choice by_solution = choose({"python", "environment XLLM_KERNEL_OVERRIDE_ALPHA"});
  ASSERT_NE(by_solution.chosen, nullptr);
  EXPECT_EQ(by_solution.chosen->candidate.name, "cpu.python.alpha");

  EXPECT_EQ(choose({"cpu.vendor.alpha", "argument"}).error,
            "alpha: override 'cpu.vendor.alpha' (argument) names an excluded implementation: "
            "missing dependency: libvendor.so (not found)");
  EXPECT_EQ(choose({"vendor", "argument"}).error,
            "alpha: override 'vendor' (argument): every implementation of that solution is excluded: "
            "cpu.vendor.alpha: missing dependency: libvendor.so (not found)");
  EXPECT_EQ(choose({"cuda.native.alpha", "argument"}).error,
            "alpha: override 'cuda.native.alpha' (argument) names cuda.native.alpha, an implementation for device "
            "cuda and operation alpha, not alpha on cpu");
  EXPECT_EQ(choose({"cpu.torch.beta", "argument"}).error,
            "alpha: override 'cpu.torch.beta' (argument) names cpu.torch.beta, an implementation for device cpu and "
            "operation beta, not alpha on cpu");
  const std::string unknown = choose({"cpu.natve.alpha", "argument"}).error;
  EXPECT_EQ(unknown.rfind("alpha: override 'cpu.natve.alpha' (argument) is neither an implementation nor a solution "
                          "of alpha on cpu; closest: cpu.native.alpha",
                          0),
            0u)
      << unknown;
  EXPECT_EQ(choose({"nosuch", "argument"}).chosen, nullptr);
}

TEST_F(SelectionTest, ChooseBySolutionTakesItsFirstEligibleInOrder) {
  std::vector<CandidateEntry> entries{entry("cpu.native.alpha.b", "native", 10, true),
                                      entry("cpu.native.alpha.x", "native", 50, false, "no"),
                                      entry("cpu.native.alpha.a", "native", 10, true),
                                      entry("cpu.torch.alpha", "torch", 90, true)};
  const ResolvedOverride o{"native", "argument"};
  const Choice choice = detail::choose(entries, alpha(), Device::kCpu, ExecutionMode::kEager, &o, registry_.kernels());
  ASSERT_NE(choice.chosen, nullptr);
  EXPECT_EQ(choice.chosen->candidate.name, "cpu.native.alpha.a");
}

TEST_F(SelectionTest, LabelPutsTheSelectedFirstAndSaysWhyTheOthersLost) {
  std::vector<CandidateEntry> entries{entry("cpu.a.alpha", "a", 20, true), entry("cpu.b.alpha", "b", 20, true),
                                      entry("cpu.c.alpha", "c", 10, true), entry("cpu.x.alpha", "x", 99, false, "gone")};
  entries[3].candidate.rejection = Rejection::kMissingDependency;
  Explanation ex;
  detail::label(entries, Choice{.chosen = &entries[1]}, nullptr, ex);
  ASSERT_EQ(ex.candidates.size(), 4u);
  EXPECT_EQ(names_of(ex.candidates),
            (std::vector<std::string>{"cpu.b.alpha", "cpu.a.alpha", "cpu.c.alpha", "cpu.x.alpha"}));
  EXPECT_EQ(ex.candidates[0].verdict, Verdict::kSelected);
  EXPECT_EQ(ex.candidates[0].reason, "");
  EXPECT_EQ(ex.candidates[1].verdict, Verdict::kLowerPriority);
  EXPECT_EQ(ex.candidates[1].reason, "same priority, name orders after cpu.b.alpha");
  EXPECT_EQ(ex.candidates[2].verdict, Verdict::kLowerPriority);
  EXPECT_EQ(ex.candidates[2].reason, "priority 10 < 20");
  EXPECT_EQ(ex.candidates[3].verdict, Verdict::kExcluded);
  EXPECT_EQ(ex.candidates[3].reason, "gone");
  EXPECT_EQ(ex.candidates[3].rejection, Rejection::kMissingDependency);
  EXPECT_EQ(ex.error, "");
  EXPECT_EQ(ex.selected(), &ex.candidates[0]);
  // The entries themselves are left as they were.
  EXPECT_EQ(entries[1].candidate.verdict, Verdict::kExcluded);
  EXPECT_EQ(entries[0].candidate.reason, "");
}

TEST_F(SelectionTest, LabelUnderAnOverrideSaysWhereItCameFrom) {
  std::vector<CandidateEntry> entries{entry("cpu.a.alpha", "a", 20, true), entry("cpu.b.alpha", "b", 10, true),
                                      entry("cpu.x.alpha", "x", 99, false, "gone")};
  const ResolvedOverride o{"b", "environment XLLM_KERNEL_OVERRIDE_ALPHA"};
  Explanation ex;
  detail::label(entries, Choice{.chosen = &entries[1]}, &o, ex);
  EXPECT_EQ(names_of(ex.candidates), (std::vector<std::string>{"cpu.b.alpha", "cpu.a.alpha", "cpu.x.alpha"}));
  EXPECT_EQ(ex.candidates[1].verdict, Verdict::kNotOverridden);
  EXPECT_EQ(ex.candidates[1].reason, "override selects cpu.b.alpha (environment XLLM_KERNEL_OVERRIDE_ALPHA)");
  EXPECT_EQ(ex.candidates[2].verdict, Verdict::kExcluded);
  EXPECT_EQ(ex.candidates[2].reason, "gone");
}

TEST_F(SelectionTest, LabelOfAFailedChoiceKeepsTheCandidatesAsTheyAre) {
  std::vector<CandidateEntry> entries{entry("cpu.a.alpha", "a", 20, true), entry("cpu.x.alpha", "x", 99, false, "gone")};
  Explanation ex;
  detail::label(entries, Choice{.chosen = nullptr, .error = "alpha: boom"}, nullptr, ex);
  EXPECT_EQ(ex.error, "alpha: boom");
  ASSERT_EQ(ex.candidates.size(), 2u);
  EXPECT_EQ(ex.candidates[0].name, "cpu.a.alpha");
  EXPECT_EQ(ex.candidates[0].verdict, Verdict::kExcluded);  // eligible, but nothing was selected
  EXPECT_EQ(ex.candidates[0].reason, "");
  EXPECT_EQ(ex.candidates[1].reason, "gone");
  EXPECT_EQ(ex.selected(), nullptr);
}

TEST_F(SelectionTest, SelectComposesTheSteps) {
  detail::Config config;
  config.operations = {"alpha"};
  const auto kernels = registry_.kernels();
  const detail::Selection s = detail::select(Device::kCpu, alpha(), config, kernels, {&group_}, modules_);
  ASSERT_NE(s.kernel, nullptr);
  EXPECT_EQ(s.kernel->spec.name, "cpu.native.alpha");
  EXPECT_EQ(s.explanation.operation, "alpha");
  EXPECT_EQ(s.explanation.device, Device::kCpu);
  EXPECT_EQ(s.explanation.override_target, "");
  EXPECT_EQ(s.explanation.to_string(),
            "alpha on cpu (eager)\n"
            "  cpu.native.alpha      priority 20  test (test target)  selected\n"
            "  cpu.python.alpha      priority 20  test  lower priority: same priority, name orders after cpu.native.alpha\n"
            "  cpu.torch.alpha       priority 10  test  lower priority: priority 10 < 20\n"
            "  cpu.old.alpha         priority 100  test  excluded: contract mismatch: implements version 0 "
            "'alpha(int x) -> int', the operation is version 1\n"
            "  cpu.vendor.alpha      priority 99  test  excluded: missing dependency: libvendor.so (not found)\n"
            "  cpu.declared.alpha.v  priority 7  test  excluded: declared by module test.declared but not registered\n"
            "  cpu.unloaded.alpha    priority 3  test  excluded: module test.unloaded was not loaded\n");

  // The same as running the steps by hand.
  auto entries = detail::gather(Device::kCpu, alpha(), kernels, {&group_});
  detail::filter(entries, alpha(), config.mode, modules_);
  const Choice choice = detail::choose(entries, alpha(), Device::kCpu, config.mode, nullptr, kernels);
  Explanation ex = s.explanation;
  ex.candidates.clear();
  detail::label(entries, choice, nullptr, ex);
  EXPECT_EQ(ex.to_string(), s.explanation.to_string());

  config.overrides["alpha"] = {"torch", "argument"};
  const detail::Selection overridden = detail::select(Device::kCpu, alpha(), config, kernels, {&group_}, modules_);
  ASSERT_NE(overridden.kernel, nullptr);
  EXPECT_EQ(overridden.kernel->spec.name, "cpu.torch.alpha");
  EXPECT_EQ(overridden.explanation.override_target, "torch");
  EXPECT_EQ(overridden.explanation.override_source, "argument");

  config.overrides["alpha"] = {"vendor", "argument"};
  const detail::Selection failed = detail::select(Device::kCpu, alpha(), config, kernels, {&group_}, modules_);
  EXPECT_EQ(failed.kernel, nullptr);
  EXPECT_NE(failed.explanation.error.find("every implementation of that solution is excluded"), std::string::npos);
  EXPECT_EQ(failed.explanation.candidates.size(), 7u);
}

}  // namespace
}  // namespace xllm_kernel::testing
