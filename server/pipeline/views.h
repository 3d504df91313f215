// Inline bytes under a view, whichever front door they came through: the view checked
// against them (ValidateView), copied where they are not aligned to the element size, and
// every bool byte the view reaches checked to be 0 or 1.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/tensor_view.h"

namespace tc::server {

// `meta` (a decoded view: dtype, shape, strides, offset) over `bytes`, checked with
// ValidateView (and every bool byte it reaches being 0 or 1). Bytes not aligned to the element
// size are copied into `owned`.
absl::StatusOr<TensorView> InlineView(TensorView meta, absl::string_view bytes,
                                      absl::string_view what,
                                      std::vector<std::unique_ptr<std::string>>& owned);

// bool elements are one byte, 0 or 1: INVALID_ARGUMENT naming the first other byte in
// [p, p + n), counted from byte `base` of `what`'s storage.
absl::Status CheckBoolBytes(const void* p, int64_t n, absl::string_view what, int64_t base = 0);

// The bytes of a bool view's storage that its elements lie at (as byte offsets from the
// storage's start), for checking those alone: a view may leave bytes it never reaches holding
// anything. Empty when every byte is to be checked: the view reaches them all, or its
// overlapping dims would take longer to walk than the storage is long.
std::vector<bool> ReachedBytes(const TensorView& v);

// CheckBoolBytes over the bytes `reached` marks (all of them when it is empty).
absl::Status CheckBoolBytesReached(const void* p, int64_t n, const std::vector<bool>& reached,
                                   absl::string_view what, int64_t base = 0);

// A bool view over bytes at hand (v.data holds its storage_bytes): the bytes it reaches.
absl::Status CheckBoolView(const TensorView& v, absl::string_view what);

}  // namespace tc::server
