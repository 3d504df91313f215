// Element types of the engine and their properties.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#ifndef __CUDACC_RTC__
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#endif
#include "kernels/scalar_types.h"

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

#ifndef __CUDACC_RTC__
// NumPy/PyTorch spelling: "float32", "bool", ...
absl::string_view DTypeName(DType t);
std::optional<DType> DTypeFromName(absl::string_view name);
#endif

// The storage type of each dtype, and a visitor over them.
template <typename T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<storage type>{}) for `t`. Every branch must return the same type. Usable
// in device code too (the CUDA kernels convert operands by dtype with it); nvcc is told not
// to check host-only callables, which host code passes.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <typename Fn>
TC_HOST_DEVICE decltype(auto) VisitDType(DType t, Fn&& fn) {
  switch (t) {
    case DType::kBool:
      return fn(TypeTag<bool>{});
    case DType::kUInt8:
      return fn(TypeTag<uint8_t>{});
    case DType::kInt8:
      return fn(TypeTag<int8_t>{});
    case DType::kInt16:
      return fn(TypeTag<int16_t>{});
    case DType::kInt32:
      return fn(TypeTag<int32_t>{});
    case DType::kInt64:
      return fn(TypeTag<int64_t>{});
    case DType::kFloat16:
      return fn(TypeTag<Half>{});
    case DType::kBFloat16:
      return fn(TypeTag<BFloat16>{});
    case DType::kFloat32:
      return fn(TypeTag<float>{});
    case DType::kFloat64:
      break;
  }
  return fn(TypeTag<double>{});
}

template <typename T>
constexpr DType DTypeOf() {
  if constexpr (std::is_same_v<T, bool>) return DType::kBool;
  if constexpr (std::is_same_v<T, uint8_t>) return DType::kUInt8;
  if constexpr (std::is_same_v<T, int8_t>) return DType::kInt8;
  if constexpr (std::is_same_v<T, int16_t>) return DType::kInt16;
  if constexpr (std::is_same_v<T, int32_t>) return DType::kInt32;
  if constexpr (std::is_same_v<T, int64_t>) return DType::kInt64;
  if constexpr (std::is_same_v<T, Half>) return DType::kFloat16;
  if constexpr (std::is_same_v<T, BFloat16>) return DType::kBFloat16;
  if constexpr (std::is_same_v<T, float>) return DType::kFloat32;
  if constexpr (std::is_same_v<T, double>) return DType::kFloat64;
}

// Sets of dtypes as bit masks (bit i: DType i): the compute types a functor is instantiated
// for, and the dtypes an op accepts.
constexpr uint32_t DTypeBit(DType t) { return 1u << static_cast<int>(t); }
inline constexpr uint32_t kFloatTypes = DTypeBit(DType::kFloat16) | DTypeBit(DType::kBFloat16) |
                                        DTypeBit(DType::kFloat32) | DTypeBit(DType::kFloat64);
inline constexpr uint32_t kIntegralTypes = DTypeBit(DType::kUInt8) | DTypeBit(DType::kInt8) |
                                           DTypeBit(DType::kInt16) | DTypeBit(DType::kInt32) |
                                           DTypeBit(DType::kInt64);
inline constexpr uint32_t kIntegralBoolTypes = kIntegralTypes | DTypeBit(DType::kBool);
inline constexpr uint32_t kNumericTypes = kIntegralTypes | kFloatTypes;
inline constexpr uint32_t kAllTypes = kNumericTypes | DTypeBit(DType::kBool);

#ifndef __CUDACC_RTC__
// The dtypes of a mask, in DType order.
std::vector<DType> DTypesIn(uint32_t mask);
// Their names, comma-separated: "bool, uint8, ...".
std::string DTypeNames(uint32_t mask);

// PyTorch's promote_types: the smallest dtype both a and b convert to without losing their
// category (bool < integer < floating). uint8 with int8 gives int16; float16 with bfloat16
// gives float32.
DType PromoteTypes(DType a, DType b);

// Whether a value of `from` may be stored as `to` without being asked for explicitly (PyTorch's
// can_cast): not floating to integer or bool, not integer to bool.
bool CanCast(DType from, DType to);
#endif  // __CUDACC_RTC__

}  // namespace tc
