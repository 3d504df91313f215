// An op's types: the one place that applies an op's accepted dtypes, its attribute check and
// its type rule, for an op run alone (PrepareValidated) and for a call in an expression
// (expr::TypeCheck) alike.
#pragma once

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/dtype.h"
#include "kernels/ops/attributes.h"
#include "kernels/ops/op_spec.h"

namespace tc {

struct OpTypes {
  // The arguments' result type (PyTorch's result_type over them, the condition left out).
  DType result = DType::kFloat32;
  // Each argument is converted to `compute` (OpMath of it in registers), the functor's value
  // rounded to it, then converted to `out`.
  DType compute = DType::kFloat32;
  DType out = DType::kFloat32;
};

// The types of `spec`'s op over arguments whose result type is `result`, with its attributes
// `attrs` (resolved). `args`: every argument's dtype, the condition's included, for messages
// and for the one-dtype rule of quantized ops. INVALID_ARGUMENT with a message for the
// client: one naming the op, or the attribute check's own.
absl::StatusOr<OpTypes> ResolveOpTypes(const OpSpec& spec, DType result, const Attrs& attrs,
                                       absl::Span<const DType> args);

}  // namespace tc
