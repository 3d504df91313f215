// Unary functors.
#pragma once

#include <cmath>

#include "kernels/ops/binary.h"

namespace tc {

// Name, its spec as MakeSpec's arguments in parentheses, its compute types, its result type and
// the body of its call operator over `T a`.
#define TC_UNARY_OP(Name, spec_args, Mask, Result, ...) \
  TC_UNARY_OP_WITH(Name, spec_args, Mask, Result, , __VA_ARGS__)
// The same, for a float function with a vectorized float32 row on the CPU (HostFloatRow, in
// kernels/cpu/vector_math.cc: glibc's vector math library), which the CPU calls instead.
#define TC_UNARY_FLOAT_ROW_OP(Name, spec_args, Mask, Result, ...)                   \
  TC_UNARY_OP_WITH(Name, spec_args, Mask, Result,                                   \
                   static void HostFloatRow(const float* a, float* out, int64_t n); \
                   , __VA_ARGS__)
// The same, with float16 and bfloat16 math of its own on the GPU (kNarrowMath):
// narrow<kFullRange>(a).
#define TC_UNARY_FLOAT_ROW_NARROW_OP(Name, spec_args, Mask, Result, narrow, ...)    \
  TC_UNARY_OP_WITH(Name, spec_args, Mask, Result,                                   \
                   static void HostFloatRow(const float* a, float* out, int64_t n); \
                   TC_NARROW_UNARY(narrow), __VA_ARGS__)                            \
  template <>                                                                       \
  inline constexpr bool kNarrowMath<Name> = true;
#if defined(__CUDACC__)
#define TC_NARROW_UNARY(narrow)            \
  template <bool kFullRange>               \
  __device__ float Narrow(float a) const { \
    return narrow<kFullRange>(a);          \
  }
#else
#define TC_NARROW_UNARY(narrow)
#endif
#define TC_UNARY_OP_WITH(Name, spec_args, Mask, Result, members, ...)                           \
  struct Name {                                                                                 \
    static constexpr uint32_t kComputeTypes = Mask;                                             \
    static constexpr int kArity = 1;                                                            \
    TC_CATALOG_ONLY(                                                                            \
        static OpSpec Spec() { return MakeSpec spec_args; } static Name Make(const MakeArgs&) { \
          return {};                                                                            \
        })                                                                                      \
    members template <typename T>                                                               \
    TC_HOST_DEVICE Result operator()(T a) const __VA_ARGS__                                     \
  };

TC_UNARY_OP(NegOp, ("neg", kNumericTypes, "-a (integers wrap)"), kNumericTypes, T,
            { return math::WrapNeg(a); })
TC_UNARY_OP(AbsOp,
            ("abs", kAllTypes, "|a| (abs of the most negative integer wraps; bool unchanged)"),
            kAllTypes, T, {
              if constexpr (std::is_unsigned_v<T> || kIsBool<T>) {
                return a;
              } else if constexpr (kIsInt<T>) {
                return a < 0 ? math::WrapNeg(a) : a;
              } else {
                return std::fabs(a);
              }
            })
#if defined(__CUDA_ARCH__) && !defined(__CUDACC_RTC__)
// 1-byte neg and abs four at a time (op_spec.h): both wrap (-(-128) and |-128| are -128), as
// the functors do; abs leaves unsigned bytes and bools as they are.
template <>
struct Wordwise<NegOp> {
  static constexpr uint32_t kTypes = DTypeBit(DType::kInt8) | DTypeBit(DType::kUInt8);
  template <typename S>
  static __device__ uint32_t Word(const NegOp&, uint32_t a) {
    return __vneg4(a);
  }
};
template <>
struct Wordwise<AbsOp> {
  static constexpr uint32_t kTypes =
      DTypeBit(DType::kInt8) | DTypeBit(DType::kUInt8) | DTypeBit(DType::kBool);
  template <typename S>
  static __device__ uint32_t Word(const AbsOp&, uint32_t a) {
    if constexpr (std::is_signed_v<S>) {
      return __vabs4(a);
    } else {
      return a;
    }
  }
};
#endif

// NaN gives 0, as PyTorch's sign does; bool is unchanged.
TC_UNARY_OP(SignOp, ("sign", kAllTypes, "-1, 0 or 1; NaN gives 0; bool unchanged"), kAllTypes, T, {
  if constexpr (kIsBool<T>) {
    return a;
  } else {
    return static_cast<T>((T(0) < a) - math::IsNegative(a));
  }
})
// NaN stays NaN.
TC_UNARY_OP(ReluOp, ("relu", kNumericTypes, "max(a, 0); NaN stays NaN"), kNumericTypes, T,
            { return math::IsNegative(a) ? T(0) : a; })
TC_UNARY_FLOAT_ROW_NARROW_OP(SigmoidOp,
                             ("sigmoid", kAllTypes, "1 / (1 + exp(-a))", TypeRule::kPromoteToFloat),
                             kFloatTypes, T, math::SigmoidNarrow,
                             { return T(1) / (T(1) + std::exp(-a)); })
TC_UNARY_FLOAT_ROW_OP(TanhOp, ("tanh", kAllTypes, "tanh(a)", TypeRule::kPromoteToFloat),
                      kFloatTypes, T, { return std::tanh(a); })
TC_UNARY_FLOAT_ROW_OP(ExpOp, ("exp", kAllTypes, "e ** a", TypeRule::kPromoteToFloat), kFloatTypes,
                      T, { return std::exp(a); })
TC_UNARY_FLOAT_ROW_OP(LogOp, ("log", kAllTypes, "natural logarithm", TypeRule::kPromoteToFloat),
                      kFloatTypes, T, { return std::log(a); })
TC_UNARY_FLOAT_ROW_OP(Log1pOp, ("log1p", kAllTypes, "log(1 + a)", TypeRule::kPromoteToFloat),
                      kFloatTypes, T, { return std::log1p(a); })
TC_UNARY_FLOAT_ROW_OP(Expm1Op, ("expm1", kAllTypes, "exp(a) - 1", TypeRule::kPromoteToFloat),
                      kFloatTypes, T, { return std::expm1(a); })
TC_UNARY_OP(SqrtOp, ("sqrt", kAllTypes, "square root", TypeRule::kPromoteToFloat), kFloatTypes, T,
            { return std::sqrt(a); })
TC_UNARY_OP(RsqrtOp, ("rsqrt", kAllTypes, "1 / sqrt(a)", TypeRule::kPromoteToFloat), kFloatTypes, T,
            { return T(1) / std::sqrt(a); })
TC_UNARY_OP(ReciprocalOp, ("reciprocal", kAllTypes, "1 / a", TypeRule::kPromoteToFloat),
            kFloatTypes, T, { return T(1) / a; })
// Four packs a thread for float32 and for float64 sqrt: the IEEE refinement behind each load;
// measured faster than the default on the row kernel
// (figures: bench/results/op-traits-tuning-h200.md, reciprocal and sqrt).
template <>
inline constexpr ByWidth kRowPacks<ReciprocalOp>{0, 4, 0};
template <>
inline constexpr ByWidth kRowPacks<SqrtOp>{0, 4, 4};
TC_UNARY_OP(SquareOp,
            ("square", kAllTypes, "a * a (integers wrap; bool gives int64)",
             TypeRule::kBoolToInt64),
            kNumericTypes, T, { return math::WrapMul(a, a); })
TC_UNARY_FLOAT_ROW_NARROW_OP(SinOp, ("sin", kAllTypes, "sine", TypeRule::kPromoteToFloat),
                             kFloatTypes, T, math::SinNarrow, { return std::sin(a); })
TC_UNARY_FLOAT_ROW_NARROW_OP(CosOp, ("cos", kAllTypes, "cosine", TypeRule::kPromoteToFloat),
                             kFloatTypes, T, math::CosNarrow, { return std::cos(a); })
TC_UNARY_FLOAT_ROW_OP(ErfOp, ("erf", kAllTypes, "error function", TypeRule::kPromoteToFloat),
                      kFloatTypes, T, { return std::erf(a); })
// Long math (op_spec.h), with packs a thread for the CUDA row kernel where measured better
// than the default: four for 16-bit erf, sigmoid, tanh and float64 sigmoid, sin; eight for
// float64 exp; one in 16 rounds of resident blocks (kRowWaves) for float64 erf, tanh, log,
// log1p (figures: bench/results/op-traits-tuning-h200.md, long math).
template <>
inline constexpr bool kLongMath<SigmoidOp> = true;
template <>
inline constexpr bool kLongMath<ErfOp> = true;
template <>
inline constexpr bool kLongMath<TanhOp> = true;
template <>
inline constexpr bool kLongMath<ExpOp> = true;
template <>
inline constexpr bool kLongMath<LogOp> = true;
template <>
inline constexpr bool kLongMath<Log1pOp> = true;
template <>
inline constexpr bool kLongMath<Expm1Op> = true;
template <>
inline constexpr ByWidth kRowPacks<SigmoidOp>{4, 0, 4};
// One pass at two packs a thread (OnePassRowKernel) where it beat the looping kernel: float32
// but for sin and cos (level), float64 exp, expm1, sin, cos, and erf and tanh for one row of
// dense operands (FlatRowKernel) (figures: bench/results/op-traits-tuning-h200.md, one pass).
template <>
inline constexpr ByWidth kRowOnePass<ErfOp>{0, 2, 2};
template <>
inline constexpr ByWidth kRowOnePass<TanhOp>{0, 2, 2};
template <>
inline constexpr ByWidth kRowOnePass<ExpOp>{0, 2, 2};
template <>
inline constexpr ByWidth kRowOnePass<Expm1Op>{0, 2, 2};
template <>
inline constexpr ByWidth kRowOnePass<LogOp>{0, 2, 0};
template <>
inline constexpr ByWidth kRowOnePass<Log1pOp>{0, 2, 0};
template <>
inline constexpr ByWidth kRowOnePass<SigmoidOp>{0, 2, 0};
template <>
inline constexpr ByWidth kRowOnePass<SinOp>{0, 0, 2};
template <>
inline constexpr ByWidth kRowOnePass<CosOp>{0, 0, 2};
// Its narrow form (float16, bfloat16) two packs: measured faster than four
// (figures: bench/results/op-traits-tuning-h200.md, sigmoid narrow).
template <bool R>
inline constexpr ByWidth kRowPacks<NarrowMath<SigmoidOp, R>>{2, 0, 0};
template <>
inline constexpr ByWidth kRowPacks<ErfOp>{4, 0, 1};
template <>
inline constexpr ByWidth kRowPacks<TanhOp>{4, 0, 1};
template <>
inline constexpr ByWidth kRowWaves<ErfOp>{0, 0, 16};
template <>
inline constexpr ByWidth kRowWaves<TanhOp>{0, 0, 16};
template <>
inline constexpr ByWidth kRowPacks<ExpOp>{0, 0, 8};
template <>
inline constexpr ByWidth kRowPacks<LogOp>{0, 0, 1};
template <>
inline constexpr ByWidth kRowPacks<Log1pOp>{0, 0, 1};
template <>
inline constexpr ByWidth kRowWaves<LogOp>{0, 0, 16};
template <>
inline constexpr ByWidth kRowWaves<Log1pOp>{0, 0, 16};
template <>
inline constexpr ByWidth kRowPacks<SinOp>{0, 0, 4};
template <>
inline constexpr ByWidth kRowPacks<CosOp>{0, 0, 4};
// Integers are already whole: floor, ceil, round and trunc return them unchanged.
TC_UNARY_OP(FloorOp, ("floor", kNumericTypes, "round down; integers unchanged"), kNumericTypes, T, {
  if constexpr (kIsFloatType<T>) return std::floor(a);
  else return a;
})
TC_UNARY_OP(CeilOp, ("ceil", kNumericTypes, "round up; integers unchanged"), kNumericTypes, T, {
  if constexpr (kIsFloatType<T>) return std::ceil(a);
  else return a;
})
TC_UNARY_OP(RoundOp, ("round", kNumericTypes, "round half to even; integers unchanged"),
            kNumericTypes, T, {
              if constexpr (kIsFloatType<T>) return math::RoundHalfEven(a);
              else return a;
            })
TC_UNARY_OP(TruncOp, ("trunc", kNumericTypes, "round toward zero; integers unchanged"),
            kNumericTypes, T, {
              if constexpr (kIsFloatType<T>) return std::trunc(a);
              else return a;
            })
TC_UNARY_OP_WITH(SiluOp, ("silu", kFloatTypes, "a * sigmoid(a)"), kFloatTypes, T,
                 TC_NARROW_UNARY(math::SiluNarrow), { return math::TimesSigmoid(a, a); })
template <>
inline constexpr bool kNarrowMath<SiluOp> = true;
TC_UNARY_OP(BitwiseNotOp, ("bitwise_not", kIntegralBoolTypes, "~a (not, for bool)"),
            kIntegralBoolTypes, T, {
              if constexpr (kIsBool<T>) return !a;
              else if constexpr (kIsInt<T>) return static_cast<T>(~a);
              else return a;
            })
TC_UNARY_OP(LogicalNotOp, ("logical_not", kAllTypes, "a == 0", TypeRule::kToBool), kAllTypes, bool,
            { return a == T(0); })
#if defined(__CUDA_ARCH__) && !defined(__CUDACC_RTC__)
// Four bytes at a time (op_spec.h): logical_not of 1-byte types is a byte-wise == 0 (bools'
// bytes are 0 or 1), bitwise_not a complement (of bools: of the low bit).
template <>
struct Wordwise<LogicalNotOp> {
  static constexpr uint32_t kTypes =
      DTypeBit(DType::kInt8) | DTypeBit(DType::kUInt8) | DTypeBit(DType::kBool);
  template <typename S>
  static __device__ uint32_t Word(const LogicalNotOp&, uint32_t a) {
    return __vseteq4(a, 0u);
  }
};
template <>
struct Wordwise<BitwiseNotOp> {
  static constexpr uint32_t kTypes =
      DTypeBit(DType::kInt8) | DTypeBit(DType::kUInt8) | DTypeBit(DType::kBool);
  template <typename S>
  static __device__ uint32_t Word(const BitwiseNotOp&, uint32_t a) {
    if constexpr (kIsBool<S>) {
      return a ^ 0x01010101u;
    } else {
      return ~a;
    }
  }
};
#endif
TC_UNARY_OP(IsnanOp, ("isnan", kAllTypes, "a is NaN", TypeRule::kToBool), kAllTypes, bool,
            { return math::IsNan(a); })
// float32 four packs a thread: measured faster than two
// (figures: bench/results/op-traits-tuning-h200.md, isnan).
template <>
inline constexpr ByWidth kRowPacks<IsnanOp>{0, 4, 0};
TC_UNARY_OP(IsinfOp, ("isinf", kAllTypes, "a is +-infinity", TypeRule::kToBool), kAllTypes, bool, {
  if constexpr (kIsFloatType<T>) return std::isinf(a);
  else return false;
})
TC_UNARY_OP(IsfiniteOp, ("isfinite", kAllTypes, "a is neither infinite nor NaN", TypeRule::kToBool),
            kAllTypes, bool, {
              if constexpr (kIsFloatType<T>) return std::isfinite(a);
              else return true;
            })
#undef TC_UNARY_OP

struct LeakyReluOp {
  static constexpr uint32_t kComputeTypes = kFloatTypes;
  static constexpr int kArity = 1;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    OpSpec s = MakeSpec("leaky_relu", kFloatTypes, "a if a > 0 else negative_slope * a");
    s.attrs = {{"negative_slope", AttrType::kFloat, false, 0.01, "slope for a <= 0"}};
    return s;
  }
  static LeakyReluOp Make(const MakeArgs& m) { return {m.attrs.Float("negative_slope")}; }
#endif
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
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    OpSpec s = MakeSpec("gelu", kFloatTypes, "a * Phi(a); approximate=\"tanh\" for the tanh form");
    s.attrs = {
        {"approximate", AttrType::kString, false, std::string("none"), "\"none\" or \"tanh\""}};
    s.check = [](const Attrs& attrs, DType) {
      const std::string& a = attrs.String("approximate");
      return a == "none" || a == "tanh"
                 ? absl::OkStatus()
                 : absl::InvalidArgumentError(absl::StrCat(
                       "gelu's attribute 'approximate' must be \"none\" or \"tanh\", not \"", a,
                       "\""));
    };
    return s;
  }
  static GeluOp Make(const MakeArgs& m) { return {m.attrs.String("approximate") == "tanh"}; }
#endif
  bool tanh_form;
  // Form 0 the erf form, 1 the tanh form (kForms, op_spec.h).
  static constexpr int kForms = 2;
  TC_HOST_DEVICE int Form() const { return tanh_form ? 1 : 0; }
  template <int K>
  static TC_HOST_DEVICE GeluOp Fixed(GeluOp f) {
    f.tanh_form = K == 1;
    return f;
  }
  template <typename T>
  TC_HOST_DEVICE T operator()(T x) const {
    if (tanh_form) {
      const T kBeta = T(0.7978845608028654);  // sqrt(2 / pi)
      const T inner = kBeta * (x + T(0.044715) * x * x * x);
#ifdef __CUDA_ARCH__
      // x sigmoid(2 inner), the same function: on the GPU an exp and a reciprocal where tanh
      // takes an exp, a reciprocal and a polynomial for small arguments (math::TimesSigmoid);
      // it keeps the negative tail, where 1 + tanh cancels.
      if constexpr (std::is_same_v<T, double>) return math::TimesSigmoid(x, T(2) * inner);
#endif
      return T(0.5) * x * (T(1) + std::tanh(inner));
    }
    return T(0.5) * x * (T(1) + std::erf(x * T(0.7071067811865476)));
  }
#if defined(__CUDACC__)
  template <bool kFullRange>
  __device__ float Narrow(float x) const {
    return tanh_form ? math::GeluTanhNarrow<kFullRange>(x) : math::GeluNarrow<kFullRange>(x);
  }
#endif
};
template <>
inline constexpr bool kNarrowMath<GeluOp> = true;

// Packs a thread in the CUDA row kernel, where measured faster: four for silu float32 and gelu
// 16- and 32-bit; one in 16 rounds (kRowWaves) for float64 gelu (both forms) and silu (its
// reciprocal form) (figures: bench/results/op-traits-tuning-h200.md, silu and gelu).
template <>
inline constexpr ByWidth kRowPacks<SiluOp>{0, 4, 1};
template <>
inline constexpr ByWidth kRowPacks<GeluOp>{4, 4, 1};
template <>
inline constexpr ByWidth kRowWaves<GeluOp>{0, 0, 16};
template <>
inline constexpr ByWidth kRowWaves<SiluOp>{0, 0, 16};
// One pass at two packs a thread (OnePassRowKernel) for silu and gelu: measured faster. Gelu's
// float64 erf form keeps the looping kernel for rows but for one row of dense operands: one
// pass at one pack (figures: bench/results/op-traits-tuning-h200.md, silu and gelu one pass).
template <>
inline constexpr ByWidth kRowOnePass<SiluOp>{0, 2, 2};
template <>
inline constexpr ByWidth kRowOnePass<GeluOp>{0, 2, 2};
template <>
inline constexpr ByWidth kRowOnePass<FixedForm<GeluOp, 0>>{0, 2, 1};
#ifndef __CUDACC_RTC__
template <>
inline bool RowOnePassTakes<GeluOp>(const GeluOp& f, size_t size, bool flat) {
  return size != 8 || f.tanh_form || flat;
}
#endif

}  // namespace tc
