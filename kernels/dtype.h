// Element types of the engine and their properties.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include "absl/strings/string_view.h"

namespace tc {

// Order matters: it is the order of the wire enum (shifted by one) and of the promotion
// lattice's categories (bool < integers < floating).
enum class DType : uint8_t {
  kBool,
  kUInt8,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
};

inline constexpr int kNumDTypes = 10;

// Size of one element in bytes.
constexpr int64_t ItemSize(DType t) {
  switch (t) {
    case DType::kBool:
    case DType::kUInt8:
    case DType::kInt8:
      return 1;
    case DType::kInt16:
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kInt32:
    case DType::kFloat32:
      return 4;
    case DType::kInt64:
    case DType::kFloat64:
      return 8;
  }
  return 0;
}

constexpr bool IsFloating(DType t) {
  return t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat32 ||
         t == DType::kFloat64;
}

constexpr bool IsIntegral(DType t) { return t != DType::kBool && !IsFloating(t); }

// NumPy/PyTorch spelling: "float32", "bool", ...
absl::string_view DTypeName(DType t);
std::optional<DType> DTypeFromName(absl::string_view name);

// C++ type stored for a dtype, for the dtypes the backends compute in directly.
template <DType T>
struct DTypeCpp;
template <>
struct DTypeCpp<DType::kFloat32> {
  using type = float;
};
template <>
struct DTypeCpp<DType::kFloat64> {
  using type = double;
};
template <>
struct DTypeCpp<DType::kInt32> {
  using type = int32_t;
};
template <>
struct DTypeCpp<DType::kInt64> {
  using type = int64_t;
};

}  // namespace tc
