// The suites the tools know (metadata only: building a suite touches no device), and the flags of
// the one a command line names. Each family's suites register themselves (XLLM_REGISTER_SUITE);
// nothing here lists them.
#include <algorithm>
#include <mutex>

#include "src/numerics/suite.h"

namespace xllm_kernel::numerics {
namespace {

struct SuiteList {
  std::mutex mutex;
  std::vector<const OperationSuite& (*)()> factories;
  std::vector<const OperationSuite*> suites;  // built from factories, ordered by operation
};

SuiteList& suite_list() {
  static SuiteList* list = new SuiteList();  // never destroyed: read until exit
  return *list;
}

}  // namespace

registration::SuiteRegistrar::SuiteRegistrar(const OperationSuite& (*suite)()) {
  SuiteList& list = suite_list();
  std::lock_guard<std::mutex> lock(list.mutex);
  list.factories.push_back(suite);
  list.suites.clear();
}

const std::vector<const OperationSuite*>& builtin_suites() {
  SuiteList& list = suite_list();
  std::lock_guard<std::mutex> lock(list.mutex);
  if (list.suites.size() != list.factories.size()) {
    list.suites.clear();
    for (auto factory : list.factories) list.suites.push_back(&factory());
    std::sort(list.suites.begin(), list.suites.end(),
              [](const OperationSuite* a, const OperationSuite* b) { return a->operation < b->operation; });
  }
  return list.suites;
}

const OperationSuite* find_suite(const std::string& operation) {
  for (const OperationSuite* s : builtin_suites()) {
    if (s->operation == operation) return s;
  }
  return nullptr;
}

const OperationSuite* add_suite_arguments(CLI::App& app, SuiteOptions& options, const std::vector<std::string>& argv) {
  for (size_t i = 1; i < argv.size(); ++i) {
    std::string name;
    if (argv[i] == "--operation" && i + 1 < argv.size()) name = argv[i + 1];
    if (argv[i].rfind("--operation=", 0) == 0) name = argv[i].substr(12);
    if (name.empty()) continue;
    if (const OperationSuite* suite = find_suite(name)) {
      suite->add_arguments(app, options);
      app.footer("Options of --operation " + name + " are listed above (" + suite->description + ").");
      return suite;
    }
  }
  std::string names;
  for (const OperationSuite* s : builtin_suites()) names += (names.empty() ? "" : ", ") + s->operation;
  app.footer("Operations: " + names + ". `--operation NAME --help` shows that operation's options.");
  return nullptr;
}

}  // namespace xllm_kernel::numerics
