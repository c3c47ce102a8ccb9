#include "src/ops/common/family.h"

#include "src/ops/common/bridge.h"

namespace xllm_kernel::family {

namespace {

std::vector<Implementation> every_operation(const ModuleTable& table, const std::string& domain, int priority,
                                            bool batch_invariant) {
  std::vector<Implementation> out;
  for (const Operation* op : table.operations) {
    out.push_back({.operation = op, .input_domain = domain, .priority = priority, .batch_invariant = batch_invariant});
  }
  return out;
}

}  // namespace

StandardModules standard_modules(ModuleTable table) {
  const std::string& f = table.family;
  const std::string cuda_torch_words =
      table.torch_cuda_note.empty() ? "cuda tensors, " : "cuda tensors (" + table.torch_cuda_note + "), ";
  StandardModules m{
      .family = f,
      .operations = table.operations,
      .torch_cpu = {.name = f + ".torch_cpu",
                    .device = Device::kCpu,
                    .solution = "torch",
                    .binding = "aten",
                    .implementations = every_operation(table, "cpu tensors, " + table.domain, kTorchPriority,
                                                      table.batch_invariant.torch_cpu)},
      .native_cpu = {.name = f + ".native_cpu",
                     .device = Device::kCpu,
                     .solution = "native",
                     .binding = "highway",
                     .implementations = every_operation(table, "cpu tensors, " + table.domain, kNativePriority,
                                                       table.batch_invariant.native_cpu),
                     .probe = &bridge::probe_highway},
      .torch_cuda = {.name = f + ".torch_cuda",
                     .device = Device::kCuda,
                     .solution = "torch",
                     .binding = "aten",
                     .execution_modes = table.torch_cuda_modes,
                     .implementations = every_operation(table, cuda_torch_words + table.domain, kTorchPriority,
                                                       table.batch_invariant.torch_cuda),
                     .probe = &bridge::probe_torch_cuda},
      .native_cuda = {.name = f + ".native_cuda",
                      .device = Device::kCuda,
                      .solution = "native",
                      .binding = "cuda",
                      .execution_modes = {ExecutionMode::kEager, ExecutionMode::kGraph},
                      .implementations =
                          every_operation(table, "cuda tensors (sm_80+), " + table.domain, kNativePriority,
                                                          table.batch_invariant.native_cuda),
                      .probe = &bridge::probe_cuda_plugin,
                      .plugin = kCudaPlugin},
      .torch_npu = std::nullopt};
  if (!table.npu_implementations.empty()) {
    m.torch_npu = BackendModule{.name = f + ".torch_npu",
                                .device = Device::kNpu,
                                .solution = "torch",
                                .binding = "torch_npu",
                                .execution_modes = {ExecutionMode::kEager, ExecutionMode::kGraph},
                                .implementations = std::move(table.npu_implementations),
                                .probe = &bridge::probe_torch_npu,
                                .plugin = kNpuPlugin};
  }
  return m;
}

Group StandardModules::group() const {
  Group g{.name = family, .operations = operations, .modules = {&torch_cpu, &native_cpu, &torch_cuda, &native_cuda}};
  if (torch_npu) g.modules.push_back(&*torch_npu);
  return g;
}

}  // namespace xllm_kernel::family
