// Comparisons and logical ops: compute in the inputs' result type, output bool.
#pragma once

#include "kernels/ops/binary.h"

namespace tc {

// Name, its catalog name and description, and the expression over a and b.
#define TC_COMPARE_OP(Name, op_name, description, expr)                        \
  struct Name {                                                                \
    static constexpr uint32_t kComputeTypes = kAllTypes;                       \
    static constexpr int kArity = 2;                                           \
    TC_CATALOG_ONLY(                                                           \
        static OpSpec Spec() {                                                 \
          return MakeSpec(op_name, kAllTypes, description, TypeRule::kToBool); \
        } static Name Make(const MakeArgs&) { return {}; })                    \
    template <typename T>                                                      \
    TC_HOST_DEVICE bool operator()(T a, T b) const {                           \
      return expr;                                                             \
    }                                                                          \
  };

TC_COMPARE_OP(EqOp, "eq", "a == b", a == b)
TC_COMPARE_OP(NeOp, "ne", "a != b", a != b)
TC_COMPARE_OP(LtOp, "lt", "a < b", a < b)
TC_COMPARE_OP(LeOp, "le", "a <= b", a <= b)
TC_COMPARE_OP(GtOp, "gt", "a > b", a > b)
TC_COMPARE_OP(GeOp, "ge", "a >= b", a >= b)
TC_COMPARE_OP(LogicalAndOp, "logical_and", "a != 0 and b != 0", (a != T(0)) && (b != T(0)))
TC_COMPARE_OP(LogicalOrOp, "logical_or", "a != 0 or b != 0", (a != T(0)) || (b != T(0)))
TC_COMPARE_OP(LogicalXorOp, "logical_xor", "(a != 0) != (b != 0)", (a != T(0)) != (b != T(0)))
#undef TC_COMPARE_OP

// 1-byte comparisons four at a time: each byte of the word 1 or 0.
TC_BYTE_WORDS(EqOp, __vseteq4, __vseteq4)
TC_BYTE_WORDS(NeOp, __vsetne4, __vsetne4)
TC_BYTE_WORDS(LtOp, __vsetlts4, __vsetltu4)
TC_BYTE_WORDS(LeOp, __vsetles4, __vsetleu4)
TC_BYTE_WORDS(GtOp, __vsetgts4, __vsetgtu4)
TC_BYTE_WORDS(GeOp, __vsetges4, __vsetgeu4)

// On bools, the logical ops are the bitwise ones.
template <>
struct Wordwise<LogicalAndOp> : BitwiseWords<BitwiseAndOp, DTypeBit(DType::kBool)> {};
template <>
struct Wordwise<LogicalOrOp> : BitwiseWords<BitwiseOrOp, DTypeBit(DType::kBool)> {};
template <>
struct Wordwise<LogicalXorOp> : BitwiseWords<BitwiseXorOp, DTypeBit(DType::kBool)> {};

// float32 logical_and four packs a thread (op_spec.h): the fastest on both machines measured,
// where one pack matched it on only one of them
// (figures: bench/results/op-traits-tuning-h200.md, logical_and).
template <>
inline constexpr ByWidth kRowPacks<LogicalAndOp>{0, 4, 0};

}  // namespace tc
