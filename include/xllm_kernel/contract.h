// Operator contracts: the one description of an operation's semantics that every implementation of
// it shares. The schema string is the single source of truth for the torch schema
// (TORCH_LIBRARY m.def), the fake kernel, the numerics suite and docs/operators.md; `mutates` is
// checked against its Tensor(a!) arguments when the operation's group registers.
//
//   const OpContract& fused_add_rms_norm_contract() {
//     static const OpContract contract{
//         .operation = "fused_add_rms_norm",
//         .version = 1,
//         .schema = "fused_add_rms_norm(Tensor(a!) input, Tensor(b!) residual, Tensor weight, float eps) -> ()",
//         .mutates = {"input", "residual"},
//         .numerical_mode = NumericalMode::kFp32Accumulate,
//         .semantics = "...",
//         .dtypes = "float32, bfloat16, float16"};
//     return contract;
//   }
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
