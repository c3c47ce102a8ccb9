// Operation suites: the cases of one operation, shared by the numerics and benchmark tools.
//
// A suite declares its CLI options, builds KernelCases from them, and each case prepares inputs
// for one implementation (a Plan) into a PreparedCase: a callable that runs the implementation
// once on those inputs, a validation against an independent float64 reference, the bytes and
// flops it moves, and an optional reset that restores mutated inputs.
#pragma once

#include <ATen/core/Tensor.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "xllm_kernel/registry.h"

namespace xllm_kernel::numerics {

using nlohmann::json;

// The implementation a case runs against, on which device and in which mode.
struct Plan {
  Device device = Device::kCpu;
  int device_index = 0;
  ExecutionMode mode = ExecutionMode::kEager;
  std::shared_ptr<const PreparedKernel> kernel{};
  uint64_t seed = 0;
};

// What a validation found, over every checked tensor.
struct Validation {
  bool passed = true;
  double max_abs_error = 0;
  double max_rel_error = 0;
  double max_ulp = 0;
  double headroom = 0;  // max |error| / (atol + rtol |reference|); <= 1 passes
  int64_t mismatches = 0;
  std::vector<std::string> failures;  // one line per failed check, for people
  json checks = json::array();        // per tensor: name, kind, statistics
};

struct CaseMetadata {
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  double flops = 0;
  // The roofline's work (src/benchmark/ceilings.h): operations (a multiply-add counts 2) per
  // instruction class the case may be computed with, as alternatives: "f32_fma", "bf16_dot",
  // "int8_dot", "amx_bf16", "amx_int8" on the CPU, "matrix_bf16", "matrix_f16" on an accelerator.
  // The fastest class the device has sets the compute time. Empty: `flops` counts as f32_fma.
  std::map<std::string, double> work;
};

struct PreparedCase {
  std::function<void()> function;      // runs the implementation once on the prepared inputs
  std::function<Validation()> validate;  // checks the state `function` left
  CaseMetadata metadata;
  std::function<void()> reset;          // restores mutated inputs; null when nothing is mutated
  // Copies of what `function` produced (outputs, then mutated arguments), for comparing a graph
  // replay with an eager call; may be null.
  std::function<std::vector<at::Tensor>()> snapshot;
  // Host and device memory this prepared copy holds (inputs, their pristine copies, expected
  // values), or 0 when unknown: bounds the copies the benchmark's --cold-cache makes.
  int64_t held_bytes = 0;
};

class KernelCase {
 public:
  virtual ~KernelCase() = default;
  virtual std::string case_id() const = 0;
  virtual json parameters() const = 0;
  // Why this case cannot run with this plan, or nothing.
  virtual std::optional<std::string> unsupported_reason(const Plan& plan) const = 0;
  virtual PreparedCase prepare(const Plan& plan) const = 0;
};

// How test/ops/batch_invariance_test.cpp checks an implementation that declares batch invariance
// (KernelSpec::batch_invariant) with this suite's arguments.
enum class BatchRows {
  // The batch's rows are the leading dimension of every tensor argument whose first dimension is
  // the first tensor argument's: each row called alone (the calls one after the other, on the same
  // state) must give the bits of the whole call, on 1, 2 and 3 threads.
  kLeadingDimension,
  // No batch rows (a weight packer): only the thread count must not change the bits.
  kNone,
  // Rows that the leading dimension does not describe (sequences over a shared cache): the family's
  // own test checks them, named in OperationSuite::batch_invariance_test.
  kFamilyTest,
};

// Values of a suite's own options after parsing.
using SuiteOptions = std::map<std::string, std::vector<std::string>>;

// The rows a case's kernels walk and the elements of each they walk, from its parameters: the
// generic tests check that a suite's default cases include an empty call (no rows) and a tail (a
// width above 16 that no SIMD width, 8 or more elements, divides).
struct RowShape {
  int64_t rows = 0;
  int64_t width = 0;
};

// What an implementation does with a bad argument it accepts instead of rejecting.
enum class AcceptedAs {
  // The same results as the valid call, bit for bit (the operation reads the argument through its
  // strides, so another layout of the same values changes nothing).
  kSameResults,
  // More rows, blocks or positions than the valid call: the results over the valid call's
  // elements are the valid call's, bit for bit (each result has the valid shape, or one dimension
  // one larger, and its leading part is compared).
  kValidPrefix,
  // kValidPrefix where the values may differ in the last bits: a GEMM whose blocking depends on the
  // row count (torch's: on an AMD Zen 5, float32 int4 linear of 3 and 4 rows) adds the same
  // products in another order. The leading part is within 1e-2 (relative and absolute, after
  // float32) of the valid call's: a mixed-up row still fails. An implementation that declares
  // batch invariance (KernelSpec::batch_invariant) is held to kValidPrefix: the same bits.
  kValidPrefixClose,
  // Zero rows: every returned tensor has no elements, and every other argument is unchanged.
  kEmptyResults,
  // Another valid call (one more token in a vocabulary, say): it must succeed, every result with the
  // valid call's shape and dtype; its values are not the valid call's to compare with.
  kAnotherValidCall,
};

// One variant of a valid call that the contract accepts. The bad-input test (test/ops/
// bad_input_test.cpp) makes each argument of the schema wrong in turn and expects an error naming
// the operation and the argument, unless the suite lists the variant here; a listed variant must be
// accepted and behave as `as` says. Variants, as that test names them: "dtype int32",
// "dtype float64", "device meta", "device cpu", "non-contiguous last dimension", "dim D + 1" (one
// dimension one larger), "empty" (the first dimension 0), "0-dim", "None"; for float scalars "NaN",
// "+inf", "-inf", "negative"; for int scalars "negative", "0".
struct AcceptedBadInput {
  std::string argument;  // as the schema names it
  std::string variant;
  AcceptedAs as = AcceptedAs::kSameResults;
  std::string why;  // the contract's words
  // The devices on which it is accepted (everywhere else it must be an error); empty: every device.
  // For what a device cannot check without a synchronization (values of index tensors on CUDA).
  std::vector<Device> devices{};
};

struct OperationSuite {
  std::string operation;
  std::string description;
  // Adds the suite's options to the CLI; values land in `options` under the option's long name.
  std::function<void(CLI::App& app, SuiteOptions& options)> add_arguments;
  std::function<std::vector<std::shared_ptr<const KernelCase>>(const SuiteOptions& options)> cases;
  bool has_reference = false;  // an independent float64 reference validates every case
  // Option values the benchmark uses where the user gave none (timing wants fewer, larger cases
  // than validation does).
  SuiteOptions benchmark_defaults;
  // The headline cases: option values both tools use under --grid headline where the user gave
  // none (scripts/main.sh's quick default). One to four cases of the shapes the operation is known
  // by (a decode batch and a prefill of a Llama-3-8B-class model), cheap enough to validate in
  // seconds. Empty: --grid headline runs the default grid and says so.
  SuiteOptions headline{};
  // Optional, called once per implementation (plan) before any of its cases run, by both tools:
  // loads what the implementation needs (an extension, a compiled kernel). A returned reason marks
  // every case of that implementation unsupported; an exception is an execution error.
  std::function<std::optional<std::string>(const Plan& plan)> prepare{};
  // The implementations the suite was written for: with --implementation left at its default, the
  // tools run those of them that are candidates on the device (none: what initialize selects).
  std::vector<std::string> implementations{};
  // Where the suite comes from, for messages ("" for a C++ suite: XLLM_REGISTER_SUITE).
  std::string origin{};

  // What the generic tests (test/numerics, test/ops/bad_input_test.cpp) read, so that they name no
  // family, operation or parameter. Required of a C++ suite: the rows and row width of a case,
  // from its parameters (the JSON a KernelCase reports).
  std::function<RowShape(const json& parameters)> row_shape{};
  // The bad-input variants the contract accepts, with the reason; everything else is an error.
  std::vector<AcceptedBadInput> accepted_bad_inputs{};
  // Optional: makes, in a stack of valid arguments (schema order), what one implementation needs of
  // its own: a weight packed by that implementation's packer in place of the suite's stand-in, say.
  // The generic tests call it before they call an implementation with a suite's arguments.
  std::function<void(const KernelSpec& implementation, std::vector<c10::IValue>& stack)> bind_arguments{};
  // Batch invariance: how the generic test treats the operation's rows, and with kFamilyTest the
  // test (file and name) that checks the implementations declaring it.
  BatchRows batch_rows = BatchRows::kLeadingDimension;
  std::string batch_invariance_test{};
};

// Suite discovery: metadata only; nothing touches a device. C++ suites register themselves while
// the tools library loads (XLLM_REGISTER_SUITE in src/ops/<family>/suites/); others are added at
// run time (add_suite: Python suites). Ordered by operation.
const std::vector<const OperationSuite*>& builtin_suites();
const OperationSuite* find_suite(const std::string& operation);

// Adds a suite at run time (the Python package adds its suites before it runs a tool). An operation
// has one suite: a second one throws std::invalid_argument naming both.
void add_suite(std::shared_ptr<const OperationSuite> suite);

// Where a suite comes from, for people: its origin, or "the C++ suite (XLLM_REGISTER_SUITE)".
std::string suite_origin(const OperationSuite& suite);

// If argv names --operation, adds that suite's flags to `app` (so that `--operation NAME --help`
// shows them) and returns the suite; an operation without a suite throws tools::UsageError naming
// the known ones (with or without --help). Without --operation returns null. Sets the help footer.
const OperationSuite* add_suite_arguments(CLI::App& app, SuiteOptions& options, const std::vector<std::string>& argv);

namespace registration {
struct SuiteRegistrar {
  explicit SuiteRegistrar(const OperationSuite& (*suite)());
};
}  // namespace registration

}  // namespace xllm_kernel::numerics

// Adds a suite at load time. FN names a function `const OperationSuite& FN()`.
#define XLLM_REGISTER_SUITE(FN) \
  static const ::xllm_kernel::numerics::registration::SuiteRegistrar xllm_kernel_suite_registrar_##FN(&FN)
