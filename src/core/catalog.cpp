#include "xllm_kernel/catalog.h"

#include <algorithm>
#include <mutex>

namespace xllm_kernel {

namespace {

struct GroupList {
  std::mutex mutex;
  std::vector<const Group& (*)()> factories;
  std::vector<const Group*> added;   // add_group, in the order added
  std::vector<const Group*> groups;  // built from factories and added, ordered by name
  bool stale = true;
};

GroupList& group_list() {
  static GroupList* list = new GroupList();  // never destroyed: read until exit
  return *list;
}

}  // namespace

namespace detail {

void define_schemas(const Group& group);  // src/core/custom_ops.cpp

GroupRegistrar::GroupRegistrar(const Group& (*group)()) {
  try {
    define_schemas(group());
  } catch (const std::exception& e) {
    registry().record_error(e.what());  // never throw during static initialization
  }
  GroupList& list = group_list();
  std::lock_guard<std::mutex> lock(list.mutex);
  list.factories.push_back(group);
  list.stale = true;  // rebuilt on the next read
}

void append_group(const Group& group) {
  GroupList& list = group_list();
  std::lock_guard<std::mutex> lock(list.mutex);
  list.added.push_back(&group);
  list.stale = true;
}

void ImplementationRegistrar::add(const BackendModule& module, const Operation& operation, ErasedFunction fn,
                                  const char* variant) {
  try {
    const Implementation* declared = module.find(operation, variant);
    if (declared == nullptr) {
      throw std::invalid_argument("register_kernel(" + std::string(to_string(module.device)) + "." + module.solution +
                                  "." + operation.name() + (*variant ? std::string(".") + variant : std::string()) +
                                  "): module " + module.name + " declares no such implementation; declare it in "
                                  "the module's implementations");
    }
    KernelSpec spec = module.spec(*declared);
    // A plugin loaded for one module registers its other modules' implementations too; where another
    // front door (the Python package's module) registered those first, the plugin's are skipped, as
    // ModuleLoader does not load the plugin for a module already provided.
    if (!module.plugin.empty()) {
      if (auto existing = registry().find(spec.name); existing != nullptr && existing->spec.module == &module) return;
    }
    registry().add(operation, std::move(spec), std::move(fn));
  } catch (const std::exception& e) {
    registry().record_error(e.what());
  }
}

}  // namespace detail

std::string BackendModule::implementation_name(const Implementation& implementation) const {
  std::string name = std::string(to_string(device)) + "." + solution + "." + implementation.operation->name();
  if (!implementation.variant.empty()) name += "." + implementation.variant;
  return name;
}

KernelSpec BackendModule::spec(const Implementation& implementation) const {
  KernelSpec s;
  s.name = implementation_name(implementation);
  s.contract = &implementation.operation->contract();
  s.device = device;
  s.execution_modes = execution_modes;
  s.input_domain = implementation.input_domain;
  s.solution = solution;
  s.variant = implementation.variant;
  s.binding = binding;
  s.priority = implementation.priority;
  s.batch_invariant = implementation.batch_invariant;
  s.module = this;
  return s;
}

const Implementation* BackendModule::find(const Operation& operation, const std::string& variant) const {
  for (const Implementation& impl : implementations) {
    if (impl.operation == &operation && impl.variant == variant) return &impl;
  }
  return nullptr;
}

std::vector<const Group*> builtin_groups() {
  GroupList& list = group_list();
  std::lock_guard<std::mutex> lock(list.mutex);
  if (list.stale) {
    list.groups.clear();
    for (auto factory : list.factories) list.groups.push_back(&factory());
    list.groups.insert(list.groups.end(), list.added.begin(), list.added.end());
    std::sort(list.groups.begin(), list.groups.end(), [](const Group* a, const Group* b) { return a->name < b->name; });
    list.stale = false;
  }
  return list.groups;  // a copy: add_group may rebuild the list while the caller reads it
}

std::vector<const Operation*> builtin_operations() {
  std::vector<const Operation*> out;
  for (const Group* g : builtin_groups()) out.insert(out.end(), g->operations.begin(), g->operations.end());
  return out;
}

std::pair<const BackendModule*, const Implementation*> find_declaration(const std::string& implementation_name) {
  for (const Group* g : builtin_groups()) {
    for (const BackendModule* m : g->modules) {
      for (const Implementation& impl : m->implementations) {
        if (m->implementation_name(impl) == implementation_name) return {m, &impl};
      }
    }
  }
  return {nullptr, nullptr};
}

}  // namespace xllm_kernel
