// Families compose only through declared dependencies (src/ops/common/dependencies.h), and the
// folders of src/ form layers. This test reads every #include and Python import of the checkout
// (XLLM_KERNEL_SOURCE_DIR) and fails on:
//   - a reference from one family's files to another family that the first does not declare;
//   - a reference to another family's internals (its internal.h, a source file, its tests);
//   - a declaration that names no family, names the family itself, or that nothing uses;
//   - a cycle among the declared dependencies;
//   - a cycle among the top-level folders of src/ (src/tools is below src/numerics, say, never both ways).
// It first runs the same checks on a made-up tree, so it shows it can fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "src/ops/common/dependencies.h"

namespace {

namespace fs = std::filesystem;

using Declarations = std::map<std::string, std::set<std::string>>;  // family -> the families it builds on

struct Reference {
  std::string from;    // the family of the file
  std::string to;      // the family referred to
  std::string where;   // path:line
  std::string text;    // the include or import line
  bool private_entry;  // another family's internal.h, a source file or a test file
};

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::vector<std::string> split(const std::string& path) {
  std::vector<std::string> parts;
  std::stringstream in(path);
  for (std::string p; std::getline(in, p, '/');) parts.push_back(p);
  return parts;
}

// The family a path (relative to the checkout, or an include path) belongs to, if any:
// src/ops/F/..., csrc/{cpu,cuda}/F/..., csrc/common/F.h, include/xllm_kernel/ops/F.h (included as
// xllm_kernel/ops/F.h), python/xllm_kernel/ops/F/..., test/{csrc,cuda,ops}/F/...
std::optional<std::string> family_of(const std::string& path, const std::set<std::string>& families) {
  std::vector<std::string> p = split(path);
  if (!p.empty() && p[0] == "include") p.erase(p.begin());
  auto known = [&](const std::string& f) -> std::optional<std::string> {
    if (families.count(f) != 0) return f;
    return std::nullopt;
  };
  auto stem = [](const std::string& file) { return file.substr(0, file.rfind('.')); };
  if (p.size() >= 4 && p[0] == "src" && p[1] == "ops") return known(p[2]);
  if (p.size() >= 4 && p[0] == "csrc" && (p[1] == "cpu" || p[1] == "cuda")) return known(p[2]);
  if (p.size() == 3 && p[0] == "csrc" && p[1] == "common") return known(stem(p[2]));
  if (p.size() == 3 && p[0] == "xllm_kernel" && p[1] == "ops") return known(stem(p[2]));
  if (p.size() >= 5 && p[0] == "python" && p[1] == "xllm_kernel" && p[2] == "ops") return known(p[3]);
  if (p.size() >= 4 && p[0] == "test" && (p[1] == "csrc" || p[1] == "cuda" || p[1] == "ops")) return known(p[2]);
  return std::nullopt;
}

// What another family may include: its entry points, docs/adding-an-operator.md's table (contract
// arithmetic csrc/common/<f>.h, kernel headers csrc/{cpu,cuda}/<f>/*.h, *.cuh, argument checks
// src/ops/<f>/checks.h, float64 references src/ops/<f>/suites/*reference.h, the public header
// xllm_kernel/ops/<f>.h). Everything else is private: its internal.h, sources, the rest of its
// suites, bridge helpers and tests.
bool is_private(const std::string& include) {
  std::vector<std::string> p = split(include);
  if (!p.empty() && p[0] == "include") p.erase(p.begin());
  const std::string file = p.back();
  const bool header = ends_with(file, ".h") || ends_with(file, ".cuh") || ends_with(file, ".hpp");
  if (!header || file == "internal.h") return true;
  if (p.size() == 3 && p[0] == "csrc" && p[1] == "common") return false;
  if (p.size() == 4 && p[0] == "csrc" && (p[1] == "cpu" || p[1] == "cuda")) return false;
  if (p.size() == 4 && p[0] == "src" && p[1] == "ops" && file == "checks.h") return false;
  if (p.size() == 5 && p[0] == "src" && p[1] == "ops" && p[3] == "suites" && ends_with(file, "reference.h")) return false;
  if (p.size() == 3 && p[0] == "xllm_kernel" && p[1] == "ops") return false;
  return true;
}

bool is_source(const fs::path& p) {
  static const std::set<std::string> kExtensions = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".py"};
  return kExtensions.count(p.extension().string()) != 0;
}

template <class Fn>
void for_each_line(const fs::path& root, Fn&& fn) {
  for (const char* top : {"src", "csrc", "include", "python", "test"}) {
    if (!fs::exists(root / top)) continue;
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(root / top)) {
      if (e.is_regular_file() && is_source(e.path())) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      const std::string rel = fs::relative(f, root).generic_string();
      std::ifstream in(f);
      int n = 0;
      for (std::string line; std::getline(in, line);) fn(rel, ++n, line);
    }
  }
}

// Every reference of one family's files to another family.
std::vector<Reference> cross_family_references(const fs::path& root, const std::set<std::string>& families) {
  static const std::regex kInclude(R"(^\s*#\s*include\s*"([^"]+)\")");
  static const std::regex kImport(R"(^\s*(?:from|import)\s+xllm_kernel\.ops\.(\w+))");
  static const std::regex kImportFrom(R"(^\s*from\s+xllm_kernel\.ops\s+import\s+\(?([\w\s,]+))");
  std::vector<Reference> out;
  for_each_line(root, [&](const std::string& rel, int n, const std::string& line) {
    const std::optional<std::string> from = family_of(rel, families);
    if (!from) return;
    const std::string where = rel + ":" + std::to_string(n);
    std::smatch m;
    if (std::regex_search(line, m, kInclude)) {
      const std::string include = m[1];
      const std::optional<std::string> to = family_of(include, families);
      if (to && *to != *from) out.push_back({*from, *to, where, line, is_private(include)});
    } else if (ends_with(rel, ".py") && std::regex_search(line, m, kImport)) {
      const std::string to = m[1];
      if (families.count(to) != 0 && to != *from) out.push_back({*from, to, where, line, false});
    } else if (ends_with(rel, ".py") && std::regex_search(line, m, kImportFrom)) {
      std::stringstream names(std::regex_replace(std::string(m[1]), std::regex(R"([\s,]+)"), " "));
      for (std::string to; names >> to;) {
        if (families.count(to) != 0 && to != *from) out.push_back({*from, to, where, line, false});
      }
    }
  });
  return out;
}

// A cycle of the graph, as "a -> b -> a", or empty.
std::string find_cycle(const std::map<std::string, std::set<std::string>>& graph) {
  std::map<std::string, int> state;  // 1: on the current path, 2: done
  std::vector<std::string> path;
  std::string cycle;
  std::function<void(const std::string&)> visit = [&](const std::string& node) {
    state[node] = 1;
    path.push_back(node);
    auto it = graph.find(node);
    if (it != graph.end()) {
      for (const std::string& next : it->second) {
        if (!cycle.empty()) break;
        if (state[next] == 1) {
          auto start = std::find(path.begin(), path.end(), next);
          for (auto p = start; p != path.end(); ++p) cycle += *p + " -> ";
          cycle += next;
        } else if (state[next] == 0) {
          visit(next);
        }
      }
    }
    path.pop_back();
    state[node] = 2;
  };
  for (const auto& [node, edges] : graph) {
    if (cycle.empty() && state[node] == 0) visit(node);
  }
  return cycle;
}

std::set<std::string> families_of(const fs::path& root) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(root / "src" / "ops")) {
    if (e.is_directory() && e.path().filename() != "common") out.insert(e.path().filename().string());
  }
  return out;
}

// Every problem of the tree under these declarations, one line each.
std::vector<std::string> family_problems(const fs::path& root, const Declarations& declared) {
  const std::set<std::string> families = families_of(root);
  std::vector<std::string> problems;
  std::set<std::pair<std::string, std::string>> used;
  for (const Reference& r : cross_family_references(root, families)) {
    used.insert({r.from, r.to});
    auto it = declared.find(r.from);
    if (it == declared.end() || it->second.count(r.to) == 0) {
      problems.push_back(r.where + ": family " + r.from + " refers to family " + r.to + " (" + r.text +
                         ") without declaring it: add \"" + r.to + "\" to XLLM_FAMILY_BUILDS_ON(" + r.from +
                         ", ...) beside its group table, or drop the reference");
    }
    if (r.private_entry) {
      problems.push_back(r.where + ": family " + r.from + " reaches into family " + r.to + "'s internals (" + r.text +
                         "): use an entry point (its public header, csrc/common/" + r.to + ".h, a kernel header, "
                         "src/ops/" + r.to + "/checks.h, its suites' reference.h)");
    }
  }
  for (const auto& [family, builds_on] : declared) {
    if (families.count(family) == 0) problems.push_back("a declaration for " + family + ", which is no family");
    for (const std::string& dep : builds_on) {
      if (dep == family) {
        problems.push_back("family " + family + " declares it builds on itself");
      } else if (families.count(dep) == 0) {
        problems.push_back("family " + family + " declares it builds on " + dep + ", which is no family");
      } else if (used.count({family, dep}) == 0) {
        problems.push_back("family " + family + " declares it builds on " + dep + ", but no file of it refers to " +
                           dep + ": drop the declaration");
      }
    }
  }
  const std::string cycle = find_cycle(declared);
  if (!cycle.empty()) problems.push_back("the declared dependencies have a cycle: " + cycle);
  return problems;
}

// The include graph between the top-level folders of src/ (core, ops, numerics, tools, ...).
std::map<std::string, std::set<std::string>> src_layers(const fs::path& root) {
  static const std::regex kInclude(R"(^\s*#\s*include\s*"src/([^/"]+)/)");
  std::map<std::string, std::set<std::string>> graph;
  for_each_line(root, [&](const std::string& rel, int, const std::string& line) {
    const std::vector<std::string> p = split(rel);
    if (p.size() < 3 || p[0] != "src") return;
    std::smatch m;
    if (std::regex_search(line, m, kInclude) && m[1] != p[1]) graph[p[1]].insert(m[1]);
  });
  return graph;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += "\n  " + l;
  return out;
}

Declarations library_declarations() {
  Declarations out;
  for (const auto& d : xllm_kernel::family::declared_dependencies()) {
    out[d.family].insert(d.builds_on.begin(), d.builds_on.end());
  }
  return out;
}

// A made-up checkout in a temporary folder.
class MadeUpTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("xk-family-deps-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    write("src/ops/common/family.h", "#pragma once\n");
    write("src/ops/a/a.cpp", "#include \"src/ops/common/family.h\"\n#include \"src/ops/a/internal.h\"\n");
    write("src/ops/a/internal.h", "#pragma once\n");
    write("src/ops/b/b.cpp", "#include \"src/ops/b/internal.h\"\n");
    write("src/ops/b/internal.h", "#pragma once\n");
    write("csrc/common/b.h", "#pragma once\n");
    write("csrc/cpu/b/b-inl.h", "#include \"csrc/common/b.h\"\n");
    write("csrc/cpu/ceilings/ceilings.cpp", "#include \"csrc/cpu/b/b-inl.h\"\n");  // not a family
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  fs::path root_;
};

TEST_F(MadeUpTree, AFamilyWithoutCrossReferencesHasNoProblems) {
  EXPECT_EQ(family_problems(root_, {}), std::vector<std::string>{});
}

TEST_F(MadeUpTree, AnUndeclaredIncludeOrImportIsReported) {
  write("csrc/cpu/a/a.cpp", "#include \"hwy/highway.h\"\n#include \"csrc/cpu/b/b-inl.h\"\n");
  write("python/xllm_kernel/ops/a/__init__.py", "import torch\nfrom xllm_kernel.ops.b import thing\n");
  write("python/xllm_kernel/ops/a/more.py", "from xllm_kernel.ops import b, c\n");
  const std::vector<std::string> problems = family_problems(root_, {});
  ASSERT_EQ(problems.size(), 3u) << joined(problems);
  EXPECT_NE(problems[0].find("csrc/cpu/a/a.cpp:2: family a refers to family b"), std::string::npos) << problems[0];
  EXPECT_NE(problems[0].find("XLLM_FAMILY_BUILDS_ON(a, ...)"), std::string::npos) << problems[0];
  EXPECT_NE(problems[1].find("python/xllm_kernel/ops/a/__init__.py:2"), std::string::npos) << problems[1];
  EXPECT_NE(problems[2].find("python/xllm_kernel/ops/a/more.py:1"), std::string::npos) << problems[2];
  // Declared, the same references pass.
  EXPECT_EQ(family_problems(root_, {{"a", {"b"}}}), std::vector<std::string>{});
}

TEST_F(MadeUpTree, ReachingIntoInternalsIsReportedEvenWhenDeclared) {
  write("src/ops/a/checks.cpp", "#include \"src/ops/b/internal.h\"\n#include \"src/ops/b/suites/cases.h\"\n");
  write("test/csrc/a/a_test.cpp", "#include \"test/csrc/b/b_harness.h\"\n#include \"csrc/cpu/b/b.cpp\"\n");
  // The entry points of the table pass.
  write("src/ops/a/a2.cpp", "#include \"src/ops/b/checks.h\"\n#include \"xllm_kernel/ops/b.h\"\n"
                            "#include \"csrc/cpu/b/b-inl.h\"\n#include \"csrc/common/b.h\"\n"
                            "#include \"src/ops/b/suites/quant_reference.h\"\n");
  const std::vector<std::string> problems = family_problems(root_, {{"a", {"b"}}});
  ASSERT_EQ(problems.size(), 4u) << joined(problems);
  for (const std::string& p : problems) EXPECT_NE(p.find("reaches into family b's internals"), std::string::npos) << p;
}

TEST_F(MadeUpTree, UnusedUnknownSelfAndCyclicDeclarationsAreReported) {
  write("csrc/cpu/a/a.cpp", "#include \"csrc/cpu/b/b-inl.h\"\n");
  write("csrc/cpu/b/b.cpp", "#include \"csrc/common/a.h\"\n");
  write("csrc/common/a.h", "#pragma once\n");
  const std::vector<std::string> problems =
      family_problems(root_, {{"a", {"b", "a", "zz"}}, {"b", {"a"}}, {"nope", {}}});
  const std::string all = joined(problems);
  EXPECT_NE(all.find("family a declares it builds on itself"), std::string::npos) << all;
  EXPECT_NE(all.find("family a declares it builds on zz, which is no family"), std::string::npos) << all;
  EXPECT_NE(all.find("a declaration for nope, which is no family"), std::string::npos) << all;
  EXPECT_NE(all.find("the declared dependencies have a cycle: a -> a"), std::string::npos) << all;
  EXPECT_EQ(family_problems(root_, {{"a", {"b"}}, {"b", {"a"}}}).back(),
            "the declared dependencies have a cycle: a -> b -> a");
  write("csrc/cpu/b/b.cpp", "\n");
  EXPECT_EQ(family_problems(root_, {{"a", {"b"}}, {"b", {}}}), std::vector<std::string>{});
  EXPECT_EQ(family_problems(root_, {{"a", {"b"}}, {"b", {"a"}}}),
            (std::vector<std::string>{"family b declares it builds on a, but no file of it refers to a: drop the "
                                      "declaration",
                                      "the declared dependencies have a cycle: a -> b -> a"}));
}

TEST_F(MadeUpTree, ACycleOfSrcFoldersIsFound) {
  write("src/numerics/n.cpp", "#include \"src/tools/t.h\"\n#include \"src/core/c.h\"\n");
  write("src/tools/t.cpp", "#include \"src/core/c.h\"\n");
  EXPECT_EQ(find_cycle(src_layers(root_)), "");
  write("src/tools/t2.cpp", "#include \"src/numerics/n.h\"\n");
  EXPECT_EQ(find_cycle(src_layers(root_)), "numerics -> tools -> numerics");
}

const fs::path kCheckout = XLLM_KERNEL_SOURCE_DIR;

TEST(FamilyDependencies, TheLibraryDeclaresWhatItsFamiliesUse) {
  const Declarations declared = library_declarations();
  // The walk sees the edges it should: the quantization family fuses normalization and activation.
  const std::vector<Reference> refs = cross_family_references(kCheckout, families_of(kCheckout));
  EXPECT_TRUE(std::any_of(refs.begin(), refs.end(), [](const Reference& r) {
    return r.from == "quantization" && r.to == "normalization";
  }));
  ASSERT_EQ(declared.count("quantization"), 1u);
  const std::vector<std::string> problems = family_problems(kCheckout, declared);
  EXPECT_TRUE(problems.empty()) << joined(problems);
}

TEST(FamilyDependencies, TheFoldersOfSrcFormLayers) {
  const auto graph = src_layers(kCheckout);
  EXPECT_GE(graph.at("ops").count("core"), 1u);  // the walk sees the edges it should
  const std::string cycle = find_cycle(graph);
  EXPECT_EQ(cycle, "") << "the top-level folders of src/ include each other: " << cycle;
}

}  // namespace
