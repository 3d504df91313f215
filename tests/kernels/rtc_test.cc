// Expression kernels without a GPU: every op of the catalog on every dtype it accepts goes
// through the CUDA source generator and NVRTC, in each walk (vectorized rows with a broadcast
// row, element by element, any rank); the generated source carries no text of the client's and
// no literal or attribute value, so that requests differing only in those share one kernel.
// (What the kernels compute is checked on a GPU: expr_test with TC_TEST_BACKEND=cuda.)
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "kernels/catalog.h"
#include "kernels/expr/program.h"
#include "kernels/rtc/codegen.h"
#include "kernels/rtc/compile.h"

namespace tc::rtc {
namespace {

struct Operands {
  std::vector<TensorView> views;
  std::vector<char*> base;  // operand 0 the output
};

// a: [4, 8] (or a permuted [2, 3, 4] view), b: [8] (or [4]) broadcast along the rows, both
// `dtype`; the pointers only decide alignment, nothing is read.
Operands Layout(DType dtype, int layout) {
  Operands o;
  TensorView a, b;
  a.dtype = b.dtype = dtype;
  if (layout < 2) {
    a.shape = {4, 8};
    a.strides = {8, 1};
    b.shape = {8};
    b.strides = {1};
  } else {
    a.shape = {2, 3, 4};
    a.strides = {1, 8, 2};
    b.shape = {4};
    b.strides = {1};
  }
  a.storage_bytes = 32 * ItemSize(dtype);
  b.storage_bytes = 8 * ItemSize(dtype);
  o.views = {a, b};
  // Layout 1: every pointer one element past a 16-byte boundary, so no vector access.
  const uintptr_t skew = layout == 1 ? static_cast<uintptr_t>(ItemSize(dtype)) : 0;
  for (uintptr_t k = 0; k < 3; ++k)
    o.base.push_back(reinterpret_cast<char*>(4096 * (k + 1) + skew));
  return o;
}

// op applied to a and b as it accepts them, or "" when it has no form here.
std::string Call(const CatalogEntry& e) {
  const OpSpec& s = e.spec;
  if (s.name == "cast") return "cast(a, float64)";
  if (s.name == "clamp") return "clamp(a, min=0.5)";
  std::vector<std::string> args;
  for (int k = 0; k < s.arity; ++k)
    args.push_back(k == s.condition_input ? "a == b" : k % 2 ? "b" : "a");
  for (const AttrSpec& at : s.attrs) {
    if (!at.required) continue;
    if (at.type != AttrType::kFloat) return "";
    args.push_back(absl::StrCat(at.name, "=0.5"));
  }
  return absl::StrCat(s.name, "(", absl::StrJoin(args, ", "), ")");
}

TEST(ExpressionKernels, EveryOpAndDtypeCompilesInEveryWalk) {
  std::set<std::string> covered;
  int kernels = 0;
  for (DType dtype : DTypesIn(kAllTypes)) {
    for (int layout = 0; layout < 3; ++layout) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " layout ", layout));
      const Operands o = Layout(dtype, layout);
      // Each op that types for this dtype, as float64 so that they all add up.
      std::vector<std::string> terms;
      for (const CatalogEntry& e : Catalog()) {
        const std::string call = Call(e);
        if (call.empty() || !Accepts(e.spec, dtype)) continue;
        const std::string term = absl::StrCat("cast(", call, ", float64)");
        if (!expr::PrepareExpression(absl::StrCat(term, " + cast(a, float64) + cast(b, float64)"),
                                     {}, o.views)
                 .ok())
          continue;
        terms.push_back(term);
        covered.insert(e.spec.name);
      }
      ASSERT_FALSE(terms.empty());
      auto p = expr::PrepareExpression(absl::StrJoin(terms, " + ") + " + cast(a + b, float64)", {},
                                       o.views);
      ASSERT_TRUE(p.ok()) << p.status();
      const ExprWalk& w = p->expression->walk;
      EXPECT_EQ(KernelName(w.kernel), KernelName(layout < 2 ? Kernel::kRows : Kernel::kGeneral));
      const int vector = expr::VectorFor(*p->expression, o.base.data());
      if (layout == 0) {
        EXPECT_GT(vector, 1);
      } else if (layout == 1) {
        EXPECT_EQ(vector, 1);
      }
      auto c = CompileToCubin(GenerateSource(*p->expression, vector), 90);
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_GT(c->cubin.size(), 0u);
      ++kernels;
    }
  }
  EXPECT_EQ(kernels, 30);
  // Every op of the catalog went through in some dtype.
  for (const CatalogEntry& e : Catalog()) EXPECT_EQ(covered.count(e.spec.name), 1u) << e.spec.name;
}

// The tile kernel (the planner's kTiles for an expression: engine_test pins when) compiles
// for inputs of different dtypes, one staged and one not.
TEST(ExpressionKernels, TileKernelsCompile) {
  auto view = [](DType dtype, bool transposed) {
    TensorView v;
    v.dtype = dtype;
    v.shape = {64, 48};
    v.strides = transposed ? DimVector{1, 64} : DimVector{48, 1};
    v.storage_bytes = 64 * 48 * ItemSize(dtype);
    return v;
  };
  auto p = expr::PrepareExpression(
      "sigmoid(a) * b + c", {},
      {view(DType::kFloat32, true), view(DType::kInt8, false), view(DType::kFloat16, true)});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(KernelName(p->expression->walk.kernel), KernelName(Kernel::kTiles));
  auto c = CompileToCubin(GenerateSource(*p->expression, 1), 90);
  ASSERT_TRUE(c.ok()) << c.status();
}

TEST(ExpressionKernels, SourceHoldsNeitherNamesNorValues) {
  const Operands o = Layout(DType::kFloat32, 0);
  auto source = [&](const std::string& text, std::vector<std::string> names) {
    auto p = expr::PrepareExpression(text, names, o.views);
    EXPECT_TRUE(p.ok()) << text << ": " << p.status();
    return p.ok() ? GenerateSource(*p->expression, expr::VectorFor(*p->expression, o.base.data()))
                  : "";
  };
  const std::string s1 = source("clamp(weights * 2.5 + bias, min=0.25) - 7", {"weights", "bias"});
  const std::string s2 = source("clamp(x * -1e30 + y, min=-3) - 0.125", {"x", "y"});
  EXPECT_EQ(s1, s2);
  for (const char* text : {"weights", "bias", "2.5", "0.25"}) {
    EXPECT_EQ(s1.find(text), std::string::npos) << text;
  }
  // Different ops, dtypes or walks are different kernels.
  EXPECT_NE(s1, source("clamp(x * 2.5 - y, min=0.25) - 7", {"x", "y"}));
  // An integer literal where a float one was computes in float32 all the same: one kernel.
  EXPECT_EQ(s1, source("clamp(x * 2 + y, min=1) - 7", {"x", "y"}));
  const Operands d = Layout(DType::kFloat64, 0);
  auto p = expr::PrepareExpression("clamp(a * 2.5 + b, min=0.25) - 7", {}, d.views);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NE(s1, GenerateSource(*p->expression, expr::VectorFor(*p->expression, d.base.data())));
}

TEST(ExpressionKernels, ParametersCarryLiteralsInTheirComputeTypes) {
  const Operands o = Layout(DType::kFloat16, 0);
  auto p = expr::PrepareExpression("a * 3 + b", {}, o.views);
  ASSERT_TRUE(p.ok()) << p.status();
  int error = 0;
  const std::string bytes = EvaluatorParam(*p->expression, &error);
  // The zero, one literal (3, as the float16 that a float16 mul computes in: its storage
  // type, widened in registers), mul (empty), add (its alpha, a double, 8-byte aligned).
  ASSERT_EQ(bytes.size(), 16u);
  EXPECT_EQ(bytes.substr(0, 4), std::string(4, '\0'));
  uint16_t three;
  std::memcpy(&three, bytes.data() + 4, sizeof(three));
  EXPECT_EQ(three, 0x4200);  // 3.0 in float16
  double alpha;
  std::memcpy(&alpha, bytes.data() + 8, sizeof(double));
  EXPECT_EQ(alpha, 1.0);
}

}  // namespace
}  // namespace tc::rtc
