// Tensor-tree cases: a suite describes one example (CPU inputs from a fixed seed, how to call an
// implementation, a float64 reference) and TensorCase does the rest: moves the inputs to the
// device with their layout, runs, and validates outputs, declared mutations, undeclared
// mutations (bitwise) and aliasing (check_tensors, src/numerics/verify.h).
#pragma once

#include <ATen/ATen.h>

#include "src/numerics/suite.h"
#include "src/numerics/verify.h"
#include "src/tools/targets.h"

namespace xllm_kernel::numerics {

struct Example {
  std::vector<std::string> names;   // argument names, in schema order
  std::vector<at::Tensor> tensors;  // CPU values (undefined: None); views keep their layout
  std::function<std::vector<at::Tensor>(const PreparedKernel& kernel, std::vector<at::Tensor>& inputs)> call;
  std::function<Expected(const std::vector<at::Tensor>& inputs)> reference;
  std::vector<std::string> mutates;  // from the contract
  bool aliases_inputs = false;       // from the contract
  Tolerance tolerance;               // for outputs and mutated arguments
  std::map<std::string, Tolerance> tolerance_overrides;  // by name ("out0", or an argument), with reason
  CaseMetadata metadata;
};

using ExampleBuilder = std::function<Example(const json& parameters, at::Generator& generator)>;

// Why no case can run with this plan, whatever its inputs: graph mode on a device without a graph
// API, or an implementation that does not declare the plan's mode. Nothing when it can.
std::optional<std::string> plan_unsupported_reason(const Plan& plan);

// Runs the suite's prepare hook (if any) for one implementation before its cases: nothing for an
// excluded target or a plan no case can run with. Returns the hook's reason to skip the
// implementation; its errors propagate, naming the implementation.
std::optional<std::string> prepare_suite(const OperationSuite& suite, const Plan& plan, const tools::Target& target);

// A case built from one point of a dimension matrix.
class TensorCase final : public KernelCase {
 public:
  TensorCase(std::string operation, json parameters, ExampleBuilder builder);
  std::string case_id() const override { return case_id_; }
  json parameters() const override { return parameters_; }
  std::optional<std::string> unsupported_reason(const Plan& plan) const override;
  PreparedCase prepare(const Plan& plan) const override;

 private:
  std::string operation_;
  json parameters_;
  std::string case_id_;
  ExampleBuilder builder_;
};

// One axis of a dimension matrix: a parameter name and its values.
struct Dimension {
  std::string name;
  std::vector<json> values;
};

// Every combination of the dimensions, in order (the last dimension varies fastest).
std::vector<json> cartesian(const std::vector<Dimension>& dimensions);

// Cases for every point of `dimensions`, plus `extra` points (e.g. empty dimensions).
std::vector<std::shared_ptr<const KernelCase>> tensor_cases(const std::string& operation,
                                                            const std::vector<Dimension>& dimensions,
                                                            const std::vector<json>& extra, ExampleBuilder builder);

// Bytes of the storages of the defined tensors (a storage shared by two counted twice).
int64_t storage_bytes(at::ArrayRef<at::Tensor> tensors);

// Restores mutated arguments before a timed call: the whole storage of each `first` from its
// copy_with_layout copy `second` (a storage shared by several arguments once). On the CPU, when
// the storages hold more bytes than the stream threshold (src/core/cpu_stream.h), with
// non-temporal stores: a plain copy would leave the last-level cache full of dirty lines of its
// own, and the timed call would pay for writing them back (a 256 MiB KV cache leaves 32 MiB of
// them) or, for an in-place kernel, find part of its input already in cache.
void restore(const std::vector<std::pair<at::Tensor, at::Tensor>>& mutated_and_pristine);

at::Device torch_device(const Plan& plan);

}  // namespace xllm_kernel::numerics
