// Scalar helpers with defined results for every input, shared by the functors on both backends:
// wrap-around integer arithmetic (C++ signed overflow is undefined), NaN-propagating min/max,
// and the error flag that integer division by zero raises.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/host_device.h"

namespace tc::math {

template <typename T>
inline constexpr bool kIsSignedInt = std::is_integral_v<T>&& std::is_signed_v<T>;

template <typename T>
TC_HOST_DEVICE T WrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}

template <typename T>
TC_HOST_DEVICE T WrapSub(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
  } else {
    return a - b;
  }
}

template <typename T>
TC_HOST_DEVICE T WrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    // Unsigned types narrower than int promote to int, where the product can overflow: go
    // through unsigned int (or wider) explicitly.
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    return static_cast<T>(
        static_cast<U>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b))));
  } else {
    return a * b;
  }
}

template <typename T>
TC_HOST_DEVICE T WrapNeg(T a) {
  if constexpr (std::is_floating_point_v<T>) {
    return -a;  // Not 0 - a: the negation of +0.0 is -0.0.
  } else {
    return WrapSub(T(0), a);
  }
}

template <typename T>
TC_HOST_DEVICE bool IsNan(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    return x != x;
  } else {
    return false;
  }
}

// A whole-number attribute (alpha, value) as T: through int64 for integers, since converting a
// negative double straight to an unsigned type is undefined (and differs between CPU and GPU).
template <typename T>
TC_HOST_DEVICE T ScalarAs(double v) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return static_cast<T>(static_cast<int64_t>(v));
  } else {
    return static_cast<T>(v);
  }
}

// a < 0, without comparing unsigned values against zero.
template <typename T>
TC_HOST_DEVICE bool IsNegative(T a) {
  if constexpr (std::is_unsigned_v<T>) {
    return false;
  } else {
    return a < T(0);
  }
}

// Raised by a functor when an input has no defined result (integer division by zero). The
// backend turns it into INVALID_ARGUMENT; every thread writes the same value.
TC_HOST_DEVICE void RaiseError(int* flag) {
  if (flag == nullptr) return;
#if defined(__CUDA_ARCH__)
  atomicExch(flag, 1);
#else
  __atomic_store_n(flag, 1, __ATOMIC_RELAXED);
#endif
}

// True (after raising `flag`) when an integer divisor is zero: the functor then returns 0 and
// the backend fails the request.
template <typename T>
TC_HOST_DEVICE bool ZeroDivisor(T b, int* flag) {
  if (b != T(0)) return false;
  RaiseError(flag);
  return true;
}

#if defined(__CUDA_ARCH__)
// The quotient a / b (b != 0) of integers of at most 16 bits, rounded down (kFloor) or toward
// zero, through float32 on the device: two conversions in, a reciprocal, a product and one
// conversion out, where the integer division takes about twenty instructions, so 1- and
// 2-byte division keeps up with memory. (Converting through the bits of 1.5 * 2^23 + v
// instead of the conversion instructions measured slower on the H100 for floor_divide int8;
// figures: bench/results/op-traits-tuning-h200.md, floor_divide.)
//
// Exact for every pair: the reciprocal instruction and the product are within 2^-22 of a / b
// relative, which the nudge of 2^-19 (away from zero for truncation, up for floor) more than
// covers, so an exact integer quotient never rounds to its neighbour; a quotient that is not an
// integer lies at least 1/|b| from one, which no error below |a / b| * 2^-18 <= 2^-2 / |b| can
// cross.
template <bool kFloor>
__device__ int32_t SmallIntQuotient(int32_t a, int32_t b) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(static_cast<float>(b)));
  const float q = static_cast<float>(a) * r;
  if constexpr (kFloor) {
    return __float2int_rd(fmaf(fabsf(q), 0x1p-19f, q));
  } else {
    return __float2int_rz(q * (1.0f + 0x1p-19f));
  }
}
#endif

// The quotient through the integer division.
template <bool kFloor, typename T>
TC_HOST_DEVICE T WideIntQuotient(T a, T b) {
  if constexpr (kIsSignedInt<T>) {
    if (b == T(-1)) return WrapNeg(a);
  }
  T q = static_cast<T>(a / b);
  if constexpr (kFloor && kIsSignedInt<T>) {
    // Rounded toward zero; one less where the division was inexact and the signs differ.
    if (WrapMul(q, b) != a && ((a < 0) != (b < 0))) q = static_cast<T>(q - 1);
  }
  return q;
}

// The truncated (C) or floored (Python) quotient of integers, b != 0. min / -1 wraps to min
// instead of trapping. On the device, 1- and 2-byte types divide through float32 (exact), and
// 8-byte values that fit in 32 bits through the 32-bit division (a fraction of the 64-bit
// routine's cost).
template <bool kFloor, typename T>
TC_HOST_DEVICE T IntQuotient(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) <= 2) {
    return static_cast<T>(SmallIntQuotient<kFloor>(a, b));
  } else if constexpr (sizeof(T) == 8) {
    using Narrow = std::conditional_t<kIsSignedInt<T>, int32_t, uint32_t>;
    // INT32_MIN is left out: its quotient by -1 does not fit.
    if (static_cast<Narrow>(a) == a && static_cast<Narrow>(b) == b &&
        (!kIsSignedInt<T> || a != static_cast<T>(std::numeric_limits<Narrow>::min()))) {
      return static_cast<T>(IntQuotient<kFloor>(static_cast<Narrow>(a), static_cast<Narrow>(b)));
    }
    return WideIntQuotient<kFloor>(a, b);
  } else {
    return WideIntQuotient<kFloor>(a, b);
  }
#else
  return WideIntQuotient<kFloor>(a, b);
#endif
}

// Integer division and remainder (b != 0), rounding toward zero (C) or toward negative
// infinity (Python). min / -1 wraps to min and its remainder is 0. The remainder is
// a - q * b, wrapping, from the same quotient.
template <typename T>
TC_HOST_DEVICE T TruncDiv(T a, T b) {
  return IntQuotient<false>(a, b);
}

template <typename T>
TC_HOST_DEVICE T TruncMod(T a, T b) {
  return WrapSub(a, WrapMul(IntQuotient<false>(a, b), b));
}

template <typename T>
TC_HOST_DEVICE T FloorDivInt(T a, T b) {
  return IntQuotient<true>(a, b);
}

template <typename T>
TC_HOST_DEVICE T FloorModInt(T a, T b) {
  return WrapSub(a, WrapMul(IntQuotient<true>(a, b), b));
}

#if defined(__CUDACC__)
// x - u * y for the integer u that leaves it in [0, y): exact, for x >= 0 and y a normal float
// up to 2^126 with x < y * 2^20. t = rint(x * rcp(y)) (1.5 * 2^23 added and taken away: two
// full-rate adds where the rounding instructions run at a quarter of the rate) is the quotient's
// floor or one more (the reciprocal instruction and the product are within 2^-22 of the
// quotient relative, so below 2^20 within a quarter); x - t * y in one fma, whose sign or size
// shows an off t (that fma may round, but never across 0 or y, which are exact); then with u
// right the value lies in [0, y) on y's grid, so the last fma is exact.
__device__ __forceinline__ float FmodStep(float x, float y) {
  float rcp;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(rcp) : "f"(y));
  const float t = __fsub_rn(fmaf(x, rcp, 12582912.0f), 12582912.0f);
  const float r = fmaf(-t, y, x);
  const float u = r < 0.0f ? t - 1.0f : r >= y ? t + 1.0f : t;
  return fmaf(-u, y, x);
}

// Python's a % b (the sign of b), exact, under FmodStep's bounds on |a| and |b|. t = rint(a *
// rcp(b)) is floor(a / b) or one more; r = a - t * b in one fma is then exact (on the grid of
// the smaller of a's and b's units, below |b| in size) and is either the answer or, when t was
// one more, lies on the other side of zero from b, where adding b gives the answer rounded as
// fmod + b would be. A zero takes a's sign, as fmod's does.
__device__ __forceinline__ float FloorModStep(float a, float b) {
  float rcp;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(rcp) : "f"(b));
  const float t = __fsub_rn(fmaf(a, rcp, 12582912.0f), 12582912.0f);
  float r = fmaf(-t, b, a);
  const bool nonzero = r != 0.0f;
  if (nonzero && ((r < 0.0f) != (b < 0.0f))) r += b;
  return nonzero ? r : copysignf(0.0f, a);
}

// Whether x / y (both >= 0) is within FmodStep's reach: y normal from 2^-100 to 2^100 and the
// quotient below 2^20 (false for NaN and infinite x).
__device__ __forceinline__ bool StepQuotient(float x, float y) {
  return x < y * 0x1p20f && y >= 0x1p-100f && y <= 0x1p100f;
}
#endif

// C's fmod, exact. On the device, float operands whose quotient is below 2^20 (every pair of
// float16 values whose exponents are close, most bfloat16 and float32 ones) skip fmodf's loop
// and the IEEE division's checks (FmodStep). Branch-free: the fallback (zero, subnormal, huge,
// infinite or NaN divisors, larger quotients) is the one branch.
template <typename T>
TC_HOST_DEVICE T FmodFloat(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) {
    const float x = fabsf(a), y = fabsf(b);
    if (StepQuotient(x, y)) return copysignf(FmodStep(x, y), a);
  }
#endif
  return std::fmod(a, b);
}

// PyTorch's floor division of floating values: exact where floor(a / b) would be off by one
// because the quotient rounded.
template <typename T>
TC_HOST_DEVICE T FloorDivFloat(T a, T b) {
  if (b == T(0)) return a / b;
  const T mod = FmodFloat(a, b);
  T div = (a - mod) / b;
  if (mod != T(0) && ((b < T(0)) != (mod < T(0)))) div -= T(1);
  if (div == T(0)) return std::copysign(T(0), a / b);
  T floordiv = std::floor(div);
  if (div - floordiv > T(0.5)) floordiv += T(1);
  return floordiv;
}

template <typename T>
TC_HOST_DEVICE T FloorModFloat(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) {
    if (StepQuotient(fabsf(a), fabsf(b))) return FloorModStep(a, b);
  }
#endif
  T m = FmodFloat(a, b);
  if (m != T(0) && ((b < T(0)) != (m < T(0)))) m += b;
  return m;
}

// Integer power by squaring, wrapping on overflow. Negative exponents: 1 for base 1, +-1 for
// base -1, 0 otherwise (the integer part of the true value).
template <typename T>
TC_HOST_DEVICE T IntPow(T base, T exp) {
  if constexpr (kIsSignedInt<T>) {
    if (exp < 0) {
      if (base == T(1)) return T(1);
      if (base == T(-1)) return (exp & T(1)) ? T(-1) : T(1);
      return T(0);
    }
  }
  T result = T(1);
  while (exp) {
    if (exp & T(1)) result = WrapMul(result, base);
    exp = static_cast<T>(exp >> 1);
    base = WrapMul(base, base);
  }
  return result;
}

// a * b rounded on its own. The device compiler would fuse a product into the sum that uses
// it (one rounding where the host, without FMA, rounds twice); ops whose results every
// backend must give alike round their products with this.
template <typename T>
TC_HOST_DEVICE T MulRounded(T a, T b) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<T, float>) {
    return __fmul_rn(a, b);
  } else if constexpr (std::is_same_v<T, double>) {
    return __dmul_rn(a, b);
  } else {
    return a * b;
  }
#else
  return a * b;
#endif
}

// x / (1 + exp(-v)): silu (v = x) and gelu's tanh form (v = 2u, below). On the GPU float64
// multiplies by the correctly rounded reciprocal (one more rounding than the IEEE division,
// whose Newton steps and range checks cost as much as the exp): measured faster for silu and
// gelu's tanh form, near a copy of the bytes. Elsewhere the division.
// (figures: bench/results/op-traits-tuning-h200.md, silu and gelu reciprocal)
template <typename T>
TC_HOST_DEVICE T TimesSigmoid(T x, T v) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<T, double>) return x * __drcp_rn(1.0 + exp(-v));
#endif
  return x / (T(1) + std::exp(-v));
}

// Round half to even (the current rounding mode, which is never changed here).
template <typename T>
TC_HOST_DEVICE T RoundHalfEven(T x) {
  return std::nearbyint(x);
}

// Small integers and float without the GPU's conversion instructions, which run at a quarter
// of the float rate (16 a clock per SM on sm_90) and held the quantized ops well below copy
// bandwidth on the H100 (figures: bench/results/op-traits-tuning-h200.md, conversions):
// 1.5 * 2^23 (bits 0x4B400000) has a mantissa whose last bit is 1, so
// for |v| < 2^22 adding v to its bits, or adding it as a float and reading the bits, is exact.
// The host converts as usual: the same values.

// v - zero for integers |v|, |zero| < 2^21 (zero given as a float), exact.
TC_HOST_DEVICE float SmallIntMinus(int v, float zero) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(__int_as_float(0x4B400000 + v), __fadd_rn(12582912.0f, zero));
#else
  return static_cast<float>(v) - zero;
#endif
}

// x < 2^22 in magnitude and integer-valued, as int.
TC_HOST_DEVICE int SmallFloatToInt(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_int(__fadd_rn(x, 12582912.0f)) - 0x4B400000;
#else
  return static_cast<int>(x);
#endif
}

// RoundHalfEven(x) + zero (an integer below 2^21 in magnitude, as a float), exact where
// |x| < 2^22: a larger magnitude comes out at least 2^21 with its sign (infinities and NaN
// stay what they are), so that a result saturated to a small integer range afterwards is the
// same as with RoundHalfEven. On the GPU by adding 1.5 * 2^23 (the sum's unit is 1; ties go
// to even) and subtracting it less `zero`: two full-rate adds.
TC_HOST_DEVICE float RoundHalfEvenPlus(float x, float zero) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(__fadd_rn(x, 12582912.0f), __fsub_rn(12582912.0f, zero));
#else
  return std::nearbyint(x) + zero;
#endif
}

#if defined(__CUDACC__)
// atan2, pow, sin, cos, sigmoid and silu for float16 and bfloat16 operands on the GPU
// (NarrowMath): their
// inputs are exact in float and their result is rounded to 8 or 11 significant bits, so float
// math with errors of a few parts in 10^7 (atan2, sin, cos) and a few in 10^6 (pow) gives the
// correctly rounded value but where it lies that close to a rounding boundary, and then its
// neighbour, one unit in the last place away. atan2f, powf and sinf hold float32's last bits
// and pay for them with an IEEE division (atan2f), extended-precision logarithms (powf) and
// quarter-rate conversions (sinf), which held float16 atan2 and pow well below copy bandwidth
// on the H200 (figures: bench/results/op-traits-tuning-h200.md, narrow math).
// kFullRange: operands may lie anywhere in float's range, subnormals
// included (bfloat16); otherwise in float16's (0, infinities, NaN and magnitudes in
// [2^-24, 65504]).

// atan2(y, x): atan(t) for t = min / max of |y| and |x| in [0, 1] (a polynomial in t^2,
// relative error 1.1e-7; 2.3e-7 as float evaluates it), moved to the octant of (x, y).
template <bool kFullRange>
__device__ __forceinline__ float Atan2Narrow(float y, float x) {
  const float ax = fabsf(x), ay = fabsf(y);
  const float hi = fmaxf(ax, ay), lo = fminf(ax, ay);
  // lo / hi by the reciprocal instruction, whose range (normal numbers up to 2^126) float16's
  // values keep; bfloat16's are scaled by 2^64 or 2^-64 into it first (a quotient below 2^-126
  // then loses bits beyond bfloat16's). Equal magnitudes (infinities too) give 1, two zeros 0.
  float sc = 1.0f;
  if constexpr (kFullRange) sc = hi > 0x1p64f ? 0x1p-64f : hi < 0x1p-64f ? 0x1p64f : 1.0f;
  float rcp;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(rcp) : "f"(hi * sc));
  float t = __fmul_rn(lo * sc, rcp);
  t = lo == hi ? (hi == 0.0f ? 0.0f : 1.0f) : t;
  const float s = t * t;
  float p = -4.780584946e-03f;
  p = fmaf(p, s, 2.455760539e-02f);
  p = fmaf(p, s, -5.990542844e-02f);
  p = fmaf(p, s, 9.942813218e-02f);
  p = fmaf(p, s, -1.402944177e-01f);
  p = fmaf(p, s, 1.997137964e-01f);
  p = fmaf(p, s, -3.333209455e-01f);
  p = fmaf(p, s, 9.999999404e-01f);
  float r = t * p;
  r = ay > ax ? 1.570796327f - r : r;
  r = __float_as_int(x) < 0 ? 3.141592654f - r : r;
  r = copysignf(r, y);
  return (x != x || y != y) ? x + y : r;
}

// sin and cos: x less j * pi/2 for j = rint(x * 2/pi) in three parts (exact enough for
// |x| < 105615, which every float16 is), then the sine or cosine polynomial of the rest on
// [-pi/4, pi/4] (relative errors 7e-8) by j's last two bits, which the sum x * 2/pi +
// 1.5 * 2^23 holds in its own (no conversion instructions: sinf's two run at a quarter of the
// rate). Larger bfloat16 values, infinities and NaN take sinf and cosf.
template <bool kFullRange>
__device__ __forceinline__ float SinCosNarrow(float x, int quarter_turns) {
  const float big = fmaf(x, 0x1.45f306p-1f, 12582912.0f);
  const int q = __float_as_int(big) + quarter_turns;
  const float j = __fsub_rn(big, 12582912.0f);
  float r = fmaf(j, -0x1.921fb4p+0f, x);
  r = fmaf(j, -0x1.4442d0p-24f, r);
  r = fmaf(j, -0x1.846988p-48f, r);
  const float s = r * r;
  const float ps = fmaf(fmaf(-1.958802604e-04f, s, 8.332748897e-03f), s, -1.666666418e-01f);
  const float sine = copysignf(fmaf(r * s, ps, r), r);  // -0 stays -0
  const float pc = fmaf(fmaf(2.454805872e-05f, s, -1.388830366e-03f), s, 4.166666418e-02f);
  const float cosine = fmaf(fmaf(pc, s, -0.5f), s, 1.0f);
  float v = (q & 1) != 0 ? cosine : sine;
  v = (q & 2) != 0 ? -v : v;
  if constexpr (kFullRange) {
    if (!(fabsf(x) < 105615.0f)) v = quarter_turns == 0 ? sinf(x) : cosf(x);
  }
  return v;
}
template <bool kFullRange>
__device__ __forceinline__ float SinNarrow(float x) {
  return SinCosNarrow<kFullRange>(x, 0);
}
template <bool kFullRange>
__device__ __forceinline__ float CosNarrow(float x) {
  return SinCosNarrow<kFullRange>(x, 1);
}

// sigmoid and silu: t = 2^(-|x| log2 e) in (0, 1] (no overflow; bfloat16 keeps the
// subnormal tail), 1 / (1 + t) by the reciprocal instruction, which is sigmoid(x) for x >= 0
// and t times it below: two instructions of the special function unit, where expf and the
// IEEE division take a dozen. The product's rounding grows with |x| (the relative error of t
// is about 4e-8 |x|: 7e-7 where float16's tail ends, x = -17).
template <bool kFullRange>
__device__ __forceinline__ float SigmoidNarrow(float x) {
  const float e = -1.442695041f * fabsf(x);
  float t, r;
  if constexpr (kFullRange) {
    asm("ex2.approx.f32 %0, %1;" : "=f"(t) : "f"(e));
  } else {
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(t) : "f"(e));
  }
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + t));
  return x >= 0.0f ? r : t * r;  // NaN: t * r
}
template <bool kFullRange>
__device__ __forceinline__ float SiluNarrow(float x) {
  return x * SigmoidNarrow<kFullRange>(x);
}

// gelu(x) = x Phi(x) through the normal tail Q(t) = 1 - Phi(t), t = |x|: x Q(t) below zero,
// x (1 - Q(t)) above, so that neither side cancels (1 + erf(x / sqrt 2) loses its relative
// accuracy below x = -3 and is 0 in float math from x = -5.5 on; bfloat16's results go on to
// x = -14).
// Q(t) = 2^(-t^2 log2(e) / 2) s g(s), s = 1 / (1 + 0.3 t): g is a degree-7 polynomial fitted
// here (relative error 1.6e-7 for t in [0, 14.5], past which x Q(t) is under float's
// subnormals), 1 / sqrt(2 pi) and 2^-64 folded into its coefficients, and 2^64 into the
// exponent, so that 2^x stays normal where bfloat16's results are float subnormals: two
// instructions of the special function unit and a dozen of arithmetic.
template <bool kFullRange>
__device__ __forceinline__ float GeluNarrow(float x) {
  const float t = fabsf(x);
  float e, s;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(fmaf(t * t, -0.7213475204f, 64.0f)));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(s) : "f"(fmaf(t, 0.3f, 1.0f)));
  float g = 1.920326045e-21f;
  g = fmaf(g, s, -8.465372043e-21f);
  g = fmaf(g, s, 1.108905485e-20f);
  g = fmaf(g, s, -2.820777775e-21f);
  g = fmaf(g, s, 6.922189063e-21f);
  g = fmaf(g, s, 5.430547754e-21f);
  g = fmaf(g, s, 6.543818152e-21f);
  g = fmaf(g, s, 6.485264023e-21f);
  const float q = e * s * g;
  return x * (x < 0.0f ? q : 1.0f - q);  // NaN and -inf: NaN (inf * 0), as erff's form
}

// The tanh form, 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2 / pi) (x + 0.044715 x^3):
// SigmoidNarrow, which keeps the negative tail that 1 + tanh(u) loses.
template <bool kFullRange>
__device__ __forceinline__ float GeluTanhNarrow(float x) {
  const float u2 = 1.5957691216f * fmaf(0.044715f * x, x * x, x);
  return x * SigmoidNarrow<kFullRange>(u2);
}

// pow(a, b) as 2^(b * log2|a|): log2 from the exponent and a polynomial in the significand
// about 1 (relative error 1.4e-7, near 1 too, where b may be large); zeros, infinities and NaN
// take the log2 instruction, whose results for them (-inf, inf, NaN) carry C's special cases
// through the product and 2^x; the rest (b = 0, |a| = 1, negative bases) by selects.
template <bool kFullRange>
__device__ __forceinline__ float PowNarrow(float a, float b) {
  const float m = fabsf(a);
  int bits = __float_as_int(m), scaled = 0;
  if constexpr (kFullRange) {  // subnormals: scaled up to normal
    const bool tiny = m < 0x1p-126f;
    bits = tiny ? __float_as_int(m * 0x1p23f) : bits;
    scaled = tiny ? 23 : 0;
  }
  // |a| = 2^k * (1 + f), 1 + f in [sqrt(1/2), sqrt(2)): f exact. Integers and floats convert
  // through 1.5 * 2^23 (SmallIntMinus), not the quarter-rate conversion instructions.
  const int k = (bits - 0x3f3504f3) >> 23;
  const float f = __int_as_float(bits - k * 0x800000) - 1.0f;
  float q = 1.292642057e-01f;
  q = fmaf(q, f, -2.089337707e-01f);
  q = fmaf(q, f, 2.152122706e-01f);
  q = fmaf(q, f, -2.386756837e-01f);
  q = fmaf(q, f, 2.879391015e-01f);
  q = fmaf(q, f, -3.607162535e-01f);
  q = fmaf(q, f, 4.809102714e-01f);
  q = fmaf(q, f, -7.213472128e-01f);
  q = fmaf(q, f, 1.442695022e+00f);
  float l = fmaf(f, q, SmallIntMinus(k - scaled, 0.0f));
  // 0, infinity and NaN (bits - 1 wraps for 0).
  if (static_cast<unsigned>(__float_as_int(m)) - 1u >= 0x7f7fffffu) {
    asm("lg2.approx.f32 %0, %1;" : "=f"(l) : "f"(m));
  }
  // 2^x: bfloat16 keeps float's subnormal results; float16's are 0 below 2^-25 anyway.
  float r;
  if constexpr (kFullRange) {
    asm("ex2.approx.f32 %0, %1;" : "=f"(r) : "f"(b * l));
  } else {
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b * l));
  }
  // l is 0 only for |a| = 1: 1 (-1 and 1 to infinite powers too; -1's sign and NaN below).
  r = b == 0.0f || l == 0.0f ? 1.0f : r;
  // A base with the sign bit (-0 and -infinity too): odd integer exponents keep the sign;
  // exponents other than integers (infinities count as even) give NaN for negative finite
  // bases. Whether b is an integer, and its last bit, from |b| + 1.5 * 2^23 (the sum's unit
  // is 1 below 2^22; 16-bit values from 2^22 up are even).
  const float ab = fabsf(b);
  const float sum = __fadd_rn(ab, 12582912.0f);
  const bool integer = ab >= 0x1p23f || __fsub_rn(sum, 12582912.0f) == ab;
  const bool odd = integer && ab < 0x1p22f && (__float_as_int(sum) & 1) != 0;
  r = __float_as_int(a) < 0 && odd ? -r : r;
  return a < 0.0f && a > -__int_as_float(0x7f800000) && !integer ? __int_as_float(0x7fffffff) : r;
}
#endif  // __CUDACC__

}  // namespace tc::math
