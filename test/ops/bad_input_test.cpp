// Bad input, from the contracts: every catalog operation, every implementation the library
// registers for it, and for each argument of its schema the ways a caller gets it wrong. Each
// variant of a valid call (the first small case of the operation's suite) must throw an error
// naming the operation and the argument, leaving the other arguments untouched, or be one its
// suite declares accepted (OperationSuite::accepted_bad_inputs, in src/ops/<family>/suites/), with
// what the operation does instead, which is checked. Nothing here names a family or an operation.
//
// Tensor arguments: an integer dtype (int32) and float64; another device (a meta tensor stands in
// for it); a non-contiguous last dimension; one dimension one larger, each dimension in turn;
// zero elements (the first dimension 0); a 0-D tensor; None where the schema does not allow it.
// float scalars: NaN, +inf, -inf, -1. int scalars: -1 and 0; ScalarType arguments also another
// dtype (float32).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "src/numerics/verify.h"
#include "test/ops/common/suite_arguments.h"

namespace xllm_kernel::testing {
namespace {

using numerics::bitwise_equal;

using numerics::AcceptedAs;
using numerics::AcceptedBadInput;

// The variant of `operation`'s argument its suite accepts on `device`, or null: everything else must
// be an error naming the operation and the argument.
const AcceptedBadInput* allowed(const std::string& operation, const std::string& argument, const std::string& variant,
                                Device device) {
  const numerics::OperationSuite* suite = numerics::find_suite(operation);
  if (suite == nullptr) return nullptr;
  for (const auto& a : suite->accepted_bad_inputs) {
    const bool here = a.devices.empty() || std::find(a.devices.begin(), a.devices.end(), device) != a.devices.end();
    if (argument == a.argument && variant == a.variant && here) return &a;
  }
  return nullptr;
}

// Whether `text` names `word` as a whole identifier ("key" in "key's dtype", not in "key_cache").
bool names(const std::string& text, const std::string& word) {
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const bool before = at == 0 || !ident(text[at - 1]);
    const bool after = at + word.size() == text.size() || !ident(text[at + word.size()]);
    if (before && after) return true;
  }
  return false;
}

struct Variant {
  size_t index;  // the argument varied
  std::string argument;
  std::string variant;
  c10::IValue value;
};

at::Tensor with_dtype(const at::Tensor& t, at::ScalarType dtype) {
  return at::empty_strided(t.sizes(), t.strides(), t.options().dtype(dtype)).copy_(t);
}

// `t` with dimension d one larger; the new slice repeats the first.
at::Tensor grown(const at::Tensor& t, int64_t d) {
  std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
  const int64_t n = sizes[d]++;
  at::Tensor out = at::empty(sizes, t.options());
  out.narrow(d, 0, n).copy_(t);
  out.narrow(d, n, 1).copy_(t.narrow(d, 0, 1));
  return out;
}

std::vector<Variant> variants_of(const c10::FunctionSchema& schema, const torch::jit::Stack& valid,
                                 const at::Device& device) {
  std::vector<Variant> out;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const c10::Argument& arg = schema.arguments()[i];
    const std::string& name = arg.name();
    auto add = [&](std::string variant, c10::IValue value) { out.push_back({i, name, std::move(variant), std::move(value)}); };
    const c10::IValue& v = valid[i];
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (t.scalar_type() != at::kInt) add("dtype int32", with_dtype(t, at::kInt));
      add("dtype float64", with_dtype(t, at::kDouble));
      add("device meta", at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta)));
      if (device.type() != at::kCPU) add("device cpu", numerics::copy_with_layout(t, at::kCPU));
      {
        std::vector<int64_t> wide(t.sizes().begin(), t.sizes().end());
        wide.back() *= 2;
        at::Tensor strided = at::empty(wide, t.options()).slice(-1, 0, wide.back(), 2);
        add("non-contiguous last dimension", strided.copy_(t));
      }
      for (int64_t d = 0; d < t.dim(); ++d) add("dim " + std::to_string(d) + " + 1", grown(t, d));
      {
        std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
        sizes[0] = 0;
        add("empty", at::empty(sizes, t.options()));
      }
      add("0-dim", t.flatten().select(0, 0).clone());
      if (arg.type()->kind() == c10::TypeKind::TensorType) add("None", c10::IValue());
    } else if (v.isDouble()) {
      add("NaN", std::numeric_limits<double>::quiet_NaN());
      add("+inf", std::numeric_limits<double>::infinity());
      add("-inf", -std::numeric_limits<double>::infinity());
      add("negative", -1.0);
    } else if (v.isInt()) {
      add("negative", int64_t{-1});
      add("0", int64_t{0});
      // A ScalarType argument: another dtype than the valid call's (float32, or float64 if that
      // is the valid one).
      if (arg.type()->kind() == c10::TypeKind::ScalarTypeType) {
        const auto other = v.toInt() == static_cast<int64_t>(at::kFloat) ? at::kDouble : at::kFloat;
        add("dtype " + std::string(other == at::kFloat ? "float32" : "float64"), static_cast<int64_t>(other));
      }
    }
  }
  return out;
}

std::string message_of(const std::function<void()>& fn, bool& threw) {
  threw = true;
  try {
    fn();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  }
  threw = false;
  return {};
}

// Checks the accepted variant's documented behaviour; empty when it holds.
std::string check_accepted(AcceptedAs accepted, const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& valid,
                           const torch::jit::Stack& before, const torch::jit::Stack& after, size_t varied,
                           size_t returned) {
  if (accepted == AcceptedAs::kEmptyResults) {
    for (size_t k = 0; k < returned && k < got.size(); ++k) {
      if (got[k].numel() != 0) return "result " + std::to_string(k) + " has elements";
    }
    for (size_t i = 0; i < before.size(); ++i) {
      if (i != varied && before[i].isTensor() && !bitwise_equal(before[i].toTensor(), after[i].toTensor())) {
        return "argument " + std::to_string(i) + " changed";
      }
    }
    return {};
  }
  if (got.size() != valid.size()) {
    return "left " + std::to_string(got.size()) + " results, the valid call " + std::to_string(valid.size());
  }
  if (accepted == AcceptedAs::kAnotherValidCall) {
    for (size_t k = 0; k < got.size(); ++k) {
      if (got[k].sizes() != valid[k].sizes() || got[k].scalar_type() != valid[k].scalar_type()) {
        std::ostringstream s;
        s << "result " << k << " (shape " << got[k].sizes() << ", " << got[k].scalar_type()
          << ") differs in shape or dtype from the valid call's (shape " << valid[k].sizes() << ", "
          << valid[k].scalar_type() << ")";
        return s.str();
      }
    }
    return {};
  }
  for (size_t k = 0; k < got.size(); ++k) {
    const at::Tensor& g = got[k];
    const at::Tensor& w = valid[k];
    at::Tensor part = g;
    const bool prefix = accepted == AcceptedAs::kValidPrefix || accepted == AcceptedAs::kValidPrefixClose;
    if (prefix && g.dim() == w.dim() && g.sizes() != w.sizes()) {
      for (int64_t d = 0; d < g.dim(); ++d) {
        if (g.size(d) == w.size(d) + 1) part = g.narrow(d, 0, w.size(d));
      }
    }
    const bool same = accepted == AcceptedAs::kValidPrefixClose && part.sizes() == w.sizes() && part.is_floating_point()
                          ? at::allclose(part.to(at::kFloat), w.to(at::kFloat), 1e-2, 1e-2, /*equal_nan=*/true)
                          : bitwise_equal(part, w);
    if (!same) {
      std::ostringstream s;
      s << "result " << k << " (shape " << g.sizes() << ") differs from the valid call's (shape " << w.sizes() << ")";
      return s.str();
    }
  }
  return {};
}

std::vector<at::Tensor> clones(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> out;
  for (const auto& t : tensors) out.push_back(t.clone());
  return out;
}

// Every variant of every argument, for every library implementation of every catalog operation on
// `device`; returns the failures, one line each.
std::vector<std::string> check_device(Device device, const at::Device& torch_device) {
  std::vector<std::string> failures;
  for (const Operation* op : builtin_operations()) {
    const auto arguments = suite_arguments(*op);
    if (!arguments) {
      failures.push_back(op->name() + ": its suite has no small case to start from");
      continue;
    }
    const torch::jit::Stack suite_stack = copy_stack(arguments->stack, torch_device);
    const c10::FunctionSchema schema = parsed_schema(*op);
    const auto kernels = library_implementations(*op, device);
    if (kernels.empty()) failures.push_back(op->name() + ": no implementation registered on " + to_string(device));
    for (const auto& kernel : kernels) {
      const std::string who = op->name() + " [" + kernel->spec.name + "] from " + arguments->case_id;
      // The arguments this implementation needs of its own (a weight it packed), then their variants.
      torch::jit::Stack valid_stack = copy_stack(suite_stack);
      bind_arguments(*op, kernel->spec, valid_stack);
      const auto variants = variants_of(schema, valid_stack, torch_device);
      torch::jit::Stack valid = copy_stack(valid_stack);
      std::vector<at::Tensor> valid_results;
      bool threw = false;
      const std::string error = message_of([&] { valid_results = clones(call_boxed_kernel(*op, *kernel, valid)); }, threw);
      if (threw) {
        failures.push_back(who + ": the valid call failed: " + error);
        continue;
      }
      for (const Variant& v : variants) {
        const std::string what = who + ", argument " + v.argument + ", " + v.variant + ": ";
        torch::jit::Stack stack = copy_stack(valid_stack);
        stack[v.index] = copy_value(v.value);
        const torch::jit::Stack before = copy_stack(stack);
        std::vector<at::Tensor> results;
        size_t returned = 0;
        const std::string message = message_of(
            [&] {
              torch::jit::Stack call = stack;
              op->boxed_caller()(kernel->function, call);
              returned = call.size();
              results = call_results(*op, stack, call);
            },
            threw);
        const AcceptedBadInput* allow = allowed(op->name(), v.argument, v.variant, device);
        if (threw) {
          if (allow != nullptr) {
            failures.push_back(what + "on the allow-list (" + allow->why + ") but rejected: " + message);
          } else if (!names(message, op->name()) || !names(message, v.argument)) {
            failures.push_back(what + "the error does not name the operation and the argument: " + message);
          } else {
            for (size_t i = 0; i < stack.size(); ++i) {
              if (i != v.index && stack[i].isTensor() && !stack[i].toTensor().is_meta() &&
                  !bitwise_equal(stack[i].toTensor(), before[i].toTensor())) {
                failures.push_back(what + "rejected (" + message + ") after writing " + schema.arguments()[i].name());
              }
            }
          }
          continue;
        }
        if (allow == nullptr) {
          failures.push_back(what + "accepted, and not on the allow-list");
          continue;
        }
        // A batch-invariant implementation gives the valid rows' bits with a row more: "close" is
        // for the others (a GEMM whose blocking follows the row count).
        const AcceptedAs as = allow->as == AcceptedAs::kValidPrefixClose && kernel->spec.batch_invariant
                                  ? AcceptedAs::kValidPrefix
                                  : allow->as;
        const std::string wrong = check_accepted(as, results, valid_results, before, stack, v.index, returned);
        if (!wrong.empty()) failures.push_back(what + "accepted (" + allow->why + ") but " + wrong);
      }
    }
  }
  return failures;
}

std::string lines(const std::vector<std::string>& failures) {
  std::string out;
  for (const auto& f : failures) out += "  " + f + "\n";
  return out;
}

TEST(BadInput, EveryCpuImplementationRejectsBadArgumentsNamingOperationAndArgument) {
  const auto failures = check_device(Device::kCpu, at::Device(at::kCPU));
  EXPECT_TRUE(failures.empty()) << failures.size() << " variant(s) failed:\n" << lines(failures);
}

// Every accepted variant a suite declares names a catalog operation, an argument of its schema and
// a variant this test makes of that argument, once, with a reason: the lists cannot go stale
// silently.
TEST(BadInput, AllowListNamesCatalogArguments) {
  for (const numerics::OperationSuite* suite : numerics::builtin_suites()) {
    if (suite->accepted_bad_inputs.empty()) continue;
    const Operation* op = nullptr;
    for (const Operation* o : builtin_operations()) {
      if (o->name() == suite->operation) op = o;
    }
    ASSERT_NE(op, nullptr) << suite->operation << " declares accepted bad inputs but is no catalog operation";
    const auto arguments = suite_arguments(*op);
    ASSERT_TRUE(arguments.has_value()) << op->name() << ": its suite has no small case to start from";
    const c10::FunctionSchema schema = parsed_schema(*op);
    // The variants made on the CPU, and the one more made on a GPU ("device cpu"; no GPU is needed
    // to name it).
    auto variants = variants_of(schema, arguments->stack, at::Device(at::kCPU));
    for (auto& v : variants_of(schema, arguments->stack, at::Device(at::kCUDA, 0))) variants.push_back(std::move(v));
    for (const auto& a : suite->accepted_bad_inputs) {
      EXPECT_TRUE(schema.argumentIndexWithName(a.argument).has_value()) << op->name() << " has no argument " << a.argument;
      EXPECT_FALSE(a.why.empty()) << op->name() << ", " << a.argument << ", " << a.variant << ": no reason given";
      const bool made = std::any_of(variants.begin(), variants.end(), [&](const Variant& v) {
        return v.argument == a.argument && v.variant == a.variant;
      });
      EXPECT_TRUE(made) << op->name() << ": this test makes no variant '" << a.variant << "' of " << a.argument;
      const auto same = std::count_if(
          suite->accepted_bad_inputs.begin(), suite->accepted_bad_inputs.end(),
          [&](const AcceptedBadInput& b) { return b.argument == a.argument && b.variant == a.variant; });
      EXPECT_EQ(same, 1) << op->name() << ", " << a.argument << ", " << a.variant << ": declared twice";
    }
  }
}

TEST(BadInput, EveryCudaImplementationRejectsBadArgumentsNamingOperationAndArgument) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device: the CUDA implementations cannot run here";
  // explain() loads the CUDA modules, and so the plugin's kernels.
  for (const Operation* op : builtin_operations()) runtime().explain(Device::kCuda, op->name());
  const auto failures = check_device(Device::kCuda, at::Device(at::kCUDA, 0));
  EXPECT_TRUE(failures.empty()) << failures.size() << " variant(s) failed:\n" << lines(failures);
}

}  // namespace
}  // namespace xllm_kernel::testing
