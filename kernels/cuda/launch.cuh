// CUDA kernels for any op of the catalog, and the launcher that picks one. Instantiated per op
// group in ops_*.cu so that the groups compile in parallel.
//
// Two kernels per op and compute type:
// - dense: every operand contiguous and of the op's own storage type; typed loads and stores;
// - general: any strides (0 and negative included) and any operand dtypes, converted while
//   loading and storing (dynamic casting), offsets from the linear index per dimension.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/launch_env.h"
#include "kernels/engine.h"
#include "kernels/ops/op_list.h"

namespace tc::cuda {

// Everything a kernel needs, passed by value as a kernel parameter.
template <int kOps>
struct KernelArgs {
  int ndim;
  int64_t numel;
  int64_t sizes[kMaxRank];
  int64_t strides[kOps][kMaxRank];
  char* base[kOps];
  DType dtypes[kOps];
};


// Loads element p of dtype t into compute type C through the compute dtype's storage type S
// (as if the input had been converted to the common dtype first).
template <typename S, typename C>
__device__ __forceinline__ C LoadAs(DType t, const char* p) {
  switch (t) {
    case DType::kBool: return static_cast<C>(Convert<S>(*reinterpret_cast<const bool*>(p)));
    case DType::kUInt8: return static_cast<C>(Convert<S>(*reinterpret_cast<const uint8_t*>(p)));
    case DType::kInt8: return static_cast<C>(Convert<S>(*reinterpret_cast<const int8_t*>(p)));
    case DType::kInt16: return static_cast<C>(Convert<S>(*reinterpret_cast<const int16_t*>(p)));
    case DType::kInt32: return static_cast<C>(Convert<S>(*reinterpret_cast<const int32_t*>(p)));
    case DType::kInt64: return static_cast<C>(Convert<S>(*reinterpret_cast<const int64_t*>(p)));
    case DType::kFloat16: return static_cast<C>(Convert<S>(*reinterpret_cast<const Half*>(p)));
    case DType::kBFloat16: return static_cast<C>(Convert<S>(*reinterpret_cast<const BFloat16*>(p)));
    case DType::kFloat32: return static_cast<C>(Convert<S>(*reinterpret_cast<const float*>(p)));
    case DType::kFloat64: break;
  }
  return static_cast<C>(Convert<S>(*reinterpret_cast<const double*>(p)));
}

// Stores a result as dtype t; half-precision results are rounded to S first.
template <typename S, typename R>
__device__ __forceinline__ void StoreAs(DType t, char* p, R r) {
  using V = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
  const V v = Convert<V>(r);
  switch (t) {
    case DType::kBool: *reinterpret_cast<bool*>(p) = Convert<bool>(v); return;
    case DType::kUInt8: *reinterpret_cast<uint8_t*>(p) = Convert<uint8_t>(v); return;
    case DType::kInt8: *reinterpret_cast<int8_t*>(p) = Convert<int8_t>(v); return;
    case DType::kInt16: *reinterpret_cast<int16_t*>(p) = Convert<int16_t>(v); return;
    case DType::kInt32: *reinterpret_cast<int32_t*>(p) = Convert<int32_t>(v); return;
    case DType::kInt64: *reinterpret_cast<int64_t*>(p) = Convert<int64_t>(v); return;
    case DType::kFloat16: *reinterpret_cast<Half*>(p) = Convert<Half>(v); return;
    case DType::kBFloat16: *reinterpret_cast<BFloat16*>(p) = Convert<BFloat16>(v); return;
    case DType::kFloat32: *reinterpret_cast<float*>(p) = Convert<float>(v); return;
    case DType::kFloat64: *reinterpret_cast<double*>(p) = Convert<double>(v); return;
  }
}

template <typename F, typename C, size_t... I>
__device__ __forceinline__ auto Call(const F& f, const C* v, std::index_sequence<I...>) {
  return f(v[I]...);
}

template <typename S, int N, typename F>
__global__ void DenseKernel(F f, KernelArgs<N + 1> a) {
  using C = OpMath<S>;
  using R = decltype(Call(f, static_cast<const C*>(nullptr), std::make_index_sequence<N>{}));
  using Out = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < a.numel; i += step) {
    C v[N];
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = static_cast<C>(reinterpret_cast<const S*>(a.base[k + 1])[i]);
    reinterpret_cast<Out*>(a.base[0])[i] = Convert<Out>(Call(f, v, std::make_index_sequence<N>{}));
  }
}

template <typename S, int N, typename F>
__global__ void GeneralKernel(F f, KernelArgs<N + 1> a) {
  using C = OpMath<S>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < a.numel; i += step) {
    int64_t off[N + 1] = {};
    int64_t rest = i;
    for (int d = 0; d < a.ndim; ++d) {
      const int64_t q = rest / a.sizes[d];
      const int64_t idx = rest - q * a.sizes[d];
      rest = q;
#pragma unroll
      for (int k = 0; k <= N; ++k) off[k] += idx * a.strides[k][d];
    }
    C v[N];
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = LoadAs<S, C>(a.dtypes[k + 1], a.base[k + 1] + off[k + 1]);
    StoreAs<S>(a.dtypes[0], a.base[0] + off[0], Call(f, v, std::make_index_sequence<N>{}));
  }
}

inline constexpr int kThreads = 256;

template <typename F, typename C, size_t... I>
auto ResultOf(std::index_sequence<I...>)
    -> decltype(std::declval<const F&>()((static_cast<void>(I), std::declval<C>())...));

template <typename S, int N, typename F>
absl::Status LaunchTyped(const F& f, const Plan& plan, char* const* base, const LaunchEnv& env) {
  using C = OpMath<S>;
  using R = decltype(ResultOf<F, C>(std::make_index_sequence<N>{}));
  KernelArgs<N + 1> a{};
  a.ndim = plan.ndim;
  a.numel = plan.numel;
  for (int d = 0; d < plan.ndim; ++d) {
    a.sizes[d] = plan.sizes[d];
    for (int k = 0; k <= N; ++k) a.strides[k][d] = plan.strides[k][d];
  }
  for (int k = 0; k <= N; ++k) {
    a.base[k] = base[k];
    a.dtypes[k] = plan.dtypes[k];
  }
  const int64_t blocks_needed = (plan.numel + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(std::min<int64_t>(blocks_needed, int64_t{env.multiprocessors} * 16));
  constexpr DType kS = DTypeOf<S>();
  constexpr DType kOut = std::is_same_v<R, bool> ? DType::kBool : kS;
  bool dense = plan.path == Path::kContiguous && plan.dtypes[0] == kOut;
  for (int k = 1; k <= N; ++k) dense &= plan.dtypes[k] == kS;
  if (dense) {
    DenseKernel<S, N><<<blocks, kThreads, 0, env.stream>>>(f, a);
  } else {
    GeneralKernel<S, N><<<blocks, kThreads, 0, env.stream>>>(f, a);
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("CUDA kernel launch failed: ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

template <typename F>
absl::Status Launch(const PreparedOp& op, char* const* base, const LaunchEnv& env) {
  F f = F::Make(MakeArgs{op.attrs, op.result_type});
  if constexpr (kHasErrorFlag<F>) f.error = env.error;
  return VisitDType(op.plan.compute_dtype, [&](auto tag) -> absl::Status {
    using S = typename decltype(tag)::type;
    if constexpr ((F::kComputeTypes & DTypeBit(DTypeOf<S>())) != 0) {
      return LaunchTyped<S, F::kArity>(f, op.plan, base, env);
    } else {
      return absl::InternalError(absl::StrCat("op '", op.op->spec.name, "' has no CUDA kernel for ",
                                              DTypeName(op.plan.compute_dtype)));
    }
  });
}

}  // namespace tc::cuda

#define TC_CUDA_INSTANTIATE(F) \
  template absl::Status tc::cuda::Launch<tc::F>(const PreparedOp&, char* const*, const LaunchEnv&);
