#include "xllm_kernel/registry.h"

#include <algorithm>
#include <stdexcept>

#include "src/core/strings.h"

namespace xllm_kernel {

const char* to_string(NumericalMode mode) {
  switch (mode) {
    case NumericalMode::kExact: return "exact";
    case NumericalMode::kFp32Accumulate: return "fp32_accumulate";
    case NumericalMode::kApproximate: return "approximate";
  }
  return "unknown";
}

const char* to_string(Device device) {
  switch (device) {
    case Device::kCpu: return "cpu";
    case Device::kCuda: return "cuda";
    case Device::kNpu: return "npu";
  }
  return "unknown";
}

Device parse_device(const std::string& name) {
  const std::string type = name.substr(0, name.find(':'));
  if (type == "cpu") return Device::kCpu;
  if (type == "cuda") return Device::kCuda;
  if (type == "npu") return Device::kNpu;
  throw std::invalid_argument("device: expected cpu, cuda or npu, got '" + name + "'");
}

const char* to_string(ExecutionMode mode) { return mode == ExecutionMode::kEager ? "eager" : "graph"; }

ExecutionMode parse_execution_mode(const std::string& name) {
  if (name == "eager") return ExecutionMode::kEager;
  if (name == "graph") return ExecutionMode::kGraph;
  throw std::invalid_argument("mode: expected eager or graph, got '" + name + "'");
}

bool KernelSpec::supports(ExecutionMode mode) const {
  return std::find(execution_modes.begin(), execution_modes.end(), mode) != execution_modes.end();
}

const PreparedKernel& Operation::get_prepared(Device device) const {
  const PreparedKernel* kernel = prepared(device);
  if (kernel == nullptr) {
    throw std::runtime_error(name() + ": device " + to_string(device) +
                             " is not initialized; call xllm_kernel::initialize(\"" + to_string(device) +
                             "\") at start-up, before the first call");
  }
  return *kernel;
}

void PreparedKernel::throw_signature_mismatch() const {
  throw std::logic_error(spec_.name + ": requested callable signature does not match the registered one");
}

namespace {

void validate_spec(const Operation& operation, const KernelSpec& spec, const ErasedFunction& function) {
  const std::string who = "register_kernel(" + (spec.name.empty() ? std::string("<unnamed>") : spec.name) + ")";
  if (spec.name.empty()) throw std::invalid_argument(who + ": name must not be empty");
  if (spec.contract == nullptr) throw std::invalid_argument(who + ": contract must be set");
  if (spec.contract->operation != operation.name()) {
    throw std::invalid_argument(who + ": contract is for operation '" + spec.contract->operation +
                                "', but the kernel is registered for '" + operation.name() + "'");
  }
  if (spec.solution.empty()) throw std::invalid_argument(who + ": solution must not be empty");
  if (spec.execution_modes.empty()) throw std::invalid_argument(who + ": execution_modes must not be empty");
  if (function.thunk == nullptr) throw std::invalid_argument(who + ": function must not be null");
  if (function.signature == nullptr || *function.signature != operation.signature()) {
    throw std::invalid_argument(who + ": callable signature does not match operation '" + operation.name() + "'");
  }
  // The name is a convention (metadata lives in fields), but a name that contradicts the fields
  // would mislead every report that prints it.
  const std::string prefix = std::string(to_string(spec.device)) + "." + spec.solution + "." + operation.name();
  const bool name_ok = spec.name == prefix || (spec.name.rfind(prefix + ".", 0) == 0 &&
                                               spec.name.substr(prefix.size() + 1) == spec.variant);
  if (!name_ok) {
    throw std::invalid_argument(who + ": name must be '" + prefix +
                                (spec.variant.empty() ? std::string() : "." + spec.variant) +
                                "' (<device>.<solution>.<operation>[.<variant>]) to match its fields");
  }
}

}  // namespace

void Registry::add(const Operation& operation, KernelSpec spec, ErasedFunction function) {
  validate_spec(operation, spec, function);
  std::lock_guard<std::mutex> lock(mutex_);
  if (frozen_[static_cast<int>(spec.device)]) {
    throw std::logic_error("register_kernel(" + spec.name + "): the registry is frozen for device " +
                           to_string(spec.device) + " (initialize() already ran); register before initialize");
  }
  for (const auto& k : kernels_) {
    if (k->spec.name == spec.name) {
      throw std::invalid_argument("register_kernel(" + spec.name + "): an implementation with this name is already registered");
    }
  }
  auto entry = std::make_shared<RegisteredKernel>();
  entry->spec = std::move(spec);
  entry->operation = &operation;
  entry->function = std::move(function);
  kernels_.push_back(std::move(entry));
}

void Registry::freeze(Device device) {
  std::lock_guard<std::mutex> lock(mutex_);
  frozen_[static_cast<int>(device)] = true;
}

bool Registry::frozen(Device device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return frozen_[static_cast<int>(device)];
}

std::vector<std::shared_ptr<const RegisteredKernel>> Registry::kernels() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kernels_;
}

std::shared_ptr<const RegisteredKernel> Registry::find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& k : kernels_) {
    if (k->spec.name == name) return k;
  }
  return nullptr;
}

size_t Registry::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kernels_.size();
}

void Registry::record_error(const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  errors_.push_back(message);
}

std::vector<std::string> Registry::errors() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return errors_;
}

void Registry::unfreeze_for_testing() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (bool& f : frozen_) f = false;
}

void Registry::clear_errors_for_testing() {
  std::lock_guard<std::mutex> lock(mutex_);
  errors_.clear();
}

Registry& registry() {
  static Registry* instance = new Registry();  // never destroyed: kernels may be called at exit
  return *instance;
}

}  // namespace xllm_kernel
