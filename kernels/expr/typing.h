// Types an expression's tree (kernels/expr/ast.h) the way running its ops one by one would:
// each call follows its catalog spec (PyTorch's result_type over its arguments, the accepted
// dtypes, the attribute checks, the type rule), literals take part as Python scalars do
// (wrapped numbers). Every value is kept in its own dtype, as the op alone stores it, so a
// fused expression computes exactly what its ops compute one by one.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/engine.h"
#include "kernels/expr/ast.h"
#include "kernels/ops/attributes.h"

namespace tc::expr {

struct NodeType {
  // The value's dtype by the catalog's rules: what running the ops one by one gives, and the
  // dtype an evaluator keeps it in.
  DType dtype = DType::kFloat32;
  TypeTier tier = TypeTier::kDimensioned;

  // Calls only.
  Attrs attrs;
  // The arguments' result type (the spec's acceptance and checks; what the functor is made
  // for), and the op's compute dtype for it: each argument is converted to `compute` (its
  // storage type; OpMath of it in registers), the result rounded to `compute` and then
  // converted to `dtype`, as the op's kernels do.
  DType result = DType::kFloat32;
  DType compute = DType::kFloat32;
};

// Types every node of `e`, whose inputs are `inputs` (dtype, and whether zero-dimensional).
// INVALID_ARGUMENT, at the offending node's position, for a dtype an op does not accept, a
// condition that is not bool, attributes the op refuses for that dtype, an integer literal
// that does not fit the integer type it is computed in (as PyTorch refuses `int8 + 300`), or
// an integer raised to a negative literal power (as PyTorch refuses it).
absl::StatusOr<std::vector<NodeType>> TypeCheck(const Expression& e,
                                                absl::Span<const TypeOperand> inputs);

// The dtype a literal is converted to where call `call` (typed `type`) takes it as argument
// `arg`: the call's compute dtype, or bool for a condition.
DType LiteralTarget(const Node& call, const NodeType& type, int arg);

// A literal's value converted to `target` (Convert, as an op converts an operand), in the
// low bytes of the result.
uint64_t LiteralBits(const Node& literal, DType target);

// Evaluates every call whose arguments are all literals, innermost first, and puts a literal
// of its value in its place, the way Python computes with numbers: int64 and float64
// arithmetic, bools counting as integers in arithmetic (True + True is 2, ~True is -2), an
// integer to a negative integer power a float (2 ** -1 is 0.5). A cast of literals becomes a
// zero-dimensional tensor of its dtype, rounded to it. INVALID_ARGUMENT where Python raises
// (division or modulo by zero, a negative shift), where an integer result does not fit 64
// bits, and for `and`/`or` over numbers that are not bools (Python's would return one of
// them).
absl::Status FoldConstants(Expression* e);

// The hook folding evaluates through: runs one prepared op over one element per operand
// (base[0] the output, base[1..] the inputs, each one element) with the ops' own loops.
// Defined by the CPU backend (kernels/cpu/dispatch.cc), which expressions do not include.
absl::Status EvaluateElement(const PreparedOp& op, char* const* base);

}  // namespace tc::expr
