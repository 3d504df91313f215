#include "kernels/tensor_view.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tc {

absl::StatusOr<int64_t> CheckedNumel(absl::Span<const int64_t> shape) {
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", shape.size(), " exceeds the limit of ", kMaxRank));
  }
  int64_t n = 1;
  bool overflow = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("dim ", i, " of shape ", ShapeToString(shape), " is negative"));
    }
    overflow |= __builtin_mul_overflow(n, shape[i], &n);
  }
  // A zero dim anywhere makes the tensor empty, whatever the other dims multiply to.
  for (int64_t d : shape) {
    if (d == 0) return 0;
  }
  if (overflow) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape ", ShapeToString(shape), " has more than 2^63 elements"));
  }
  return n;
}

DimVector ContiguousStrides(absl::Span<const int64_t> shape) {
  DimVector strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    // Only an empty tensor (a zero dim elsewhere) can get here with dims whose product does
    // not fit; its strides reach nothing, so they saturate instead of overflowing.
    if (__builtin_mul_overflow(s, shape[i] > 0 ? shape[i] : 1, &s)) s = INT64_MAX;
  }
  return strides;
}

absl::Status ValidateView(const TensorView& v, absl::string_view what) {
  auto numel = CheckedNumel(v.shape);
  if (!numel.ok())
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", numel.status().message()));
  if (v.strides.size() != v.shape.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", v.strides.size(), " strides given for rank ", v.shape.size()));
  }
  const int64_t item = ItemSize(v.dtype);
  if (v.storage_bytes < 0 || v.storage_bytes % item != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": storage of ", v.storage_bytes, " bytes is not a whole number of ",
                     DTypeName(v.dtype), " elements (", item, " bytes each)"));
  }
  if (v.offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": offset ", v.offset, " is negative"));
  }
  if (*numel == 0) return absl::OkStatus();  // Reaches nothing.

  // Lowest and highest element index reachable: offset plus the most negative / most positive
  // sum of (dim - 1) * stride.
  int64_t lo = v.offset, hi = v.offset;
  for (size_t i = 0; i < v.shape.size(); ++i) {
    int64_t span;
    if (__builtin_mul_overflow(v.shape[i] - 1, v.strides[i], &span) ||
        __builtin_add_overflow(span < 0 ? lo : hi, span, span < 0 ? &lo : &hi)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": strides [", absl::StrJoin(v.strides, ","), "] with shape ",
                       ShapeToString(v.shape), " overflow 64-bit offsets"));
    }
  }
  const int64_t storage_elems = v.storage_bytes / item;
  if (lo < 0 || hi >= storage_elems) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": shape ", ShapeToString(v.shape), ", strides [", absl::StrJoin(v.strides, ","),
        "] and offset ", v.offset, " reach elements ", lo, "..", hi, ", but the storage holds ",
        storage_elems, " ", DTypeName(v.dtype), " elements (", v.storage_bytes, " bytes)"));
  }
  return absl::OkStatus();
}

std::string ShapeToString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

}  // namespace tc
