// Element access shared by the kernels: loads and stores that convert between an operand's
// dtype and the compute type, packs of elements moved in one access, and the call of a
// functor over an array of operands.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/cuda/pack.h"
#include "kernels/dtype.h"
#include "kernels/scalar_types.h"

namespace tc::cuda {

// Loads element p of dtype t into compute type C through the compute dtype's storage type S
// (as if the input had been converted to the common dtype first).
template <typename S, typename C>
__device__ __forceinline__ C LoadAs(DType t, const char* p) {
  return VisitDType(t, [p](auto tag) {
    using T = typename decltype(tag)::type;
    return static_cast<C>(Convert<S>(*reinterpret_cast<const T*>(p)));
  });
}

// Stores a result as dtype t; half-precision results are rounded to S first.
template <typename S, typename R>
__device__ __forceinline__ void StoreAs(DType t, char* p, R r) {
  using V = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
  const V v = Convert<V>(r);
  VisitDType(t, [p, v](auto tag) {
    using T = typename decltype(tag)::type;
    *reinterpret_cast<T*>(p) = Convert<T>(v);
  });
}

template <typename F, typename C, size_t... I>
__device__ __forceinline__ auto Call(const F& f, const C* v, std::index_sequence<I...>) {
  return f(v[I]...);
}

}  // namespace tc::cuda
