// What the catalog says of an op: what ListOps shows and what requests are checked against.
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "kernels/dtype.h"
#include "kernels/ops/attributes.h"

namespace tc {

// How an op's compute and output dtypes follow from its inputs' result type (PyTorch's
// result_type over the inputs).
enum class TypeRule : uint8_t {
  // Compute in the result type, output it too (add, neg, clamp...).
  kPromote,
  // Like kPromote, but bool and integer result types compute in float32 (div, exp...).
  kPromoteToFloat,
  // Compute in the result type, output bool (eq, logical_and, isnan...).
  kToBool,
  // Compute in the input's dtype, output the `dtype` attribute (cast).
  kCastToAttr,
  // int8/uint8 in and out, all inputs one dtype; compute in float32 (quantized ops).
  kQuantized,
};

struct OpSpec {
  std::string name;
  int arity = 0;
  std::vector<AttrSpec> attrs;
  // Result types accepted (before any promotion to float).
  std::vector<DType> dtypes;
  std::string description;
  TypeRule rule = TypeRule::kPromote;
  // Input that is a condition (bool) rather than a value: not part of the promotion.
  int condition_input = -1;
  // Extra checks of attributes against the result type, e.g. an integral alpha for integers.
  absl::Status (*check)(const Attrs&, DType result) = nullptr;
};

// Whether functor F reports integer division by zero through an `int* error` member, which the
// backend points at a flag it checks after the run.
template <typename F, typename = void>
inline constexpr bool kHasErrorFlag = false;
template <typename F>
inline constexpr bool kHasErrorFlag<F, std::void_t<decltype(std::declval<F&>().error)>> = true;

// What a functor's Make gets: the request's attributes and the inputs' result type.
struct MakeArgs {
  const Attrs& attrs;
  DType result;
};

}  // namespace tc
