// A tensor case's validation (numerics::check_tensors) on hand-made calls: outputs against the
// reference, aliasing only where declared, undeclared mutations bitwise (padding included),
// declared mutations against the reference and within their elements.
#include "src/numerics/verify.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

namespace xllm_kernel::numerics {
namespace {

// f(x, y) -> x + y, or in place: x <- x + y (mutates x). x is a [4, 6] view of a [4, 8] tensor
// (padding between rows).
struct Call {
  at::Tensor x_storage = at::randn({4, 8});
  at::Tensor x = x_storage.slice(1, 0, 6);
  at::Tensor y = at::randn({4, 6});

  TensorCheck check(bool in_place) const {
    TensorCheck c;
    c.names = {"x", "y", "scale"};
    c.tolerance = {1e-6, 1e-6};
    c.inputs = {x, y, at::Tensor()};  // scale is not a tensor
    c.pristine = {copy_with_layout(x, at::kCPU), copy_with_layout(y, at::kCPU), at::Tensor()};
    const at::Tensor sum = (x.to(at::kDouble) + y.to(at::kDouble));
    if (in_place) {
      c.mutates = {"x"};
      c.expected.mutated["x"] = sum;
    } else {
      c.outputs = {x + y};
      c.expected.outputs = {sum};
    }
    return c;
  }
};

std::vector<std::string> kinds(const Validation& v) {
  std::vector<std::string> out;
  for (const auto& check : v.checks) out.push_back(check["kind"].get<std::string>());
  return out;
}

TEST(CheckTensors, PassesACorrectCall) {
  const Call call;
  const Validation v = check_tensors(call.check(/*in_place=*/false));
  EXPECT_TRUE(v.passed) << (v.failures.empty() ? "" : v.failures.front());
  EXPECT_EQ(kinds(v), (std::vector<std::string>{"output", "unchanged", "unchanged"}));
  EXPECT_EQ(v.mismatches, 0);
}

TEST(CheckTensors, ComparesOutputsWithTheirToleranceOverride) {
  const Call call;
  TensorCheck c = call.check(false);
  c.outputs[0] = c.outputs[0] + 1e-3;
  Validation v = check_tensors(c);
  EXPECT_FALSE(v.passed);
  EXPECT_EQ(v.mismatches, 24);
  ASSERT_EQ(v.failures.size(), 1u);
  EXPECT_EQ(v.failures[0].rfind("output out0: 24 of 24 elements outside tolerance", 0), 0u) << v.failures[0];
  c.tolerance_overrides["out0"] = {1e-2, 0};
  v = check_tensors(c);
  EXPECT_TRUE(v.passed);
  EXPECT_EQ(v.checks[0]["atol"], 1e-2);
}

// A NaN in the reference is matched by any NaN, an infinity by the same infinity; anything else
// there (a finite value, the other infinity, a NaN for an infinity) is a mismatch, as is a
// non-finite value where the reference is finite.
TEST(Compare, MatchesNonFiniteReferencesExactly) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const at::Tensor want = at::tensor({nan, inf, -inf, 1.0, 2.0}, at::kDouble);
  const auto mismatches = [&](std::vector<float> got) {
    Validation v;
    compare(v, "out0", "output", at::tensor(got, at::kFloat), want, {1e-6, 1e-6});
    return v.mismatches;
  };
  const float finf = std::numeric_limits<float>::infinity(), fnan = std::nanf("");
  EXPECT_EQ(mismatches({-fnan, finf, -finf, 1.0f, 2.0f}), 0);
  EXPECT_EQ(mismatches({0.0f, finf, -finf, 1.0f, 2.0f}), 1);      // a finite value for a NaN
  EXPECT_EQ(mismatches({fnan, -finf, -finf, 1.0f, 2.0f}), 1);     // the other infinity
  EXPECT_EQ(mismatches({fnan, fnan, 3e38f, 1.0f, 2.0f}), 2);      // NaN or finite for an infinity
  EXPECT_EQ(mismatches({fnan, finf, -finf, fnan, finf}), 2);      // non-finite for finite
}

// Tolerance 0 is an exact comparison: equal values (infinities of the same sign included) and NaN
// where the reference is NaN are no error, with headroom 0; one ulp off, a NaN for a number, a
// number for a NaN, or the other infinity is a mismatch.
TEST(Compare, ToleranceZeroIsExactAndNaNMatchesNaN) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const at::Tensor want = at::tensor({1.5, -2.0, inf, -inf, nan, 0.0}, at::kDouble);
  Validation v;
  compare(v, "out0", "output", want.to(at::kFloat), want, Tolerance{0, 0});
  EXPECT_TRUE(v.passed) << (v.failures.empty() ? "" : v.failures.front());
  EXPECT_EQ(v.headroom, 0.0);
  EXPECT_EQ(v.mismatches, 0);
  const at::Tensor wrong[] = {at::tensor({1.5f, -2.0f, INFINITY, -INFINITY, NAN, 1e-30f}),
                              at::tensor({1.5f, -2.0f, INFINITY, -INFINITY, 1.0f, 0.0f}),
                              at::tensor({NAN, -2.0f, INFINITY, -INFINITY, NAN, 0.0f}),
                              at::tensor({1.5f, -2.0f, -INFINITY, -INFINITY, NAN, 0.0f})};
  for (const at::Tensor& got : wrong) {
    Validation w;
    compare(w, "out0", "output", got, want, Tolerance{0, 0});
    EXPECT_FALSE(w.passed) << got;
    EXPECT_EQ(w.mismatches, 1) << got;
  }
}

TEST(CheckTensors, AWrongNumberOfOutputsStopsTheChecks) {
  const Call call;
  TensorCheck c = call.check(false);
  c.outputs.push_back(c.outputs[0]);
  const Validation v = check_tensors(c);
  EXPECT_FALSE(v.passed);
  EXPECT_EQ(v.failures, (std::vector<std::string>{"returned 2 outputs, expected 1"}));
  EXPECT_TRUE(v.checks.empty());
}

TEST(CheckTensors, AnOutputAliasingAnInputFailsUnlessDeclared) {
  const Call call;
  TensorCheck c = call.check(false);
  c.outputs = {call.y};
  c.expected.outputs = {call.y.to(at::kDouble)};
  Validation v = check_tensors(c);
  EXPECT_FALSE(v.passed);
  EXPECT_EQ(v.failures, (std::vector<std::string>{"output out0 aliases input y, which the contract does not allow"}));
  EXPECT_EQ(kinds(v), (std::vector<std::string>{"output", "alias", "unchanged", "unchanged"}));
  c.aliases_inputs = true;
  EXPECT_TRUE(check_tensors(c).passed);
}

TEST(CheckTensors, AnUndeclaredMutationFailsEvenInThePadding) {
  const Call call;
  const TensorCheck c = call.check(false);
  call.x_storage.select(1, 7).fill_(5);  // padding only: the view's elements are untouched
  const Validation v = check_tensors(c);
  EXPECT_FALSE(v.passed);
  EXPECT_EQ(v.failures, (std::vector<std::string>{"input x was modified, but the contract does not declare it mutated"}));
  EXPECT_EQ(v.checks[1]["name"], "x");
  EXPECT_EQ(v.checks[1]["passed"], false);
}

TEST(CheckTensors, ADeclaredMutationIsComparedAndMustStayWithinItsElements) {
  Call call;
  const TensorCheck before = call.check(/*in_place=*/true);
  call.x.add_(call.y);
  Validation v = check_tensors(before);
  EXPECT_TRUE(v.passed) << (v.failures.empty() ? "" : v.failures.front());
  EXPECT_EQ(kinds(v), (std::vector<std::string>{"mutation", "unchanged"}));

  call.x_storage.select(1, 6).fill_(9);  // written outside the view's elements
  v = check_tensors(before);
  EXPECT_FALSE(v.passed);
  EXPECT_EQ(v.failures, (std::vector<std::string>{"mutated argument x was written outside its elements"}));
  EXPECT_EQ(kinds(v), (std::vector<std::string>{"mutation", "unchanged", "bounds"}));
}

TEST(CheckTensors, ADeclaredMutationNeedsAReferenceValue) {
  const Call call;
  TensorCheck c = call.check(true);
  c.expected.mutated.clear();
  const Validation v = check_tensors(c);
  EXPECT_FALSE(v.passed);
  EXPECT_EQ(v.failures, (std::vector<std::string>{"reference gives no value for mutated argument x"}));
}

TEST(CheckTensors, NeedsOneNameInputAndPristineCopyPerArgument) {
  const Call call;
  TensorCheck c = call.check(false);
  c.pristine.pop_back();
  try {
    check_tensors(c);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "check_tensors: 3 names, 3 inputs and 2 pristine copies; expected one of each per argument");
  }
}

}  // namespace
}  // namespace xllm_kernel::numerics
