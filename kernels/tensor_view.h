// A strided view of a storage blob (TH's TensorImpl over a StorageImpl), and the checks that
// make every element it can reach lie inside that blob.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/dtype.h"
#include "kernels/max_rank.h"

namespace tc {

using DimVector = absl::InlinedVector<int64_t, kMaxRank>;

struct TensorView {
  DType dtype = DType::kFloat32;
  DimVector shape;
  // In elements, same length as `shape`.
  DimVector strides;
  // In elements, into `data`.
  int64_t offset = 0;
  const std::byte* data = nullptr;
  int64_t storage_bytes = 0;
};

// Number of elements of `shape`, or INVALID_ARGUMENT when a dim is negative, the rank exceeds
// kMaxRank, or the product overflows int64.
absl::StatusOr<int64_t> CheckedNumel(absl::Span<const int64_t> shape);

// Strides (in elements) of a C-contiguous tensor of `shape`. `shape` must have passed
// CheckedNumel.
DimVector ContiguousStrides(absl::Span<const int64_t> shape);

// Checks rank, dims, strides, offset and storage size so that every element the view reaches
// lies inside [data, data + storage_bytes). All arithmetic is overflow-checked. `what` names
// the tensor in error messages ("input 0").
absl::Status ValidateView(const TensorView& v, absl::string_view what);

// "[2,3,4]"
std::string ShapeToString(absl::Span<const int64_t> shape);

}  // namespace tc
