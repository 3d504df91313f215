// float16 and bfloat16 storage types and the conversions between every storage type, shared
// by host and device code. Half types compute in float ("opmath").
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/host_device.h"

namespace tc {

namespace detail {
TC_HOST_DEVICE uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
TC_HOST_DEVICE float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
}  // namespace detail

// Which NaN a conversion gives is not part of the contract: every NaN stays a NaN, but its
// sign and payload may differ between backends. The GPU converts with single instructions,
// which give the canonical NaN (0x7fff, 0x7fffffff) for any NaN; keeping the sign and payload
// there takes integer tests on every element, which float16 kernels cannot afford at copy
// bandwidth. The host keeps both (the x86 F16C instructions keep them too).

// IEEE 754 binary16, converted with round-to-nearest-even.
struct Half {
  uint16_t bits;

  Half() = default;
  TC_HOST_DEVICE explicit Half(float f) : bits(FromFloat(f)) {}
  TC_HOST_DEVICE operator float() const { return ToFloat(bits); }

  static TC_HOST_DEVICE uint16_t FromFloat(float f) {
#if defined(__CUDA_ARCH__)
    // One instruction, rounding to nearest even like the code below; a NaN becomes 0x7fff.
    uint16_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    const uint32_t u = detail::FloatBits(f);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;   // NaN (quiet)
    if (a >= 0x477ff000u) return sign | 0x7c00u;  // rounds to infinity (>= 65520)
    if (a < 0x38800000u) {                        // below 2^-14: subnormal or zero
      // Align the 24-bit significand to a 2^-24 unit and round to nearest even.
      if (a < 0x33000000u) return sign;  // below 2^-25: rounds to zero
      const uint32_t exp = a >> 23;      // 102..112
      const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
      const uint32_t shift = 126u - exp;  // 14..24
      const uint32_t half_ulp = 1u << (shift - 1);
      const uint32_t rest = mant & ((1u << shift) - 1);
      uint32_t q = mant >> shift;
      if (rest > half_ulp || (rest == half_ulp && (q & 1u))) ++q;
      return sign | static_cast<uint16_t>(q);
    }
    const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
    return sign | static_cast<uint16_t>((rounded >> 13) - (112u << 10));
#endif
  }

  static TC_HOST_DEVICE float ToFloat(uint16_t h) {
#if defined(__CUDA_ARCH__)
    // One instruction, exact like the code below; a NaN becomes 0x7fffffff.
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#else
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
      u = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
      u = sign | ((exp + 112u) << 23) | (mant << 13);
    } else if (mant == 0) {
      u = sign;
    } else {
      // Subnormal: value mant * 2^-24, exact in float.
      return detail::BitsToFloat(
          detail::FloatBits(static_cast<float>(mant) * 5.9604644775390625e-08f) | sign);
    }
    return detail::BitsToFloat(u);
#endif
  }
};

// bfloat16: the top half of a float32, converted with round-to-nearest-even.
struct BFloat16 {
  uint16_t bits;

  BFloat16() = default;
  TC_HOST_DEVICE explicit BFloat16(float f) : bits(FromFloat(f)) {}
  TC_HOST_DEVICE operator float() const {
    return detail::BitsToFloat(static_cast<uint32_t>(bits) << 16);
  }

  static TC_HOST_DEVICE uint16_t FromFloat(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    // One instruction, rounding like the code below; a NaN becomes 0x7fff.
    uint16_t h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    const uint32_t u = detail::FloatBits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
      return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
  }
};

template <typename T>
inline constexpr bool kIsHalfType = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename T>
inline constexpr bool kIsFloatType = std::is_floating_point_v<T> || kIsHalfType<T>;

// The type a functor computes in for storage type T.
template <typename T>
using OpMath = std::conditional_t<kIsHalfType<T>, float, T>;

// A type that holds an element of one of several types as that type's own bits
// (cuda::AnyOf): where a walk holds operands whose types the kernel knows when it is compiled
// but the walk does not (a fused expression's), Convert moves values in and out of it bit for
// bit; whoever reads one knows which type it holds.
template <typename T, typename = void>
inline constexpr bool kIsCarrier = false;
template <typename T>
inline constexpr bool kIsCarrier<T, std::void_t<decltype(T::kCarrier)>> = true;

// Converts between storage and compute types with defined results everywhere:
// - to bool: x != 0 (NaN is true);
// - floating to integer: truncation toward zero, NaN to 0, out-of-range values saturated to
//   the integer type's limits (C++ leaves these undefined; PyTorch's result depends on the
//   platform);
// - integer to integer: two's complement wrap-around, as C++ and PyTorch do.
template <typename To, typename From>
TC_HOST_DEVICE To Convert(From x) {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (kIsCarrier<From>) {
    return x.template As<To>();
  } else if constexpr (kIsCarrier<To>) {
    return To::Holding(x);
  } else if constexpr (kIsHalfType<From>) {
    return Convert<To>(static_cast<float>(x));
  } else if constexpr (kIsHalfType<To>) {
    return To(Convert<float>(x));
  } else if constexpr (std::is_same_v<To, bool>) {
    return x != From(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    if (!(x == x)) return To(0);
    // Bounds as From: the max of a 64-bit integer is not a float, so compare against 2^bits.
    constexpr From kLo = static_cast<From>(std::numeric_limits<To>::min());
    constexpr From kHiExclusive =
        static_cast<From>(std::numeric_limits<To>::max() / 2 + 1) * From(2);
    if (x <= kLo) return std::numeric_limits<To>::min();
    if (x >= kHiExclusive) return std::numeric_limits<To>::max();
    return static_cast<To>(x);
  } else {
    return static_cast<To>(x);
  }
}

}  // namespace tc
