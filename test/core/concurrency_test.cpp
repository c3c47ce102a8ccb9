// Concurrency: initialize() and explain() from many threads at once, and every CPU implementation
// called from many threads on shared inputs. The tests' names start with Concurrency, so the
// ThreadSanitizer build (scripts/sanitize.sh) runs them; they assert no timing.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <mutex>
#include <set>
#include <thread>

#include "src/numerics/verify.h"
#include "test/core/test_catalog.h"
#include "test/ops/common/suite_arguments.h"

namespace xllm_kernel::testing {
namespace {

constexpr int kThreads = 8;

// Runs body(i) on kThreads threads released together.
void race(const std::function<void(int)>& body) {
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      body(i);
    });
  }
  for (auto& t : threads) t.join();
}

// A registry holding the library's implementations, which a test may freeze.
std::unique_ptr<Registry> copy_of_library_registry() {
  auto r = std::make_unique<Registry>();
  for (const auto& k : registry().kernels()) {
    if (k->spec.module != nullptr) r->add(*k->operation, k->spec, k->function);
  }
  return r;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

// (a) The same configuration from every thread: one selection, one Bindings object for all.
TEST(Concurrency, InitializeWithOneConfigurationGivesEveryThreadTheSameBindings) {
  auto r = copy_of_library_registry();
  Runtime rt(*r, builtin_groups(), /*publish_to_operations=*/false);
  std::vector<std::shared_ptr<const Bindings>> got(kThreads);
  std::vector<std::string> errors(kThreads);
  race([&](int i) { errors[i] = error_of([&] { got[i] = rt.initialize(Device::kCpu, {}); }); });
  for (int i = 0; i < kThreads; ++i) {
    ASSERT_EQ(errors[i], "") << "thread " << i;
    ASSERT_NE(got[i], nullptr);
    EXPECT_EQ(got[i].get(), got[0].get()) << "thread " << i << " got another Bindings object";
  }
  EXPECT_EQ(got[0]->size(), builtin_operations().size());
  EXPECT_EQ(rt.bindings(Device::kCpu).get(), got[0].get());
}

// (b) Two configurations race: exactly one wins; every thread asking for the other gets the
// documented error, and no thread (nor a reader polling bindings()) sees a partial state.
TEST(Concurrency, InitializeWithTwoConfigurationsLetsExactlyOneWin) {
  const std::vector<const Operation*> operations = builtin_operations();
  ASSERT_GE(operations.size(), 2u);
  const InitializeOptions configurations[2] = {{.operations = {operations[0]->name()}},
                                               {.operations = {operations[1]->name()}}};
  auto r = copy_of_library_registry();
  Runtime rt(*r, builtin_groups(), /*publish_to_operations=*/false);
  std::vector<std::shared_ptr<const Bindings>> got(kThreads);
  std::vector<std::string> errors(kThreads);
  std::atomic<bool> done{false};
  std::vector<std::string> reader_saw;  // what a reader polling bindings() found wrong
  std::thread reader([&] {
    while (!done.load()) {
      if (auto b = rt.bindings(Device::kCpu)) {
        const bool first = b->contains(operations[0]->name()), second = b->contains(operations[1]->name());
        if (b->size() != 1 || first == second) reader_saw.push_back("bindings of " + std::to_string(b->size()) + " operations");
      }
      std::this_thread::yield();
    }
  });
  race([&](int i) { errors[i] = error_of([&] { got[i] = rt.initialize(Device::kCpu, configurations[i % 2]); }); });
  done = true;
  reader.join();
  EXPECT_TRUE(reader_saw.empty()) << reader_saw.front();

  auto published = rt.bindings(Device::kCpu);
  ASSERT_NE(published, nullptr);
  const int winner = published->contains(operations[0]->name()) ? 0 : 1;
  for (int i = 0; i < kThreads; ++i) {
    if (i % 2 == winner) {
      EXPECT_EQ(errors[i], "") << "thread " << i;
      EXPECT_EQ(got[i].get(), published.get()) << "thread " << i;
    } else {
      EXPECT_EQ(got[i], nullptr) << "thread " << i;
      EXPECT_NE(errors[i].find("already initialized with a different configuration"), std::string::npos)
          << "thread " << i << ": " << errors[i];
    }
  }
  ASSERT_EQ(published->size(), 1u);
  EXPECT_TRUE(published->contains(configurations[winner].operations[0]));
}

// (c) Every CPU implementation of every operation, called from 8 threads at once on shared
// read-only arguments (each thread its own copy of what the contract mutates): every thread
// leaves what one thread alone leaves, bit for bit.
TEST(Concurrency, EveryCpuImplementationGivesTheSingleThreadedResultFromManyThreads) {
  for (const Operation* op : builtin_operations()) {
    const auto arguments = suite_arguments(*op);
    ASSERT_TRUE(arguments.has_value()) << op->name() << ": its suite has no small case";
    const auto& mutates = op->contract().mutates;
    const c10::FunctionSchema schema = parsed_schema(*op);
    // Shared: every argument the contract does not mutate is the same tensor in every thread.
    torch::jit::Stack bound;  // the suite's arguments made ready for the implementation under test
    auto per_call = [&] {
      torch::jit::Stack stack = bound;
      for (size_t i = 0; i < stack.size(); ++i) {
        const std::string& name = schema.arguments()[i].name();
        if (std::find(mutates.begin(), mutates.end(), name) != mutates.end()) stack[i] = copy_value(stack[i]);
      }
      return stack;
    };
    const torch::jit::Stack pristine = copy_stack(arguments->stack);
    const auto kernels = library_implementations(*op, Device::kCpu);
    ASSERT_FALSE(kernels.empty()) << op->name();
    for (const auto& kernel : kernels) {
      bound = arguments->stack;
      bind_arguments(*op, kernel->spec, bound);
      torch::jit::Stack alone = per_call();
      const std::vector<at::Tensor> expected = call_boxed_kernel(*op, *kernel, alone);
      std::vector<std::vector<at::Tensor>> got(kThreads);
      std::vector<std::string> errors(kThreads);
      std::vector<torch::jit::Stack> stacks(kThreads);
      for (auto& s : stacks) s = per_call();
      race([&](int i) { errors[i] = error_of([&] { got[i] = call_boxed_kernel(*op, *kernel, stacks[i]); }); });
      for (int i = 0; i < kThreads; ++i) {
        ASSERT_EQ(errors[i], "") << kernel->spec.name << ", thread " << i;
        ASSERT_EQ(got[i].size(), expected.size()) << kernel->spec.name;
        for (size_t k = 0; k < expected.size(); ++k) {
          EXPECT_TRUE(numerics::bitwise_equal(got[i][k], expected[k]))
              << kernel->spec.name << " from " << arguments->case_id << ", thread " << i << ", result " << k;
        }
      }
      // The shared arguments are read only.
      for (size_t i = 0; i < arguments->stack.size(); ++i) {
        const auto& v = arguments->stack[i];
        const std::string& name = schema.arguments()[i].name();
        if (v.isTensor() && std::find(mutates.begin(), mutates.end(), name) == mutates.end()) {
          EXPECT_TRUE(numerics::bitwise_equal(v.toTensor(), pristine[i].toTensor())) << kernel->spec.name << " wrote " << name;
        }
      }
    }
  }
}

// (d) explain() and initialize() racing with module loading: each module's dependency probe runs
// exactly once, however many threads need it, and every thread sees the same explanation.
std::atomic<int> probes_cpu_alpha{0}, probes_cpu_beta{0}, probes_cuda{0};

ProbeResult slow_probe(std::atomic<int>& count, ProbeResult result) {
  count.fetch_add(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // widens the window for a second probe
  return result;
}

TEST(Concurrency, ExplainAndInitializeRacingWithModuleLoadingProbeOnce) {
  static const BackendModule cpu_alpha{
      .name = "test.concurrent_alpha", .device = Device::kCpu, .solution = "native", .binding = "test",
      .implementations = {{.operation = &alpha(), .priority = 20}},
      .probe = [] { return slow_probe(probes_cpu_alpha, ProbeResult::ok("test target")); }};
  static const BackendModule cpu_beta{
      .name = "test.concurrent_beta", .device = Device::kCpu, .solution = "torch", .binding = "test",
      .implementations = {{.operation = &beta(), .priority = 10}},
      .probe = [] { return slow_probe(probes_cpu_beta, ProbeResult::ok()); }};
  static const BackendModule cuda_alpha{
      .name = "test.concurrent_cuda", .device = Device::kCuda, .solution = "native", .binding = "test",
      .implementations = {{.operation = &alpha(), .priority = 20}},
      .probe = [] { return slow_probe(probes_cuda, ProbeResult::missing("test device (absent)")); }};
  static const Group group{"concurrent", {&alpha(), &beta()}, {&cpu_alpha, &cpu_beta, &cuda_alpha}};
  Registry r;
  r.add(alpha(), cpu_alpha.spec(cpu_alpha.implementations[0]), KernelFunction<UnaryFn>::of<&plus1>());
  r.add(beta(), cpu_beta.spec(cpu_beta.implementations[0]), KernelFunction<UnaryFn>::of<&times2>());
  Runtime rt(r, {&group}, /*publish_to_operations=*/false);

  // Thread i: 0 explains cpu alpha, 1 initializes cpu, 2 explains cpu beta, 3 explains cuda alpha.
  std::vector<std::string> explained(kThreads), errors(kThreads);
  std::vector<std::shared_ptr<const Bindings>> bindings(kThreads);
  race([&](int i) {
    errors[i] = error_of([&] {
      switch (i % 4) {
        case 0: explained[i] = rt.explain(Device::kCpu, "alpha").to_string(); break;
        case 1: bindings[i] = rt.initialize(Device::kCpu, {.operations = {"alpha", "beta"}}); break;
        case 2: explained[i] = rt.explain(Device::kCpu, "beta").to_string(); break;
        case 3: explained[i] = rt.explain(Device::kCuda, "alpha").to_string(); break;
      }
    });
  });
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(errors[i], "") << "thread " << i;
  EXPECT_EQ(probes_cpu_alpha.load(), 1);
  EXPECT_EQ(probes_cpu_beta.load(), 1);
  EXPECT_EQ(probes_cuda.load(), 1);
  for (int i = 4; i < kThreads; ++i) {
    EXPECT_EQ(explained[i], explained[i - 4]) << "threads " << i - 4 << " and " << i;
    EXPECT_EQ(bindings[i].get(), bindings[i - 4].get());
  }
  // What they saw is what a single thread sees now.
  EXPECT_EQ(explained[0], rt.explain(Device::kCpu, "alpha").to_string());
  EXPECT_EQ(explained[2], rt.explain(Device::kCpu, "beta").to_string());
  EXPECT_EQ(explained[3], rt.explain(Device::kCuda, "alpha").to_string());
  EXPECT_NE(explained[0].find("cpu.native.alpha"), std::string::npos) << explained[0];
  EXPECT_NE(explained[3].find("missing dependency: test device (absent)"), std::string::npos) << explained[3];
  ASSERT_NE(bindings[1], nullptr);
  EXPECT_EQ(bindings[1]->at("alpha").function<UnaryFn>()(1), 2);
  EXPECT_EQ(bindings[1]->at("beta").function<UnaryFn>()(3), 6);
}

}  // namespace
}  // namespace xllm_kernel::testing
