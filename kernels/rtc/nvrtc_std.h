// The part of the C++ standard library that the functor headers use in device code, for
// NVRTC, which ships none: fused expressions compile those headers at run time, and this file
// stands in for each standard header they include (<cmath>, <cstdint>, <limits>, ...). The
// math functions are CUDA's own device functions, the ones nvcc's std:: names resolve to, so
// run-time kernels compute what the ahead-of-time ones do.
// One text under several names: guarded by a macro, which #pragma once would not be.
#ifndef TC_RTC_NVRTC_STD_H_
#define TC_RTC_NVRTC_STD_H_

#ifndef __CUDACC_RTC__
#error "only for NVRTC: host and nvcc code use the real standard library"
#endif

typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef unsigned long uintptr_t;
typedef unsigned long size_t;
typedef long ptrdiff_t;

namespace std {

using ::int8_t;
using ::int16_t;
using ::int32_t;
using ::int64_t;
using ::uint8_t;
using ::uint16_t;
using ::uint32_t;
using ::uint64_t;
using ::uintptr_t;
using ::size_t;
using ::ptrdiff_t;

template <typename T, T v>
struct integral_constant {
  static constexpr T value = v;
};
using true_type = integral_constant<bool, true>;
using false_type = integral_constant<bool, false>;

template <typename A, typename B>
struct is_same : false_type {};
template <typename A>
struct is_same<A, A> : true_type {};
template <typename A, typename B>
inline constexpr bool is_same_v = is_same<A, B>::value;

template <typename T>
struct remove_cv {
  using type = T;
};
template <typename T>
struct remove_cv<const T> {
  using type = T;
};
template <typename T>
struct remove_cv<volatile T> {
  using type = T;
};
template <typename T>
struct remove_cv<const volatile T> {
  using type = T;
};
template <typename T>
using remove_cv_t = typename remove_cv<T>::type;
template <typename T>
struct remove_reference {
  using type = T;
};
template <typename T>
struct remove_reference<T&> {
  using type = T;
};
template <typename T>
struct remove_reference<T&&> {
  using type = T;
};
template <typename T>
using remove_reference_t = typename remove_reference<T>::type;

template <bool B, typename T, typename F>
struct conditional {
  using type = T;
};
template <typename T, typename F>
struct conditional<false, T, F> {
  using type = F;
};
template <bool B, typename T, typename F>
using conditional_t = typename conditional<B, T, F>::type;
template <bool B, typename T = void>
struct enable_if {};
template <typename T>
struct enable_if<true, T> {
  using type = T;
};
template <bool B, typename T = void>
using enable_if_t = typename enable_if<B, T>::type;
template <typename...>
using void_t = void;

template <typename T>
__host__ __device__ T&& declval() noexcept;

namespace detail {
template <typename T>
struct integral : false_type {};
template <>
struct integral<bool> : true_type {};
template <>
struct integral<char> : true_type {};
template <>
struct integral<signed char> : true_type {};
template <>
struct integral<unsigned char> : true_type {};
template <>
struct integral<short> : true_type {};
template <>
struct integral<unsigned short> : true_type {};
template <>
struct integral<int> : true_type {};
template <>
struct integral<unsigned> : true_type {};
template <>
struct integral<long> : true_type {};
template <>
struct integral<unsigned long> : true_type {};
template <>
struct integral<long long> : true_type {};
template <>
struct integral<unsigned long long> : true_type {};
template <typename T>
struct floating : false_type {};
template <>
struct floating<float> : true_type {};
template <>
struct floating<double> : true_type {};
template <typename T>
struct unsigned_of {
  using type = T;
};
template <>
struct unsigned_of<char> {
  using type = unsigned char;
};
template <>
struct unsigned_of<signed char> {
  using type = unsigned char;
};
template <>
struct unsigned_of<short> {
  using type = unsigned short;
};
template <>
struct unsigned_of<int> {
  using type = unsigned;
};
template <>
struct unsigned_of<long> {
  using type = unsigned long;
};
template <>
struct unsigned_of<long long> {
  using type = unsigned long long;
};
}  // namespace detail

template <typename T>
struct is_integral : detail::integral<remove_cv_t<T>> {};
template <typename T>
inline constexpr bool is_integral_v = is_integral<T>::value;
template <typename T>
struct is_floating_point : detail::floating<remove_cv_t<T>> {};
template <typename T>
inline constexpr bool is_floating_point_v = is_floating_point<T>::value;
template <typename T>
inline constexpr bool is_arithmetic_v = is_integral_v<T> || is_floating_point_v<T>;
template <typename T, bool = is_arithmetic_v<T>>
struct is_signed : integral_constant<bool, (T(-1) < T(0))> {};
template <typename T>
struct is_signed<T, false> : false_type {};
template <typename T>
inline constexpr bool is_signed_v = is_signed<T>::value;
template <typename T>
inline constexpr bool is_unsigned_v = is_arithmetic_v<T> && !is_signed_v<T>;
template <typename T>
struct make_unsigned {
  using type = typename detail::unsigned_of<remove_cv_t<T>>::type;
};
template <typename T>
using make_unsigned_t = typename make_unsigned<T>::type;

// Integers' limits from their width and sign (integers only: what the functors ask of it).
template <typename T>
struct numeric_limits {
  static constexpr bool is_signed = is_signed_v<T>;
  static constexpr int digits = static_cast<int>(sizeof(T) * 8) - (is_signed_v<T> ? 1 : 0);
  __host__ __device__ static constexpr T max() {
    return is_same_v<T, bool> ? T(1)
           : is_signed        ? T(((T(1) << (digits - 1)) - 1) * 2 + 1)
                              : T(~T(0));
  }
  __host__ __device__ static constexpr T min() { return is_signed ? T(-max() - 1) : T(0); }
  __host__ __device__ static constexpr T lowest() { return min(); }
};

template <size_t... I>
struct index_sequence {};
namespace detail {
template <size_t N, size_t... I>
struct make_seq : make_seq<N - 1, N - 1, I...> {};
template <size_t... I>
struct make_seq<0, I...> {
  using type = index_sequence<I...>;
};
}  // namespace detail
template <size_t N>
using make_index_sequence = typename detail::make_seq<N>::type;

using ::memcpy;

using ::atan2;
using ::ceil;
using ::copysign;
using ::cos;
using ::erf;
using ::exp;
using ::expm1;
using ::fabs;
using ::floor;
using ::fmax;
using ::fmin;
using ::fmod;
using ::isfinite;
using ::isinf;
using ::isnan;
using ::log;
using ::log1p;
using ::nearbyint;
using ::pow;
using ::sin;
using ::sqrt;
using ::tanh;
using ::trunc;

}  // namespace std

#endif  // TC_RTC_NVRTC_STD_H_
