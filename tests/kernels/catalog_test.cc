// What adding an op must keep in step, checked rather than left to discipline: a kernel for
// every dtype the spec accepts (the arity is the functor's, stated once), a row in the
// independent reference with that arity, and the op table of docs/semantics.md and the README's
// count naming exactly the catalog's ops.
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "kernels/catalog.h"
#include "kernels/planner.h"
#include "tests/support/reference.h"

namespace tc {
namespace {

std::set<std::string> CatalogNames() {
  std::set<std::string> names;
  for (const CatalogEntry& e : Catalog()) names.insert(e.spec.name);
  return names;
}

TEST(Catalog, SpecsAgreeWithTheirFunctors) {
  for (const CatalogEntry& e : Catalog()) {
    const OpSpec& s = e.spec;
    EXPECT_GE(s.arity, 1) << s.name;
    EXPECT_LE(s.arity, kMaxOperands - 1) << s.name;
    for (DType r : DTypesIn(s.dtypes)) {
      DType compute = r;
      if (s.rule == TypeRule::kPromoteToFloat && !IsFloating(r)) compute = DType::kFloat32;
      if (s.rule == TypeRule::kBoolToInt64 && r == DType::kBool) compute = DType::kInt64;
      EXPECT_NE(e.compute_types & DTypeBit(compute), 0u)
          << s.name << " accepts " << DTypeName(r) << " but its functor has no kernel for "
          << DTypeName(compute);
    }
  }
}

TEST(Catalog, EveryOpHasAReferenceRow) {
  std::mt19937_64 rng(1);
  std::set<std::pair<std::string, int>> ref_forms;
  for (const ref::Op& op : ref::Ops(rng)) {
    ref_forms.insert({op.name, op.arity});
    EXPECT_NE(FindOp(op.name, op.arity), nullptr)
        << "tests/support/reference.cc has a row for '" << op.name << "' with " << op.arity
        << " inputs, which the catalog does not have";
  }
  for (const CatalogEntry& e : Catalog()) {
    EXPECT_TRUE(ref_forms.count({e.spec.name, e.spec.arity}))
        << "op '" << e.spec.name << "' with " << e.spec.arity
        << " inputs has no row in tests/support/reference.cc: the conformance tests would never "
           "check it";
  }
}

// The op names in docs/semantics.md's table: every `name` in the second column, where `a`/`b`
// continues the name before it (`bitwise_and`/`or` is bitwise_and and bitwise_or) and
// parentheses hold attributes, not ops.
std::set<std::string> TableOps(const std::string& table) {
  std::set<std::string> ops;
  for (absl::string_view line : absl::StrSplit(table, '\n')) {
    std::vector<std::string> cells = absl::StrSplit(line, '|');
    if (cells.size() < 4 || line.find('`') == absl::string_view::npos) continue;
    std::string cell = cells[2];
    std::string flat;  // without the parenthesized parts
    int depth = 0;
    for (char ch : cell) {
      if (ch == '(') ++depth;
      if (depth == 0) flat += ch;
      if (ch == ')') --depth;
    }
    std::string prev;
    bool continues = false;
    for (size_t i = 0; i < flat.size(); ++i) {
      if (flat[i] == '/') continues = true;
      if (flat[i] == ',') continues = false;
      if (flat[i] != '`') continue;
      const size_t end = flat.find('`', i + 1);
      std::string name = flat.substr(i + 1, end - i - 1);
      i = end;
      if (continues && !prev.empty()) name = prev.substr(0, prev.rfind('_') + 1) + name;
      ops.insert(name);
      prev = name;
      continues = false;
    }
  }
  return ops;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(Catalog, DocsListEveryOp) {
  const std::string semantics = ReadFile(TC_SOURCE_DIR "/docs/semantics.md");
  const std::string readme = ReadFile(TC_SOURCE_DIR "/README.md");
  ASSERT_FALSE(semantics.empty()) << "cannot read docs/semantics.md";
  ASSERT_FALSE(readme.empty()) << "cannot read README.md";
  const size_t table = semantics.find("| group | ops |");
  ASSERT_NE(table, std::string::npos);
  const size_t table_end = semantics.find("\n\n", table);
  const std::set<std::string> listed = TableOps(semantics.substr(table, table_end - table));
  const std::set<std::string> catalog = CatalogNames();
  std::vector<std::string> missing, extra;
  for (const std::string& n : catalog)
    if (!listed.count(n)) missing.push_back(n);
  for (const std::string& n : listed)
    if (!catalog.count(n)) extra.push_back(n);
  EXPECT_TRUE(missing.empty()) << "docs/semantics.md's op table lacks: "
                               << absl::StrJoin(missing, ", ");
  EXPECT_TRUE(extra.empty()) << "docs/semantics.md's op table names ops the catalog lacks: "
                             << absl::StrJoin(extra, ", ");
  const std::string count = "It has " + std::to_string(catalog.size()) + " element-wise ops";
  EXPECT_NE(readme.find(count), std::string::npos) << "README should say: " << count;
}

}  // namespace
}  // namespace tc
