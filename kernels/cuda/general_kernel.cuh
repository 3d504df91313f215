// The general kernel: any rank, strides and dtypes, 32-bit index math by fast division.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "kernels/cuda/fast_divisor.h"
#include "kernels/cuda/memory_access.cuh"
#include "kernels/dtype.h"
#include "kernels/tensor_view.h"

namespace tc::cuda {

// The general kernel's piece of a plan: fewer than 2^31 elements, and every operand's offsets
// from its base within 32 bits (SplitForIndexing), so that all index math is 32-bit.
template <int kOps>
struct KernelArgs {
  int ndim;
  uint32_t numel;
  int32_t strides[kOps][kMaxRank];
  char* base[kOps];
  DType dtypes[kOps];
  // Per-dim indices from the element index by fast division (every dim but the last).
  FastDivisor div[kMaxRank];
};

template <typename S, int N, typename F>
__global__ void GeneralKernel(F f, KernelArgs<N + 1> a) {
  using C = OpMath<S>;
  // i < 2^31 and the grid is far smaller, so i + step never wraps.
  const uint32_t step = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < a.numel; i += step) {
    // Each term idx * stride is bounded by the operand's reach, which fits in 31 bits.
    int32_t off[N + 1] = {};
    uint32_t rest = i;
    for (int d = 0; d < a.ndim - 1; ++d) {
      const uint32_t q = FastDiv(rest, a.div[d]);
      const int32_t idx = static_cast<int32_t>(rest - q * a.div[d].d);
      rest = q;
#pragma unroll
      for (int k = 0; k <= N; ++k) off[k] += idx * a.strides[k][d];
    }
#pragma unroll
    for (int k = 0; k <= N; ++k) off[k] += static_cast<int32_t>(rest) * a.strides[k][a.ndim - 1];
    C v[N];
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = LoadAs<S, C>(a.dtypes[k + 1], a.base[k + 1] + off[k + 1]);
    StoreAs<S>(a.dtypes[0], a.base[0] + off[0], Call(f, v, std::make_index_sequence<N>{}));
  }
}

}  // namespace tc::cuda
