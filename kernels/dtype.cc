#include "kernels/dtype.h"

#include "absl/strings/str_join.h"

namespace tc {
namespace {
constexpr absl::string_view kNames[kNumDTypes] = {
    "bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
};
}  // namespace

absl::string_view DTypeName(DType t) {
  const auto i = static_cast<int>(t);
  return i < kNumDTypes ? kNames[i] : absl::string_view("invalid");
}

std::optional<DType> DTypeFromName(absl::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (kNames[i] == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

}  // namespace tc

namespace tc {

std::vector<DType> DTypesIn(uint32_t mask) {
  std::vector<DType> ts;
  for (int i = 0; i < kNumDTypes; ++i) {
    if (mask & (1u << i)) ts.push_back(static_cast<DType>(i));
  }
  return ts;
}

std::string DTypeNames(uint32_t mask) {
  std::vector<absl::string_view> names;
  for (DType t : DTypesIn(mask)) names.push_back(DTypeName(t));
  return absl::StrJoin(names, ", ");
}

DType PromoteTypes(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::kBool) return b;
  if (b == DType::kBool) return a;
  const bool fa = IsFloating(a), fb = IsFloating(b);
  if (fa && fb) {
    const bool halves = (a == DType::kFloat16 && b == DType::kBFloat16) ||
                        (a == DType::kBFloat16 && b == DType::kFloat16);
    if (halves) return DType::kFloat32;
    return ItemSize(a) >= ItemSize(b) ? a : b;
  }
  if (fa) return a;
  if (fb) return b;
  // Both integers. uint8 is the only unsigned one: with int8 neither holds the other.
  if (a == DType::kUInt8) return b == DType::kInt8 ? DType::kInt16 : b;
  if (b == DType::kUInt8) return a == DType::kInt8 ? DType::kInt16 : a;
  return ItemSize(a) >= ItemSize(b) ? a : b;
}

bool CanCast(DType from, DType to) {
  if (IsFloating(from) && !IsFloating(to)) return false;
  if (from != DType::kBool && to == DType::kBool) return false;
  return true;
}

}  // namespace tc
