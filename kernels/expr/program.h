// An expression request made ready to run: parsed, typed against its inputs, its output
// planned like any op's (broadcast over every input, the requested dtype and layout), and the
// iteration space over all of its operands. Backends evaluate a Program (the CPU in blocks,
// kernels/cpu/expr_eval.h); nothing in it depends on one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/engine.h"
#include "kernels/expr/ast.h"
#include "kernels/expr/parser.h"
#include "kernels/expr/typing.h"

namespace tc::expr {

struct Program {
  // The checked tree; its root is always a call (a bare input or literal becomes a cast to
  // its own dtype).
  Expression expression;
  std::vector<NodeType> types;
  // Canonical() of the expression, for caches and messages.
  std::string canonical;
  // The text and input names it was prepared from (to prepare it again elsewhere: a worker
  // process).
  std::string source;
  std::vector<std::string> input_names;
  // Operand 0 the output, then the inputs in request order.
  Iteration space;
  // The output's dtype (the root's, or the one the request asked for) and the inputs'.
  DType out_dtype = DType::kFloat32;
  std::vector<DType> input_dtypes;
  // How one fused kernel walks the space (the planner's PlanExpression), which the CUDA
  // backend's generated kernel follows. (The CPU evaluator walks blocks of rows of it.)
  ExprWalk walk;
};

// Inputs an expression's tile kernel stages at most (each tile 32 x 33 elements).
inline constexpr int kMaxExprStaged = 4;

// The vector width the program's walk takes over operands starting at `base` (operand k's
// element (0, ..., 0)): FitVector of the walk.
int VectorFor(const Program& program, char* const* base);

// What ListOps says about the expression language: grammar, names, limits, semantics.
std::string GrammarDescription();

// Parses `text` over inputs named `names` (DefaultInputNames when empty), checks that every
// input is used, types it and plans its output. The returned PreparedOp has no op and its
// `expression` set; its plan describes the output only (shape, strides, storage, dtype).
// Inputs must have been checked with ValidateView. INVALID_ARGUMENT for anything wrong.
absl::StatusOr<PreparedOp> PrepareExpression(absl::string_view text,
                                             const std::vector<std::string>& names,
                                             absl::Span<const TensorView> inputs,
                                             const OutputOptions& output = {},
                                             const Limits& limits = {});

}  // namespace tc::expr
