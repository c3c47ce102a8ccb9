// The soak: one process calls every catalog operation many times through its published binding,
// on inputs from the operation's numerics suite at token counts from 1 to 8192, and checks that
// its resident memory stops growing after a warm-up and that the CPU output block cache stays
// within its bound (xllm-kernel-soak; scripts/soak.sh runs it and the Python soak, scripts/soak.py).
//
//   auto pool = soak::build_pool({.max_tokens = 8192});   // after initialize(Device::kCpu)
//   pool[i].call();                                       // ops::<op>(...) on that case's inputs
//
// No list of operations: the pool walks builtin_operations() and takes each one's suite
// (numerics::find_suite); an operation without a suite is an error.
#pragma once

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace xllm_kernel::tools::soak {

struct PoolOptions {
  int64_t max_tokens = 8192;
  // A case whose estimated footprint (the suite's bytes read + written per token at 1 token, times
  // the tokens) exceeds this is replaced by a smaller point of the suite's grid, so that the pool
  // stays small and fast: large token counts come with small rows.
  int64_t max_case_bytes = int64_t{256} << 10;
  // The same bound for the largest token count, where outputs reach the CPU output block cache
  // (blocks of 1 MiB and more).
  int64_t max_large_case_bytes = int64_t{4} << 20;
  uint64_t seed = 0;
  // Keep each case's arguments, in schema order (for the Python soak); `call` then goes through the
  // operation's boxed caller, else through the prepared binding's typed function.
  bool record_arguments = false;
};

// One case of the pool: an operation on one point of its suite's grid.
struct Entry {
  std::string operation;
  std::string case_id;
  int64_t tokens = 0;
  double weight = 0;                    // relative share of calls: 1 / max(footprint, 16 KiB) (mostly small)
  std::function<void()> call;           // one call through the published binding (restores mutated inputs first)
  std::function<std::string()> check;   // calls once more and validates against the suite's reference: "" or why not
  std::vector<c10::IValue> arguments;   // with record_arguments: the call's arguments, schema order
};

// Token counts from 1 to max_tokens, about log-spaced (1, 2, 3, 5, 8, 13, ...).
std::vector<int64_t> token_ladder(int64_t max_tokens);

// For every catalog operation, one case per token count of the ladder (the suite's --tokens
// option; a suite without it gives as many of its default cases, drawn at random), the values of its suite's "dtype" parameter
// taken in turn, each case a random point of the suite's grid within the footprint bound. The CPU must be initialized (every operation). Throws std::runtime_error for an
// operation without a suite or without a binding on the CPU.
std::vector<Entry> build_pool(const PoolOptions& options);

// Resident memory of this process (/proc/self/statm), bytes.
int64_t resident_bytes();

// xllm-kernel-soak: --calls N (default 10^6), --seed, --max-tokens, --max-growth (percent, default 5).
// Exit codes: 0 passed, 1 memory grew, the cache exceeded its bound or a case failed validation,
// 2 usage error.
int soak_main(const std::vector<std::string>& argv);

}  // namespace xllm_kernel::tools::soak
