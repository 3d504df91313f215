// The element-wise planner (TensorIterator's role): from validated input views to the one
// iteration space every backend executes. Pure host code, no backend in it.
#pragma once

#include <cstdint>
#include <vector>

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
  // Two dims, output dense; each input dense, a scalar, or a row repeated along dim 1
  // (stride 0 there): [M,N] + [N].
  kInnerBroadcast,
  // Two dims, output dense; some input a column repeated along dim 0: [M,N] + [M,1].
  kOuterBroadcast,
  // Some operand moves fastest along another dim than the output does (a transposed input or
  // output): worth tiling so that both sides stay cache- or coalescing-friendly.
  kPermuted,
  // Anything else: per-operand byte strides over `ndim` dims.
  kStrided,
};

absl::string_view PathName(Path p);

struct Plan {
  // What the client sees: the broadcast output shape, its strides in elements (offset 0), and
  // the bytes of storage they span.
  DimVector out_shape;
  DimVector out_strides;
  int64_t out_storage_bytes = 0;
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
};

// Broadcasts `inputs` (already validated with ValidateView) against each other, NumPy style,
// and plans an output of `out_dtype` computed in `compute_dtype`, with `out_strides` (in
// elements, non-overlapping, non-negative; C-contiguous when empty).
absl::StatusOr<Plan> PlanElementwise(absl::Span<const TensorView> inputs, DType compute_dtype,
                                     DType out_dtype, const DimVector& out_strides = {});

// Splits a plan into pieces whose every operand offset, relative to the piece's own base
// offset, and element count fit in `limit` (2^31 - 1 for 32-bit index math on the GPU).
// Pieces cover the plan's elements exactly once; a plan that fits comes back whole.
std::vector<Plan> SplitForIndexing(const Plan& plan, int64_t limit = INT32_MAX);

// NumPy broadcast of several shapes, with a message naming the dims that clash.
absl::StatusOr<DimVector> BroadcastShapes(absl::Span<const DimVector* const> shapes);

}  // namespace tc
