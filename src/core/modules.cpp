#include "src/core/modules.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <mutex>
#include <stdexcept>

namespace xllm_kernel::detail {

std::string library_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&library_directory), &info) == 0 || info.dli_fname == nullptr) return ".";
  std::string path(info.dli_fname);
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

namespace {
struct Notes {
  std::mutex mutex;
  std::map<std::string, std::string> by_module;
};
Notes& notes() {
  static Notes* n = new Notes();
  return *n;
}
}  // namespace

void note_missing_dependency(const std::string& module, const std::string& reason) {
  Notes& n = notes();
  std::lock_guard<std::mutex> lock(n.mutex);
  if (reason.empty()) {
    n.by_module.erase(module);
  } else {
    n.by_module[module] = reason;
  }
}

std::string missing_dependency_note(const std::string& module) {
  Notes& n = notes();
  std::lock_guard<std::mutex> lock(n.mutex);
  auto it = n.by_module.find(module);
  return it == n.by_module.end() ? std::string() : it->second;
}

void ModuleLoader::load(const BackendModule& module, const std::string& who,
                        const std::function<bool(const std::string&)>& registered) {
  if (probes_.count(&module)) return;
  ProbeResult result = module.probe ? module.probe() : ProbeResult::ok();
  if (!result.available) {
    if (const std::string note = missing_dependency_note(module.name); !note.empty()) {
      result.detail += "; " + note;
    }
  }
  bool provided = false;  // another front door registered the module's implementations
  if (registered) {
    for (const Implementation& impl : module.implementations) provided |= registered(module.implementation_name(impl));
  }
  if (result.available && provided && !module.plugin.empty()) {
    result.detail += (result.detail.empty() ? "" : "; ") + std::string("implementations already registered (the Python package's module), plugin ") +
                     module.plugin + " not loaded";
  }
  if (result.available && !provided && !module.plugin.empty() && !plugins_.count(&module)) {
    const std::string path = library_directory() + "/" + module.plugin;
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
      result = ProbeResult::missing("plugin " + module.plugin + " is not installed beside the library (" + path + ")");
    } else {
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
      if (handle == nullptr) {
        const char* message = dlerror();
        throw std::runtime_error(who + ": module " + module.name + ": plugin " + path +
                                 " is present but failed to load: " + (message ? message : "unknown error"));
      }
      plugins_[&module] = handle;
    }
  }
  if (result.available) {
    for (const Implementation& impl : module.implementations) {
      if (impl.supports) supports_[&impl] = impl.supports();
    }
  }
  probes_[&module] = std::move(result);
}

const ProbeResult* ModuleLoader::probe(const BackendModule& module) const {
  auto it = probes_.find(&module);
  return it == probes_.end() ? nullptr : &it->second;
}

const ProbeResult* ModuleLoader::supports(const Implementation& implementation) const {
  auto it = supports_.find(&implementation);
  return it == supports_.end() ? nullptr : &it->second;
}

}  // namespace xllm_kernel::detail
