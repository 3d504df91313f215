// Comparisons and logical ops: compute in the inputs' result type, output bool.
#pragma once

#include "kernels/ops/binary.h"

namespace tc {

#define TC_COMPARE_OP(Name, expr)                      \
  struct Name {                                        \
    static constexpr uint32_t kComputeTypes = kAllTypes; \
    static constexpr int kArity = 2;                   \
    static OpSpec Spec();                              \
    static Name Make(const MakeArgs&) { return {}; }   \
    template <typename T>                              \
    TC_HOST_DEVICE bool operator()(T a, T b) const {   \
      return expr;                                     \
    }                                                  \
  };

TC_COMPARE_OP(EqOp, a == b)
TC_COMPARE_OP(NeOp, a != b)
TC_COMPARE_OP(LtOp, a < b)
TC_COMPARE_OP(LeOp, a <= b)
TC_COMPARE_OP(GtOp, a > b)
TC_COMPARE_OP(GeOp, a >= b)
TC_COMPARE_OP(LogicalAndOp, (a != T(0)) && (b != T(0)))
TC_COMPARE_OP(LogicalOrOp, (a != T(0)) || (b != T(0)))
TC_COMPARE_OP(LogicalXorOp, (a != T(0)) != (b != T(0)))
#undef TC_COMPARE_OP

// On bools, the logical ops are the bitwise ones.
template <>
struct Wordwise<LogicalAndOp> {
  static constexpr uint32_t kTypes = DTypeBit(DType::kBool);
  using Op = BitwiseAndOp;
};
template <>
struct Wordwise<LogicalOrOp> {
  static constexpr uint32_t kTypes = DTypeBit(DType::kBool);
  using Op = BitwiseOrOp;
};
template <>
struct Wordwise<LogicalXorOp> {
  static constexpr uint32_t kTypes = DTypeBit(DType::kBool);
  using Op = BitwiseXorOp;
};

}  // namespace tc
