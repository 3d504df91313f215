#include "kernels/expr/program.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tc::expr {

std::string GrammarDescription() {
  const Limits limits;
  return absl::StrCat(
      "An element-wise expression over the request's inputs, evaluated in one pass: e.g. "
      "\"sigmoid(a * b + c) * 0.5\" or \"where(m > 0, a * 2, b)\".\n"
      "Inputs: named a, b, c, ... in request order, or by the request's input_names. Up to ",
      kMaxExprInputs,
      " inputs, each used at least once; broadcast against each other as one op's are.\n"
      "Operators, lowest precedence first (Python's): or, and, not (logical_*); == != < <= > "
      ">= (eq ne lt le gt ge; no chains); | ^ & (bitwise_*); << >>; + -; * / // %; unary - + "
      "~ (neg, bitwise_not); ** (pow, right-associative); parentheses.\n"
      "Calls: any op ListOps lists, by name, inputs first and attributes by keyword: "
      "clamp(x, min=0, max=6), gelu(x, approximate=\"tanh\"), cast(x, float16) or "
      "cast(x, dtype=float16), where(cond, x, y).\n"
      "Literals: numbers as Python writes them (7, 0x1f, 1_000, 1.5, 1e-3), True, False. They "
      "take part in type promotion as Python scalars do in PyTorch (x_float16 * 2.5 stays "
      "float16; an integer literal must fit the integer type it is computed in) and are "
      "converted to the type their op computes in. Calls on literals alone are computed first, "
      "as Python computes with numbers (int64 or float64; True + True is 2, 2 ** -1 is 0.5); a "
      "cast of literals is a zero-dimensional tensor of that dtype.\n"
      "Types: every op computes exactly as it does alone, each value kept in its own dtype "
      "(float16 and bfloat16 ones rounded to it, as the op alone rounds them), so the result "
      "equals the ops run one by one, bit for bit. An output dtype converts the root's value "
      "as one op's output dtype does.\n"
      "Limits: ",
      limits.max_bytes, " bytes, nesting depth ", limits.max_depth, ", ", limits.max_nodes,
      " nodes.");
}

absl::StatusOr<PreparedOp> PrepareExpression(absl::string_view text,
                                             const std::vector<std::string>& names_in,
                                             absl::Span<const TensorView> inputs,
                                             const OutputOptions& output, const Limits& limits) {
  const int n = static_cast<int>(inputs.size());
  if (n == 0 || n > kMaxExprInputs) {
    return absl::InvalidArgumentError(
        absl::StrCat("an expression takes 1 to ", kMaxExprInputs, " inputs, got ", n));
  }
  if (!names_in.empty() && static_cast<int>(names_in.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(names_in.size(), " input names given for ", n, " inputs"));
  }
  const std::vector<std::string> names = names_in.empty() ? DefaultInputNames(n) : names_in;
  auto parsed = Parse(text, names, limits);
  if (!parsed.ok()) return parsed.status();

  auto program = std::make_shared<Program>();
  Expression& e = program->expression;
  e = *std::move(parsed);
  if (auto s = FoldConstants(&e); !s.ok()) return s;
  std::vector<bool> used(static_cast<size_t>(n), false);
  for (const Node& node : e.nodes) {
    if (node.kind == NodeKind::kInput) used[static_cast<size_t>(node.input)] = true;
  }
  for (int i = 0; i < n; ++i) {
    if (!used[static_cast<size_t>(i)]) {
      return absl::InvalidArgumentError(
          absl::StrCat("expression: input ", i, " ('", names[static_cast<size_t>(i)],
                       "') is not used; send only the inputs the expression names"));
    }
  }
  std::vector<TypeOperand> operands;
  for (const TensorView& v : inputs) {
    operands.push_back({v.dtype, v.shape.empty() ? TypeTier::kZeroDim : TypeTier::kDimensioned});
    program->input_dtypes.push_back(v.dtype);
  }
  auto cast_root = [&](DType dtype) {
    Node cast;
    cast.kind = NodeKind::kCall;
    cast.position = e.nodes.back().position;
    cast.op = FindOp("cast");
    cast.attrs["dtype"] = dtype;
    cast.args = {e.root()};
    e.nodes.push_back(std::move(cast));
  };
  if (e.nodes.back().kind != NodeKind::kCall) {
    // Every input is used, so the root is an input: copied through a cast to its own dtype.
    cast_root(inputs[static_cast<size_t>(e.nodes.back().input)].dtype);
  }
  auto types = TypeCheck(e, operands);
  if (!types.ok()) return types.status();
  DType out = types->back().dtype;
  if (output.dtype && *output.dtype != out) {
    if (!CanCast(out, *output.dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the expression gives ", DTypeName(out), "; storing it as ",
                       DTypeName(*output.dtype), " would be an unsafe cast: write cast(..., ",
                       DTypeName(*output.dtype), ") in the expression to ask for it"));
    }
    // The root's value as its op gives it, then converted, as one op with an output dtype.
    out = *output.dtype;
    cast_root(out);
    types = TypeCheck(e, operands);
    if (!types.ok()) return types.status();
  }
  program->types = *std::move(types);
  program->canonical = Canonical(e);
  program->source = std::string(text);
  program->input_names = names;
  const NodeType& root = program->types.back();
  program->out_dtype = out;

  auto out_strides = OutputStridesFor(inputs, output);
  if (!out_strides.ok()) return out_strides.status();
  if (auto s = BuildIteration(inputs, out, *out_strides, &program->space); !s.ok()) return s;
  // The planner decides the walk, as for an op: tiles where some inputs are dense along
  // another dim than the output, rows, or the general walk.
  Iteration& space = program->space;
  int64_t item[kMaxIterOperands];
  item[0] = ItemSize(out);
  for (int k = 1; k < space.num_operands; ++k)
    item[k] = ItemSize(inputs[static_cast<size_t>(k - 1)].dtype);
  bool long_math = false;
  for (const Node& n : e.nodes)
    long_math = long_math || (n.kind == NodeKind::kCall && n.op->long_math);
  program->walk = PlanExpression(&space, item, long_math, kMaxExprStaged);

  Plan plan = PlanExpressionOutput(program->space, program->walk.kernel, out, root.compute);
  return PreparedOp::Of(nullptr, Attrs(), root.result, std::move(plan), std::move(program));
}

int VectorFor(const Program& program, char* const* base) {
  int64_t item[kMaxIterOperands];
  item[0] = ItemSize(program.out_dtype);
  for (size_t k = 0; k < program.input_dtypes.size(); ++k)
    item[k + 1] = ItemSize(program.input_dtypes[k]);
  return FitVector(program.walk, program.space, item, base);
}

}  // namespace tc::expr
