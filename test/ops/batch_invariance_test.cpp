// Batch invariance, from the registry: every library CPU implementation that declares it
// (KernelSpec::batch_invariant) is checked with arguments from its operation's numerics suite, and
// nothing here names a family or an operation. What the suite says of its rows (OperationSuite::
// batch_rows) decides how:
//   leading dimension: the batch's rows are the leading dimension of every tensor argument that has
//     the first tensor argument's row count. The whole call (on 2 threads) must give the same bits
//     on 1 and 3 threads, and as the rows called one at a time, each alone, on the same state (so
//     that what a call writes, a cache or a residual, is compared too);
//   none (a weight packer): the same bits on 1, 2 and 3 threads;
//   family test: the family's own test checks it; the suite must name that test.
// And initialize(batch_invariant=true) binds the whole catalog on the CPU, every binding declaring
// the property.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "src/numerics/verify.h"
#include "test/ops/common/suite_arguments.h"

namespace xllm_kernel::testing {
namespace {

using numerics::bitwise_equal;
using numerics::BatchRows;

// The index of the first tensor argument of a stack, or -1.
int first_tensor(const torch::jit::Stack& stack) {
  for (size_t i = 0; i < stack.size(); ++i) {
    if (stack[i].isTensor() && stack[i].toTensor().defined()) return static_cast<int>(i);
  }
  return -1;
}

// A stack with at least `rows` rows (the first tensor's leading dimension), rows of at least
// `width` elements, and at most 2^20 elements per tensor.
bool batch_of_rows(const torch::jit::Stack& stack, int64_t rows, int64_t width) {
  const int first = first_tensor(stack);
  if (first < 0 || stack[first].toTensor().dim() == 0) return false;
  const at::Tensor& t = stack[first].toTensor();
  if (t.size(0) < rows || t.numel() < t.size(0) * width) return false;
  for (const auto& v : stack) {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().numel() > (int64_t{1} << 20)) return false;
  }
  return true;
}

// The suite's case with the most telling batch: 5 rows or more of 128 elements or more (several
// SIMD vectors and a tail, rows at the start, the middle and the end), else 3 rows of any width.
std::optional<SuiteArguments> batch_arguments(const Operation& op) {
  auto found = find_suite_arguments_where(op, [](const torch::jit::Stack& s) { return batch_of_rows(s, 5, 128); });
  if (!found) found = find_suite_arguments_where(op, [](const torch::jit::Stack& s) { return batch_of_rows(s, 3, 1); });
  return found;
}

// Copies of the tensors a boxed call on `stack` returned (not the arguments it wrote).
std::vector<at::Tensor> call_returning(const Operation& op, const RegisteredKernel& kernel, torch::jit::Stack stack) {
  op.boxed_caller()(kernel.function, stack);
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : returned_tensors(stack)) out.push_back(t.clone());
  return out;
}

class ThreadCount {
 public:
  ThreadCount() : saved_(at::get_num_threads()) {}
  ~ThreadCount() { at::set_num_threads(saved_); }

 private:
  int saved_;
};

// What differs between two calls' tensors (empty when every one has the same bits).
std::string compare(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want, const std::string& what) {
  if (got.size() != want.size()) return what + ": " + std::to_string(got.size()) + " tensors, not " + std::to_string(want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (!bitwise_equal(got[i], want[i])) return what + ": tensor " + std::to_string(i) + " differs";
  }
  return "";
}

// The failures of one implementation; `checked` counts the comparisons made.
std::vector<std::string> check_implementation(const Operation& op, const RegisteredKernel& kernel,
                                              const numerics::OperationSuite& suite, int& checked) {
  std::vector<std::string> failures;
  const std::string who = op.name() + " [" + kernel.spec.name + "]";
  if (suite.batch_rows == BatchRows::kFamilyTest) {
    if (suite.batch_invariance_test.empty()) failures.push_back(who + ": the suite names no family test of its rows");
    return failures;
  }
  const auto found = suite.batch_rows == BatchRows::kNone ? suite_arguments(op)
                                                          : batch_arguments(op);
  if (!found) {
    failures.push_back(who + ": its suite has no case to check batch invariance with");
    return failures;
  }
  torch::jit::Stack base = copy_stack(found->stack);
  bind_arguments(op, kernel.spec, base);
  const std::string from = who + " from " + found->case_id;
  if (std::getenv("XLLM_KERNEL_TEST_VERBOSE") != nullptr) std::cerr << "checking " << from << "\n";
  ThreadCount restore;

  // The whole call on 2 threads, then on 1 and 3: the same results and the same written state.
  at::set_num_threads(2);
  torch::jit::Stack whole_state = copy_stack(base);
  const std::vector<at::Tensor> whole = call_returning(op, kernel, whole_state);
  for (const int threads : {1, 3}) {
    at::set_num_threads(threads);
    torch::jit::Stack state = copy_stack(base);
    const std::vector<at::Tensor> again = call_returning(op, kernel, state);
    std::string wrong = compare(again, whole, from + ", " + std::to_string(threads) + " threads");
    if (wrong.empty()) {
      for (size_t i = 0; i < state.size() && wrong.empty(); ++i) {
        if (state[i].isTensor() && !bitwise_equal(state[i].toTensor(), whole_state[i].toTensor())) {
          wrong = from + ", " + std::to_string(threads) + " threads: argument " + std::to_string(i) + " written otherwise";
        }
      }
    }
    if (!wrong.empty()) failures.push_back(wrong);
    ++checked;
  }
  at::set_num_threads(2);
  if (suite.batch_rows == BatchRows::kNone) return failures;

  // Row by row: every tensor argument with the first one's row count is a row argument; row r
  // alone is its slice (a view, so what the call writes lands in the same state).
  const int first = first_tensor(base);
  const int64_t rows = base[first].toTensor().size(0);
  torch::jit::Stack state = copy_stack(base);
  std::vector<std::vector<at::Tensor>> parts;
  for (int64_t r = 0; r < rows; ++r) {
    torch::jit::Stack one = state;
    for (size_t i = 0; i < one.size(); ++i) {
      if (!one[i].isTensor() || !one[i].toTensor().defined()) continue;
      const at::Tensor& t = one[i].toTensor();
      if (t.dim() >= 1 && t.size(0) == rows) one[i] = t.narrow(0, r, 1);
    }
    std::vector<at::Tensor> out;
    try {
      out = call_returning(op, kernel, one);
    } catch (const std::exception& e) {
      failures.push_back(from + ": row " + std::to_string(r) + " alone failed: " + e.what());
      return failures;
    }
    if (!parts.empty() && out.size() != parts.front().size()) {
      failures.push_back(from + ": row " + std::to_string(r) + " alone returned another number of tensors");
      return failures;
    }
    parts.push_back(out);
  }
  if (parts.empty() || parts.front().size() != whole.size()) {
    failures.push_back(from + ": a row alone returns " + std::to_string(parts.empty() ? 0 : parts.front().size()) +
                       " tensors, the whole call " + std::to_string(whole.size()));
    return failures;
  }
  for (size_t j = 0; j < whole.size(); ++j) {
    std::vector<at::Tensor> column;
    for (const auto& p : parts) column.push_back(p[j]);
    const at::Tensor& want = whole[j];
    if (want.dim() >= 1 && want.size(0) == rows) {
      const at::Tensor got = at::cat(column);
      for (int64_t r = 0; r < rows; ++r) {
        if (!bitwise_equal(got.narrow(0, r, 1), want.narrow(0, r, 1))) {
          failures.push_back(from + ": result " + std::to_string(j) + ", row " + std::to_string(r) +
                             " alone differs from that row in the batch of " + std::to_string(rows));
          break;
        }
      }
    } else {
      failures.push_back(from + ": result " + std::to_string(j) + " has no row per batch row; the suite must say how "
                         "its rows are checked (OperationSuite::batch_rows)");
    }
    ++checked;
  }
  for (size_t i = 0; i < state.size(); ++i) {
    if (state[i].isTensor() && !bitwise_equal(state[i].toTensor(), whole_state[i].toTensor())) {
      failures.push_back(from + ": argument " + std::to_string(i) + " is written otherwise row by row than by the whole call");
    }
  }
  ++checked;
  return failures;
}

TEST(BatchInvariance, EveryCpuImplementationThatDeclaresItGivesARowTheSameBitsAloneAndInAnyBatch) {
  std::vector<std::string> failures;
  int implementations = 0, checked = 0;
  for (const Operation* op : builtin_operations()) {
    const numerics::OperationSuite* suite = numerics::find_suite(op->name());
    for (const auto& kernel : library_implementations(*op, Device::kCpu)) {
      if (!kernel->spec.batch_invariant) continue;
      ++implementations;
      if (suite == nullptr) {
        failures.push_back(kernel->spec.name + ": declares batch invariance but its operation has no suite");
        continue;
      }
      for (auto& f : check_implementation(*op, *kernel, *suite, checked)) failures.push_back(std::move(f));
    }
  }
  EXPECT_GT(implementations, 0);
  EXPECT_GT(checked, implementations);  // a comparison per thread count, at least
  std::string text;
  for (const auto& f : failures) text += "  " + f + "\n";
  EXPECT_TRUE(failures.empty()) << failures.size() << " failures:\n" << text;
}

// The check is not vacuous: a kernel whose row depends on the batch (it adds the rows' count)
// fails it.
TEST(BatchInvariance, TheCheckCatchesARowThatDependsOnTheBatch) {
  for (const Operation* op : builtin_operations()) {
    const numerics::OperationSuite* suite = numerics::find_suite(op->name());
    if (suite == nullptr || suite->batch_rows != BatchRows::kLeadingDimension || op->boxer() == nullptr) continue;
    const auto kernels = library_implementations(*op, Device::kCpu);
    if (kernels.empty()) continue;
    const std::shared_ptr<const RegisteredKernel> real = kernels.front();
    // The real kernel, then every floating result plus the number of rows / 1e3.
    auto skewed = std::make_shared<const BoxedKernel>([real, op](torch::jit::Stack& stack) {
      const int first = first_tensor(stack);
      const double rows = static_cast<double>(stack[first].toTensor().size(0));
      op->boxed_caller()(real->function, stack);
      for (auto& v : stack) {
        if (v.isTensor() && at::isFloatingType(v.toTensor().scalar_type())) v = v.toTensor().add(rows / 1e3);
      }
    });
    RegisteredKernel fake{.spec = real->spec, .operation = op, .function = op->boxer()(skewed)};
    int checked = 0;
    const auto failures = check_implementation(*op, fake, *suite, checked);
    bool found = false;
    for (const auto& f : failures) found |= f.find("alone differs from that row in the batch") != std::string::npos;
    EXPECT_TRUE(found) << op->name() << ": a batch-dependent kernel passed the check";
    return;  // one operation shows it
  }
  FAIL() << "no operation with leading-dimension rows";
}

// initialize(batch_invariant=true) binds every operation of the catalog on the CPU.
TEST(BatchInvariance, InitializeBindsTheWholeCatalogOnTheCpu) {
  runtime().reset_for_testing();
  InitializeOptions options;
  options.batch_invariant = true;
  std::shared_ptr<const Bindings> b;
  ASSERT_NO_THROW(b = initialize(Device::kCpu, options));
  EXPECT_EQ(b->size(), builtin_operations().size());
  for (const auto& name : b->operations()) {
    EXPECT_TRUE(b->at(name).spec().batch_invariant) << name << " -> " << b->at(name).spec().name;
  }
  EXPECT_EQ(b->at("paged_attention").spec().name, "cpu.native.paged_attention.batch_invariant");
  runtime().reset_for_testing();
  // The default selection keeps the faster plan.
  EXPECT_EQ(initialize("cpu", {"paged_attention"})->at("paged_attention").spec().name, "cpu.native.paged_attention");
  runtime().reset_for_testing();
}

}  // namespace
}  // namespace xllm_kernel::testing
