// Binary arithmetic functors. Each is a small value type built once per request (Make) and
// called per element, in the compute type, on either backend.
#pragma once

#include <cmath>
#include <type_traits>

#include "kernels/host_device.h"
#include "kernels/ops/math.h"
#include "kernels/ops/op_spec.h"

namespace tc {

template <typename T>
inline constexpr bool kIsBool = std::is_same_v<T, bool>;
template <typename T>
inline constexpr bool kIsInt = std::is_integral_v<T> && !std::is_same_v<T, bool>;

// a + alpha * b
struct AddOp {
  static constexpr uint32_t kComputeTypes = kAllTypes;
  static constexpr int kArity = 2;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    OpSpec s = MakeSpec("add", kAllTypes, "a + alpha * b");
    s.attrs = {{"alpha", AttrType::kFloat, false, 1.0, "multiplier of b (whole for integers)"}};
    s.check = [](const Attrs& a, DType r) { return CheckWholeNumber(a, r, "alpha"); };
    return s;
  }
  static AddOp Make(const MakeArgs& m) { return {m.attrs.Float("alpha")}; }
#endif
  double alpha;
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (kIsBool<T>) {
      return a || (alpha != 0 && b);
    } else if constexpr (kIsInt<T>) {
      return math::WrapAdd(a, math::WrapMul(math::ScalarAs<T>(alpha), b));
    } else {
      return a + static_cast<T>(alpha) * b;
    }
  }
};

// a - alpha * b
struct SubOp {
  static constexpr uint32_t kComputeTypes = kNumericTypes;
  static constexpr int kArity = 2;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    OpSpec s = MakeSpec("sub", kNumericTypes, "a - alpha * b");
    s.attrs = {{"alpha", AttrType::kFloat, false, 1.0, "multiplier of b (whole for integers)"}};
    s.check = [](const Attrs& a, DType r) { return CheckWholeNumber(a, r, "alpha"); };
    return s;
  }
  static SubOp Make(const MakeArgs& m) { return {m.attrs.Float("alpha")}; }
#endif
  double alpha;
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (kIsInt<T>) {
      return math::WrapSub(a, math::WrapMul(math::ScalarAs<T>(alpha), b));
    } else {
      return a - static_cast<T>(alpha) * b;
    }
  }
};

#if defined(__CUDA_ARCH__) && !defined(__CUDACC_RTC__)
// alpha * b in each byte of b (wrapping): the bytes in two halves, each 16-bit lane of a
// 32-bit product holding one byte's product whole (at most 255 * 255), so that no lane carries
// into the next. k: alpha as the byte's type takes it, as the functor does.
__device__ __forceinline__ uint32_t ByteTimes(uint32_t b, uint32_t k) {
  if (k == 1) return b;
  const uint32_t even = ((b & 0x00ff00ffu) * k) & 0x00ff00ffu;
  const uint32_t odd = (((b >> 8) & 0x00ff00ffu) * k) & 0x00ff00ffu;
  return even | (odd << 8);
}
template <typename S>
__device__ __forceinline__ uint32_t ByteAlpha(double alpha) {
  return static_cast<uint8_t>(math::ScalarAs<S>(alpha));
}

// 1-byte add and sub four at a time: element by element, an int8 add fell short of copy
// bandwidth (figures: bench/results/op-traits-tuning-h200.md, add, sub).
// Bools (bytes 0 or 1) add as a or (alpha != 0 and b).
template <>
struct Wordwise<AddOp> {
  static constexpr uint32_t kTypes =
      DTypeBit(DType::kInt8) | DTypeBit(DType::kUInt8) | DTypeBit(DType::kBool);
  template <typename S>
  static __device__ uint32_t Word(const AddOp& f, uint32_t a, uint32_t b) {
    if constexpr (kIsBool<S>) {
      return f.alpha != 0 ? (a | b) : a;
    } else {
      return __vadd4(a, ByteTimes(b, ByteAlpha<S>(f.alpha)));
    }
  }
};
template <>
struct Wordwise<SubOp> {
  static constexpr uint32_t kTypes = DTypeBit(DType::kInt8) | DTypeBit(DType::kUInt8);
  template <typename S>
  static __device__ uint32_t Word(const SubOp& f, uint32_t a, uint32_t b) {
    return __vsub4(a, ByteTimes(b, ByteAlpha<S>(f.alpha)));
  }
};
#endif

struct MulOp {
  static constexpr uint32_t kComputeTypes = kAllTypes;
  static constexpr int kArity = 2;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() { return MakeSpec("mul", kAllTypes, "a * b"); }
  static MulOp Make(const MakeArgs&) { return {}; }
#endif
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (kIsBool<T>) {
      return a && b;
    } else {
      return math::WrapMul(a, b);
    }
  }
};

#if defined(__CUDA_ARCH__) && !defined(__CUDACC_RTC__)
// The four byte-wise products a_i * b_i of two words, wrapping: each lane's byte shifted down
// and multiplied in place (the bits above it add only multiples of 256 to the low byte), the
// four low bytes put together. Element by element, with each byte taken out, extended and put
// back for every operand, an int8 multiply issued twice PyTorch's instructions and ran behind
// both PyTorch and a copy (figures: bench/results/op-traits-tuning-h200.md, mul).
__device__ __forceinline__ uint32_t ByteProducts(uint32_t a, uint32_t b) {
  const uint32_t p0 = a * b;
  const uint32_t p1 = (a >> 8) * (b >> 8);
  const uint32_t p2 = (a >> 16) * (b >> 16);
  const uint32_t p3 = (a >> 24) * (b >> 24);
  return __byte_perm(__byte_perm(p0, p1, 0x0040), __byte_perm(p2, p3, 0x0040), 0x5410);
}
// Bools (bytes 0 or 1) multiply as and.
template <>
struct Wordwise<MulOp> {
  static constexpr uint32_t kTypes =
      DTypeBit(DType::kInt8) | DTypeBit(DType::kUInt8) | DTypeBit(DType::kBool);
  template <typename S>
  static __device__ uint32_t Word(const MulOp&, uint32_t a, uint32_t b) {
    if constexpr (kIsBool<S>) {
      return a & b;
    } else {
      return ByteProducts(a, b);
    }
  }
};
#endif

// True division; integer inputs compute in float32 (TypeRule::kPromoteToFloat).
struct DivOp {
  static constexpr uint32_t kComputeTypes = kFloatTypes;
  static constexpr int kArity = 2;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    return MakeSpec("div", kAllTypes, "true division a / b; integers divide in float32",
                    TypeRule::kPromoteToFloat);
  }
  static DivOp Make(const MakeArgs&) { return {}; }
#endif
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b) const {
    return a / b;
  }
};
// Tiles that convert, for float32 (op_spec.h): a transposed float16, bfloat16 or integer
// operand beside float32 ones.
template <>
inline constexpr uint32_t kConvertingTiles<AddOp> = DTypeBit(DType::kFloat32);
template <>
inline constexpr uint32_t kConvertingTiles<SubOp> = DTypeBit(DType::kFloat32);
template <>
inline constexpr uint32_t kConvertingTiles<MulOp> = DTypeBit(DType::kFloat32);
template <>
inline constexpr uint32_t kConvertingTiles<DivOp> = DTypeBit(DType::kFloat32);

// Division flagging integer division by zero through `error`.
struct FloorDivideOp {
  static constexpr uint32_t kComputeTypes = kNumericTypes;
  static constexpr int kArity = 2;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    return MakeSpec(
        "floor_divide", kNumericTypes,
        "floor(a / b); integer division by zero is INVALID_ARGUMENT, min / -1 wraps to min");
  }
  static FloorDivideOp Make(const MakeArgs&) { return {}; }
#endif
  int* error = nullptr;
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (kIsInt<T>) {
      return math::ZeroDivisor(b, error) ? T(0) : math::FloorDivInt(a, b);
    } else {
      return math::FloorDivFloat(a, b);
    }
  }
};

// Python's %: the result has the divisor's sign.
struct RemainderOp {
  static constexpr uint32_t kComputeTypes = kNumericTypes;
  static constexpr int kArity = 2;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    return MakeSpec(
        "remainder", kNumericTypes,
        "a - floor(a / b) * b, sign of b (Python %); integer division by zero is INVALID_ARGUMENT");
  }
  static RemainderOp Make(const MakeArgs&) { return {}; }
#endif
  int* error = nullptr;
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (kIsInt<T>) {
      return math::ZeroDivisor(b, error) ? T(0) : math::FloorModInt(a, b);
    } else {
      return math::FloorModFloat(a, b);
    }
  }
};

// Two packs a thread for float16/bfloat16: measured faster than the default on the row kernel
// (figures: bench/results/op-traits-tuning-h200.md, remainder).
template <>
inline constexpr ByWidth kRowPacks<RemainderOp>{2, 0, 0};

// C's fmod: the result has the dividend's sign.
struct FmodOp {
  static constexpr uint32_t kComputeTypes = kNumericTypes;
  static constexpr int kArity = 2;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    return MakeSpec("fmod", kNumericTypes,
                    "C fmod, sign of a; integer division by zero is INVALID_ARGUMENT");
  }
  static FmodOp Make(const MakeArgs&) { return {}; }
#endif
  int* error = nullptr;
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (kIsInt<T>) {
      return math::ZeroDivisor(b, error) ? T(0) : math::TruncMod(a, b);
    } else {
      return math::FmodFloat(a, b);
    }
  }
};

struct PowOp {
  static constexpr uint32_t kComputeTypes = kNumericTypes;
  static constexpr int kArity = 2;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    return MakeSpec(
        "pow", kNumericTypes,
        "a ** b; integers: wrap on overflow, negative exponents give 0 except for bases 1 and -1");
  }
  static PowOp Make(const MakeArgs&) { return {}; }
#endif
  // A vectorized powf (kernels/cpu/vector_math.cc): the scalar call per element is the CPU's
  // bottleneck.
  static void HostFloatRow(const float* a, const float* b, float* out, int64_t n);
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (kIsInt<T>) {
      return math::IntPow(a, b);
    } else {
      return std::pow(a, b);
    }
  }
#if defined(__CUDACC__)
  template <bool kFullRange>
  __device__ float Narrow(float a, float b) const {
    return math::PowNarrow<kFullRange>(a, b);
  }
#endif
};

template <>
inline constexpr bool kLongMath<PowOp> = true;
template <>
inline constexpr bool kNarrowMath<PowOp> = true;
// float32 (four packs) and float64 (one pack) in 16 rounds of resident blocks, float16 and
// bfloat16 (narrow math, two packs) in 8: each measured faster than the whole grid, float64
// also than two packs (figures: bench/results/op-traits-tuning-h200.md, pow).
template <>
inline constexpr ByWidth kRowPacks<PowOp>{2, 0, 1};
template <>
inline constexpr ByWidth kRowWaves<PowOp>{8, 16, 16};
// float64 in one pass at two packs a thread: faster than 16 rounds at one pack, in one row and
// in many; float32 keeps four packs in 16 rounds, one pass being no faster
// (figures: bench/results/op-traits-tuning-h200.md, pow one pass).
template <>
inline constexpr ByWidth kRowOnePass<PowOp>{0, 0, 2};

// NaN-propagating, like PyTorch's maximum/minimum.
struct MaximumOp {
  static constexpr uint32_t kComputeTypes = kAllTypes;
  static constexpr int kArity = 2;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    return MakeSpec("maximum", kAllTypes, "element-wise max; NaN if either is NaN");
  }
  static MaximumOp Make(const MakeArgs&) { return {}; }
#endif
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (kIsBool<T>) {
      return a || b;
    } else {
      if (math::IsNan(a)) return a;
      if (math::IsNan(b)) return b;
      return a > b ? a : b;
    }
  }
};

struct MinimumOp {
  static constexpr uint32_t kComputeTypes = kAllTypes;
  static constexpr int kArity = 2;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    return MakeSpec("minimum", kAllTypes, "element-wise min; NaN if either is NaN");
  }
  static MinimumOp Make(const MakeArgs&) { return {}; }
#endif
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (kIsBool<T>) {
      return a && b;
    } else {
      if (math::IsNan(a)) return a;
      if (math::IsNan(b)) return b;
      return a < b ? a : b;
    }
  }
};

// 1-byte max and min four at a time (on bools: or, and).
TC_BYTE_WORDS(MaximumOp, __vmaxs4, __vmaxu4)
TC_BYTE_WORDS(MinimumOp, __vmins4, __vminu4)

// a if a > 0 else weight * a, with the weight broadcast like any input.
struct PreluOp {
  static constexpr uint32_t kComputeTypes = kFloatTypes;
  static constexpr int kArity = 2;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    return MakeSpec("prelu", kFloatTypes,
                    "a if a > 0 else weight * a (weight broadcast like any input)");
  }
  static PreluOp Make(const MakeArgs&) { return {}; }
#endif
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T w) const {
    return a > T(0) ? a : w * a;
  }
};

struct Atan2Op {
  static constexpr uint32_t kComputeTypes = kFloatTypes;
  static constexpr int kArity = 2;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    return MakeSpec("atan2", kAllTypes, "atan2(a, b); integers compute in float32",
                    TypeRule::kPromoteToFloat);
  }
  static Atan2Op Make(const MakeArgs&) { return {}; }
#endif
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b) const {
    return std::atan2(a, b);
  }
#if defined(__CUDACC__)
  template <bool kFullRange>
  __device__ float Narrow(float a, float b) const {
    return math::Atan2Narrow<kFullRange>(a, b);
  }
#endif
};
template <>
inline constexpr bool kNarrowMath<Atan2Op> = true;
// float32 and float64 in 16 rounds of resident blocks, float16/bfloat16 in 8: faster than the
// whole grid; 8 rounds the best for bfloat16 and level with 16 for float16, aligned or shifted
// (figures: bench/results/op-traits-tuning-h200.md, atan2 rounds).
template <>
inline constexpr ByWidth kRowWaves<Atan2Op>{8, 16, 16};
// Two packs a thread for float16/bfloat16 (narrow math): measured faster than the default on
// the row kernel (figures: bench/results/op-traits-tuning-h200.md, atan2 packs).
template <>
inline constexpr ByWidth kRowPacks<Atan2Op>{2, 0, 0};

struct BitwiseAndOp {
  static constexpr uint32_t kComputeTypes = kIntegralBoolTypes;
  static constexpr int kArity = 2;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() { return MakeSpec("bitwise_and", kIntegralBoolTypes, "a & b"); }
  static BitwiseAndOp Make(const MakeArgs&) { return {}; }
#endif
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (kIsBool<T>) {
      return a && b;
    } else if constexpr (kIsInt<T>) {
      return static_cast<T>(a & b);
    } else {
      return a;  // not instantiated for floating types: the catalog refuses them
    }
  }
};
template <>
struct Wordwise<BitwiseAndOp> : BitwiseWords<BitwiseAndOp, kIntegralBoolTypes> {};

struct BitwiseOrOp {
  static constexpr uint32_t kComputeTypes = kIntegralBoolTypes;
  static constexpr int kArity = 2;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() { return MakeSpec("bitwise_or", kIntegralBoolTypes, "a | b"); }
  static BitwiseOrOp Make(const MakeArgs&) { return {}; }
#endif
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (kIsBool<T>) {
      return a || b;
    } else if constexpr (kIsInt<T>) {
      return static_cast<T>(a | b);
    } else {
      return a;
    }
  }
};
template <>
struct Wordwise<BitwiseOrOp> : BitwiseWords<BitwiseOrOp, kIntegralBoolTypes> {};

struct BitwiseXorOp {
  static constexpr uint32_t kComputeTypes = kIntegralBoolTypes;
  static constexpr int kArity = 2;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() { return MakeSpec("bitwise_xor", kIntegralBoolTypes, "a ^ b"); }
  static BitwiseXorOp Make(const MakeArgs&) { return {}; }
#endif
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (kIsBool<T>) {
      return a != b;
    } else if constexpr (kIsInt<T>) {
      return static_cast<T>(a ^ b);
    } else {
      return a;
    }
  }
};
template <>
struct Wordwise<BitwiseXorOp> : BitwiseWords<BitwiseXorOp, kIntegralBoolTypes> {};

// Shifts by a negative amount or by the type's width or more give 0 (left) or the sign fill
// (right), where C++ leaves them undefined.
struct LeftShiftOp {
  static constexpr uint32_t kComputeTypes = kIntegralTypes;
  static constexpr int kArity = 2;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    return MakeSpec("left_shift", kIntegralTypes, "a << b; shifts < 0 or >= the bit width give 0");
  }
  static LeftShiftOp Make(const MakeArgs&) { return {}; }
#endif
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (kIsInt<T>) {
      using U = std::make_unsigned_t<T>;
      if (math::IsNegative(b) || static_cast<uint64_t>(b) >= sizeof(T) * 8) return T(0);
      return static_cast<T>(static_cast<U>(static_cast<U>(a) << b));
    } else {
      return a;
    }
  }
};

struct RightShiftOp {
  static constexpr uint32_t kComputeTypes = kIntegralTypes;
  static constexpr int kArity = 2;
#ifndef __CUDACC_RTC__
  static OpSpec Spec() {
    return MakeSpec("right_shift", kIntegralTypes,
                    "a >> b (arithmetic); shifts < 0 or >= the bit width give 0 or -1 by sign");
  }
  static RightShiftOp Make(const MakeArgs&) { return {}; }
#endif
  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (kIsInt<T>) {
      if (math::IsNegative(b) || static_cast<uint64_t>(b) >= sizeof(T) * 8) {
        if constexpr (std::is_signed_v<T>) {
          return a < 0 ? T(-1) : T(0);
        } else {
          return T(0);
        }
      }
      return static_cast<T>(a >> b);
    } else {
      return a;
    }
  }
};

}  // namespace tc
