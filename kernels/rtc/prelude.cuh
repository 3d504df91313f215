// What every fused expression kernel includes (NVRTC only): the catalog's functors, and how
// a node of the tree applies its op the way the op's own kernel would.
#pragma once

#include "kernels/gpu/pack.h"
#include "kernels/ops/op_list.h"
#include "kernels/rtc/args.h"

namespace tc::rtc {

// A node's value as computed, which no later arithmetic may be combined with: its bits pass
// through an xor with `zero`, a kernel parameter that is always 0, which neither the compiler
// nor ptxas can see through. So each node rounds exactly as its op run alone does (no a * b
// + c fused into one rounding across two nodes: an empty asm statement does not stop ptxas).
// Integers too: ptxas (CUDA 13.0's, in NVRTC and in the 580 driver) lost the negation in
// minimum(bitwise_and(5, a), minimum(a, neg(3))) * (a - 1) on int16 when the nodes were
// combined (expr_test's CallsOnLiteralsAlone), and runs it right with this in between.
template <typename T>
__device__ __forceinline__ T Rounded(T x, unsigned zero) {
  if constexpr (std::is_same_v<T, float>) {
    return __int_as_float(__float_as_int(x) ^ static_cast<int>(zero));
  } else if constexpr (std::is_same_v<T, double>) {
    return __longlong_as_double(__double_as_longlong(x) ^ static_cast<long long>(zero));
  } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return static_cast<T>(x ^ static_cast<T>(zero));
  } else {
    return x;
  }
}

// Node with op functor f, computing in storage type S (OpMath<S> in registers), its value
// kept as T. Arguments are converted as the op's kernels load operands of other dtypes
// (through S), the result as they store it (a non-bool result through S first).
template <typename S, typename T, typename F, typename... A>
__device__ __forceinline__ T Apply(unsigned zero, const F& f, A... a) {
  using C = OpMath<S>;
  // The op's kernels' math (launch.cuh), narrow forms included.
  const auto r = GpuMath<S>(f)(static_cast<C>(Convert<S>(a))...);
  using R = std::remove_cv_t<decltype(r)>;
  using V = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
  return Rounded(Convert<T>(Convert<V>(r)), zero);
}

}  // namespace tc::rtc
