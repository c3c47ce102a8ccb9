#include "src/numerics/soak.h"

#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

#include "src/core/cpu_allocator.h"
#include "src/numerics/suite.h"
#include "src/tools/cli.h"
#include "src/tools/run_tool.h"
#include "xllm_kernel/boxing.h"
#include "xllm_kernel/runtime.h"

namespace xllm_kernel::tools::soak {
namespace {

using numerics::KernelCase;
using numerics::Plan;
using numerics::PreparedCase;
using numerics::SuiteOptions;
using nlohmann::json;

bool has_tokens_option(const numerics::OperationSuite& suite) {
  CLI::App app;
  SuiteOptions options;
  suite.add_arguments(app, options);
  return app.get_option_no_throw("--tokens") != nullptr;
}

int64_t footprint(const PreparedCase& prepared) {
  return prepared.metadata.bytes_read + prepared.metadata.bytes_written;
}

json without_tokens(json parameters) {
  parameters.erase("tokens");
  return parameters;
}

// The binding published for `operation` on the CPU, kept alive by the bindings that own it.
std::shared_ptr<const PreparedKernel> published(const std::shared_ptr<const Bindings>& bindings, const Operation& op) {
  if (!bindings->contains(op.name())) {
    throw std::runtime_error("soak: operation '" + op.name() + "' has no binding on the CPU");
  }
  const PreparedKernel& kernel = bindings->at(op.name());
  if (op.prepared(Device::kCpu) != &kernel) {
    throw std::runtime_error("soak: operation '" + op.name() + "': the published binding is not initialize()'s");
  }
  return std::shared_ptr<const PreparedKernel>(bindings, &kernel);
}

// A kernel with the binding's spec whose calls go through the operation's boxed caller, and which
// keeps the arguments of its first call.
std::shared_ptr<const PreparedKernel> recording(const Operation& op, std::shared_ptr<const PreparedKernel> binding,
                                                std::shared_ptr<std::vector<c10::IValue>> arguments) {
  if (op.boxer() == nullptr || op.boxed_caller() == nullptr) {
    throw std::runtime_error("soak: operation '" + op.name() + "' cannot be called boxed (no boxer), so its "
                             "arguments cannot be recorded for the Python soak");
  }
  auto boxed = std::make_shared<const BoxedKernel>([&op, binding, arguments](torch::jit::Stack& stack) {
    if (arguments->empty()) *arguments = stack;
    op.boxed_caller()(binding->erased(), stack);
  });
  return std::make_shared<const PreparedKernel>(binding->spec(), op.boxer()(boxed), binding->detail());
}

Entry make_entry(const Operation& op, const KernelCase& c, int64_t tokens, const Plan& plan, bool record,
                 std::shared_ptr<const PreparedKernel> binding) {
  Entry e;
  e.operation = op.name();
  e.case_id = c.case_id();
  e.tokens = tokens;
  Plan p = plan;
  auto arguments = std::make_shared<std::vector<c10::IValue>>();
  if (record) p.kernel = recording(op, std::move(binding), arguments);
  auto prepared = std::make_shared<PreparedCase>(c.prepare(p));
  auto calls = std::make_shared<int64_t>(0);
  // Equal shares for small cases, fewer calls for larger ones: every case costs about the same.
  e.weight = 1.0 / static_cast<double>(std::max<int64_t>(footprint(*prepared), int64_t{16} << 10));
  // Mutated inputs are restored now and then only (a reset copies them whole: a KV cache costs more
  // than the call), often enough that repeated in-place updates stay in range.
  e.call = [prepared, calls] {
    if (prepared->reset && (*calls)++ % 64 == 0) prepared->reset();
    prepared->function();
  };
  e.check = [prepared] {
    if (prepared->reset) prepared->reset();
    prepared->function();
    const numerics::Validation v = prepared->validate();
    std::string why;
    for (const auto& f : v.failures) why += (why.empty() ? "" : "; ") + f;
    return v.passed ? std::string() : why.empty() ? std::string("failed") : why;
  };
  if (record) {
    e.call();  // the first call records the arguments
    e.arguments = *arguments;
  }
  return e;
}

}  // namespace

std::vector<int64_t> token_ladder(int64_t max_tokens) {
  std::vector<int64_t> ladder;
  if (max_tokens < 1) return ladder;
  const int steps = static_cast<int>(std::ceil(std::log(static_cast<double>(max_tokens)) / std::log(1.6)));
  for (int i = 0; i <= steps; ++i) {
    const double t = std::exp(std::log(static_cast<double>(max_tokens)) * i / std::max(steps, 1));
    const int64_t v = std::clamp<int64_t>(std::llround(t), 1, max_tokens);
    if (ladder.empty() || ladder.back() != v) ladder.push_back(v);
  }
  return ladder;
}

std::vector<Entry> build_pool(const PoolOptions& options) {
  const auto bindings = runtime().bindings(Device::kCpu);
  if (!bindings) throw std::runtime_error("soak: the CPU is not initialized; call initialize(\"cpu\") first");
  std::mt19937_64 rng(options.seed);
  std::vector<Entry> pool;
  for (const Operation* op : builtin_operations()) {
    const numerics::OperationSuite* suite = numerics::find_suite(op->name());
    if (suite == nullptr) {
      throw std::runtime_error("soak: operation '" + op->name() + "' has no numerics suite, which the soak takes "
                               "its inputs from (docs/adding-an-operator.md)");
    }
    const auto binding = published(bindings, *op);
    const Plan plan{Device::kCpu, 0, ExecutionMode::kEager, binding, options.seed};
    if (!has_tokens_option(*suite)) {
      // No token dimension to vary: as many of the suite's own cases as the ladder has token counts,
      // drawn at random (paged_attention's whole grid was 372 cases holding 13 GiB).
      const auto cases = suite->cases({});
      std::vector<const KernelCase*> order;
      for (const auto& c : cases) {
        if (!c->unsupported_reason(plan)) order.push_back(c.get());
      }
      std::shuffle(order.begin(), order.end(), rng);
      order.resize(std::min(order.size(), token_ladder(options.max_tokens).size()));
      for (const KernelCase* c : order) {
        const int64_t tokens = c->parameters().value("tokens", int64_t{1});
        pool.push_back(make_entry(*op, *c, tokens, plan, options.record_arguments, binding));
      }
      continue;
    }
    // Grid points at one token, grouped by dtype, each with its footprint per token.
    const auto probes = suite->cases({{"tokens", {"1"}}});
    std::map<std::string, std::vector<const KernelCase*>> by_dtype;
    for (const auto& c : probes) {
      if (c->unsupported_reason(plan)) continue;
      const json p = c->parameters();
      by_dtype[p.contains("dtype") ? p["dtype"].dump() : ""].push_back(c.get());
    }
    std::map<std::string, int64_t> per_token;  // case_id at one token -> bytes
    auto bytes_per_token = [&](const KernelCase& c) {
      auto it = per_token.find(c.case_id());
      if (it == per_token.end()) it = per_token.emplace(c.case_id(), footprint(c.prepare(plan))).first;
      return it->second;
    };
    // Token counts take the dtypes in turn, so that each dtype meets small and large ones and the pool
    // holds one case per token count.
    std::vector<std::vector<const KernelCase*>> groups;
    for (auto& [dtype, candidates] : by_dtype) groups.push_back(candidates);
    if (groups.empty()) continue;
    const std::vector<int64_t> ladder = token_ladder(options.max_tokens);
    for (size_t k = 0; k < ladder.size(); ++k) {
      const int64_t tokens = ladder[k];
      const int64_t max_bytes = tokens == options.max_tokens ? options.max_large_case_bytes : options.max_case_bytes;
      const auto cases = suite->cases({{"tokens", {std::to_string(tokens)}}});
      std::map<json, const KernelCase*> at_tokens;  // grid point (without tokens) -> case
      for (const auto& c : cases) at_tokens.emplace(without_tokens(c->parameters()), c.get());
      std::vector<const KernelCase*> order = groups[k % groups.size()];
      std::shuffle(order.begin(), order.end(), rng);
      const KernelCase* chosen = nullptr;
      const KernelCase* smallest = nullptr;
      for (const KernelCase* c : order) {
        if (at_tokens.count(without_tokens(c->parameters())) == 0) continue;
        const int64_t bytes = bytes_per_token(*c);
        if (smallest == nullptr || bytes < bytes_per_token(*smallest)) smallest = c;
        if (bytes * tokens <= max_bytes) {
          chosen = c;
          break;
        }
      }
      if (chosen == nullptr) chosen = smallest;
      if (chosen == nullptr) continue;
      const KernelCase& c = *at_tokens.at(without_tokens(chosen->parameters()));
      if (c.unsupported_reason(plan)) continue;
      pool.push_back(make_entry(*op, c, tokens, plan, options.record_arguments, binding));
    }
  }
  return pool;
}

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) throw std::runtime_error("soak: cannot read /proc/self/statm");
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

namespace {

std::string format_seconds(double seconds) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", seconds);
  return buffer;
}

std::string mib(int64_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", static_cast<double>(bytes) / (1 << 20));
  return buffer;
}

int run(const std::vector<std::string>& argv) {
  CLI::App app{"xllm-kernel-soak: calls every catalog operation many times through its published CPU binding "
               "(inputs from its numerics suite, 1 to --max-tokens tokens, mostly few) and fails when resident "
               "memory grows after the warm-up or the CPU output block cache exceeds its bound.\n"
               "Exit codes: 0 passed, 1 memory grew, the cache overran or a case failed validation, 2 usage error.",
               "xllm-kernel-soak"};
  int64_t calls = 1000000;
  PoolOptions pool_options;
  double max_growth = 5;
  app.add_option("--calls", calls, "Calls in all, the warm-up included")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--seed", pool_options.seed, "Seed of the inputs, the grid points and the call order")
      ->capture_default_str();
  app.add_option("--max-tokens", pool_options.max_tokens, "Largest token count")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-case-bytes", pool_options.max_case_bytes, "Footprint above which a smaller grid point is taken")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-large-case-bytes", pool_options.max_large_case_bytes,
                 "The same at --max-tokens tokens, where outputs reach the CPU output block cache")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-growth", max_growth, "Resident memory growth after the warm-up that fails the run, percent")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  if (auto code = parse(app, argv)) return *code;

  const auto start = std::chrono::steady_clock::now();
  initialize(Device::kCpu);
  const std::vector<Entry> pool = build_pool(pool_options);
  const int64_t rss_pool = resident_bytes();
  const double pool_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (pool.empty()) throw std::runtime_error("soak: no case to run");
  std::vector<double> weights;
  std::set<std::string> operations;
  for (const Entry& e : pool) {
    weights.push_back(e.weight);
    operations.insert(e.operation);
  }
  std::discrete_distribution<size_t> pick(weights.begin(), weights.end());
  std::mt19937_64 rng(pool_options.seed + 1);
  std::map<std::string, int64_t> per_operation;
  const size_t bound = detail::cpu_cache_limit();
  size_t cache_max = 0;
  auto call = [&](size_t i) {
    pool[i].call();
    ++per_operation[pool[i].operation];
  };

  // Warm-up: every case twice (each output size meets the allocators), then a tenth of the calls.
  int64_t done = 0;
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < pool.size(); ++i, ++done) call(i);
  }
  const int64_t warmup = std::max<int64_t>(done, calls / 10);
  for (; done < warmup; ++done) call(pick(rng));
  const int64_t rss_warm = resident_bytes();
  const double warm_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (; done < calls; ++done) {
    call(pick(rng));
    if (done % 4096 == 0) cache_max = std::max(cache_max, detail::cpu_cache_bytes());
  }
  cache_max = std::max(cache_max, detail::cpu_cache_bytes());
  const int64_t rss_end = resident_bytes();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Still right after all those calls: every case validated once more.
  std::vector<std::string> failures;
  for (const Entry& e : pool) {
    const std::string why = e.check();
    if (!why.empty()) failures.push_back(e.operation + " " + e.case_id + ": " + why);
  }

  const double growth = 100.0 * static_cast<double>(rss_end - rss_warm) / static_cast<double>(rss_warm);
  const bool grew = growth > max_growth, overran = cache_max > bound;
  std::ostringstream out;
  out << "# Soak (C++): " << done << " calls, " << operations.size() << " operations, " << pool.size()
      << " cases, tokens 1.." << pool_options.max_tokens << ", " << at::get_num_threads() << " threads; the cases "
      << "took " << format_seconds(pool_seconds) << " s to prepare and hold " << mib(rss_pool) << " MiB resident\n\n";
  out << "| calls | seconds | warm-up calls | warm-up s | RSS after warm-up MiB | RSS at end MiB | growth % | "
         "cache max MiB | cache bound MiB |\n|---|---|---|---|---|---|---|---|---|\n";
  char growth_text[32];
  std::snprintf(growth_text, sizeof growth_text, "%+.2f", growth);
  out << "| " << done << " | " << format_seconds(seconds) << " | " << warmup << " | " << format_seconds(warm_seconds)
      << " | " << mib(rss_warm) << " | " << mib(rss_end) << " | " << growth_text << " | "
      << mib(static_cast<int64_t>(cache_max)) << " | " << mib(static_cast<int64_t>(bound)) << " |\n\n";
  out << "| operation | calls |\n|---|---|\n";
  for (const auto& [name, n] : per_operation) out << "| " << name << " | " << n << " |\n";
  std::cout << out.str();
  for (const auto& f : failures) std::cerr << "xllm-kernel-soak: validation failed: " << f << "\n";
  if (grew) {
    std::cerr << "xllm-kernel-soak: resident memory grew " << growth_text << "% after the warm-up (limit "
              << max_growth << "%)\n";
  }
  if (overran) {
    std::cerr << "xllm-kernel-soak: the CPU output block cache held " << cache_max << " bytes, above its bound "
              << bound << "\n";
  }
  return grew || overran || !failures.empty() ? kCaseFailed : kPassed;
}

}  // namespace

int soak_main(const std::vector<std::string>& argv) {
  return run_tool("xllm-kernel-soak", [&](auto&) { return run(argv); });
}

}  // namespace xllm_kernel::tools::soak
