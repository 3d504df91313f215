// Every op the engine serves, once. The catalog and each backend expand these lists, so an op
// is added by writing its functor (with its Spec() in it), one line here, and its row in
// tests/support/reference.cc; tests/kernels/catalog_test.cc fails while the spec accepts a
// dtype the functor has no kernel for, the reference row is missing, or the op table of
// docs/semantics.md does not name it. The groups let backends compile their kernels in several
// translation units at once.
#pragma once

#include "kernels/ops/binary.h"
#include "kernels/ops/compare.h"
#include "kernels/ops/misc.h"
#include "kernels/ops/unary.h"

// X(Functor)
// clang-format off
#define TC_ARITHMETIC_OPS(X)                                                                   \
  X(AddOp) X(SubOp) X(MulOp) X(DivOp) X(FloorDivideOp) X(RemainderOp) X(FmodOp) X(PowOp)      \
  X(MaximumOp) X(MinimumOp) X(PreluOp) X(Atan2Op) X(BitwiseAndOp) X(BitwiseOrOp)              \
  X(BitwiseXorOp) X(LeftShiftOp) X(RightShiftOp)
#define TC_COMPARISON_OPS(X)                                                                   \
  X(EqOp) X(NeOp) X(LtOp) X(LeOp) X(GtOp) X(GeOp) X(LogicalAndOp) X(LogicalOrOp)              \
  X(LogicalXorOp) X(LogicalNotOp) X(IsnanOp) X(IsinfOp) X(IsfiniteOp)
#define TC_UNARY_OPS(X)                                                                        \
  X(NegOp) X(AbsOp) X(SignOp) X(ReluOp) X(LeakyReluOp) X(SigmoidOp) X(TanhOp) X(ExpOp)        \
  X(LogOp) X(Log1pOp) X(Expm1Op) X(SqrtOp) X(RsqrtOp) X(ReciprocalOp) X(SquareOp) X(SinOp)    \
  X(CosOp) X(FloorOp) X(CeilOp) X(RoundOp) X(TruncOp) X(ErfOp) X(GeluOp) X(SiluOp)            \
  X(BitwiseNotOp)
#define TC_OTHER_OPS(X)                                                                        \
  X(ClampOp) X(ClampTensorOp) X(CastOp) X(FillOp) X(WhereOp) X(AddcmulOp) X(LerpOp) X(QAddOp) \
  X(QSubOp) X(QMulOp)
// clang-format on

#define TC_FOR_EACH_OP(X) TC_ARITHMETIC_OPS(X) TC_COMPARISON_OPS(X) TC_UNARY_OPS(X) TC_OTHER_OPS(X)
