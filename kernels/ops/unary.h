// Unary functors.
#pragma once

#include <cmath>

#include "kernels/ops/binary.h"

namespace tc {

#define TC_UNARY_OP(Name, Mask, Result, ...)          \
  struct Name {                                       \
    static constexpr uint32_t kComputeTypes = Mask;   \
    static constexpr int kArity = 1;                  \
    static OpSpec Spec();                             \
    static Name Make(const MakeArgs&) { return {}; }  \
    template <typename T>                             \
    TC_HOST_DEVICE Result operator()(T a) const __VA_ARGS__ \
  };

TC_UNARY_OP(NegOp, kNumericTypes, T, { return math::WrapNeg(a); })
TC_UNARY_OP(AbsOp, kNumericTypes, T, {
  if constexpr (std::is_unsigned_v<T>) {
    return a;
  } else if constexpr (kIsInt<T>) {
    return a < 0 ? math::WrapNeg(a) : a;
  } else {
    return std::fabs(a);
  }
})
// NaN gives 0, as PyTorch's sign does.
TC_UNARY_OP(SignOp, kNumericTypes, T, { return static_cast<T>((T(0) < a) - math::IsNegative(a)); })
// NaN stays NaN.
TC_UNARY_OP(ReluOp, kNumericTypes, T, { return math::IsNegative(a) ? T(0) : a; })
TC_UNARY_OP(SigmoidOp, kFloatTypes, T, { return T(1) / (T(1) + std::exp(-a)); })
TC_UNARY_OP(TanhOp, kFloatTypes, T, { return std::tanh(a); })
TC_UNARY_OP(ExpOp, kFloatTypes, T, { return std::exp(a); })
TC_UNARY_OP(LogOp, kFloatTypes, T, { return std::log(a); })
TC_UNARY_OP(Log1pOp, kFloatTypes, T, { return std::log1p(a); })
TC_UNARY_OP(Expm1Op, kFloatTypes, T, { return std::expm1(a); })
TC_UNARY_OP(SqrtOp, kFloatTypes, T, { return std::sqrt(a); })
TC_UNARY_OP(RsqrtOp, kFloatTypes, T, { return T(1) / std::sqrt(a); })
TC_UNARY_OP(ReciprocalOp, kFloatTypes, T, { return T(1) / a; })
TC_UNARY_OP(SquareOp, kNumericTypes, T, { return math::WrapMul(a, a); })
TC_UNARY_OP(SinOp, kFloatTypes, T, { return std::sin(a); })
TC_UNARY_OP(CosOp, kFloatTypes, T, { return std::cos(a); })
TC_UNARY_OP(ErfOp, kFloatTypes, T, { return std::erf(a); })
template <>
inline constexpr bool kLongMath<SigmoidOp> = true;
template <>
inline constexpr bool kLongMath<ErfOp> = true;
// Integers are already whole: floor, ceil, round and trunc return them unchanged.
TC_UNARY_OP(FloorOp, kNumericTypes, T, {
  if constexpr (kIsFloatType<T>) return std::floor(a); else return a;
})
TC_UNARY_OP(CeilOp, kNumericTypes, T, {
  if constexpr (kIsFloatType<T>) return std::ceil(a); else return a;
})
TC_UNARY_OP(RoundOp, kNumericTypes, T, {
  if constexpr (kIsFloatType<T>) return math::RoundHalfEven(a); else return a;
})
TC_UNARY_OP(TruncOp, kNumericTypes, T, {
  if constexpr (kIsFloatType<T>) return std::trunc(a); else return a;
})
TC_UNARY_OP(SiluOp, kFloatTypes, T, { return a / (T(1) + std::exp(-a)); })
TC_UNARY_OP(BitwiseNotOp, kIntegralBoolTypes, T, {
  if constexpr (kIsBool<T>) return !a; else if constexpr (kIsInt<T>) return static_cast<T>(~a); else return a;
})
TC_UNARY_OP(LogicalNotOp, kAllTypes, bool, { return a == T(0); })
TC_UNARY_OP(IsnanOp, kAllTypes, bool, { return math::IsNan(a); })
TC_UNARY_OP(IsinfOp, kAllTypes, bool, {
  if constexpr (kIsFloatType<T>) return std::isinf(a); else return false;
})
TC_UNARY_OP(IsfiniteOp, kAllTypes, bool, {
  if constexpr (kIsFloatType<T>) return std::isfinite(a); else return true;
})
#undef TC_UNARY_OP

struct LeakyReluOp {
  static constexpr uint32_t kComputeTypes = kFloatTypes;
  static constexpr int kArity = 1;
  static OpSpec Spec();
  static LeakyReluOp Make(const MakeArgs& m) { return {m.attrs.Float("negative_slope")}; }
  double negative_slope;
  template <typename T>
  TC_HOST_DEVICE T operator()(T a) const {
    return a > T(0) ? a : a * static_cast<T>(negative_slope);
  }
};

// approximate="none": x * Phi(x) with erf; "tanh": the tanh approximation.
struct GeluOp {
  static constexpr uint32_t kComputeTypes = kFloatTypes;
  static constexpr int kArity = 1;
  static OpSpec Spec();
  static GeluOp Make(const MakeArgs& m);
  bool tanh_form;
  template <typename T>
  TC_HOST_DEVICE T operator()(T x) const {
    if (tanh_form) {
      const T kBeta = T(0.7978845608028654);  // sqrt(2 / pi)
      const T inner = kBeta * (x + T(0.044715) * x * x * x);
      return T(0.5) * x * (T(1) + std::tanh(inner));
    }
    return T(0.5) * x * (T(1) + std::erf(x * T(0.7071067811865476)));
  }
};

}  // namespace tc
