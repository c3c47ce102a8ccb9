// Operator contracts: the one description of an operation's semantics that every implementation of
// it shares. The schema string is the single source of truth for the torch schema
// (TORCH_LIBRARY m.def), the fake kernel, the numerics suite and docs/operators.md.
//
//   inline const OpContract kRmsNorm{
//       "rms_norm", 1, "rms_norm(Tensor input, Tensor weight, float eps) -> Tensor",
//       /*mutates=*/{}, /*aliases_inputs=*/false, NumericalMode::kFp32Accumulate, "..."};
#pragma once

#include <string>
#include <vector>

namespace xllm_kernel {

enum class NumericalMode { kExact, kFp32Accumulate, kApproximate };
const char* to_string(NumericalMode mode);

enum class Device { kCpu = 0, kCuda = 1, kNpu = 2 };
inline constexpr int kNumDevices = 3;
const char* to_string(Device device);
// "cpu", "cuda", "npu" (a "cuda:0"-style index is accepted and ignored); throws on anything else.
Device parse_device(const std::string& name);

// eager: called directly; graph: captured into the device's graph (CUDA graphs, ACLGraph).
enum class ExecutionMode { kEager = 0, kGraph = 1 };
const char* to_string(ExecutionMode mode);
ExecutionMode parse_execution_mode(const std::string& name);  // "eager" | "graph"

struct OpContract {
  std::string operation;              // "rms_norm"
  int version = 1;                    // bumped when semantics change
  std::string schema;                 // torch schema, "Tensor(a!)" for every mutated argument
  std::vector<std::string> mutates;   // argument names the op writes, as in the schema
  bool aliases_inputs = false;        // whether an output may alias an input
  NumericalMode numerical_mode = NumericalMode::kFp32Accumulate;
  std::string semantics;              // one paragraph for people (docs/operators.md)
  std::string dtypes;                 // supported dtypes, for people
};

}  // namespace xllm_kernel
