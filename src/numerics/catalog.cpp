// The suites the tools know (metadata only: building a suite touches no device), and the flags of
// the one a command line names. Each family's C++ suites register themselves (XLLM_REGISTER_SUITE);
// Python suites join at run time (add_suite); nothing here lists them.
#include <algorithm>
#include <mutex>
#include <stdexcept>

#include "src/numerics/suite.h"
#include "src/tools/cli.h"

namespace xllm_kernel::numerics {
namespace {

struct SuiteList {
  std::mutex mutex;
  std::vector<const OperationSuite& (*)()> factories;
  std::vector<std::shared_ptr<const OperationSuite>> added;  // add_suite, kept until exit
  std::vector<const OperationSuite*> suites;                  // factories' and added, ordered by operation
  bool stale = true;
};

SuiteList& suite_list() {
  static SuiteList* list = new SuiteList();  // never destroyed: read until exit
  return *list;
}

// Rebuilds list.suites if a suite was registered since; the caller holds list.mutex.
const std::vector<const OperationSuite*>& current(SuiteList& list) {
  if (list.stale) {
    list.suites.clear();
    for (auto factory : list.factories) list.suites.push_back(&factory());
    for (const auto& suite : list.added) list.suites.push_back(suite.get());
    std::stable_sort(list.suites.begin(), list.suites.end(),
                     [](const OperationSuite* a, const OperationSuite* b) { return a->operation < b->operation; });
    list.stale = false;
  }
  return list.suites;
}

std::string operation_names() {
  std::string names;
  for (const OperationSuite* s : builtin_suites()) names += (names.empty() ? "" : ", ") + s->operation;
  return names.empty() ? "(none)" : names;
}

}  // namespace

registration::SuiteRegistrar::SuiteRegistrar(const OperationSuite& (*suite)()) {
  SuiteList& list = suite_list();
  std::lock_guard<std::mutex> lock(list.mutex);
  list.factories.push_back(suite);
  list.stale = true;
}

const std::vector<const OperationSuite*>& builtin_suites() {
  SuiteList& list = suite_list();
  std::lock_guard<std::mutex> lock(list.mutex);
  return current(list);
}

const OperationSuite* find_suite(const std::string& operation) {
  for (const OperationSuite* s : builtin_suites()) {
    if (s->operation == operation) return s;
  }
  return nullptr;
}

std::string suite_origin(const OperationSuite& suite) {
  return suite.origin.empty() ? "the C++ suite (XLLM_REGISTER_SUITE)" : suite.origin;
}

void add_suite(std::shared_ptr<const OperationSuite> suite) {
  if (!suite || suite->operation.empty()) throw std::invalid_argument("add_suite: the suite names no operation");
  if (!suite->add_arguments || !suite->cases) {
    throw std::invalid_argument("add_suite: suite " + suite->operation + " (" + suite_origin(*suite) +
                                ") lacks add_arguments or cases");
  }
  SuiteList& list = suite_list();
  std::lock_guard<std::mutex> lock(list.mutex);
  for (const OperationSuite* s : current(list)) {
    if (s->operation == suite->operation) {
      throw std::invalid_argument("add_suite: operation " + suite->operation + " already has a suite, " +
                                  suite_origin(*s) + "; a second one, " + suite_origin(*suite) +
                                  ", cannot be added (one suite per operation)");
    }
  }
  list.added.push_back(std::move(suite));
  list.stale = true;
}

const OperationSuite* add_suite_arguments(CLI::App& app, SuiteOptions& options, const std::vector<std::string>& argv) {
  for (size_t i = 1; i < argv.size(); ++i) {
    std::string name;
    bool named = false;
    if (argv[i] == "--operation" && i + 1 < argv.size()) {
      name = argv[i + 1];
      named = true;
    }
    if (argv[i].rfind("--operation=", 0) == 0) {
      name = argv[i].substr(12);
      named = true;
    }
    if (!named || name.empty() || name[0] == '-') continue;  // CLI11 reports a missing value
    if (const OperationSuite* suite = find_suite(name)) {
      suite->add_arguments(app, options);
      app.footer("Options of --operation " + name + " are listed above (" + suite->description + ").");
      return suite;
    }
    throw tools::UsageError("--operation: unknown operation '" + name + "'; known: " + operation_names());
  }
  app.footer("Operations: " + operation_names() + ". `--operation NAME --help` shows that operation's options.");
  return nullptr;
}

}  // namespace xllm_kernel::numerics
