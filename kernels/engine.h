// The engine's entry points: check and plan a request once (PrepareOp), then run the plan on
// a backend.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/catalog.h"
#include "kernels/ops/attributes.h"
#include "kernels/planner.h"
#include "kernels/tensor_view.h"

namespace tc {

// How the client wants the output.
struct OutputOptions {
  // Output dtype; by default the op's own (the inputs' result type, bool for comparisons...).
  // Only casts that lose no category are allowed here (CanCast); others need op "cast".
  std::optional<DType> dtype;
  enum class Layout { kContiguous, kLikeFirstInput };
  Layout layout = Layout::kContiguous;
  // Explicit output strides in elements (non-negative, non-overlapping); overrides `layout`.
  DimVector strides;
};

namespace expr {
struct Program;
}

struct PreparedOp {
  // The one way a PreparedOp is assembled (PrepareValidated, an expression's steps and its
  // program, folded literals): the op (null for an expression) with its resolved attributes
  // and result type, planned by the planner, and an expression's program.
  static PreparedOp Of(const CatalogEntry* op, Attrs attrs, DType result_type, Plan plan,
                       std::shared_ptr<const expr::Program> expression = nullptr);

  // The op; null for an expression.
  const CatalogEntry* op = nullptr;
  Attrs attrs;
  // The inputs' result type (PyTorch's result_type), before any promotion to float.
  DType result_type = DType::kFloat32;
  Plan plan;
  // An expression's program (kernels/expr/program.h) instead of one op: `plan` then says
  // only what the output is.
  std::shared_ptr<const expr::Program> expression;
};

// How an operand takes part in PyTorch's result_type: tensors with dims decide; zero-dim
// tensors, then wrapped numbers (Python scalars in an expression), count only where they
// belong to a higher category (bool < integer < floating). A wrapped number's dtype is its
// category's default: bool, int64 or float32.
enum class TypeTier : uint8_t { kWrappedNumber, kZeroDim, kDimensioned };
struct TypeOperand {
  DType dtype;
  TypeTier tier;
};
DType ResultType(absl::Span<const TypeOperand> operands);

// PyTorch's result_type over the inputs: dimensioned tensors decide, and zero-dimensional
// ones count only where they belong to a higher category (bool < integer < floating).
// `skip` (or -1) names an input left out, such as where's condition.
DType ResultType(absl::Span<const TensorView> inputs, int skip = -1);

// The strides (elements) of the output `inputs` broadcast to, as `output` asks: the explicit
// ones (checked: non-negative, non-overlapping), C-contiguous, or in the first input's memory
// order. INVALID_ARGUMENT where the shapes do not broadcast.
absl::StatusOr<DimVector> OutputStridesFor(absl::Span<const TensorView> inputs,
                                           const OutputOptions& output);

// The catalog entry of `name` that takes `inputs` inputs, or INVALID_ARGUMENT listing the ops
// there are (an unknown name) or the input counts the op takes.
absl::StatusOr<const CatalogEntry*> LookupOp(absl::string_view name, int inputs);

// Finds the op, checks arity, every input view (ValidateView), dtypes, attributes and output
// options, and plans the iteration. Every failure is INVALID_ARGUMENT with a message for the
// client.
// `tiles`: the rule of the backend that will run it (its tile kernel's reach).
absl::StatusOr<PreparedOp> PrepareOp(absl::string_view op, absl::Span<const TensorView> inputs,
                                     const AttrMap& attrs, const OutputOptions& output = {},
                                     TileRule tiles = TileRule::kDense);

// PrepareOp for a caller that has found the op (LookupOp) and checked every input view with
// ValidateView itself, as the server does while it decodes them: the rest of the checks, once.
absl::StatusOr<PreparedOp> PrepareValidated(const CatalogEntry& op,
                                            absl::Span<const TensorView> inputs,
                                            const AttrMap& attrs, const OutputOptions& output = {},
                                            TileRule tiles = TileRule::kDense);

// The pointers a launcher takes: base[0] at the output's element (0, ..., 0) in `out`,
// base[k] at input k-1's in its storage (`inputs[k-1]`, or the data of the view it was planned
// from); inputs are only read, but every operand goes through one pointer type.
void OperandBases(const Plan& plan, std::byte* out, absl::Span<const std::byte* const> inputs,
                  char** base);
void OperandBases(const Plan& plan, std::byte* out, absl::Span<const TensorView> inputs,
                  char** base);

}  // namespace tc
