// The tile kernel: transposed operands read and written coalesced through shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/cuda/memory_access.cuh"
#include "kernels/tensor_view.h"

namespace tc::cuda {

// Two dims (and any number of batch dims) where some inputs are dense along dim 1 while the
// output is dense along dim 0 (a transposed input, or a transposed output with dense inputs,
// or channels-first against channels-last, or any permutation whose fastest input dim is not
// the output's). A block takes a T x T tile: the inputs dense along dim 1 ("staged", at most
// two) are read along dim 1 into shared memory, then every thread walks the tile along dim 0,
// reading the staged inputs across the shared tile and the others from memory, so that every
// global access of a warp is coalesced.
inline constexpr int kMaxTileBatchDims = kMaxRank - 2;

template <int kOps>
struct TileArgs {
  int64_t size[2];
  char* base[kOps];
  int64_t stride[kOps][2];
  int32_t stride32[kOps][2];  // stride[k][0..1], which a tile's offsets keep within 32 bits
  int8_t staged[kOps];  // index into the shared tiles, -1 for an input read in place
  // The batch dims (plan dims 2 and up), fastest first, and the number of batches in all.
  int batch_dims;
  int64_t batches;
  int64_t batch_size[kMaxTileBatchDims];
  int64_t batch_stride[kOps][kMaxTileBatchDims];
};

template <typename S, int N, int T, typename F>
__global__ void __launch_bounds__(256, 4) TileKernel(F f, TileArgs<N + 1> a) {
  using C = OpMath<S>;
  using R = decltype(Call(f, static_cast<const C*>(nullptr), std::make_index_sequence<N>{}));
  using Out = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
  // The block's 256 threads cover kBand lines of the tile at a time, kPasses times.
  constexpr int kBand = 256 / T;
  constexpr int kPasses = T / kBand;
  // One T x (T + 1) tile per staged input (the extra column keeps a warp reading down a
  // column on distinct banks).
  extern __shared__ __align__(16) unsigned char shared[];
  auto* tiles = reinterpret_cast<S(*)[T][T + 1]>(shared);
  const int lane = threadIdx.x % T, band = threadIdx.x / T;
  for (int64_t b = blockIdx.z; b < a.batches; b += gridDim.z) {
    // The batch's offset in each operand (once per batch, not per element).
    int64_t batch_offset[N + 1] = {};
    int64_t rest = b;
    for (int d = 0; d < a.batch_dims; ++d) {
      const int64_t i = rest % a.batch_size[d];
      rest /= a.batch_size[d];
#pragma unroll
      for (int k = 0; k <= N; ++k) batch_offset[k] += i * a.batch_stride[k][d];
    }
    for (int64_t t1 = blockIdx.y * int64_t{T}; t1 < a.size[1]; t1 += int64_t{gridDim.y} * T) {
      const int64_t t0 = blockIdx.x * int64_t{T};
      const int n0 = a.size[0] - t0 < T ? static_cast<int>(a.size[0] - t0) : T;
      const int n1 = a.size[1] - t1 < T ? static_cast<int>(a.size[1] - t1) : T;
      const bool full = n0 == T && n1 == T;
      char* at[N + 1];
#pragma unroll
      for (int k = 0; k <= N; ++k) {
        at[k] = a.base[k] + t0 * a.stride[k][0] + t1 * a.stride[k][1] + batch_offset[k];
      }
      // Staged inputs: each thread reads down dim 0 at i1 = lane, so that a warp reads
      // along dim 1, where they are dense. Offsets within a tile fit 32 bits (checked at
      // launch).
#pragma unroll
      for (int k = 1; k <= N; ++k) {
        if (a.staged[k] < 0) continue;
        S(*sh)[T + 1] = tiles[a.staged[k]];
        const char* p = at[k] + lane * a.stride32[k][1] + band * a.stride32[k][0];
        const int32_t step = kBand * a.stride32[k][0];
#pragma unroll
        for (int g = 0; g < kPasses; g += 4) {
          S q[4] = {};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            if (full || (lane < n1 && band + (g + i) * kBand < n0)) {
              q[i] = *reinterpret_cast<const S*>(p + (g + i) * step);
            }
          }
#pragma unroll
          for (int i = 0; i < 4; ++i) sh[band + (g + i) * kBand][lane] = q[i];
        }
      }
      __syncthreads();
      // Every thread now walks dim 1 at i0 = lane: a warp reads and writes along dim 0. All
      // of a thread's lines are loaded before the first is computed (a loop over halves of
      // them was slower: 92% of copy bandwidth against 94.5% on a transposed-output add).
      C x[N][kPasses];
#pragma unroll
      for (int k = 1; k <= N; ++k) {
        const char* p = at[k] + lane * a.stride32[k][0] + band * a.stride32[k][1];
        const int32_t step = kBand * a.stride32[k][1];
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
          const int i1 = band + i * kBand;
          if (a.staged[k] >= 0) {
            x[k - 1][i] = static_cast<C>(tiles[a.staged[k]][lane][i1]);
          } else if (full || (lane < n0 && i1 < n1)) {
            x[k - 1][i] = static_cast<C>(*reinterpret_cast<const S*>(p + i * step));
          } else {
            x[k - 1][i] = C{};
          }
        }
      }
      char* out = at[0] + lane * a.stride32[0][0] + band * a.stride32[0][1];
      const int32_t out_step = kBand * a.stride32[0][1];
#pragma unroll
      for (int i = 0; i < kPasses; ++i) {
        if (full || (lane < n0 && band + i * kBand < n1)) {
          C v[N];
#pragma unroll
          for (int k = 0; k < N; ++k) v[k] = x[k][i];
          *reinterpret_cast<Out*>(out + i * out_step) =
              Convert<Out>(Call(f, v, std::make_index_sequence<N>{}));
        }
      }
      __syncthreads();
    }
  }
}

}  // namespace tc::cuda
