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
      "Literals: integers, floats (1.5, 1e-3), True, False. They take part in type promotion "
      "as Python scalars do in PyTorch (x_float16 * 2.5 stays float16; an integer literal "
      "must fit the integer type it is computed in).\n"
      "Types: each op follows its own rules, as if the ops ran one by one, except that "
      "float16 and bfloat16 intermediates are kept in float32 and rounded once, at the output "
      "(or where cast() asks for it), and arithmetic on literals alone is done in float64 or "
      "int64.\n"
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
    return absl::InvalidArgumentError(absl::StrCat("an expression takes 1 to ", kMaxExprInputs,
                                                   " inputs, got ", n));
  }
  if (!names_in.empty() && static_cast<int>(names_in.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat(names_in.size(), " input names given for ",
                                                   n, " inputs"));
  }
  const std::vector<std::string> names = names_in.empty() ? DefaultInputNames(n) : names_in;
  auto parsed = Parse(text, names, limits);
  if (!parsed.ok()) return parsed.status();

  auto program = std::make_shared<Program>();
  Expression& e = program->expression;
  e = *std::move(parsed);
  std::vector<bool> used(static_cast<size_t>(n), false);
  for (const Node& node : e.nodes) {
    if (node.kind == NodeKind::kInput) used[static_cast<size_t>(node.input)] = true;
  }
  for (int i = 0; i < n; ++i) {
    if (!used[static_cast<size_t>(i)]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expression: input ", i, " ('", names[static_cast<size_t>(i)],
          "') is not used; send only the inputs the expression names"));
    }
  }
  std::vector<TypeOperand> operands;
  for (const TensorView& v : inputs) {
    operands.push_back(
        {v.dtype, v.shape.empty() ? TypeTier::kZeroDim : TypeTier::kDimensioned});
    program->input_dtypes.push_back(v.dtype);
  }
  if (e.nodes.back().kind != NodeKind::kCall) {
    // Every input is used, so the root is an input: copied through a cast to its own dtype.
    Node cast;
    cast.kind = NodeKind::kCall;
    cast.position = e.nodes.back().position;
    cast.op = FindOp("cast");
    cast.attrs["dtype"] = inputs[static_cast<size_t>(e.nodes.back().input)].dtype;
    cast.args = {e.root()};
    e.nodes.push_back(std::move(cast));
  }
  auto types = TypeCheck(e, operands);
  if (!types.ok()) return types.status();
  program->types = *std::move(types);
  program->canonical = Canonical(e);

  const NodeType& root = program->types.back();
  DType out = root.dtype;
  if (output.dtype && *output.dtype != out) {
    if (!CanCast(out, *output.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the expression gives ", DTypeName(out), "; storing it as ", DTypeName(*output.dtype),
          " would be an unsafe cast: write cast(..., ", DTypeName(*output.dtype),
          ") in the expression to ask for it"));
    }
    out = *output.dtype;
  }
  program->out_dtype = out;

  auto out_strides = OutputStridesFor(inputs, output);
  if (!out_strides.ok()) return out_strides.status();
  if (auto s = BuildIteration(inputs, out, *out_strides, &program->space); !s.ok()) return s;

  PreparedOp p;
  p.result_type = root.result;
  Plan& plan = p.plan;
  const Iteration& it = program->space;
  plan.out_shape = it.out_shape;
  plan.out_strides = it.out_strides;
  plan.out_storage_bytes = it.out_storage_bytes;
  plan.out_has_gaps = it.out_has_gaps;
  plan.out_dtype = out;
  plan.compute_dtype = root.eval_compute;
  plan.numel = it.numel;
  // The output alone: the inputs' side of the iteration lives in the program.
  plan.num_operands = 1;
  plan.dtypes[0] = out;
  plan.ndim = it.ndim;
  for (int j = 0; j < it.ndim; ++j) {
    plan.sizes[j] = it.sizes[j];
    plan.strides[0][j] = it.strides[0][j];
  }
  plan.kernel = Kernel::kGeneral;
  plan.path = Path::kStrided;
  p.expression = std::move(program);
  return p;
}

}  // namespace tc::expr
