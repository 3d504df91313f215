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
inline constexpr bool kIsSignedInt = std::is_integral_v<T> && std::is_signed_v<T>;

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
    return static_cast<T>(static_cast<U>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b))));
  } else {
    return a * b;
  }
}

template <typename T>
TC_HOST_DEVICE T WrapNeg(T a) {
  return WrapSub(T(0), a);
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

// Integer division and remainder, rounding toward zero (C) or toward negative infinity
// (Python). min / -1 wraps to min and its remainder is 0, instead of trapping.
template <typename T>
TC_HOST_DEVICE T TruncDiv(T a, T b) {
  if constexpr (kIsSignedInt<T>) {
    if (b == T(-1)) return WrapNeg(a);
  }
  return static_cast<T>(a / b);
}

template <typename T>
TC_HOST_DEVICE T TruncMod(T a, T b) {
  if constexpr (kIsSignedInt<T>) {
    if (b == T(-1)) return T(0);
  }
  return static_cast<T>(a % b);
}

template <typename T>
TC_HOST_DEVICE T FloorDivInt(T a, T b) {
  const T q = TruncDiv(a, b);
  if constexpr (kIsSignedInt<T>) {
    const T r = TruncMod(a, b);
    if (r != 0 && ((r < 0) != (b < 0))) return static_cast<T>(q - 1);
  }
  return q;
}

template <typename T>
TC_HOST_DEVICE T FloorModInt(T a, T b) {
  T r = TruncMod(a, b);
  if constexpr (kIsSignedInt<T>) {
    if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
  }
  return r;
}

// PyTorch's floor division of floating values: exact where floor(a / b) would be off by one
// because the quotient rounded.
template <typename T>
TC_HOST_DEVICE T FloorDivFloat(T a, T b) {
  if (b == T(0)) return a / b;
  const T mod = std::fmod(a, b);
  T div = (a - mod) / b;
  if (mod != T(0) && ((b < T(0)) != (mod < T(0)))) div -= T(1);
  if (div == T(0)) return std::copysign(T(0), a / b);
  T floordiv = std::floor(div);
  if (div - floordiv > T(0.5)) floordiv += T(1);
  return floordiv;
}

template <typename T>
TC_HOST_DEVICE T FloorModFloat(T a, T b) {
  T m = std::fmod(a, b);
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

// Round half to even (the current rounding mode, which is never changed here).
template <typename T>
TC_HOST_DEVICE T RoundHalfEven(T x) {
  return std::nearbyint(x);
}

}  // namespace tc::math
