#include "src/numerics/tensor_case.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <functional>
#include <stdexcept>

#include "src/core/cpu_copy.h"
#include "src/core/cpu_stream.h"
#include "xllm_kernel/device_api.h"

namespace xllm_kernel::numerics {

at::Device torch_device(const Plan& plan) {
  switch (plan.device) {
    case Device::kCpu: return at::Device(at::kCPU);
    case Device::kCuda: return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(plan.device_index));
    case Device::kNpu: return at::Device(at::kPrivateUse1, static_cast<c10::DeviceIndex>(plan.device_index));
  }
  return at::Device(at::kCPU);
}

int64_t storage_bytes(at::ArrayRef<at::Tensor> tensors) {
  int64_t bytes = 0;
  for (const auto& t : tensors) {
    if (t.defined()) bytes += static_cast<int64_t>(t.storage().nbytes());
  }
  return bytes;
}

void restore(const std::vector<std::pair<at::Tensor, at::Tensor>>& mutated_and_pristine) {
  std::vector<std::pair<at::Tensor, at::Tensor>> storages;
  int64_t bytes = 0;
  bool cpu = true;
  for (const auto& [mutated, pristine] : mutated_and_pristine) {
    if (!mutated.defined()) continue;
    // Captured by pointer: C++20 lambdas may not capture structured bindings (clang rejects it).
    const void* data = mutated.storage().data();
    const bool seen = std::any_of(storages.begin(), storages.end(),
                                  [data](const auto& s) { return s.first.storage().data() == data; });
    if (seen) continue;
    storages.emplace_back(whole_storage(mutated), whole_storage(pristine));
    bytes += static_cast<int64_t>(mutated.storage().nbytes());
    cpu &= mutated.device().is_cpu();
  }
  const bool stream = cpu && detail::stream_cpu_output(bytes);
  for (const auto& [dst, src] : storages) {
    if (stream) {
      detail::cpu_stream_copy(dst, src);
    } else {
      dst.copy_(src);
    }
  }
}

namespace {

std::string make_case_id(const std::string& operation, const json& parameters) {
  std::string id = operation;
  for (const auto& [key, value] : parameters.items()) {
    id += "/" + key + "=" + (value.is_string() ? value.get<std::string>() : value.dump());
  }
  return id;
}

struct State {
  Example example;
  Expected expected;
  std::vector<at::Tensor> inputs;    // on the device, what the implementation sees
  std::vector<at::Tensor> pristine;  // on the device, the values before any call
  std::vector<at::Tensor> outputs;
};

}  // namespace

TensorCase::TensorCase(std::string operation, json parameters, ExampleBuilder builder)
    : operation_(std::move(operation)),
      parameters_(std::move(parameters)),
      case_id_(make_case_id(operation_, parameters_)),
      builder_(std::move(builder)) {}

std::optional<std::string> TensorCase::unsupported_reason(const Plan& plan) const {
  return plan_unsupported_reason(plan);
}

std::optional<std::string> plan_unsupported_reason(const Plan& plan) {
  if (plan.mode == ExecutionMode::kGraph) {
    const DeviceApi* api = device_api(plan.device);
    if (api == nullptr) return std::string("device ") + to_string(plan.device) + " has no runtime support loaded";
    if (auto reason = api->graph_unsupported_reason()) return reason;
  }
  if (plan.kernel && !plan.kernel->spec().supports(plan.mode)) {
    return plan.kernel->spec().name + " does not support " + to_string(plan.mode) + " mode";
  }
  return std::nullopt;
}

namespace {

// The storages a prepared case holds (a storage shared by two tensors counted twice: an upper bound).
int64_t held_bytes(const State& state) {
  int64_t bytes = storage_bytes(state.example.tensors) + storage_bytes(state.inputs) + storage_bytes(state.pristine) +
                  storage_bytes(state.expected.outputs);
  for (const auto& [name, t] : state.expected.mutated) bytes += storage_bytes(t);
  return bytes;
}

}  // namespace

PreparedCase TensorCase::prepare(const Plan& plan) const {
  // Inputs depend on the seed and the case only, never on the order cases run in.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(plan.seed ^ std::hash<std::string>{}(case_id_));
  auto state = std::make_shared<State>();
  state->example = builder_(parameters_, generator);
  const Example& ex = state->example;
  state->expected = ex.reference(ex.tensors);
  const at::Device device = torch_device(plan);
  for (const auto& t : ex.tensors) {
    state->inputs.push_back(copy_with_layout(t, device));
    state->pristine.push_back(copy_with_layout(t, device));
  }
  auto kernel = plan.kernel;

  PreparedCase prepared;
  prepared.metadata = ex.metadata;
  prepared.held_bytes = held_bytes(*state);
  prepared.function = [state, kernel] { state->outputs = state->example.call(*kernel, state->inputs); };
  if (!ex.mutates.empty()) {
    prepared.reset = [state] {
      std::vector<std::pair<at::Tensor, at::Tensor>> mutated;
      for (size_t i = 0; i < state->inputs.size(); ++i) {
        const auto& m = state->example.mutates;
        if (state->inputs[i].defined() && std::find(m.begin(), m.end(), state->example.names[i]) != m.end()) {
          mutated.emplace_back(state->inputs[i], state->pristine[i]);
        }
      }
      restore(mutated);
    };
  }
  prepared.snapshot = [state] {
    std::vector<at::Tensor> out;
    for (const auto& t : state->outputs) out.push_back(t.clone());
    for (size_t i = 0; i < state->inputs.size(); ++i) {
      const auto& m = state->example.mutates;
      if (std::find(m.begin(), m.end(), state->example.names[i]) != m.end()) out.push_back(state->inputs[i].clone());
    }
    return out;
  };
  prepared.validate = [state] {
    const Example& ex = state->example;
    return check_tensors(TensorCheck{ex.names, ex.mutates, ex.aliases_inputs, ex.tolerance, ex.tolerance_overrides,
                                     state->inputs, state->pristine, state->outputs, state->expected});
  };
  return prepared;
}

std::optional<std::string> prepare_suite(const OperationSuite& suite, const Plan& plan, const tools::Target& target) {
  if (!suite.prepare || !target.kernel || plan_unsupported_reason(plan)) return std::nullopt;
  try {
    return suite.prepare(plan);
  } catch (const std::exception& e) {
    throw std::runtime_error(target.name + ": the " + suite.operation + " suite's prepare failed: " + e.what());
  }
}

std::vector<json> cartesian(const std::vector<Dimension>& dimensions) {
  std::vector<json> points{json::object()};
  for (const auto& d : dimensions) {
    std::vector<json> next;
    for (const auto& p : points) {
      for (const auto& value : d.values) {
        json q = p;
        q[d.name] = value;
        next.push_back(std::move(q));
      }
    }
    points = std::move(next);
  }
  return points;
}

std::vector<std::shared_ptr<const KernelCase>> tensor_cases(const std::string& operation,
                                                            const std::vector<Dimension>& dimensions,
                                                            const std::vector<json>& extra, ExampleBuilder builder) {
  std::vector<std::shared_ptr<const KernelCase>> cases;
  for (const auto& p : cartesian(dimensions)) cases.push_back(std::make_shared<TensorCase>(operation, p, builder));
  for (const auto& p : extra) cases.push_back(std::make_shared<TensorCase>(operation, p, builder));
  return cases;
}

}  // namespace xllm_kernel::numerics
