#include "xllm_kernel/runtime.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "src/core/modules.h"
#include "src/core/selection.h"
#include "src/core/strings.h"

namespace xllm_kernel {

using detail::Config;
using detail::join;
using detail::ResolvedOverride;

const char* to_string(Rejection rejection) {
  switch (rejection) {
    case Rejection::kNone: return "none";
    case Rejection::kMissingDependency: return "missing_dependency";
    case Rejection::kUnsupported: return "unsupported";
    case Rejection::kContractMismatch: return "contract_mismatch";
    case Rejection::kUnsupportedMode: return "unsupported_mode";
    case Rejection::kNotRegistered: return "not_registered";
    case Rejection::kNotBatchInvariant: return "not_batch_invariant";
  }
  return "unknown";
}

const char* to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::kSelected: return "selected";
    case Verdict::kLowerPriority: return "lower priority";
    case Verdict::kNotOverridden: return "overridden";
    case Verdict::kExcluded: return "excluded";
  }
  return "unknown";
}

const PreparedKernel& Bindings::at(const std::string& operation) const {
  auto it = kernels_.find(operation);
  if (it == kernels_.end()) {
    throw std::out_of_range("bindings(" + std::string(to_string(device_)) + "): operation '" + operation +
                            "' was not initialized; initialized: [" + join(operations(), ", ") + "]");
  }
  return *it->second;
}

std::vector<std::string> Bindings::operations() const {
  std::vector<std::string> names;
  for (const auto& [name, kernel] : kernels_) names.push_back(name);
  return names;
}

const Candidate* Explanation::selected() const {
  for (const auto& c : candidates) {
    if (c.verdict == Verdict::kSelected) return &c;
  }
  return nullptr;
}

std::string Explanation::to_string() const {
  std::ostringstream out;
  out << operation << " on " << xllm_kernel::to_string(device) << " (" << xllm_kernel::to_string(mode)
      << (batch_invariant ? ", batch-invariant" : "") << ")";
  if (!override_target.empty()) out << ", override '" << override_target << "' from " << override_source;
  out << "\n";
  size_t width = 4;
  for (const auto& c : candidates) width = std::max(width, c.name.size());
  for (const auto& c : candidates) {
    std::string verdict = xllm_kernel::to_string(c.verdict);
    if (!c.reason.empty()) verdict += ": " + c.reason;
    std::string binding = c.binding;
    if (!c.detail.empty()) binding += " (" + c.detail + ")";
    if (c.batch_invariant) binding += ", batch-invariant";
    out << "  " << c.name << std::string(width - c.name.size() + 2, ' ') << "priority " << c.priority
        << "  " << binding << "  " << verdict << "\n";
  }
  if (candidates.empty()) out << "  (no implementation registered for this device)\n";
  if (!error.empty()) out << "  error: " << error << "\n";
  return out.str();
}

namespace {

std::string describe_overrides(const std::map<std::string, ResolvedOverride>& overrides) {
  std::vector<std::string> parts;
  for (const auto& [op, o] : overrides) parts.push_back(op + "=" + o.target + " (" + o.source + ")");
  // Appended, not "{" + join(...): g++ 12 -O3 warns (-Wstringop-overflow, a false positive) on the
  // inlined operator+(const char*, string&&) once ATen's precompiled header is in front.
  std::string text = "{";
  text += join(parts, ", ");
  text += "}";
  return text;
}

// Empty when equal; otherwise what differs, for the error message.
std::string difference(const Config& before, const Config& now) {
  std::vector<std::string> parts;
  if (before.operations != now.operations) {
    parts.push_back("operations [" + join(before.operations, ", ") + "] then [" + join(now.operations, ", ") + "]");
  }
  bool overrides_equal = before.overrides.size() == now.overrides.size();
  if (overrides_equal) {
    for (const auto& [op, o] : before.overrides) {
      auto it = now.overrides.find(op);
      if (it == now.overrides.end() || !(it->second == o)) overrides_equal = false;
    }
  }
  if (!overrides_equal) {
    parts.push_back("overrides " + describe_overrides(before.overrides) + " then " + describe_overrides(now.overrides));
  }
  if (before.mode != now.mode) {
    parts.push_back(std::string("mode ") + to_string(before.mode) + " then " + to_string(now.mode));
  }
  if (before.batch_invariant != now.batch_invariant) {
    parts.push_back(std::string("batch_invariant ") + (before.batch_invariant ? "true" : "false") + " then " +
                    (now.batch_invariant ? "true" : "false"));
  }
  return join(parts, "; ");
}

bool log_enabled() {
  const char* level = std::getenv("XLLM_KERNEL_LOG");
  if (level == nullptr) return true;
  const std::string value(level);
  return !(value == "off" || value == "0" || value == "warning" || value == "error");
}

}  // namespace

struct Runtime::State {
  std::mutex mutex;
  std::optional<Config> configs[kNumDevices];
  std::shared_ptr<const Bindings> bindings[kNumDevices];
  detail::ModuleLoader modules;

  // Loads the modules of `device` that declare one of `operations` (all of them when empty).
  void load_modules(const Registry& registry, Device device, const std::vector<const Group*>& groups,
                    const std::vector<std::string>& operations) {
    const std::string who = std::string("initialize(") + to_string(device) + ")";
    const auto registered = [&registry](const std::string& name) { return registry.find(name) != nullptr; };
    for (const Group* group : groups) {
      for (const BackendModule* module : group->modules) {
        if (module->device != device) continue;
        bool wanted = operations.empty();
        for (const Implementation& impl : module->implementations) {
          wanted |= std::find(operations.begin(), operations.end(), impl.operation->name()) != operations.end();
        }
        if (wanted) modules.load(*module, who, registered);
      }
    }
  }
};

Runtime::Runtime(Registry& registry, std::vector<const Group*> groups, bool publish_to_operations)
    : Runtime(registry, [groups = std::move(groups)] { return groups; }, publish_to_operations) {}

Runtime::Runtime(Registry& registry, std::function<std::vector<const Group*>()> groups, bool publish_to_operations)
    : state_(std::make_unique<State>()), registry_(registry), groups_(std::move(groups)), publish_(publish_to_operations) {}

Runtime::~Runtime() = default;

namespace {

std::vector<const Operation*> operations_of(const std::vector<const Group*>& groups) {
  std::vector<const Operation*> out;
  for (const Group* g : groups) out.insert(out.end(), g->operations.begin(), g->operations.end());
  return out;
}

const Operation* find_operation(const std::vector<const Operation*>& operations, const std::string& name) {
  for (const Operation* op : operations) {
    if (op->name() == name) return op;
  }
  return nullptr;
}

std::vector<std::string> operation_names(const std::vector<const Operation*>& operations) {
  std::vector<std::string> names;
  for (const Operation* op : operations) names.push_back(op->name());
  return names;
}

[[noreturn]] void throw_unknown_operation(const std::string& who, const std::string& name,
                                          const std::vector<const Operation*>& operations) {
  throw std::invalid_argument(who + ": unknown operation '" + name + "'; closest: " +
                              join(detail::closest(name, operation_names(operations)), ", ") +
                              " (catalog: " + join(operation_names(operations), ", ") + ")");
}

// XLLM_KERNEL_BATCH_INVARIANT: 1, true, yes or on asks for batch invariance; unset, empty, 0, false,
// no or off leaves it to the argument; anything else is an error naming the variable.
bool batch_invariant_from_environment(const std::string& who) {
  const char* value = std::getenv("XLLM_KERNEL_BATCH_INVARIANT");
  if (value == nullptr) return false;
  const std::string v = detail::lower(value);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v.empty() || v == "0" || v == "false" || v == "no" || v == "off") return false;
  throw std::invalid_argument(who + ": XLLM_KERNEL_BATCH_INVARIANT must be 1, true, yes, on, 0, false, no or off, got '" +
                              std::string(value) + "'");
}

Config resolve(Device device, const InitializeOptions& options, const std::vector<const Operation*>& catalog) {
  const std::string who = std::string("initialize(") + to_string(device) + ")";
  Config config;
  config.mode = options.mode;
  if (options.operations.empty()) {
    config.operations = operation_names(catalog);
  } else {
    for (const auto& name : options.operations) {
      if (!find_operation(catalog, name)) throw_unknown_operation(who, name, catalog);
      config.operations.push_back(name);
    }
  }
  std::sort(config.operations.begin(), config.operations.end());
  config.operations.erase(std::unique(config.operations.begin(), config.operations.end()), config.operations.end());
  for (const auto& [op, target] : options.overrides) {
    if (!find_operation(catalog, op)) throw_unknown_operation(who + ": overrides", op, catalog);
    if (!std::binary_search(config.operations.begin(), config.operations.end(), op)) {
      throw std::invalid_argument(who + ": override for '" + op + "', which is not among the requested operations [" +
                                  join(config.operations, ", ") + "]");
    }
    if (target.empty()) throw std::invalid_argument(who + ": override for '" + op + "' is empty");
    config.overrides[op] = {target, "argument"};
  }
  config.batch_invariant = options.batch_invariant || batch_invariant_from_environment(who);
  // The environment beats the argument.
  for (const auto& op : config.operations) {
    const std::string variable = "XLLM_KERNEL_OVERRIDE_" + detail::upper(op);
    const char* value = std::getenv(variable.c_str());
    if (value != nullptr && *value != '\0') config.overrides[op] = {value, "environment " + variable};
  }
  return config;
}

}  // namespace

std::vector<const Operation*> Runtime::operations() const { return operations_of(groups_()); }

std::shared_ptr<const Bindings> Runtime::initialize(Device device, const InitializeOptions& options) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  const std::string who = std::string("initialize(") + to_string(device) + ")";
  auto check_registrations = [&] {
    if (auto errors = registry_.errors(); !errors.empty()) {
      throw std::runtime_error(who + ": an implementation failed to register: " + errors.front());
    }
  };
  check_registrations();
  const auto groups = groups_();
  const auto catalog = operations_of(groups);
  Config config = resolve(device, options, catalog);
  const int index = static_cast<int>(device);
  if (state_->configs[index]) {
    const std::string diff = difference(*state_->configs[index], config);
    if (diff.empty()) return state_->bindings[index];
    throw std::logic_error(who + ": already initialized with a different configuration (" + diff +
                           "); selection happens once per process: restart the worker to change it");
  }

  state_->load_modules(registry_, device, groups, config.operations);
  // A plugin registers while it loads: its failures are known only now.
  check_registrations();
  registry_.freeze(device);

  std::map<std::string, std::shared_ptr<const PreparedKernel>> kernels;
  std::vector<std::pair<const Operation*, Explanation>> chosen;
  const auto registered = registry_.kernels();
  std::string failures;  // every operation that cannot be bound, each with its explanation
  int failed = 0;
  for (const auto& name : config.operations) {
    const Operation* op = find_operation(catalog, name);
    detail::Selection selection = detail::select(device, *op, config, registered, groups, state_->modules);
    if (!selection.kernel) {
      failures += (failed++ == 0 ? "" : "\n") + selection.explanation.error + "\n" + selection.explanation.to_string();
      continue;
    }
    const Candidate* selected = selection.explanation.selected();
    kernels[name] = std::make_shared<PreparedKernel>(selection.kernel->spec, selection.kernel->function, selected->detail);
    chosen.emplace_back(op, std::move(selection.explanation));
  }

  if (failed == 1) throw std::runtime_error(who + ": " + failures);
  if (failed > 1) {
    throw std::runtime_error(who + ": " + std::to_string(failed) + " operations have no eligible implementation" +
                             (config.batch_invariant ? " (batch invariance was asked for)" : "") + ":\n" + failures);
  }
  auto bindings = std::make_shared<const Bindings>(device, config.mode, std::move(kernels));
  state_->configs[index] = config;
  state_->bindings[index] = bindings;
  if (publish_) {
    for (const auto& [op, ex] : chosen) op->publish(device, &bindings->at(op->name()));
  }
  if (log_enabled()) {
    for (const auto& [op, ex] : chosen) {
      const Candidate* c = ex.selected();
      std::cerr << "[xllm_kernel] " << to_string(device) << ": " << op->name() << " -> " << c->name << " (" << c->binding
                << (c->detail.empty() ? "" : " " + c->detail) << ", priority " << c->priority
                << (ex.override_target.empty() ? "" : ", override from " + ex.override_source) << ")\n";
    }
  }
  return bindings;
}

Explanation Runtime::explain(Device device, const std::string& operation) {
  InitializeOptions options;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    const auto& config = state_->configs[static_cast<int>(device)];
    if (config) {
      options.operations = config->operations;
      options.mode = config->mode;
      options.batch_invariant = config->batch_invariant;
      for (const auto& [op, o] : config->overrides) {
        if (o.source == "argument") options.overrides[op] = o.target;
      }
    }
  }
  if (options.operations.empty()) options.operations = {operation};
  return explain(device, operation, options);
}

Explanation Runtime::explain(Device device, const std::string& operation, const InitializeOptions& options) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  const auto groups = groups_();
  const auto catalog = operations_of(groups);
  const Operation* op = find_operation(catalog, operation);
  if (op == nullptr) throw_unknown_operation("explain(" + std::string(to_string(device)) + ")", operation, catalog);
  InitializeOptions scoped = options;
  if (std::find(scoped.operations.begin(), scoped.operations.end(), operation) == scoped.operations.end()) {
    scoped.operations.push_back(operation);
  }
  Config config = resolve(device, scoped, catalog);
  // Loads only the modules that declare this operation.
  state_->load_modules(registry_, device, groups, {operation});
  return detail::select(device, *op, config, registry_.kernels(), groups, state_->modules).explanation;
}

std::shared_ptr<const Bindings> Runtime::bindings(Device device) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->bindings[static_cast<int>(device)];
}

void Runtime::reset_for_testing() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  for (int d = 0; d < kNumDevices; ++d) {
    state_->configs[d].reset();
    // Bindings stay alive (callers may hold prepared kernels); unpublish them.
    if (publish_) {
      for (const Operation* op : operations()) op->publish(static_cast<Device>(d), nullptr);
    }
    state_->bindings[d].reset();
  }
  registry_.unfreeze_for_testing();
}

Runtime& runtime() {
  static Runtime* instance = new Runtime(registry(), &builtin_groups, /*publish_to_operations=*/true);
  return *instance;
}

std::shared_ptr<const Bindings> initialize(const std::string& device, std::vector<std::string> operations,
                                           std::map<std::string, std::string> overrides, const std::string& mode,
                                           bool batch_invariant) {
  InitializeOptions options{std::move(operations), std::move(overrides), parse_execution_mode(mode), batch_invariant};
  return runtime().initialize(parse_device(device), options);
}

std::shared_ptr<const Bindings> initialize(Device device, const InitializeOptions& options) {
  return runtime().initialize(device, options);
}

Explanation explain(const std::string& device, const std::string& operation) {
  return runtime().explain(parse_device(device), operation);
}

}  // namespace xllm_kernel
