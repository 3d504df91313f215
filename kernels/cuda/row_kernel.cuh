// The same-dtype row kernel: 16-byte packs, several per thread, all loads in flight before
// the first use.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/cuda/memory_access.cuh"
#include "kernels/cuda/rows.cuh"
#include "kernels/dtype.h"
#include "kernels/ops/op_spec.h"
#include "kernels/scalar_types.h"

namespace tc::cuda {

// Which rows a RowKernel takes beyond aligned ones; each a variant of its own, so that aligned
// launches keep their registers. Rows whose output is misaligned: PeeledRowKernel.
enum RowMode : int {
  kAlignedRows,
  // Inputs may also be dense but misaligned (Access::kStrided with a step of one element),
  // their packs loaded from the aligned 16-byte blocks around them and shifted into place
  // (LoadUnaligned).
  kShiftedInputs,
  // Aligned rows over more than two dims (broadcasts whose dims alternate between the
  // operands), their starts by division per dim (DeepRowArgs). Binary ops.
  kDeepRows,
};

// What a row kernel over same-dtype operands holds a pack of each operand in, and how it
// computes and stores one output pack.
template <typename S, int N, int V, typename F>
struct RowPacks {
  using C = OpMath<S>;
  using R = decltype(Call(std::declval<const F&>(), static_cast<const C*>(nullptr),
                          std::make_index_sequence<N>{}));
  using Out = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
  // Word ops take their operands as raw 16-byte words: a pack of bytes would be taken apart
  // and put together again byte by byte.
  using Word = Wordwise<F>;
  static constexpr bool kWords =
      N <= 2 && (Word::kTypes & DTypeBit(DTypeOf<S>())) != 0 && sizeof(Out) == sizeof(S);
  // Packs of 1- and 2-byte types are held as raw words, a broadcast operand's as its value
  // repeated: choosing it or a loaded pack (the operand's access is known only at run time) is
  // then a select per word, not one per element (8 per float16 pack, 16 per byte pack; H200:
  // bfloat16 div 45 -> 37 registers). Wider types' elements are words already.
  using Unit = std::conditional_t<
      kWords || (sizeof(S) <= 2 && sizeof(Pack<S, V>) == 16), uint4,
      std::conditional_t<sizeof(S) <= 2 && sizeof(Pack<S, V>) == 8, uint2, Pack<S, V>>>;
  static_assert(sizeof(Unit) == sizeof(Pack<S, V>));

  // A repeated operand's element as a unit.
  static __device__ __forceinline__ Unit Repeated(const char* p) {
    const S one = *reinterpret_cast<const S*>(p);
    Pack<S, V> ones;
#pragma unroll
    for (int j = 0; j < V; ++j) ones.v[j] = one;
    Unit u;
    memcpy(&u, &ones, sizeof(Unit));
    return u;
  }

  // Output pack p of `out` from the operands' units x.
  static __device__ __forceinline__ void Store(const F& f, const Unit (&x)[N], char* out,
                                               int64_t p) {
    if constexpr (kWords && N == 1) {
      const uint4 a = x[0];
      reinterpret_cast<uint4*>(out)[p] =
          make_uint4(Word::template Word<S>(f, a.x), Word::template Word<S>(f, a.y),
                     Word::template Word<S>(f, a.z), Word::template Word<S>(f, a.w));
    } else if constexpr (kWords) {
      const uint4 a = x[0], b = x[1];
      reinterpret_cast<uint4*>(out)[p] =
          make_uint4(Word::template Word<S>(f, a.x, b.x), Word::template Word<S>(f, a.y, b.y),
                     Word::template Word<S>(f, a.z, b.z), Word::template Word<S>(f, a.w, b.w));
    } else {
      // Taken out of the units first: computing straight from them held 38 registers instead
      // of 32 for a float16 multiply (six blocks per SM instead of eight, 1.3% slower).
      Pack<S, V> in[N];
#pragma unroll
      for (int k = 0; k < N; ++k) memcpy(&in[k], &x[k], sizeof(in[k]));
      Pack<Out, V> y;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        C v[N];
#pragma unroll
        for (int k = 0; k < N; ++k) v[k] = static_cast<C>(in[k].v[j]);
        y.v[j] = Convert<Out>(Call(f, v, std::make_index_sequence<N>{}));
      }
      reinterpret_cast<Pack<Out, V>*>(out)[p] = y;
    }
  }
};

// Same-dtype rows: every input of storage type S, each dense along the row (kVector) or
// repeated (kBroadcast), the output of its own type dense along the row; every row start
// aligned for V-element packs, cols a multiple of V (but see RowMode). Each thread moves U
// packs per operand per step, all loads issued before the first use; only the last step of a
// row checks bounds.
template <int kOps, int kMode>
using RowKernelArgs = std::conditional_t<kMode == kDeepRows, DeepRowArgs<kOps>, RowArgs<kOps>>;

template <typename S, int N, int V, int U, typename F, int kMode = kAlignedRows>
__global__ void __launch_bounds__(256) RowKernel(F f, RowKernelArgs<N + 1, kMode> a) {
  using P = RowPacks<S, N, V, F>;
  using Unit = typename P::Unit;
  const int64_t packs = a.cols / V;
  const int64_t tile = static_cast<int64_t>(blockDim.x) * U;
  // Short rows: a block spans several rows (blockDim.y of them).
  for (int64_t r = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y; r < a.rows;
       r += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    char* row[N + 1];
    RowStarts(a, r, row);
    for (int64_t p0 = blockIdx.x * tile + threadIdx.x; p0 < packs; p0 += gridDim.x * tile) {
      const bool full = p0 + (U - 1) * static_cast<int64_t>(blockDim.x) < packs;
      Unit q[U][N];
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if (a.access[k + 1] == Access::kVector) {
          const auto* in = reinterpret_cast<const Unit*>(row[k + 1]);
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
            if (full || p < packs) q[u][k] = in[p];
          }
        } else if (kMode == kShiftedInputs && a.access[k + 1] != Access::kBroadcast) {
          if constexpr (kMode == kShiftedInputs) {
            static_assert(sizeof(Unit) == 16);
#pragma unroll
            for (int u = 0; u < U; ++u) {
              const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
              if (full || p < packs) {
                uint32_t w[4];
                LoadUnaligned<16>(row[k + 1] + p * 16, w);
                memcpy(&q[u][k], w, sizeof(w));
              }
            }
          }
        } else {
          const Unit one = P::Repeated(row[k + 1]);
#pragma unroll
          for (int u = 0; u < U; ++u) q[u][k] = one;
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
        if (!full && p >= packs) break;
        P::Store(f, q[u], row[0], p);
      }
    }
  }
}

// Same-dtype rows as RowKernel's aligned ones, in one pass: the grid covers every row and
// pack, each thread takes U packs of one row (blockDim.y rows a block) and no loop. Long math
// inside RowKernel's loops ran slower than the same math straight through (H200, 2^26
// float64 elements at two packs a thread: exp 0.271 -> 0.259 ms, expm1 0.287 -> 0.259, sin
// 0.272 -> 0.259; kRowOnePass in op_spec.h says for which ops and types).
template <typename S, int N, int V, int U, typename F>
__global__ void __launch_bounds__(128) OnePassRowKernel(F f, RowArgs<N + 1> a) {
  using P = RowPacks<S, N, V, F>;
  using Unit = typename P::Unit;
  const int64_t r = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y;
  if (r >= a.rows) return;
  char* row[N + 1];
  RowStarts(a, r, row);
  const int64_t packs = a.cols / V;
  const int64_t p0 = blockIdx.x * static_cast<int64_t>(blockDim.x) * U + threadIdx.x;
  Unit q[U][N];
#pragma unroll
  for (int k = 0; k < N; ++k) {
    if (a.access[k + 1] == Access::kVector) {
      const auto* in = reinterpret_cast<const Unit*>(row[k + 1]);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
        if (p < packs) q[u][k] = in[p];
      }
    } else {
      const Unit one = P::Repeated(row[k + 1]);
#pragma unroll
      for (int u = 0; u < U; ++u) q[u][k] = one;
    }
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
    if (p < packs) P::Store(f, q[u], row[0], p);
  }
}

// One row (a.rows == 1) whose every operand is dense: the one-pass kernel's work without its
// row arithmetic and its run-time choice between a dense and a repeated operand. Each thread
// loads U packs of every operand from the operand's base, checked against the row's end,
// before it computes. The row starts cost more than their few instructions suggest: on an
// H200, 2^26 float64 elements at one pack a thread, interleaved runs, erf 0.297 ms from the
// base against 0.316 with the row stride and 0.335 with RowStarts' division; tanh 0.279 /
// 0.302 / 0.330.
template <typename S, int N, int V, int U, typename F>
__global__ void __launch_bounds__(128) FlatRowKernel(F f, RowArgs<N + 1> a) {
  using P = RowPacks<S, N, V, F>;
  using Unit = typename P::Unit;
  const int64_t packs = a.cols / V;
  const int64_t p0 = blockIdx.x * static_cast<int64_t>(blockDim.x) * U + threadIdx.x;
  Unit q[U][N];
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const auto* in = reinterpret_cast<const Unit*>(a.base[k + 1]);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
      if (p < packs) q[u][k] = in[p];
    }
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
    if (p < packs) P::Store(f, q[u], a.base[0], p);
  }
}

// Rows of 1- and 2-byte types whose output is dense but may start anywhere (a row slice's
// sum into a contiguous output of odd cols, an output at an odd offset), every input of the
// output's type, dense or repeated along the row. Each row is taken from the output's first
// 16-byte boundary on: its first elements up to there (head) and its last ones past the
// whole packs, element by element, the packs between stored aligned. A dense input's packs
// then sit at one offset against 16-byte blocks along the row: each thread loads the aligned
// block under its pack and takes the next one from the thread of the next pack (a shuffle),
// loading it itself only at the end of a warp or the row: one load a pack where loading both
// blocks took two (H200, int8 [8192, 8189] row slice: 0.0647 -> 0.0588 ms with U = 2).
// Launched with blocks at least a warp wide (blockDim.x >= 32): a warp's threads are then in
// one row, and a row has a thread for each of its elements outside the packs (fewer than 2V).
template <typename S, int N, int V, int U, typename F>
__global__ void __launch_bounds__(256) PeeledRowKernel(F f, RowArgs<N + 1> a) {
  using P = RowPacks<S, N, V, F>;
  using C = typename P::C;
  using Out = typename P::Out;
  static_assert(sizeof(Out) == sizeof(S) && sizeof(typename P::Unit) == 16);
  const int64_t tile = static_cast<int64_t>(blockDim.x) * U;
  const int lane = threadIdx.x % 32;
  const int64_t t0 = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (int64_t r = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y; r < a.rows;
       r += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    char* row[N + 1];
    RowStarts(a, r, row);
    const PeeledRow peel = PeelRow<Out>(row[0], a.cols, V);
    const int64_t packs = peel.runs;
#pragma unroll
    for (int k = 0; k <= N; ++k) row[k] += peel.head * a.step[k];
    // The elements outside the packs (at most 2V - 2), one a thread of the row's first ones:
    // loaded before the packs' loads and stored after them, so that they wait together.
    const bool extra = t0 < a.cols - peel.body;
    const int64_t e = peel.Extra(t0);
    C ev[N];
    if (extra) {
#pragma unroll
      for (int k = 0; k < N; ++k) {
        ev[k] = static_cast<C>(*reinterpret_cast<const S*>(row[k + 1] + e * a.step[k + 1]));
      }
    }
    for (int64_t b0 = blockIdx.x * tile; b0 < packs; b0 += gridDim.x * tile) {
      const int64_t p0 = b0 + threadIdx.x;
      const bool full = b0 + tile <= packs;
      uint4 q[U][N];
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if (a.access[k + 1] == Access::kBroadcast) {
          const uint4 one = P::Repeated(row[k + 1]);
#pragma unroll
          for (int u = 0; u < U; ++u) q[u][k] = one;
          continue;
        }
        const int off = static_cast<int>(reinterpret_cast<uintptr_t>(row[k + 1]) % 16);
        const auto* blocks = reinterpret_cast<const uint4*>(row[k + 1] - off);
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
          const bool in_row = full || p < packs;
          uint4 lo = make_uint4(0, 0, 0, 0);
          if (in_row) lo = blocks[p];
          uint4 hi;
          hi.x = __shfl_down_sync(0xffffffffu, lo.x, 1);
          hi.y = __shfl_down_sync(0xffffffffu, lo.y, 1);
          hi.z = __shfl_down_sync(0xffffffffu, lo.z, 1);
          hi.w = __shfl_down_sync(0xffffffffu, lo.w, 1);
          // Block p + 1 holds bytes of pack p wherever off != 0.
          if (in_row && off != 0 && (lane == 31 || p + 1 >= packs)) {
            hi = blocks[p + 1];
          }
          uint32_t w[4];
          ShiftDown<16>(lo, hi, off, w);
          memcpy(&q[u][k], w, sizeof(w));
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
        if (!full && p >= packs) break;
        P::Store(f, q[u], row[0], p);
      }
    }
    if (extra) {
      *reinterpret_cast<Out*>(row[0] + e * static_cast<int64_t>(sizeof(Out))) =
          Convert<Out>(Call(f, ev, std::make_index_sequence<N>{}));
    }
  }
}

}  // namespace tc::cuda
