#include "kernels/dtype.h"

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
