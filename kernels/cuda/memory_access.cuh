// Element access shared by the kernels: loads and stores that convert between an operand's
// dtype and the compute type, packs of elements moved in one access, and the call of a
// functor over an array of operands.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/gpu/pack.h"
#include "kernels/dtype.h"
#include "kernels/scalar_types.h"

namespace tc::cuda {

// An element of a walk whose operands have types of their own that the kernel knows when it
// is compiled (a fused expression's, NVRTC) though the walk does not: Ts are operand k's type
// for k = 0 (the output), 1, ... (the inputs), and an AnyOf holds one of them as its own bits.
// The walk loads each operand into one (Convert moves the bits), hands them to the functor,
// which reads each as the type it knows that operand has, and stores the one it returns.
// VisitOperand gives operand k its own type, without a run-time choice once k is a constant
// (an unrolled loop's).
template <typename... Ts>
struct AnyOf {
  static constexpr bool kCarrier = true;
  using Bits = std::conditional_t<((sizeof(Ts) <= 4) && ...), uint32_t, uint64_t>;
  Bits bits;

  AnyOf() = default;
  // An integer's value (a bool's 0 or 1 as the walks make it: see ToCompute).
  __host__ __device__ explicit AnyOf(int v) : bits(static_cast<Bits>(v)) {}
  template <typename T>
  static __host__ __device__ __forceinline__ AnyOf Holding(T v) {
    static_assert(sizeof(T) <= sizeof(Bits));
    AnyOf a;
    a.bits = 0;
    memcpy(&a.bits, &v, sizeof(T));
    return a;
  }
  template <typename T>
  __host__ __device__ __forceinline__ T As() const {
    static_assert(sizeof(T) <= sizeof(Bits));
    T v;
    memcpy(&v, &bits, sizeof(T));
    return v;
  }
};

// fn(TypeTag<T_k>{}) for operand k of the types T, Rest... (of operand I, I + 1, ...).
template <int I, typename T, typename... Rest, typename Fn>
__device__ __forceinline__ decltype(auto) VisitOperandAt(int k, Fn&& fn) {
  if constexpr (sizeof...(Rest) == 0) {
    (void)k;
    return fn(TypeTag<T>{});
  } else {
    if (k == I) return fn(TypeTag<T>{});
    return VisitOperandAt<I + 1, Rest...>(k, fn);
  }
}

template <typename T>
struct CarrierTypes;
template <typename... Ts>
struct CarrierTypes<AnyOf<Ts...>> {
  template <typename Fn>
  static __device__ __forceinline__ decltype(auto) Visit(int k, Fn&& fn) {
    return VisitOperandAt<0, Ts...>(k, fn);
  }
};

// fn(TypeTag<storage type>{}) for operand k (0 the output) of dtype t, of a walk over S: t's
// type (VisitDType), or where S is an AnyOf the type it gives operand k.
template <typename S, typename Fn>
__device__ __forceinline__ decltype(auto) VisitOperand(int k, DType t, Fn&& fn) {
  if constexpr (kIsCarrier<S>) {
    (void)t;
    return CarrierTypes<S>::Visit(k, fn);
  } else {
    (void)k;
    return VisitDType(t, fn);
  }
}

// Loads element p of operand k, of dtype t, into compute type C through the compute dtype's
// storage type S (as if the input had been converted to the common dtype first).
template <typename S, typename C>
__device__ __forceinline__ C LoadAs(int k, DType t, const char* p) {
  return VisitOperand<S>(k, t, [p](auto tag) {
    using T = typename decltype(tag)::type;
    return static_cast<C>(Convert<S>(*reinterpret_cast<const T*>(p)));
  });
}

// Stores a result as the output (operand 0) of dtype t; half-precision results are rounded
// to S first.
template <typename S, typename R>
__device__ __forceinline__ void StoreAs(DType t, char* p, R r) {
  using V = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
  const V v = Convert<V>(r);
  VisitOperand<S>(0, t, [p, v](auto tag) {
    using T = typename decltype(tag)::type;
    *reinterpret_cast<T*>(p) = Convert<T>(v);
  });
}

// The B bytes (B = 8 or 16) that start `off` bytes into block x and run on into block y,
// the next B bytes of memory (0 <= off < B), by selects and funnel shifts: no branch.
template <int B, typename Block>
__device__ __forceinline__ void ShiftDown(Block x, Block y, int off, uint32_t (&out)[B / 4]) {
  static_assert(B == 8 || B == 16);
  static_assert(sizeof(Block) == B);
  constexpr int M = B / 4;
  uint32_t w[2 * M];
  memcpy(w, &x, B);
  memcpy(w + M, &y, B);
  // Down by off / 4 words (selects, one bit of it at a time), then by the bytes left.
#pragma unroll
  for (int bit = 1; bit < M; bit *= 2) {
    const bool take = ((off / 4) & bit) != 0;
#pragma unroll
    for (int i = 0; i + bit < 2 * M; ++i) w[i] = take ? w[i + bit] : w[i];
  }
  const int sh = (off % 4) * 8;
#pragma unroll
  for (int i = 0; i < M; ++i) out[i] = __funnelshift_r(w[i], w[i + 1], sh);
}

// B consecutive bytes (B = 8 or 16) from p at any alignment, by aligned accesses of B bytes:
// the two aligned blocks the range straddles (the same one twice where p is aligned), put
// together by ShiftDown. Both blocks hold bytes of [p, p + B), so nothing is read from an
// aligned block the range does not touch; no branch, so that a kernel issues every chunk's
// loads before the first use. A warp whose threads take consecutive ranges makes
// whole-sector accesses (element by element, a thread 16 bytes from the next, it made eight
// to sixteen times as many L1 requests as bytes needed).
template <int B>
__device__ __forceinline__ void LoadUnaligned(const char* p, uint32_t (&out)[B / 4]) {
  static_assert(B == 8 || B == 16);
  using Block = std::conditional_t<B == 16, uint4, uint2>;
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  const int off = static_cast<int>(at % B);
  const Block* lo = reinterpret_cast<const Block*>(at - off);
  const Block* hi = lo + (off != 0 ? 1 : 0);
  const Block x = *lo, y = *hi;
  ShiftDown<B>(x, y, off, out);
}

template <typename F, typename C, size_t... I>
__device__ __forceinline__ auto Call(const F& f, const C* v, std::index_sequence<I...>) {
  return f(v[I]...);
}

}  // namespace tc::cuda
