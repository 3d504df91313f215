// The element-wise planner (TensorIterator's role): from validated input views to the one
// iteration space every backend executes. Pure host code, no backend in it.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/dtype.h"
#include "kernels/tensor_view.h"

namespace tc {

// Output plus up to three inputs (ternary ops).
inline constexpr int kMaxOperands = 4;

// How a backend should walk the iteration space; chosen once here.
enum class Path : uint8_t {
  // One dim, every operand dense.
  kContiguous,
  // One dim, output dense, each input dense or a single repeated element (stride 0).
  kScalarBroadcast,
  // Anything else: per-operand byte strides over `ndim` dims.
  kStrided,
};

absl::string_view PathName(Path p);

struct Plan {
  // What the client sees: the broadcast output shape, C-contiguous.
  DimVector out_shape;
  DType out_dtype = DType::kFloat32;
  // Type the functor computes in.
  DType compute_dtype = DType::kFloat32;
  int64_t numel = 0;

  // The iteration space after dropping size-1 dims, reordering (fastest-moving dim first) and
  // coalescing. Always at least one dim. Operand 0 is the output, then the inputs in order.
  int ndim = 1;
  int64_t sizes[kMaxRank] = {};
  int num_operands = 0;
  DType dtypes[kMaxOperands] = {};
  // Byte strides per operand and dim, 0 where an input is broadcast.
  int64_t strides[kMaxOperands][kMaxRank] = {};
  // Byte offset from an operand's storage base to its element (0, ..., 0).
  int64_t offsets[kMaxOperands] = {};
  Path path = Path::kStrided;

  int64_t out_bytes() const { return numel * ItemSize(out_dtype); }
};

// Broadcasts `inputs` (already validated with ValidateView) against each other, NumPy style,
// and plans a C-contiguous output of `out_dtype` computed in `compute_dtype`.
absl::StatusOr<Plan> PlanElementwise(absl::Span<const TensorView> inputs, DType compute_dtype,
                                     DType out_dtype);

// NumPy broadcast of several shapes, with a message naming the dims that clash.
absl::StatusOr<DimVector> BroadcastShapes(absl::Span<const DimVector* const> shapes);

}  // namespace tc
