// where(cond, a, b) along rows, the condition bool and the values and output of one storage
// type: the chosen element's bits copied, nothing converted.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/memory_access.cuh"
#include "kernels/cuda/rows.cuh"

namespace tc::cuda {

// Whether chunks of V elements of T load whole where the operand is dense but not aligned
// for them (LoadUnaligned takes 8 and 16 bytes).
template <typename T, int V>
inline constexpr bool kShiftable = sizeof(T) * V == 8 || sizeof(T) * V == 16;

// What the operands of a where need besides whole aligned chunks and repeated elements:
// nothing, misaligned dense chunks shifted into place, or any step (element by element).
// Each holds registers where every chunk's loads are in flight at once.
enum WhereLoads { kWholeChunks = 0, kShiftedChunks = 1, kAnyStep = 2 };

// A chunk of V elements of T as 32-bit words (the last one partly used below 4 bytes): every
// path of a load makes words, so that a chunk takes B / 4 registers whichever path ran (as a
// Pack of elements a repeated int8 took sixteen, one a byte).
template <typename T, int V>
inline constexpr int kChunkWords = (static_cast<int>(sizeof(T)) * V + 3) / 4;
template <int B>
using ChunkBlock = std::conditional_t<
    B == 16, uint4,
    std::conditional_t<B == 8, uint2, std::conditional_t<B == 4, uint32_t, uint16_t>>>;

// Full chunk c of V elements of type T of a row, as words: one access where the operand is
// dense and aligned, one element repeated where it repeats, aligned accesses shifted into
// place where it is dense but not aligned (kMode >= kShiftedChunks), element by element where
// it is strided (kAnyStep).
template <typename T, int V, int kMode>
__device__ __forceinline__ void LoadWords(const char* row, int64_t step, Access access, int64_t c,
                                          uint32_t (&w)[kChunkWords<T, V>]) {
  constexpr int B = static_cast<int>(sizeof(T)) * V;
  if (access == Access::kVector) {
    const ChunkBlock<B> b = reinterpret_cast<const ChunkBlock<B>*>(row)[c];
    if constexpr (B >= 4) {
      memcpy(w, &b, B);
    } else {
      w[0] = b;
    }
    return;
  }
  if (access == Access::kBroadcast) {
    if constexpr (sizeof(T) == 8) {
      uint32_t two[2];
      memcpy(two, row, 8);
#pragma unroll
      for (int i = 0; i < kChunkWords<T, V>; ++i) w[i] = two[i % 2];
    } else {
      uint32_t one = 0;
      memcpy(&one, row, sizeof(T));
      const uint32_t word = sizeof(T) == 1   ? one * 0x01010101u
                            : sizeof(T) == 2 ? one * 0x00010001u
                                             : one;
#pragma unroll
      for (int i = 0; i < kChunkWords<T, V>; ++i) w[i] = word;
    }
    return;
  }
  if constexpr (kMode >= kShiftedChunks && kShiftable<T, V>) {
    if (kMode == kAnyStep ? step == sizeof(T) : true) {
      LoadUnaligned<B>(row + c * B, w);
      return;
    }
  }
  if constexpr (kMode == kAnyStep) {
    Pack<T, V> q;
#pragma unroll
    for (int j = 0; j < V; ++j) q.v[j] = *reinterpret_cast<const T*>(row + (c * V + j) * step);
    w[kChunkWords<T, V> - 1] = 0;
    memcpy(w, &q, B);
  }
}

// where over one chunk as 32-bit words: each byte of the output from x where the condition
// of its element is nonzero, else from y; selector bytes built from the condition's bytes
// (__byte_perm), set to all ones where nonzero (__vcmpne4), merged in one logic op.
template <typename S, int V>
__device__ __forceinline__ void Choose(const uint32_t (&c)[kChunkWords<bool, V>],
                                       uint32_t (&x)[kChunkWords<S, V>],
                                       const uint32_t (&y)[kChunkWords<S, V>]) {
#pragma unroll
  for (int w = 0; w < kChunkWords<S, V>; ++w) {
    // The element of each byte of word w, and where its condition byte is.
    uint32_t selector = 0;
    int word = 0;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int e = (w * 4 + b) / static_cast<int>(sizeof(S));
      word = e / 4;
      selector |= static_cast<uint32_t>(e % 4) << (4 * b);
    }
    const uint32_t m = __vcmpne4(__byte_perm(c[word], 0, selector), 0);
    x[w] = (x[w] & m) | (y[w] & ~m);
  }
}

// Stores chunk c of the output from its words: one access where aligned, else (kAnyStep)
// element by element.
template <typename S, int V, int kMode>
__device__ __forceinline__ void StoreWords(const RowArgs<4>& a, char* out, int64_t c,
                                           const uint32_t (&w)[kChunkWords<S, V>]) {
  if (kMode != kAnyStep || a.access[0] == Access::kVector) {
    ChunkBlock<16> b;
    memcpy(&b, w, 16);
    reinterpret_cast<ChunkBlock<16>*>(out)[c] = b;
  } else {
    Pack<S, V> q;
    memcpy(&q, w, sizeof(q));
#pragma unroll
    for (int j = 0; j < V; ++j) *reinterpret_cast<S*>(out + (c * V + j) * a.step[0]) = q.v[j];
  }
}

// One full chunk c of where: loaded, chosen, stored.
template <typename S, int V, int kMode>
__device__ __forceinline__ void WhereChunk(const RowArgs<4>& a, char* const (&row)[4], int64_t c) {
  uint32_t cond[kChunkWords<bool, V>], x[kChunkWords<S, V>], y[kChunkWords<S, V>];
  LoadWords<bool, V, kMode>(row[1], a.step[1], a.access[1], c, cond);
  LoadWords<S, V, kMode>(row[2], a.step[2], a.access[2], c, x);
  LoadWords<S, V, kMode>(row[3], a.step[3], a.access[3], c, y);
  Choose<S, V>(cond, x, y);
  StoreWords<S, V, kMode>(a, row[0], c, x);
}

// where over rows: operand 1 the bool condition, 2 and 3 the values, 0 the output, all of
// storage type S but the condition. Chunks of V elements (16 bytes of S), U of them a thread
// per step, every load issued before the first use; kMode (WhereLoads) what else the
// operands need, so that the common case holds no registers for the rest (45-48; a version
// choosing element by element held 96, a third of the SM's threads, and ran a float16 where
// at 56% of copy on the H200, the casting row kernel that took it before at 61%). Where a thread's
// U chunks are not all whole (short rows, a row's end), it takes them one at a time, the partial
// one element by element.
template <typename S, int V, int U, int kMode>
__global__ void __launch_bounds__(128) WhereRowKernel(RowArgs<4> a) {
  static_assert(sizeof(S) * V == 16);
  const int64_t full = a.cols / V;
  const int64_t tile = static_cast<int64_t>(blockDim.x) * U;
  for (int64_t r = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y; r < a.rows;
       r += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    char* row[4];
    RowStarts(a, r, row);
    // A condition repeated along the row (a column of bools broadcast, or a 0-dim one) picks
    // the whole row: it is a copy of the chosen operand's row, the other one never read.
    const bool one_pick = a.access[1] == Access::kBroadcast;
    const bool pick = one_pick && *reinterpret_cast<const uint8_t*>(row[1]) != 0;
    const char* const chosen = pick ? row[2] : row[3];
    const int64_t chosen_step = pick ? a.step[2] : a.step[3];
    const Access chosen_access = pick ? a.access[2] : a.access[3];
    for (int64_t c0 = blockIdx.x * tile + threadIdx.x; c0 * V < a.cols; c0 += gridDim.x * tile) {
      if (one_pick && c0 + (U - 1) * static_cast<int64_t>(blockDim.x) < full) {
        uint32_t x[U][kChunkWords<S, V>];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          LoadWords<S, V, kMode>(chosen, chosen_step, chosen_access,
                                 c0 + u * static_cast<int64_t>(blockDim.x), x[u]);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          StoreWords<S, V, kMode>(a, row[0], c0 + u * static_cast<int64_t>(blockDim.x), x[u]);
        }
        continue;
      }
      if (c0 + (U - 1) * static_cast<int64_t>(blockDim.x) < full) {
        uint32_t cond[U][kChunkWords<bool, V>], x[U][kChunkWords<S, V>], y[U][kChunkWords<S, V>];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t c = c0 + u * static_cast<int64_t>(blockDim.x);
          LoadWords<bool, V, kMode>(row[1], a.step[1], a.access[1], c, cond[u]);
          LoadWords<S, V, kMode>(row[2], a.step[2], a.access[2], c, x[u]);
          LoadWords<S, V, kMode>(row[3], a.step[3], a.access[3], c, y[u]);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          Choose<S, V>(cond[u], x[u], y[u]);
          StoreWords<S, V, kMode>(a, row[0], c0 + u * static_cast<int64_t>(blockDim.x), x[u]);
        }
        continue;
      }
#pragma unroll 1
      for (int u = 0; u < U; ++u) {
        const int64_t c = c0 + u * static_cast<int64_t>(blockDim.x);
        if (c < full) {
          WhereChunk<S, V, kMode>(a, row, c);
          continue;
        }
#pragma unroll 1
        for (int64_t e = c * V; e < c * V + V && e < a.cols; ++e) {
          const bool pick = *reinterpret_cast<const bool*>(row[1] + e * a.step[1]);
          const char* from = pick ? row[2] : row[3];
          const int64_t step = pick ? a.step[2] : a.step[3];
          *reinterpret_cast<S*>(row[0] + e * a.step[0]) =
              *reinterpret_cast<const S*>(from + e * step);
        }
      }
    }
  }
}

}  // namespace tc::cuda
