// Types an expression's tree (kernels/expr/ast.h) the way running its ops one by one would:
// each call follows its catalog spec (PyTorch's result_type over its arguments, the accepted
// dtypes, the attribute checks, the type rule), literals take part as Python scalars do
// (wrapped numbers). Then says how an evaluator keeps each value: float16 and bfloat16
// intermediates in float32 and literal-only values in float64, so that rounding to a half
// type happens once, at the output (or where the expression casts to one explicitly).
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/engine.h"
#include "kernels/expr/ast.h"
#include "kernels/ops/attributes.h"

namespace tc::expr {

struct NodeType {
  // The value's dtype by the catalog's rules: what running the ops one by one would give.
  DType dtype = DType::kFloat32;
  TypeTier tier = TypeTier::kDimensioned;
  // Where an evaluator keeps the value: `dtype`, except float16/bfloat16 results kept in
  // float32 (an explicit cast to them keeps its rounding) and wrapped-number floats (literal
  // arithmetic, as Python does it) in float64. An input's is its own dtype.
  DType storage = DType::kFloat32;

  // Calls only.
  Attrs attrs;
  // The arguments' result type (the spec's acceptance and checks), and the op's compute
  // dtype for it.
  DType result = DType::kFloat32;
  DType compute = DType::kFloat32;
  // What the evaluator computes in, and hands the functor as the result type: `compute` and
  // `result`, widened as `storage` is.
  DType eval_compute = DType::kFloat32;
  DType eval_result = DType::kFloat32;
};

// Types every node of `e`, whose inputs are `inputs` (dtype, and whether zero-dimensional).
// INVALID_ARGUMENT, at the offending node's position, for a dtype an op does not accept, a
// condition that is not bool, attributes the op refuses for that dtype, or an integer literal
// that does not fit the integer type it is computed in (as PyTorch refuses `int8 + 300`).
absl::StatusOr<std::vector<NodeType>> TypeCheck(const Expression& e,
                                                absl::Span<const TypeOperand> inputs);

// The dtype a literal is computed in where call `call` (typed `type`) takes it as argument
// `arg`: the call's evaluator compute dtype, or bool for a condition.
DType LiteralTarget(const Node& call, const NodeType& type, int arg);

}  // namespace tc::expr
