// The expression parser: Python's precedence and associativity, calls with attributes,
// input names, the canonical form, and a clear INVALID_ARGUMENT at the right position for
// every malformed expression (limits included: deep nesting is refused, never a deep stack).
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/expr/parser.h"

namespace tc::expr {
namespace {

std::string Canon(const std::string& text, std::vector<std::string> inputs = DefaultInputNames(4)) {
  auto e = Parse(text, inputs);
  EXPECT_TRUE(e.ok()) << text << ": " << e.status();
  if (!e.ok()) return "<error>";
  for (int i = 0; i < static_cast<int>(e->nodes.size()); ++i) {
    for (int a : e->at(i).args) EXPECT_LT(a, i) << text << ": not in post-order";
  }
  return Canonical(*e);
}

// The message of the parse error ("" when it parsed).
std::string Error(const std::string& text, std::vector<std::string> inputs = DefaultInputNames(3),
                  const Limits& limits = {}) {
  auto e = Parse(text, inputs, limits);
  if (e.ok()) return "";
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << text;
  return std::string(e.status().message());
}

TEST(ExprParser, FollowsPythonsPrecedenceAndAssociativity) {
  EXPECT_EQ(Canon("sigmoid(a * b + c) * 0.5"), "mul(sigmoid(add(mul($0,$1),$2)),0.5)");
  EXPECT_EQ(Canon("a - b - c"), "sub(sub($0,$1),$2)");
  EXPECT_EQ(Canon("a + b * c"), "add($0,mul($1,$2))");
  EXPECT_EQ(Canon("(a + b) * c"), "mul(add($0,$1),$2)");
  EXPECT_EQ(Canon("2 ** 3 ** 2"), "pow(2,pow(3,2))");
  EXPECT_EQ(Canon("-a ** 2"), "neg(pow($0,2))");
  EXPECT_EQ(Canon("a ** -1"), "pow($0,-1)");
  EXPECT_EQ(Canon("a // b % c / d"), "div(remainder(floor_divide($0,$1),$2),$3)");
  EXPECT_EQ(Canon("a << 1 + b"), "left_shift($0,add(1,$1))");
  EXPECT_EQ(Canon("~a | b ^ c & d"),
            "bitwise_or(bitwise_not($0),bitwise_xor($1,bitwise_and($2,$3)))");
  // As in Python, & binds tighter than a comparison.
  EXPECT_EQ(Canon("a & b == c"), "eq(bitwise_and($0,$1),$2)");
  EXPECT_EQ(Canon("not a or b and c"), "logical_or(logical_not($0),logical_and($1,$2))");
  EXPECT_EQ(Canon("a >= b"), "ge($0,$1)");
  EXPECT_EQ(Canon("a != -b"), "ne($0,neg($1))");
  EXPECT_EQ(Canon("+a"), "$0");
}

TEST(ExprParser, LiteralsKeepPythonsKinds) {
  auto e = Parse("a * 2 + 2.5 + True - -3", DefaultInputNames(1));
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<LiteralKind> kinds;
  for (const Node& n : e->nodes) {
    if (n.kind == NodeKind::kLiteral) kinds.push_back(n.literal);
  }
  EXPECT_EQ(kinds, (std::vector<LiteralKind>{LiteralKind::kInt, LiteralKind::kFloat,
                                             LiteralKind::kBool, LiteralKind::kInt}));
  EXPECT_EQ(Canonical(*e), "sub(add(add(mul($0,2),2.5),True),-3)");
  EXPECT_EQ(Canon("a * 1e3 + 0.1"), "add(mul($0,1e+03),0.1)");
}

TEST(ExprParser, CallsTakeInputsThenAttributes) {
  EXPECT_EQ(Canon("where(a > 0, a * 2, b)"), "where(gt($0,0),mul($0,2),$1)");
  EXPECT_EQ(Canon("clamp(a, max=1.5, min=-2)"), "clamp($0,max=1.5,min=-2)");
  EXPECT_EQ(Canon("cast(a, float16)"), "cast($0,dtype=float16)");
  EXPECT_EQ(Canon("cast(a, dtype=bfloat16)"), "cast($0,dtype=bfloat16)");
  EXPECT_EQ(Canon("gelu(a, approximate=\"tanh\")"), "gelu($0,approximate=tanh)");
  EXPECT_EQ(Canon("add(a, b, alpha=2)"), "add($0,$1,alpha=2)");
  EXPECT_EQ(Canon("lerp(a, b, 0.25)"), "lerp($0,$1,0.25)");
  EXPECT_EQ(Canon("quantized_add(a, b, a_scale=0.5, b_scale=0.25, scale=1, zero_point=-3)"),
            "quantized_add($0,$1,a_scale=0.5,b_scale=0.25,scale=1,zero_point=-3)");
}

TEST(ExprParser, InputsByTheirNames) {
  EXPECT_EQ(Canon("sigmoid(x * w + bias)", {"x", "w", "bias"}), "sigmoid(add(mul($0,$1),$2))");
  // Spacing does not change the canonical form.
  EXPECT_EQ(Canon("  x*w+bias ", {"x", "w", "bias"}), Canon("x * w + bias", {"x", "w", "bias"}));
  EXPECT_EQ(DefaultInputNames(3), (std::vector<std::string>{"a", "b", "c"}));
}

TEST(ExprParser, BadExpressionsSayWhereAndWhat) {
  EXPECT_EQ(Error("sigmod(a)"),
            "expression: at 0: unknown function 'sigmod' (ListOps lists the ops)");
  EXPECT_EQ(Error("a + where(a, b)"), "expression: at 4: where takes 3 inputs, not 2");
  EXPECT_EQ(Error("neg(a, b)"), "expression: at 0: neg takes 1 input, not 2");
  // clamp has two forms: number bounds as attributes, or tensor bounds as inputs.
  EXPECT_EQ(Error("clamp(a, b)"), "expression: at 0: clamp takes 1 or 3 inputs, not 2");
  EXPECT_EQ(Canon("clamp(a, b, c)"), "clamp($0,$1,$2)");
  EXPECT_EQ(Error("clamp(a, b, c, min=1)"),
            "expression: at 0: op 'clamp' has no attribute 'min' (it takes: none)");
  EXPECT_EQ(Error("(a + b"), "expression: at 6: expected ')' to close the '(' at 0, found the end");
  EXPECT_EQ(Error("a + b)"), "expression: at 5: unexpected ')' after a complete expression");
  EXPECT_EQ(Error("a + z"), "expression: at 4: 'z' names no input (inputs: a, b, c)");
  EXPECT_EQ(Error("a + sigmoid"), "expression: at 4: 'sigmoid' is an op: call it, as sigmoid(...)");
  EXPECT_EQ(Error("cast(a, dtype=float17)"), "expression: at 14: 'float17' is not a dtype");
  EXPECT_EQ(Error("cast(a, float17)"), "expression: at 8: 'float17' is not a dtype");
  // An input or a call in that place is an input of cast, which takes one.
  EXPECT_EQ(Error("cast(a, b)"), "expression: at 0: cast takes 1 input, not 2");
  EXPECT_EQ(Error("cast(a, neg (b))"), "expression: at 0: cast takes 1 input, not 2");
  EXPECT_EQ(Canon("cast(a + 1, int32 )"), "cast(add($0,1),dtype=int32)");
  // Numbers as Python writes them; a trailing comma in a call.
  EXPECT_EQ(Canon("a + 0x1F + 0o17 + 0B11 + 1_000_000 + 1_0.2_5e1_0 + 0x1e+5"),
            "add(add(add(add(add(add(add($0,31),15),3),1000000),1.025e+11),30),5)");
  EXPECT_EQ(Canon("clamp(a, min=0, max=1,)"), "clamp($0,max=1,min=0)");
  EXPECT_NE(Error("cast(a)").find("dtype"), std::string::npos) << Error("cast(a)");
  EXPECT_EQ(Error("add(a, b, beta=1)"),
            "expression: at 10: add has no attribute 'beta' (it has: alpha)");
  EXPECT_EQ(Error("neg(a, alpha=1)"),
            "expression: at 7: neg has no attribute 'alpha' (it has none)");
  EXPECT_EQ(Error("clamp(a, min=1, min=2)"), "expression: at 16: attribute 'min' given twice");
  EXPECT_EQ(Error("clamp(min=1, a)"),
            "expression: at 13: an input after an attribute: inputs come first");
  EXPECT_EQ(Error("a < b < c"),
            "expression: at 6: comparisons do not chain: write (a < b) and (b < c)");
  EXPECT_EQ(Error(""), "expression: at 0: the expression is empty");
  EXPECT_EQ(Error("   "), "expression: at 0: the expression is empty");
  EXPECT_EQ(Error("a b"), "expression: at 2: unexpected 'b' after a complete expression");
  EXPECT_EQ(Error("a $ b"), "expression: at 2: unexpected character '$'");
  EXPECT_EQ(Error(std::string("a + \x01")), "expression: at 4: unexpected byte 0x01");
  EXPECT_EQ(Error("a + 99999999999999999999"),
            "expression: at 4: '99999999999999999999' does not fit 64 bits");
  EXPECT_EQ(Error("a + 0x8000000000000000"),
            "expression: at 4: '0x8000000000000000' does not fit 64 bits");
  EXPECT_EQ(Error("a + 0x"), "expression: at 4: '0x' is not a number");
  EXPECT_EQ(Error("a + 0b102"), "expression: at 4: '0b102' is not a number");
  EXPECT_EQ(Error("a + 1__0"), "expression: at 4: '1__0' is not a number: '_' goes between digits");
  EXPECT_EQ(Error("a + 1_.5"), "expression: at 4: '1_.5' is not a number: '_' goes between digits");
  EXPECT_EQ(Error("a + 00"), "");
  EXPECT_EQ(Error("neg(a,,)"),
            "expression: at 6: expected a number, an input, a call or '(', found ','");
  EXPECT_EQ(Error("neg(,)"),
            "expression: at 4: expected a number, an input, a call or '(', found ','");
  EXPECT_EQ(Error("a * 1e999"), "expression: at 4: '1e999' overflows float64");
  EXPECT_EQ(Error("a + 1.2.3"), "expression: at 4: '1.2.3' is not a number");
  EXPECT_EQ(Error("a + * b"),
            "expression: at 4: expected a number, an input, a call or '(', found '*'");
  EXPECT_EQ(Error("gelu(a, approximate=\"tanh)"), "expression: at 20: the string is not closed");
  // (Checks that depend on the dtype, such as gelu's approximate or an integral alpha, come
  // with typing: the parser checks names, arity and attribute types.)
  EXPECT_EQ(Error("clamp(a, min=\"x\")"),
            "expression: at 0: attribute 'min' of op 'clamp' must be of type float");
}

TEST(ExprParser, InputNamesMustBeUsable) {
  EXPECT_NE(Error("add", {"add"}).find("input name 'add' is not usable"), std::string::npos);
  EXPECT_NE(Error("a", {"a", "a"}).find("given twice"), std::string::npos);
  EXPECT_NE(Error("x", {"not"}).find("not usable"), std::string::npos);
  EXPECT_NE(Error("x", {"1x"}).find("not usable"), std::string::npos);
}

TEST(ExprParser, LimitsAreEnforcedWithoutDeepRecursion) {
  std::string calls;
  for (int i = 0; i < 10000; ++i) calls += "neg(";
  calls += "a";
  for (int i = 0; i < 10000; ++i) calls += ")";
  EXPECT_NE(Error(calls).find("nested more than 128 deep"), std::string::npos);
  EXPECT_NE(Error(std::string(10000, '(') + "a" + std::string(10000, ')')).find("nested more than"),
            std::string::npos);
  EXPECT_NE(Error(std::string(10000, '-') + "a").find("nested more than"), std::string::npos);
  EXPECT_NE(Error(std::string(10000, '~') + "a").find("nested more than"), std::string::npos);
  EXPECT_NE(Error("not " + std::string("not ") + "a", DefaultInputNames(1), Limits{1024, 1, 100})
                .find("nested more than 1 deep"),
            std::string::npos);

  std::string sum = "a";
  for (int i = 0; i < 2000; ++i) sum += "+a";
  EXPECT_NE(Error(sum).find("more than 1024 nodes"), std::string::npos);
  EXPECT_EQ(Error(sum, DefaultInputNames(1), Limits{64 << 10, 128, 4001}), "");

  EXPECT_EQ(Error(std::string(1 << 20, ' ') + "a"),
            "expression: 1048577 bytes, more than the limit of 65536");
  // Within the limits, long flat expressions parse.
  std::string ok = "a";
  for (int i = 0; i < 500; ++i) ok += " * 1.5";
  EXPECT_EQ(Error(ok), "");
}

}  // namespace
}  // namespace tc::expr
