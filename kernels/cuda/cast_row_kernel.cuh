// The row kernel with dynamic casting: any operand dtypes and any step along a row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/cuda/memory_access.cuh"
#include "kernels/cuda/rows.cuh"

namespace tc::cuda {

// An input element of storage type T in S's compute type: Convert<S> then to OpMath<S>, but
// a bool straight to 0 or 1 (where's condition in a float16 where would take an integer
// conversion and two float ones).
template <typename S, typename T>
__device__ __forceinline__ OpMath<S> ToCompute(T v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? OpMath<S>(1) : OpMath<S>(0);
  } else {
    return static_cast<OpMath<S>>(Convert<S>(v));
  }
}

// Rows with any operand dtypes (converted in registers while loading and storing, as
// LoadAs / StoreAs do) and any step along the row, output included. Each thread takes U
// chunks of E consecutive elements of a row per step, every load issued before the first use:
// vector accesses for dense aligned operands, aligned accesses shifted into place for dense
// misaligned ones of 2 and 8 bytes (LoadUnaligned), element by element for strided ones,
// one load for repeated ones.
template <typename S, int N, int E, int U, typename F>
__global__ void __launch_bounds__(256) CastRowKernel(F f, RowArgs<N + 1> a) {
  using C = OpMath<S>;
  using R = decltype(Call(f, static_cast<const C*>(nullptr), std::make_index_sequence<N>{}));
  using Rounded = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
  const int64_t chunks = (a.cols + E - 1) / E;
  const int64_t tile = static_cast<int64_t>(blockDim.x) * U;
  for (int64_t r = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y; r < a.rows;
       r += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    char* row[N + 1];
    RowStarts(a, r, row);
    for (int64_t c0 = blockIdx.x * tile + threadIdx.x; c0 < chunks; c0 += gridDim.x * tile) {
      // Elements of each chunk inside the row: E, fewer in the last, 0 past the end.
      int valid[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t left = a.cols - (c0 + u * static_cast<int64_t>(blockDim.x)) * E;
        valid[u] = left <= 0 ? 0 : left < E ? static_cast<int>(left) : E;
      }
      C x[U][N][E];
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const char* in = row[k + 1];
        const int64_t step = a.step[k + 1];
        const Access access = a.access[k + 1];
        VisitDType(a.dtype[k + 1], [&](auto tag) {
          using T = typename decltype(tag)::type;
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const int64_t c = c0 + u * static_cast<int64_t>(blockDim.x);
            if (access == Access::kVector && valid[u] == E) {
              const Pack<T, E> q = reinterpret_cast<const Pack<T, E>*>(in)[c];
#pragma unroll
              for (int j = 0; j < E; ++j) x[u][k][j] = ToCompute<S>(q.v[j]);
              continue;
            }
            if constexpr (sizeof(T) * E == 16) {
              if (access == Access::kStrided && step == sizeof(T) && valid[u] == E) {
                // Dense but not aligned for packs (an offset view, a row slice): the aligned
                // blocks around the chunk, shifted into place (H200: mul_f16_offset1 57% of
                // copy element by element, 61% so; 8-byte chunks of 1-byte types were slower
                // so, add_i8_offset3 40% -> 35%, and stay element by element).
                uint32_t w[sizeof(T) * E / 4];
                LoadUnaligned<sizeof(T) * E>(in + c * E * step, w);
                Pack<T, E> q;
                memcpy(&q, w, sizeof(q));
#pragma unroll
                for (int j = 0; j < E; ++j) x[u][k][j] = ToCompute<S>(q.v[j]);
                continue;
              }
            }
            if (access == Access::kBroadcast) {
              const C one = ToCompute<S>(*reinterpret_cast<const T*>(in));
#pragma unroll
              for (int j = 0; j < E; ++j) x[u][k][j] = one;
            } else {
#pragma unroll
              for (int j = 0; j < E; ++j) {
                x[u][k][j] =
                    j < valid[u]
                        ? ToCompute<S>(*reinterpret_cast<const T*>(in + (c * E + j) * step))
                        : C{};
              }
            }
          }
        });
      }
      Rounded y[U][E];
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int j = 0; j < E; ++j) {
          C v[N];
#pragma unroll
          for (int k = 0; k < N; ++k) v[k] = x[u][k][j];
          // Elements past the row's end are not computed (a zero divisor there must not
          // raise the division error).
          y[u][j] = j < valid[u] ? Convert<Rounded>(Call(f, v, std::make_index_sequence<N>{}))
                                 : Rounded{};
        }
      }
      VisitDType(a.dtype[0], [&](auto tag) {
        using T = typename decltype(tag)::type;
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t c = c0 + u * static_cast<int64_t>(blockDim.x);
          if (a.access[0] == Access::kVector && valid[u] == E) {
            Pack<T, E> q;
#pragma unroll
            for (int j = 0; j < E; ++j) q.v[j] = Convert<T>(y[u][j]);
            reinterpret_cast<Pack<T, E>*>(row[0])[c] = q;
          } else {
#pragma unroll
            for (int j = 0; j < E; ++j) {
              if (j < valid[u]) {
                *reinterpret_cast<T*>(row[0] + (c * E + j) * a.step[0]) = Convert<T>(y[u][j]);
              }
            }
          }
        }
      });
    }
  }
}

// Rows with any operand dtypes, spread: like CastRowKernel, but element i of a block's
// step (i < U * E) goes to thread i % blockDim.x, every operand element by element, so that
// a warp's accesses to a dense operand are consecutive elements whatever its alignment. The
// launch takes it where the output's rows are not aligned for vector stores: CastRowKernel
// then stores element by element 32 bytes apart across a warp (a float32 row slice ran at
// 36% of copy bandwidth). kSame: every input of type S and the output of the functor's
// result type, read and written as such (no dtype visited: a small kernel to compile).
template <typename S, int N, int E, int U, bool kSame, typename F>
__global__ void __launch_bounds__(256) SpreadRowKernel(F f, RowArgs<N + 1> a) {
  using C = OpMath<S>;
  using R = decltype(Call(f, static_cast<const C*>(nullptr), std::make_index_sequence<N>{}));
  using Rounded = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
  constexpr int kSlots = U * E;
  const int64_t width = blockDim.x;
  const int64_t per_step = width * kSlots;
  for (int64_t r = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y; r < a.rows;
       r += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    char* row[N + 1];
    RowStarts(a, r, row);
    for (int64_t first = blockIdx.x * per_step; first < a.cols; first += gridDim.x * per_step) {
      const int64_t e0 = first + threadIdx.x;
      // Slots inside the row: all, or the first `valid` (the row ends in this step).
      const int64_t left = a.cols - e0;
      const int valid = left <= 0 ? 0
                        : left > (kSlots - 1) * width
                            ? kSlots
                            : static_cast<int>((left + width - 1) / width);
      C x[N][kSlots];
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const char* in = row[k + 1];
        const int64_t step = a.step[k + 1];
        const bool repeated = a.access[k + 1] == Access::kBroadcast;
        const auto load = [&](auto tag) {
          using T = typename decltype(tag)::type;
          if (repeated) {
            const C one = ToCompute<S>(*reinterpret_cast<const T*>(in));
#pragma unroll
            for (int i = 0; i < kSlots; ++i) x[k][i] = one;
          } else {
            const char* at = in + e0 * step;
            const int64_t next = width * step;
#pragma unroll
            for (int i = 0; i < kSlots; ++i) {
              x[k][i] = i < valid ? ToCompute<S>(*reinterpret_cast<const T*>(at + i * next)) : C{};
            }
          }
        };
        if constexpr (kSame) {
          load(TypeTag<S>{});
        } else {
          VisitDType(a.dtype[k + 1], load);
        }
      }
      Rounded y[kSlots];
#pragma unroll
      for (int i = 0; i < kSlots; ++i) {
        C v[N];
#pragma unroll
        for (int k = 0; k < N; ++k) v[k] = x[k][i];
        // Slots past the row's end are not computed (a zero divisor there must not raise the
        // division error).
        y[i] = i < valid ? Convert<Rounded>(Call(f, v, std::make_index_sequence<N>{})) : Rounded{};
      }
      const auto store = [&](auto tag) {
        using T = typename decltype(tag)::type;
        char* at = row[0] + e0 * a.step[0];
        const int64_t next = width * a.step[0];
#pragma unroll
        for (int i = 0; i < kSlots; ++i) {
          if (i < valid) *reinterpret_cast<T*>(at + i * next) = Convert<T>(y[i]);
        }
      };
      if constexpr (kSame) {
        store(TypeTag<Rounded>{});
      } else {
        VisitDType(a.dtype[0], store);
      }
    }
  }
}

// E consecutive elements of T from p at any alignment (sizeof(T) * E a multiple of 16), in
// aligned 16-byte accesses shifted into place (LoadUnaligned).
template <typename T, int E>
__device__ __forceinline__ Pack<T, E> LoadShiftedPack(const char* p) {
  static_assert(sizeof(T) * E % 16 == 0);
  uint32_t w[sizeof(T) * E / 4];
#pragma unroll
  for (int i = 0; i < sizeof(T) * E / 16; ++i) {
    uint32_t q[4];
    LoadUnaligned<16>(p + 16 * i, q);
#pragma unroll
    for (int j = 0; j < 4; ++j) w[4 * i + j] = q[j];
  }
  Pack<T, E> v;
  memcpy(&v, w, sizeof(v));
  return v;
}

// Rows of a float32 op over inputs of dtypes TA and TB (one of them float16 or bfloat16, the
// other float32; add, sub, mul and div, kConvertingTiles), both dense along the row, into a
// float32 output dense along the row whose rows start anywhere (a row slice of bfloat16
// activations times float32 weights into a contiguous output of odd cols). Typed for the
// pair: SpreadRowKernel, which converts by run-time dtype an element a thread, ran that
// product at 76% of copy, CastRowKernel with the same peeling 84%, this kernel 100% (H200,
// [8192, 8189]). Each row is taken from the output's first 16-byte boundary on, as
// PeeledRowKernel does (the elements outside the chunks one a thread, so blocks at least a
// warp wide), in chunks of E elements, U a thread; an input's chunks are loaded as packs
// where the row puts them on their boundary, shifted into place where not.
template <typename TA, typename TB, int E, int U, typename F>
__global__ void __launch_bounds__(256) PeeledPairRowKernel(F f, RowArgs<3> a) {
  const int64_t tile = static_cast<int64_t>(blockDim.x) * U;
  const int64_t t0 = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (int64_t r = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y; r < a.rows;
       r += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    char* row[3];
    RowStarts(a, r, row);
    const PeeledRow peel = PeelRow<float>(row[0], a.cols, E);
    const int64_t chunks = peel.runs;
    row[0] += peel.head * int64_t{sizeof(float)};
    row[1] += peel.head * int64_t{sizeof(TA)};
    row[2] += peel.head * int64_t{sizeof(TB)};
    const bool extra = t0 < a.cols - peel.body;
    const int64_t e = peel.Extra(t0);
    float ea = 0, eb = 0;
    if (extra) {
      ea = ToCompute<float>(*reinterpret_cast<const TA*>(row[1] + e * int64_t{sizeof(TA)}));
      eb = ToCompute<float>(*reinterpret_cast<const TB*>(row[2] + e * int64_t{sizeof(TB)}));
    }
    const bool a_packs = reinterpret_cast<uintptr_t>(row[1]) % alignof(Pack<TA, E>) == 0;
    const bool b_packs = reinterpret_cast<uintptr_t>(row[2]) % alignof(Pack<TB, E>) == 0;
    for (int64_t b0 = blockIdx.x * tile; b0 < chunks; b0 += gridDim.x * tile) {
      const int64_t c0 = b0 + threadIdx.x;
      const bool full = b0 + tile <= chunks;
      Pack<TA, E> x[U];
      Pack<TB, E> y[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = c0 + u * static_cast<int64_t>(blockDim.x);
        if (!full && c >= chunks) continue;
        x[u] = a_packs ? reinterpret_cast<const Pack<TA, E>*>(row[1])[c]
                       : LoadShiftedPack<TA, E>(row[1] + c * int64_t{sizeof(TA) * E});
        y[u] = b_packs ? reinterpret_cast<const Pack<TB, E>*>(row[2])[c]
                       : LoadShiftedPack<TB, E>(row[2] + c * int64_t{sizeof(TB) * E});
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = c0 + u * static_cast<int64_t>(blockDim.x);
        if (!full && c >= chunks) break;
        Pack<float, E> z;
#pragma unroll
        for (int j = 0; j < E; ++j) {
          z.v[j] = f(ToCompute<float>(x[u].v[j]), ToCompute<float>(y[u].v[j]));
        }
        reinterpret_cast<Pack<float, E>*>(row[0])[c] = z;
      }
    }
    if (extra) *reinterpret_cast<float*>(row[0] + e * int64_t{sizeof(float)}) = f(ea, eb);
  }
}

}  // namespace tc::cuda
