// The general kernel: any rank, strides and dtypes, 32-bit index math by fast division. The
// ahead-of-time ops launch GeneralKernel; a fused expression's kernel (NVRTC) runs
// GeneralSteps with its tree as the functor and its operands' types (AnyOf) as S.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/cuda/memory_access.cuh"
#include "kernels/dtype.h"
#include "kernels/gpu/fast_divisor.h"
#include "kernels/gpu/general_args.h"
#include "kernels/max_rank.h"

namespace tc::cuda {

// Every operand's byte offset of element i. The dims are walked in a loop of kMaxRank fixed
// steps, so that the arguments are indexed by constants (read where the kernel's parameters
// are; a loop bounded by ndim indexed them at run time). Each term idx * stride is bounded by
// the operand's reach, which fits in 31 bits.
template <int kOps>
__device__ __forceinline__ void GeneralOffsets(const KernelArgs<kOps>& a, uint32_t i,
                                               int32_t (&off)[kOps]) {
#pragma unroll
  for (int k = 0; k < kOps; ++k) off[k] = 0;
  uint32_t rest = i;
#pragma unroll
  for (int d = 0; d < kMaxRank; ++d) {
    if (d == a.ndim) break;
    int32_t idx;
    if (d == a.ndim - 1) {
      idx = static_cast<int32_t>(rest);
    } else {
      const uint32_t q = FastDiv(rest, a.div[d]);
      idx = static_cast<int32_t>(rest - q * a.div[d].d);
      rest = q;
    }
#pragma unroll
    for (int k = 0; k < kOps; ++k) off[k] += idx * a.strides[k][d];
  }
}

// Each thread takes kU elements a step (kGeneralUnroll for the ops), blockDim.x apart (a warp's
// accesses to an operand dense along dim 0 stay consecutive), every load issued before the first
// use. kSame: every dtype is the functor's (KernelArgs::same_types).
template <typename S, int N, bool kSame, typename F, int kU = kGeneralUnroll>
__device__ __forceinline__ void GeneralSteps(const F& f, const KernelArgs<N + 1>& a) {
  static_assert(!kSame || !kIsCarrier<S>, "an AnyOf's operands are converted as they are typed");
  using C = OpMath<S>;
  using R = decltype(Call(f, static_cast<const C*>(nullptr), std::make_index_sequence<N>{}));
  using Out = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
  const uint32_t width = blockDim.x;
  // numel < 2^31 and the grid is far smaller, so neither first + step nor an element index
  // of a step wraps.
  const uint32_t step = gridDim.x * width * kU;
  for (uint32_t first = blockIdx.x * width * kU + threadIdx.x; first < a.numel; first += step) {
    int32_t off[kU][N + 1];
    C v[kU][N];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const uint32_t i = first + u * width;
      if (i >= a.numel) break;
      GeneralOffsets(a, i, off[u]);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const char* p = a.base[k + 1] + off[u][k + 1];
        if constexpr (kSame) {
          v[u][k] = static_cast<C>(*reinterpret_cast<const S*>(p));
        } else {
          v[u][k] = LoadAs<S, C>(k + 1, a.dtypes[k + 1], p);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (first + u * width >= a.numel) break;
      char* p = a.base[0] + off[u][0];
      if constexpr (kSame) {
        *reinterpret_cast<Out*>(p) = Convert<Out>(Call(f, v[u], std::make_index_sequence<N>{}));
      } else {
        StoreAs<S>(a.dtypes[0], p, Call(f, v[u], std::make_index_sequence<N>{}));
      }
    }
  }
}

template <typename S, int N, typename F>
__global__ void __launch_bounds__(kGeneralThreads) GeneralKernel(F f, KernelArgs<N + 1> a) {
  if (a.same_types) {
    GeneralSteps<S, N, true>(f, a);
  } else {
    GeneralSteps<S, N, false>(f, a);
  }
}

}  // namespace tc::cuda
