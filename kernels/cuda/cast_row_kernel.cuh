// The row kernel with dynamic casting: any operand dtypes and any step along a row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/cuda/memory_access.cuh"
#include "kernels/cuda/rows.cuh"

namespace tc::cuda {

// Rows with any operand dtypes (converted in registers while loading and storing, as
// LoadAs / StoreAs do) and any step along the row, output included. Each thread takes a
// chunk of E consecutive elements of a row: vector accesses for dense aligned operands,
// element by element for strided ones, one load for repeated ones.
template <typename S, int N, int E, typename F>
__global__ void __launch_bounds__(256) CastRowKernel(F f, RowArgs<N + 1> a) {
  using C = OpMath<S>;
  using R = decltype(Call(f, static_cast<const C*>(nullptr), std::make_index_sequence<N>{}));
  using Rounded = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
  const int64_t chunks = (a.cols + E - 1) / E;
  for (int64_t r = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y; r < a.rows;
       r += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    char* row[N + 1];
    RowStarts(a, r, row);
    for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < chunks;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t e0 = c * E;
      const int valid = a.cols - e0 < E ? static_cast<int>(a.cols - e0) : E;
      C x[N][E];
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const char* in = row[k + 1];
        const int64_t step = a.step[k + 1];
        const Access access = a.access[k + 1];
        VisitDType(a.dtype[k + 1], [&](auto tag) {
          using T = typename decltype(tag)::type;
          if (access == Access::kVector && valid == E) {
            const Pack<T, E> q = reinterpret_cast<const Pack<T, E>*>(in)[c];
#pragma unroll
            for (int j = 0; j < E; ++j) x[k][j] = static_cast<C>(Convert<S>(q.v[j]));
          } else if (access == Access::kBroadcast) {
            const C one = static_cast<C>(Convert<S>(*reinterpret_cast<const T*>(in)));
#pragma unroll
            for (int j = 0; j < E; ++j) x[k][j] = one;
          } else {
#pragma unroll
            for (int j = 0; j < E; ++j) {
              x[k][j] = j < valid ? static_cast<C>(Convert<S>(
                                        *reinterpret_cast<const T*>(in + (e0 + j) * step)))
                                  : C{};
            }
          }
        });
      }
      Rounded y[E];
#pragma unroll
      for (int j = 0; j < E; ++j) {
        C v[N];
#pragma unroll
        for (int k = 0; k < N; ++k) v[k] = x[k][j];
        // Elements past the row's end are not computed (a zero divisor there must not
        // raise the division error).
        y[j] = j < valid ? Convert<Rounded>(Call(f, v, std::make_index_sequence<N>{})) : Rounded{};
      }
      VisitDType(a.dtype[0], [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (a.access[0] == Access::kVector && valid == E) {
          Pack<T, E> q;
#pragma unroll
          for (int j = 0; j < E; ++j) q.v[j] = Convert<T>(y[j]);
          reinterpret_cast<Pack<T, E>*>(row[0])[c] = q;
        } else {
#pragma unroll
          for (int j = 0; j < E; ++j) {
            if (j < valid) *reinterpret_cast<T*>(row[0] + (e0 + j) * a.step[0]) = Convert<T>(y[j]);
          }
        }
      });
    }
  }
}

}  // namespace tc::cuda
