// Catalog entries (name, attributes, accepted dtypes, type rule, description) of the
// functors in op_list.h.
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/ops/op_list.h"

namespace tc {
namespace {

using D = DType;
const std::vector<DType> kAll = {D::kBool,    D::kUInt8,    D::kInt8,    D::kInt16,  D::kInt32,
                                 D::kInt64,   D::kFloat16,  D::kBFloat16, D::kFloat32, D::kFloat64};
const std::vector<DType> kNumeric = {D::kUInt8,   D::kInt8,     D::kInt16,   D::kInt32, D::kInt64,
                                     D::kFloat16, D::kBFloat16, D::kFloat32, D::kFloat64};
const std::vector<DType> kIntegral = {D::kUInt8, D::kInt8, D::kInt16, D::kInt32, D::kInt64};
const std::vector<DType> kIntegralAndBool = {D::kBool,  D::kUInt8, D::kInt8,
                                             D::kInt16, D::kInt32, D::kInt64};
const std::vector<DType> kFloating = {D::kFloat16, D::kBFloat16, D::kFloat32, D::kFloat64};
const std::vector<DType> kQuantizedTypes = {D::kUInt8, D::kInt8};

// Integer results need whole-number multipliers, as in PyTorch.
absl::Status CheckIntegral(const Attrs& attrs, DType result, const char* name) {
  if (!IsIntegral(result)) return absl::OkStatus();
  const double v = attrs.Float(name);
  if (std::trunc(v) != v || std::fabs(v) > 9007199254740992.0) {
    return absl::InvalidArgumentError(absl::StrCat("attribute '", name, "' must be a whole number for ",
                                                   DTypeName(result), " inputs, got ", v));
  }
  return absl::OkStatus();
}

absl::Status CheckAlpha(const Attrs& attrs, DType result) { return CheckIntegral(attrs, result, "alpha"); }
absl::Status CheckValue(const Attrs& attrs, DType result) { return CheckIntegral(attrs, result, "value"); }

absl::Status CheckClamp(const Attrs& attrs, DType) {
  if (!attrs.Has("min") && !attrs.Has("max")) {
    return absl::InvalidArgumentError("clamp needs attribute 'min', 'max' or both");
  }
  return absl::OkStatus();
}

absl::Status CheckGelu(const Attrs& attrs, DType) {
  const std::string& a = attrs.String("approximate");
  if (a != "none" && a != "tanh") {
    return absl::InvalidArgumentError(
        absl::StrCat("gelu's attribute 'approximate' must be \"none\" or \"tanh\", not \"", a, "\""));
  }
  return absl::OkStatus();
}

absl::Status CheckQuantized(const Attrs& attrs, DType result) {
  const int64_t lo = result == D::kUInt8 ? 0 : -128, hi = result == D::kUInt8 ? 255 : 127;
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
      return absl::InvalidArgumentError(absl::StrCat("attribute '", z, "' must lie in [", lo, ", ",
                                                     hi, "] for ", DTypeName(result), ", got ", v));
    }
  }
  return absl::OkStatus();
}

OpSpec Binary(const char* name, std::vector<DType> dtypes, const char* description,
              TypeRule rule = TypeRule::kPromote) {
  OpSpec s;
  s.name = name;
  s.arity = 2;
  s.dtypes = std::move(dtypes);
  s.description = description;
  s.rule = rule;
  return s;
}

OpSpec Unary(const char* name, std::vector<DType> dtypes, const char* description,
             TypeRule rule = TypeRule::kPromote) {
  OpSpec s = Binary(name, std::move(dtypes), description, rule);
  s.arity = 1;
  return s;
}

std::vector<AttrSpec> QuantizedAttrs() {
  return {{"a_scale", AttrType::kFloat, true, {}, "scale of the first input"},
          {"a_zero_point", AttrType::kInt, false, int64_t{0}, "zero point of the first input"},
          {"b_scale", AttrType::kFloat, true, {}, "scale of the second input"},
          {"b_zero_point", AttrType::kInt, false, int64_t{0}, "zero point of the second input"},
          {"scale", AttrType::kFloat, true, {}, "scale of the output"},
          {"zero_point", AttrType::kInt, false, int64_t{0}, "zero point of the output"}};
}

}  // namespace

OpSpec AddOp::Spec() {
  OpSpec s = Binary("add", kAll, "a + alpha * b");
  s.attrs = {{"alpha", AttrType::kFloat, false, 1.0, "multiplier of b (whole for integers)"}};
  s.check = CheckAlpha;
  return s;
}
OpSpec SubOp::Spec() {
  OpSpec s = Binary("sub", kNumeric, "a - alpha * b");
  s.attrs = {{"alpha", AttrType::kFloat, false, 1.0, "multiplier of b (whole for integers)"}};
  s.check = CheckAlpha;
  return s;
}
OpSpec MulOp::Spec() { return Binary("mul", kAll, "a * b"); }
OpSpec DivOp::Spec() {
  return Binary("div", kAll, "true division a / b; integers divide in float32",
                TypeRule::kPromoteToFloat);
}
OpSpec FloorDivideOp::Spec() {
  return Binary("floor_divide", kNumeric,
                "floor(a / b); integer division by zero is INVALID_ARGUMENT, min / -1 wraps to min");
}
OpSpec RemainderOp::Spec() {
  return Binary("remainder", kNumeric,
                "a - floor(a / b) * b, sign of b (Python %); integer division by zero is INVALID_ARGUMENT");
}
OpSpec FmodOp::Spec() {
  return Binary("fmod", kNumeric,
                "C fmod, sign of a; integer division by zero is INVALID_ARGUMENT");
}
OpSpec PowOp::Spec() {
  return Binary("pow", kNumeric,
                "a ** b; integers: wrap on overflow, negative exponents give 0 except for bases 1 and -1");
}
OpSpec MaximumOp::Spec() { return Binary("maximum", kAll, "element-wise max; NaN if either is NaN"); }
OpSpec MinimumOp::Spec() { return Binary("minimum", kAll, "element-wise min; NaN if either is NaN"); }
OpSpec PreluOp::Spec() {
  return Binary("prelu", kFloating, "a if a > 0 else weight * a (weight broadcast like any input)");
}
OpSpec Atan2Op::Spec() {
  return Binary("atan2", kAll, "atan2(a, b); integers compute in float32", TypeRule::kPromoteToFloat);
}
OpSpec BitwiseAndOp::Spec() { return Binary("bitwise_and", kIntegralAndBool, "a & b"); }
OpSpec BitwiseOrOp::Spec() { return Binary("bitwise_or", kIntegralAndBool, "a | b"); }
OpSpec BitwiseXorOp::Spec() { return Binary("bitwise_xor", kIntegralAndBool, "a ^ b"); }
OpSpec LeftShiftOp::Spec() {
  return Binary("left_shift", kIntegral, "a << b; shifts < 0 or >= the bit width give 0");
}
OpSpec RightShiftOp::Spec() {
  return Binary("right_shift", kIntegral,
                "a >> b (arithmetic); shifts < 0 or >= the bit width give 0 or -1 by sign");
}

OpSpec EqOp::Spec() { return Binary("eq", kAll, "a == b", TypeRule::kToBool); }
OpSpec NeOp::Spec() { return Binary("ne", kAll, "a != b", TypeRule::kToBool); }
OpSpec LtOp::Spec() { return Binary("lt", kAll, "a < b", TypeRule::kToBool); }
OpSpec LeOp::Spec() { return Binary("le", kAll, "a <= b", TypeRule::kToBool); }
OpSpec GtOp::Spec() { return Binary("gt", kAll, "a > b", TypeRule::kToBool); }
OpSpec GeOp::Spec() { return Binary("ge", kAll, "a >= b", TypeRule::kToBool); }
OpSpec LogicalAndOp::Spec() { return Binary("logical_and", kAll, "a != 0 and b != 0", TypeRule::kToBool); }
OpSpec LogicalOrOp::Spec() { return Binary("logical_or", kAll, "a != 0 or b != 0", TypeRule::kToBool); }
OpSpec LogicalXorOp::Spec() { return Binary("logical_xor", kAll, "(a != 0) != (b != 0)", TypeRule::kToBool); }
OpSpec LogicalNotOp::Spec() { return Unary("logical_not", kAll, "a == 0", TypeRule::kToBool); }

OpSpec NegOp::Spec() { return Unary("neg", kNumeric, "-a (integers wrap)"); }
OpSpec AbsOp::Spec() { return Unary("abs", kNumeric, "|a| (abs of the most negative integer wraps)"); }
OpSpec SignOp::Spec() { return Unary("sign", kNumeric, "-1, 0 or 1; NaN gives 0"); }
OpSpec ReluOp::Spec() { return Unary("relu", kNumeric, "max(a, 0); NaN stays NaN"); }
OpSpec LeakyReluOp::Spec() {
  OpSpec s = Unary("leaky_relu", kFloating, "a if a > 0 else negative_slope * a");
  s.attrs = {{"negative_slope", AttrType::kFloat, false, 0.01, "slope for a <= 0"}};
  return s;
}
OpSpec SigmoidOp::Spec() { return Unary("sigmoid", kAll, "1 / (1 + exp(-a))", TypeRule::kPromoteToFloat); }
OpSpec TanhOp::Spec() { return Unary("tanh", kAll, "tanh(a)", TypeRule::kPromoteToFloat); }
OpSpec ExpOp::Spec() { return Unary("exp", kAll, "e ** a", TypeRule::kPromoteToFloat); }
OpSpec LogOp::Spec() { return Unary("log", kAll, "natural logarithm", TypeRule::kPromoteToFloat); }
OpSpec Log1pOp::Spec() { return Unary("log1p", kAll, "log(1 + a)", TypeRule::kPromoteToFloat); }
OpSpec Expm1Op::Spec() { return Unary("expm1", kAll, "exp(a) - 1", TypeRule::kPromoteToFloat); }
OpSpec SqrtOp::Spec() { return Unary("sqrt", kAll, "square root", TypeRule::kPromoteToFloat); }
OpSpec RsqrtOp::Spec() { return Unary("rsqrt", kAll, "1 / sqrt(a)", TypeRule::kPromoteToFloat); }
OpSpec ReciprocalOp::Spec() { return Unary("reciprocal", kAll, "1 / a", TypeRule::kPromoteToFloat); }
OpSpec SquareOp::Spec() { return Unary("square", kNumeric, "a * a (integers wrap)"); }
OpSpec SinOp::Spec() { return Unary("sin", kAll, "sine", TypeRule::kPromoteToFloat); }
OpSpec CosOp::Spec() { return Unary("cos", kAll, "cosine", TypeRule::kPromoteToFloat); }
OpSpec FloorOp::Spec() { return Unary("floor", kNumeric, "round down; integers unchanged"); }
OpSpec CeilOp::Spec() { return Unary("ceil", kNumeric, "round up; integers unchanged"); }
OpSpec RoundOp::Spec() { return Unary("round", kNumeric, "round half to even; integers unchanged"); }
OpSpec TruncOp::Spec() { return Unary("trunc", kNumeric, "round toward zero; integers unchanged"); }
OpSpec ErfOp::Spec() { return Unary("erf", kAll, "error function", TypeRule::kPromoteToFloat); }
OpSpec GeluOp::Spec() {
  OpSpec s = Unary("gelu", kFloating, "a * Phi(a); approximate=\"tanh\" for the tanh form");
  s.attrs = {{"approximate", AttrType::kString, false, std::string("none"), "\"none\" or \"tanh\""}};
  s.check = CheckGelu;
  return s;
}
GeluOp GeluOp::Make(const MakeArgs& m) { return {m.attrs.String("approximate") == "tanh"}; }
OpSpec SiluOp::Spec() { return Unary("silu", kFloating, "a * sigmoid(a)"); }
OpSpec BitwiseNotOp::Spec() { return Unary("bitwise_not", kIntegralAndBool, "~a (not, for bool)"); }
OpSpec IsnanOp::Spec() { return Unary("isnan", kAll, "a is NaN", TypeRule::kToBool); }
OpSpec IsinfOp::Spec() { return Unary("isinf", kAll, "a is +-infinity", TypeRule::kToBool); }
OpSpec IsfiniteOp::Spec() { return Unary("isfinite", kAll, "a is neither infinite nor NaN", TypeRule::kToBool); }

OpSpec ClampOp::Spec() {
  OpSpec s = Unary("clamp", kNumeric,
                   "min(max(a, min), max); bounds are converted to the input dtype; NaN stays NaN");
  s.attrs = {{"min", AttrType::kFloat, false, {}, "lower bound (absent: none)"},
             {"max", AttrType::kFloat, false, {}, "upper bound (absent: none)"}};
  s.check = CheckClamp;
  return s;
}
ClampOp ClampOp::Make(const MakeArgs& m) {
  const bool has_min = m.attrs.Has("min"), has_max = m.attrs.Has("max");
  return {has_min, has_max, has_min ? m.attrs.Float("min") : 0.0,
          has_max ? m.attrs.Float("max") : 0.0};
}
OpSpec CastOp::Spec() {
  OpSpec s = Unary("cast", kAll,
                   "convert to `dtype`; float to integer truncates, NaN gives 0, out-of-range "
                   "saturates; to bool is a != 0",
                   TypeRule::kCastToAttr);
  s.attrs = {{"dtype", AttrType::kDType, true, {}, "target dtype"}};
  return s;
}
OpSpec FillOp::Spec() {
  OpSpec s = Unary("fill", kAll, "a tensor like the input with every element `value` (converted like cast)");
  s.attrs = {{"value", AttrType::kFloat, true, {}, "the value"}};
  return s;
}

OpSpec WhereOp::Spec() {
  OpSpec s = Binary("where", kAll, "cond ? a : b; inputs (cond: bool, a, b)");
  s.arity = 3;
  s.condition_input = 0;
  return s;
}
OpSpec AddcmulOp::Spec() {
  OpSpec s = Binary("addcmul", kNumeric, "a + value * b * c");
  s.arity = 3;
  s.attrs = {{"value", AttrType::kFloat, false, 1.0, "multiplier (whole for integers)"}};
  s.check = CheckValue;
  return s;
}
OpSpec LerpOp::Spec() {
  OpSpec s = Binary("lerp", kFloating, "a + weight * (b - a); inputs (a, b, weight)");
  s.arity = 3;
  return s;
}

template <int kKind>
OpSpec QuantizedOp<kKind>::Spec() {
  static constexpr const char* kNames[] = {"quantized_add", "quantized_sub", "quantized_mul"};
  static constexpr const char* kWhat[] = {"+", "-", "*"};
  OpSpec s = Binary(kNames[kKind], kQuantizedTypes,
                    "", TypeRule::kQuantized);
  s.description = absl::StrCat("requantize((a - a_zero_point) * a_scale ", kWhat[kKind],
                               " (b - b_zero_point) * b_scale) to scale and zero_point, rounding "
                               "half to even, saturating; int8 or uint8, both inputs one dtype");
  s.attrs = QuantizedAttrs();
  s.check = CheckQuantized;
  return s;
}

template <int kKind>
QuantizedOp<kKind> QuantizedOp<kKind>::Make(const MakeArgs& m) {
  const Attrs& a = m.attrs;
  const bool u8 = m.result == DType::kUInt8;
  return {static_cast<float>(a.Float("a_scale")),   static_cast<float>(a.Int("a_zero_point")),
          static_cast<float>(a.Float("b_scale")),   static_cast<float>(a.Int("b_zero_point")),
          static_cast<float>(1.0 / a.Float("scale")), static_cast<float>(a.Int("zero_point")),
          u8 ? 0.0f : -128.0f,                      u8 ? 255.0f : 127.0f};
}

template struct QuantizedOp<0>;
template struct QuantizedOp<1>;
template struct QuantizedOp<2>;

}  // namespace tc
