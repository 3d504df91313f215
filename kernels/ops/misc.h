// Ops with attributes (clamp, cast, fill), ternary ops (where, addcmul, lerp) and quantized
// int8/uint8 arithmetic.
#pragma once

#include <cmath>
#include <limits>

#include "kernels/ops/binary.h"

namespace tc {

// min(max(a, min), max); either bound may be absent. NaN inputs stay NaN; a min above the max
// gives the max everywhere, as in PyTorch.
struct ClampOp {
  static constexpr uint32_t kComputeTypes = kNumericTypes;
  static constexpr int kArity = 1;
  static OpSpec Spec();
  static ClampOp Make(const MakeArgs& m);
  bool has_min, has_max;
  double lo, hi;
  template <typename T>
  TC_HOST_DEVICE T operator()(T a) const {
    if (math::IsNan(a)) return a;
    if (has_min) {
      const T l = Convert<T>(lo);
      if (a < l) a = l;
    }
    if (has_max) {
      const T h = Convert<T>(hi);
      if (a > h) a = h;
    }
    return a;
  }
};

// The conversion happens in the store to the `dtype` attribute's type (see Convert).
struct CastOp {
  static constexpr uint32_t kComputeTypes = kAllTypes;
  static constexpr int kArity = 1;
  static OpSpec Spec();
  static CastOp Make(const MakeArgs&) { return {}; }
  template <typename T>
  TC_HOST_DEVICE T operator()(T a) const {
    return a;
  }
};

// A tensor shaped and typed like the input, every element `value` (converted like cast).
struct FillOp {
  static constexpr uint32_t kComputeTypes = kAllTypes;
  static constexpr int kArity = 1;
  static OpSpec Spec();
  static FillOp Make(const MakeArgs& m) { return {m.attrs.Float("value")}; }
  double value;
  template <typename T>
  TC_HOST_DEVICE T operator()(T) const {
    return Convert<T>(value);
  }
};

// cond ? a : b, with the condition (bool) loaded in the compute type.
struct WhereOp {
  static constexpr uint32_t kComputeTypes = kAllTypes;
  static constexpr int kArity = 3;
  static OpSpec Spec();
  static WhereOp Make(const MakeArgs&) { return {}; }
  template <typename T>
  TC_HOST_DEVICE T operator()(T cond, T a, T b) const {
    return cond != T(0) ? a : b;
  }
};

// a + value * b * c
struct AddcmulOp {
  static constexpr uint32_t kComputeTypes = kNumericTypes;
  static constexpr int kArity = 3;
  static OpSpec Spec();
  static AddcmulOp Make(const MakeArgs& m) { return {m.attrs.Float("value")}; }
  double value;
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b, T c) const {
    if constexpr (kIsInt<T>) {
      return math::WrapAdd(a, math::WrapMul(math::ScalarAs<T>(value), math::WrapMul(b, c)));
    } else {
      return a + static_cast<T>(value) * b * c;
    }
  }
};

// a + weight * (b - a), in PyTorch's form that is exact at both ends.
struct LerpOp {
  static constexpr uint32_t kComputeTypes = kFloatTypes;
  static constexpr int kArity = 3;
  static OpSpec Spec();
  static LerpOp Make(const MakeArgs&) { return {}; }
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b, T w) const {
    const T diff = b - a;
    return std::fabs(w) < T(0.5) ? a + w * diff : b - diff * (T(1) - w);
  }
};

// Quantized arithmetic: each input is real = (q - zero_point) * scale; the result is
// requantized to the output's scale and zero point, rounded half to even and saturated to the
// integer type. Computed in float; returns the integer value as float, which the store
// converts exactly.
template <int kKind>  // 0 add, 1 sub, 2 mul
struct QuantizedOp {
  static constexpr uint32_t kComputeTypes = kFloatTypes;
  static constexpr int kArity = 2;
  static OpSpec Spec();
  static QuantizedOp Make(const MakeArgs& m);
  float a_scale, a_zero, b_scale, b_zero, inv_out_scale, out_zero, qmin, qmax;
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b) const {
    const T x = (a - T(a_zero)) * T(a_scale), y = (b - T(b_zero)) * T(b_scale);
    const T r = kKind == 0 ? x + y : kKind == 1 ? x - y : x * y;
    T q = math::RoundHalfEven(r * T(inv_out_scale)) + T(out_zero);
    if (!(q >= T(qmin))) q = T(qmin);  // NaN too
    if (q > T(qmax)) q = T(qmax);
    return q;
  }
};
using QAddOp = QuantizedOp<0>;
using QSubOp = QuantizedOp<1>;
using QMulOp = QuantizedOp<2>;

}  // namespace tc
