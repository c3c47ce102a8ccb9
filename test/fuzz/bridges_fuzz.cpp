// Fuzzes every bridge's input checking: the input picks an operation of the catalog and describes
// each argument of its schema (dtype, rank, sizes, layout, device, values; scalars from a table that
// includes NaN, infinities and negative values). Every registered CPU implementation of that
// operation is called on its own copy of those arguments, through the operation's boxed caller, so
// any operation is covered without knowing its C++ signature. Each call must either throw an error
// that names the operation, or succeed; when several implementations succeed, their outputs and
// mutated arguments agree within a tolerance of the dtype. ASan and UBSan watch for any access out
// of bounds. When one implementation accepts what another rejects, the input is reported.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/ScalarType.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "xllm_kernel/xllm_kernel.h"

namespace {

using namespace xllm_kernel;

class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t next() { return position_ < size_ ? data_[position_++] : 0; }
  int pick(int n) { return next() % n; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t position_ = 0;
};

// How to build one argument; built once per implementation so each gets its own, identical copy.
struct Recipe {
  enum Kind { kNone, kTensor, kFloat, kInt, kBool, kIntList } kind = kNone;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> sizes;
  int layout = 0;  // 0 contiguous, 1 last two dims transposed, 2 every other row, 3 expanded leading dim
  bool meta = false;
  uint64_t seed = 0;
  double real = 0;
  int64_t integer = 0;
  std::vector<int64_t> list;
};

constexpr at::ScalarType kDtypes[] = {at::kFloat, at::kBFloat16, at::kHalf, at::kFloat, at::kBFloat16,
                                      at::kHalf, at::kDouble, at::kInt, at::kLong, at::kBool};
const double kReals[] = {1e-6, 1e-5, 0.5, 1.0, 0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity(),
                         -std::numeric_limits<double>::infinity(), 1e30};
constexpr int64_t kInts[] = {0, 1, 2, 4, 8, 16, 32, 64, 128, -1, -8, 3};

Recipe describe(const c10::Argument& argument, bool written, Bytes& bytes) {
  Recipe r;
  c10::TypePtr type = argument.type();
  bool optional = false;
  if (auto inner = type->cast<c10::OptionalType>()) {
    optional = true;
    type = inner->getElementType();
  }
  if (optional && bytes.pick(4) == 0) return r;  // None
  if (type->kind() == c10::TypeKind::TensorType) {
    r.kind = Recipe::kTensor;
    r.dtype = kDtypes[bytes.pick(10)];
    const int rank = bytes.pick(5);
    for (int d = 0; d < rank; ++d) r.sizes.push_back(bytes.pick(10));
    r.layout = bytes.pick(written ? 3 : 4);  // never an expanded (self-overlapping) tensor to write
    r.meta = bytes.pick(16) == 0;
    r.seed = bytes.next();
  } else if (type->kind() == c10::TypeKind::FloatType) {
    r.kind = Recipe::kFloat;
    r.real = kReals[bytes.pick(10)];
  } else if (type->kind() == c10::TypeKind::IntType || type->kind() == c10::TypeKind::SymIntType) {
    r.kind = Recipe::kInt;
    r.integer = kInts[bytes.pick(12)];
  } else if (type->kind() == c10::TypeKind::BoolType) {
    r.kind = Recipe::kBool;
    r.integer = bytes.pick(2);
  } else if (type->kind() == c10::TypeKind::ListType) {
    r.kind = Recipe::kIntList;
    const int n = bytes.pick(4);
    for (int i = 0; i < n; ++i) r.list.push_back(kInts[bytes.pick(12)]);
  } else {
    std::fprintf(stderr, "bridges fuzz: argument %s has a type this fuzzer does not build (%s)\n",
                 argument.name().c_str(), type->str().c_str());
    std::abort();
  }
  return r;
}

at::Tensor build_tensor(const Recipe& r) {
  std::vector<int64_t> sizes = r.sizes;
  if (r.layout == 2 && !sizes.empty()) sizes[0] *= 2;  // a base twice as long, every other row taken
  at::Generator generator = at::detail::createCPUGenerator(r.seed);
  at::Tensor t;
  if (at::isFloatingType(r.dtype)) {
    t = at::randn(sizes, generator, at::TensorOptions().dtype(at::kFloat)).to(r.dtype);
  } else if (r.dtype == at::kBool) {
    t = at::randint(0, 2, sizes, generator, at::TensorOptions().dtype(at::kLong)).to(at::kBool);
  } else {
    t = at::randint(-2, 24, sizes, generator, at::TensorOptions().dtype(r.dtype));  // positions, slots
  }
  if (r.layout == 1 && t.dim() >= 2) t = t.transpose(-1, -2).contiguous().transpose(-1, -2);
  if (r.layout == 2 && t.dim() >= 1) t = t.slice(0, 0, t.size(0), 2);
  if (r.layout == 3 && t.dim() >= 1 && t.size(0) >= 1) t = t.narrow(0, 0, 1).expand(sizes);
  if (r.meta) t = at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta));
  return t;
}

c10::IValue build(const Recipe& r) {
  switch (r.kind) {
    case Recipe::kNone: return c10::IValue();
    case Recipe::kTensor: return build_tensor(r);
    case Recipe::kFloat: return r.real;
    case Recipe::kInt: return r.integer;
    case Recipe::kBool: return r.integer != 0;
    case Recipe::kIntList: return r.list;
  }
  return c10::IValue();
}

struct Outcome {
  bool ok = false;
  std::string error;
  std::vector<at::Tensor> results;  // outputs, then the written arguments
};

bool close(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  if (a.numel() == 0) return true;
  if (!at::isFloatingType(a.scalar_type())) return at::equal(a, b);
  double tolerance = 1e-4;
  if (a.scalar_type() == at::kBFloat16) tolerance = 4e-2;
  if (a.scalar_type() == at::kHalf) tolerance = 8e-3;
  if (a.scalar_type() == at::kDouble) tolerance = 1e-9;
  return at::allclose(a.to(at::kDouble), b.to(at::kDouble), tolerance, tolerance, /*equal_nan=*/true);
}

struct Target {
  const Operation* operation;
  const c10::FunctionSchema* schema;
  std::vector<std::shared_ptr<const RegisteredKernel>> kernels;
};

const std::vector<Target>& targets() {
  static const std::vector<Target> all = [] {
    at::set_num_threads(1);
    std::vector<Target> out;
    const auto registered = registry().kernels();
    for (const Operation* op : builtin_operations()) {
      Target t{op, &c10::Dispatcher::singleton().findSchemaOrThrow(("xllm_kernel::" + op->name()).c_str(), "").schema(),
               {}};
      for (const auto& k : registered) {
        if (k->operation == op && k->spec.device == Device::kCpu) t.kernels.push_back(k);
      }
      if (op->boxed_caller() != nullptr && !t.kernels.empty()) out.push_back(std::move(t));
    }
    if (out.empty()) std::abort();
    return out;
  }();
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes bytes(data, size);
  const Target& target = targets()[bytes.pick(static_cast<int>(targets().size()))];
  const auto& arguments = target.schema->arguments();
  std::vector<Recipe> recipes;
  std::vector<size_t> written;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const bool writes = arguments[i].alias_info() != nullptr && arguments[i].alias_info()->isWrite();
    if (writes) written.push_back(i);
    recipes.push_back(describe(arguments[i], writes, bytes));
  }
  const std::string& op = target.operation->name();
  std::vector<Outcome> outcomes;
  for (const auto& kernel : target.kernels) {
    torch::jit::Stack stack;
    std::vector<c10::IValue> kept;  // the written arguments, read back after the call
    for (const Recipe& r : recipes) stack.push_back(build(r));
    for (size_t i : written) kept.push_back(stack[i]);
    Outcome outcome;
    try {
      target.operation->boxed_caller()(kernel->function, stack);
      outcome.ok = true;
      for (const auto& v : stack) {
        if (v.isTensor()) outcome.results.push_back(v.toTensor());
      }
      for (const auto& v : kept) {
        if (v.isTensor()) outcome.results.push_back(v.toTensor());
      }
    } catch (const std::exception& e) {
      outcome.error = e.what();
      if (outcome.error.find(op) == std::string::npos) {
        std::fprintf(stderr, "%s: error does not name the operation: %s\n", kernel->spec.name.c_str(), e.what());
        std::abort();
      }
    }
    outcomes.push_back(std::move(outcome));
  }
  for (size_t i = 1; i < outcomes.size(); ++i) {
    const Outcome& a = outcomes[0];
    const Outcome& b = outcomes[i];
    const std::string& na = target.kernels[0]->spec.name;
    const std::string& nb = target.kernels[i]->spec.name;
    if (a.ok != b.ok) {
      std::fprintf(stderr, "%s and %s disagree on accepting the input: %s\n", na.c_str(), nb.c_str(),
                   (a.ok ? nb + " says: " + b.error : na + " says: " + a.error).c_str());
      std::abort();
    }
    if (!a.ok) continue;
    if (a.results.size() != b.results.size()) std::abort();
    for (size_t j = 0; j < a.results.size(); ++j) {
      if (a.results[j].device().is_meta() || close(a.results[j], b.results[j])) continue;
      std::fprintf(stderr, "%s and %s disagree on result %zu of %s\n", na.c_str(), nb.c_str(), j, op.c_str());
      std::abort();
    }
  }
  return 0;
}
