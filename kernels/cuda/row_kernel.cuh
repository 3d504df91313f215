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
// launches keep their registers.
enum RowMode : int {
  kAlignedRows,
  // Inputs may also be dense but misaligned (Access::kStrided with a step of one element),
  // their packs loaded from the aligned 16-byte blocks around them and shifted into place
  // (LoadUnaligned).
  kShiftedInputs,
  // The output too may start anywhere (dense, its rows misaligned, any cols): each row's
  // first elements up to the output's first 16-byte boundary, and its last ones past the
  // whole packs, element by element; the packs between them stored aligned, every dense input
  // shifted into place. Outputs of the inputs' own type.
  kPeeledRows,
  // Aligned rows over more than two dims (broadcasts whose dims alternate between the
  // operands), their starts by division per dim (DeepRowArgs). Binary ops.
  kDeepRows,
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
  using C = OpMath<S>;
  using R = decltype(Call(f, static_cast<const C*>(nullptr), std::make_index_sequence<N>{}));
  using Out = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
  // Word ops take their operands as raw 16-byte words: a pack of bytes would be taken apart
  // and put together again byte by byte.
  using Word = Wordwise<F>;
  constexpr bool kWords =
      N <= 2 && (Word::kTypes & DTypeBit(DTypeOf<S>())) != 0 && sizeof(Out) == sizeof(S);
  // Packs of 1- and 2-byte types are held as raw words, a broadcast operand's as its value
  // repeated: choosing it or a loaded pack (the operand's access is known only at run time) is
  // then a select per word, not one per element (8 per float16 pack, 16 per byte pack; H200:
  // bfloat16 div 45 -> 37 registers). Wider types' elements are words already.
  using Unit = std::conditional_t<
      kWords || (sizeof(S) <= 2 && sizeof(Pack<S, V>) == 16), uint4,
      std::conditional_t<sizeof(S) <= 2 && sizeof(Pack<S, V>) == 8, uint2, Pack<S, V>>>;
  static_assert(sizeof(Unit) == sizeof(Pack<S, V>));
  static_assert(kMode != kPeeledRows || sizeof(Out) == sizeof(S));
  // Inputs loaded from the aligned blocks around them (LoadUnaligned).
  constexpr bool kShifts = kMode == kShiftedInputs || kMode == kPeeledRows;
  int64_t packs = a.cols / V;
  const int64_t tile = static_cast<int64_t>(blockDim.x) * U;
  // Short rows: a block spans several rows (blockDim.y of them).
  for (int64_t r = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y; r < a.rows;
       r += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    char* row[N + 1];
    RowStarts(a, r, row);
    if constexpr (kMode == kPeeledRows) {
      // The row from the output's first 16-byte boundary on: the elements before it (head)
      // and after the last whole pack, one a thread of the row's first block.
      const auto misaligned = static_cast<int>(reinterpret_cast<uintptr_t>(row[0]) % 16);
      const int64_t to_boundary = ((16 - misaligned) % 16) / static_cast<int>(sizeof(S));
      const int64_t head = to_boundary < a.cols ? to_boundary : a.cols;
      packs = (a.cols - head) / V;
#pragma unroll
      for (int k = 0; k <= N; ++k) row[k] += head * a.step[k];
      if (blockIdx.x == 0) {
        const int64_t body = packs * V;
        const int64_t extra = a.cols - body;  // head + tail
        for (int64_t t = threadIdx.x; t < extra; t += blockDim.x) {
          const int64_t e = t < head ? t - head : body + (t - head);
          C v[N];
#pragma unroll
          for (int k = 0; k < N; ++k) {
            v[k] = static_cast<C>(*reinterpret_cast<const S*>(row[k + 1] + e * a.step[k + 1]));
          }
          *reinterpret_cast<Out*>(row[0] + e * static_cast<int64_t>(sizeof(Out))) =
              Convert<Out>(Call(f, v, std::make_index_sequence<N>{}));
        }
      }
    }
    for (int64_t p0 = blockIdx.x * tile + threadIdx.x; p0 < packs; p0 += gridDim.x * tile) {
      const bool full = p0 + (U - 1) * static_cast<int64_t>(blockDim.x) < packs;
      Unit q[N][U];
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if (kMode != kPeeledRows && a.access[k + 1] == Access::kVector) {
          const auto* in = reinterpret_cast<const Unit*>(row[k + 1]);
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
            if (full || p < packs) q[k][u] = in[p];
          }
        } else if (kShifts && a.access[k + 1] != Access::kBroadcast) {
          if constexpr (kShifts) {
            static_assert(sizeof(Unit) == 16);
#pragma unroll
            for (int u = 0; u < U; ++u) {
              const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
              if (full || p < packs) {
                uint32_t w[4];
                LoadUnaligned<16>(row[k + 1] + p * 16, w);
                memcpy(&q[k][u], w, sizeof(w));
              }
            }
          }
        } else {
          const S one = *reinterpret_cast<const S*>(row[k + 1]);
          Pack<S, V> ones;
#pragma unroll
          for (int j = 0; j < V; ++j) ones.v[j] = one;
#pragma unroll
          for (int u = 0; u < U; ++u) memcpy(&q[k][u], &ones, sizeof(Unit));
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
        if (!full && p >= packs) break;
        if constexpr (kWords && N == 1) {
          const uint4 x = q[0][u];
          reinterpret_cast<uint4*>(row[0])[p] =
              make_uint4(Word::template Word<S>(f, x.x), Word::template Word<S>(f, x.y),
                         Word::template Word<S>(f, x.z), Word::template Word<S>(f, x.w));
        } else if constexpr (kWords) {
          const uint4 x = q[0][u], y = q[1][u];
          reinterpret_cast<uint4*>(row[0])[p] = make_uint4(
              Word::template Word<S>(f, x.x, y.x), Word::template Word<S>(f, x.y, y.y),
              Word::template Word<S>(f, x.z, y.z), Word::template Word<S>(f, x.w, y.w));
        } else {
          // Taken out of q first: computing straight from q[k][u] held 38 registers instead of
          // 32 for a float16 multiply (six blocks per SM instead of eight, 1.3% slower).
          Pack<S, V> x[N];
#pragma unroll
          for (int k = 0; k < N; ++k) memcpy(&x[k], &q[k][u], sizeof(x[k]));
          Pack<Out, V> y;
#pragma unroll
          for (int j = 0; j < V; ++j) {
            C v[N];
#pragma unroll
            for (int k = 0; k < N; ++k) v[k] = static_cast<C>(x[k].v[j]);
            y.v[j] = Convert<Out>(Call(f, v, std::make_index_sequence<N>{}));
          }
          reinterpret_cast<Pack<Out, V>*>(row[0])[p] = y;
        }
      }
    }
  }
}

}  // namespace tc::cuda
