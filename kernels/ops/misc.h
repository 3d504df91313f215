// Ops with attributes (clamp, cast, fill), ternary ops (clamp with tensor bounds, where,
// addcmul, lerp) and quantized int8/uint8 arithmetic.
#pragma once

#include <cmath>
#include <limits>

#ifndef __CUDACC_RTC__
#include "absl/strings/str_cat.h"
#endif
#include "kernels/ops/binary.h"

namespace tc {

// min(max(a, min), max); either bound may be absent. NaN inputs stay NaN; a min above the max
// gives the max everywhere, as in PyTorch.
struct ClampOp {
  static constexpr uint32_t kComputeTypes = kNumericTypes;
  static constexpr int kArity = 1;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    OpSpec s =
        MakeSpec("clamp", kNumericTypes,
                 "min(max(a, min), max); bounds are converted to the input dtype; NaN stays NaN");
    s.attrs = {{"min", AttrType::kFloat, false, {}, "lower bound (absent: none)"},
               {"max", AttrType::kFloat, false, {}, "upper bound (absent: none)"}};
    s.check = [](const Attrs& a, DType) {
      return a.Has("min") || a.Has("max")
                 ? absl::OkStatus()
                 : absl::InvalidArgumentError("clamp needs attribute 'min', 'max' or both");
    };
    return s;
  }
  static ClampOp Make(const MakeArgs& m) {
    const bool has_min = m.attrs.Has("min"), has_max = m.attrs.Has("max");
    return {has_min, has_max, has_min ? m.attrs.Float("min") : 0.0,
            has_max ? m.attrs.Float("max") : 0.0};
  }
#endif
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

// clamp's tensor form, inputs (a, min, max) promoted and broadcast like any inputs, as
// PyTorch's clamp with tensor bounds: min(max(a, min), max), NaN where any of the three is NaN
// (the same values as minimum(maximum(a, min), max)); a min above the max gives the max.
struct ClampTensorOp {
  static constexpr uint32_t kComputeTypes = kNumericTypes;
  static constexpr int kArity = 3;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    return MakeSpec(
        "clamp", kNumericTypes,
        "tensor bounds: inputs (a, min, max), min(max(a, min), max), NaN if any is NaN");
  }
  static ClampTensorOp Make(const MakeArgs&) { return {}; }
#endif
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T lo, T hi) const {
    if (math::IsNan(a)) return a;
    if (math::IsNan(lo)) return lo;
    if (math::IsNan(hi)) return hi;
    if (a < lo) a = lo;
    return hi < a ? hi : a;
  }
};

// The conversion happens in the store to the `dtype` attribute's type (see Convert).
struct CastOp {
  static constexpr uint32_t kComputeTypes = kAllTypes;
  static constexpr int kArity = 1;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    OpSpec s = MakeSpec("cast", kAllTypes,
                        "convert to `dtype`; float to integer truncates, NaN gives 0, out-of-range "
                        "saturates; to bool is a != 0",
                        TypeRule::kCastToAttr);
    s.attrs = {{"dtype", AttrType::kDType, true, {}, "target dtype"}};
    return s;
  }
  static CastOp Make(const MakeArgs&) { return {}; }
#endif
  template <typename T>
  TC_HOST_DEVICE T operator()(T a) const {
    return a;
  }
};
template <>
inline constexpr uint32_t kConvertingTiles<CastOp> = kAllTypes;

// A tensor shaped and typed like the input, every element `value` (converted like cast).
struct FillOp {
  static constexpr uint32_t kComputeTypes = kAllTypes;
  static constexpr int kArity = 1;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    OpSpec s = MakeSpec("fill", kAllTypes,
                        "a tensor like the input with every element `value` (converted like cast)");
    s.attrs = {{"value", AttrType::kFloat, true, {}, "the value"}};
    return s;
  }
  static FillOp Make(const MakeArgs& m) { return {m.attrs.Float("value")}; }
#endif
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
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    OpSpec s = MakeSpec("where", kAllTypes, "cond ? a : b; inputs (cond: bool, a, b)");
    s.condition_input = 0;
    return s;
  }
  static WhereOp Make(const MakeArgs&) { return {}; }
#endif
  template <typename T>
  TC_HOST_DEVICE T operator()(T cond, T a, T b) const {
    return cond != T(0) ? a : b;
  }
};

// a + value * b * c
struct AddcmulOp {
  static constexpr uint32_t kComputeTypes = kNumericTypes;
  static constexpr int kArity = 3;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    OpSpec s = MakeSpec("addcmul", kNumericTypes, "a + value * b * c");
    s.attrs = {{"value", AttrType::kFloat, false, 1.0, "multiplier (whole for integers)"}};
    s.check = [](const Attrs& a, DType r) { return CheckWholeNumber(a, r, "value"); };
    return s;
  }
  static AddcmulOp Make(const MakeArgs& m) { return {m.attrs.Float("value")}; }
#endif
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
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    OpSpec s = MakeSpec("lerp", kFloatTypes, "a + weight * (b - a); inputs (a, b, weight)");
    return s;
  }
  static LerpOp Make(const MakeArgs&) { return {}; }
#endif
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b, T w) const {
    const T diff = b - a;
    return std::fabs(w) < T(0.5) ? a + w * diff : b - diff * (T(1) - w);
  }
};

// Quantized arithmetic: each input is real = (q - zero_point) * scale; the result is
// requantized to the output's scale and zero point, rounded half to even and saturated to the
// integer type. Kernels take it as an int8/uint8 op (inputs and output of that type, read and
// written as the bytes they are); it computes in float inside.
template <int kKind>  // 0 add, 1 sub, 2 mul
struct QuantizedOp {
  static constexpr uint32_t kComputeTypes = DTypeBit(DType::kInt8) | DTypeBit(DType::kUInt8);
  static constexpr int kArity = 2;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    static constexpr const char* kNames[] = {"quantized_add", "quantized_sub", "quantized_mul"};
    static constexpr const char* kWhat[] = {"+", "-", "*"};
    OpSpec s = MakeSpec(kNames[kKind], DTypeBit(DType::kUInt8) | DTypeBit(DType::kInt8), "",
                        TypeRule::kQuantized);
    s.description = absl::StrCat("requantize((a - a_zero_point) * a_scale ", kWhat[kKind],
                                 " (b - b_zero_point) * b_scale) to scale and zero_point, rounding "
                                 "half to even, saturating; int8 or uint8, both inputs one dtype");
    s.attrs = {
        {"a_scale", AttrType::kFloat, true, {}, "scale of the first input"},
        {"a_zero_point", AttrType::kInt, false, int64_t{0}, "zero point of the first input"},
        {"b_scale", AttrType::kFloat, true, {}, "scale of the second input"},
        {"b_zero_point", AttrType::kInt, false, int64_t{0}, "zero point of the second input"},
        {"scale", AttrType::kFloat, true, {}, "scale of the output"},
        {"zero_point", AttrType::kInt, false, int64_t{0}, "zero point of the output"}};
    s.check = Check;
    return s;
  }
  // Scales positive and finite (with finite inverses), zero points within the dtype's range.
  static absl::Status Check(const Attrs& attrs, DType result) {
    const int64_t lo = result == DType::kUInt8 ? 0 : -128, hi = result == DType::kUInt8 ? 255 : 127;
    for (const char* s : {"a_scale", "b_scale", "scale"}) {
      const double v = attrs.Float(s);
      if (!(v > 0) || !std::isfinite(v) || !std::isfinite(1.0 / v)) {
        return absl::InvalidArgumentError(
            absl::StrCat("attribute '", s, "' must be a positive finite scale, got ", v));
      }
    }
    for (const char* z : {"a_zero_point", "b_zero_point", "zero_point"}) {
      const int64_t v = attrs.Int(z);
      if (v < lo || v > hi) {
        return absl::InvalidArgumentError(absl::StrCat("attribute '", z, "' must lie in [", lo,
                                                       ", ", hi, "] for ", DTypeName(result),
                                                       ", got ", v));
      }
    }
    return absl::OkStatus();
  }
  static QuantizedOp Make(const MakeArgs& m) {
    const Attrs& a = m.attrs;
    const bool u8 = m.result == DType::kUInt8;
    return {static_cast<float>(a.Float("a_scale")),
            static_cast<float>(a.Int("a_zero_point")),
            static_cast<float>(a.Float("b_scale")),
            static_cast<float>(a.Int("b_zero_point")),
            static_cast<float>(1.0 / a.Float("scale")),
            static_cast<float>(a.Int("zero_point")),
            u8 ? 0.0f : -128.0f,
            u8 ? 255.0f : 127.0f};
  }
#endif
  float a_scale, a_zero, b_scale, b_zero, inv_out_scale, out_zero, qmin, qmax;
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b) const {
    // Products rounded on their own: the CUDA and CPU backends give the same integers.
    const float x = math::MulRounded(math::SmallIntMinus(a, a_zero), a_scale);
    const float y = math::MulRounded(math::SmallIntMinus(b, b_zero), b_scale);
    const float r = kKind == 0 ? x + y : kKind == 1 ? x - y : x * y;
    // Saturated next, so only values near the range must round exactly.
    const float q = math::RoundHalfEvenPlus(r * inv_out_scale, out_zero);
    // fmax gives qmin for NaN.
    return static_cast<T>(math::SmallFloatToInt(std::fmin(std::fmax(q, qmin), qmax)));
  }
};
// Four rounds of resident blocks for the 1-byte forms: measured faster than the whole grid
// and than 16 rounds (figures: bench/results/op-traits-tuning-h200.md, quantized).
// The float math per element leaves the 1-byte kernel's start-up per thread in the way.
template <int kKind>
inline constexpr ByWidth kRowWaves<QuantizedOp<kKind>>{0, 0, 0, 4};
using QAddOp = QuantizedOp<0>;
using QSubOp = QuantizedOp<1>;
using QMulOp = QuantizedOp<2>;

}  // namespace tc
