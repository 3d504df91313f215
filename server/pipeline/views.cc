// Inline bytes under a view: checked, aligned, bools validated (views.h).
#include "server/pipeline/views.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tc::server {

absl::Status CheckBoolBytes(const void* p, int64_t n, absl::string_view what, int64_t base) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (int64_t i = 0; i < n; ++i) {
    if (b[i] > 1) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": byte ", base + i, " is ",
                                                     static_cast<int>(b[i]),
                                                     ", but bool elements must be 0 or 1"));
    }
  }
  return absl::OkStatus();
}

std::vector<bool> ReachedBytes(const TensorView& v) {
  // Dims that move: their sizes and strides in bytes.
  std::vector<std::pair<int64_t, int64_t>> dims;
  int64_t count = 1;
  const int64_t limit = 4 * v.storage_bytes + 4096;
  for (size_t d = 0; d < v.shape.size(); ++d) {
    if (v.shape[d] == 0) return std::vector<bool>(static_cast<size_t>(v.storage_bytes), false);
    if (v.shape[d] == 1 || v.strides[d] == 0) continue;
    dims.emplace_back(v.shape[d], v.strides[d]);
    if (count > limit / v.shape[d]) return {};
    count *= v.shape[d];
  }
  if (count >= v.storage_bytes) return {};  // reaches every byte, or overlaps: check them all
  std::vector<bool> reached(static_cast<size_t>(v.storage_bytes), false);
  std::vector<int64_t> index(dims.size(), 0);
  int64_t at = v.offset;
  for (int64_t i = 0; i < count; ++i) {
    reached[static_cast<size_t>(at)] = true;
    for (size_t d = dims.size(); d-- > 0;) {
      at += dims[d].second;
      if (++index[d] < dims[d].first) break;
      at -= dims[d].second * dims[d].first;
      index[d] = 0;
    }
  }
  return reached;
}

absl::Status CheckBoolBytesReached(const void* p, int64_t n, const std::vector<bool>& reached,
                                   absl::string_view what, int64_t base) {
  if (reached.empty()) return CheckBoolBytes(p, n, what, base);
  const auto* b = static_cast<const unsigned char*>(p);
  for (int64_t i = 0; i < n; ++i) {
    if (b[i] > 1 && reached[static_cast<size_t>(base + i)])
      return CheckBoolBytes(b + i, 1, what, base + i);
  }
  return absl::OkStatus();
}

absl::Status CheckBoolView(const TensorView& v, absl::string_view what) {
  return CheckBoolBytesReached(v.data, v.storage_bytes, ReachedBytes(v), what);
}

absl::StatusOr<TensorView> InlineView(TensorView meta, absl::string_view bytes,
                                      absl::string_view what,
                                      std::vector<std::unique_ptr<std::string>>& owned) {
  TensorView v = std::move(meta);
  if (reinterpret_cast<uintptr_t>(bytes.data()) % ItemSize(v.dtype) != 0) {
    owned.push_back(std::make_unique<std::string>(bytes));
    bytes = *owned.back();
  }
  v.data = reinterpret_cast<const std::byte*>(bytes.data());
  v.storage_bytes = static_cast<int64_t>(bytes.size());
  if (auto s = ValidateView(v, what); !s.ok()) return s;
  if (v.dtype == DType::kBool) {
    if (auto s = CheckBoolView(v, what); !s.ok()) return s;
  }
  return v;
}

}  // namespace tc::server
