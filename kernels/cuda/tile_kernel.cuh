// The tile kernel: transposed operands read and written coalesced through shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/gpu/fast_divisor.h"
#include "kernels/cuda/memory_access.cuh"
#include "kernels/tensor_view.h"

namespace tc::cuda {

// Two dims (and any number of batch dims) where some inputs are dense along dim 1 while the
// output is dense along dim 0 (a transposed input, or a transposed output with dense inputs,
// or channels-first against channels-last, or any permutation whose fastest input dim is not
// the output's). A block takes a T0 x T1 tile (square, or 16 along dim 0 where the output's
// dim 0 is that short: a square tile ran a quarter full there): the inputs dense along dim 1
// ("staged", at most two) are read along dim 1 into shared memory, then every thread walks
// the tile along dim 0, reading the staged inputs across the shared tile and the others from
// memory, so that every global access of a warp is coalesced. A cast (an operand of another
// dtype than the kernel's) converts as it reads and writes: a transposed float32 tensor cast
// to bfloat16 goes through the tiles too.
inline constexpr int kMaxTileBatchDims = kMaxRank - 2;

template <int kOps>
struct TileArgs {
  int64_t size[2];
  char* base[kOps];
  int64_t stride[kOps][2];
  int32_t stride32[kOps][2];  // stride[k][0..1], which a tile's offsets keep within 32 bits
  int8_t staged[kOps];        // index into the shared tiles, -1 for an input read in place
  // The batch dims (plan dims 2 and up), fastest first, and the number of batches in all.
  int batch_dims;
  int64_t batches;
  int64_t batch_size[kMaxTileBatchDims];
  FastDivisor batch_div[kMaxTileBatchDims];  // batch_size's, where batches < 2^31
  int64_t batch_stride[kOps][kMaxTileBatchDims];
  // Each operand's dtype, for the kernel that converts (TileKernel's kSame false).
  DType dtype[kOps];
  // The kernel whose tile dims are fused (kFused, Plan::fused): index i along tile dim j is
  // i & mask[j] along its inner plan dim (stride[k][j]) and i >> bits[j] along its outer one
  // (outer[k][j], outer32 within a tile). A dim not fused: bits 30, its outer stride 2^30
  // inner ones (a tile's indices never reach it).
  int bits[2];
  int32_t mask[2];
  int64_t outer[kOps][2];
  int32_t outer32[kOps][2];
};

// Each operand's offset at batch b (the batch dims' strides, b split fastest dim first):
// once per batch, not per element; by multiplications where there are fewer than 2^31
// batches (64-bit divisions by each batch dim took a rank-7 permutation's blocks, one tile
// each, hundreds of instructions before their first load).
template <int kOps>
__device__ __forceinline__ void BatchOffsets(const TileArgs<kOps>& a, int64_t b,
                                             int64_t (&offset)[kOps]) {
#pragma unroll
  for (int k = 0; k < kOps; ++k) offset[k] = 0;
  if (a.batches < (int64_t{1} << 31)) {
    auto rest = static_cast<uint32_t>(b);
    for (int d = 0; d < a.batch_dims; ++d) {
      const uint32_t q = FastDiv(rest, a.batch_div[d]);
      const int64_t i = rest - q * a.batch_div[d].d;
      rest = q;
#pragma unroll
      for (int k = 0; k < kOps; ++k) offset[k] += i * a.batch_stride[k][d];
    }
    return;
  }
  for (int d = 0; d < a.batch_dims; ++d) {
    const int64_t i = b % a.batch_size[d];
    b /= a.batch_size[d];
#pragma unroll
    for (int k = 0; k < kOps; ++k) offset[k] += i * a.batch_stride[k][d];
  }
}

// A block's tiles: T0 x T1 at (t0, t1) in every batch, the block's own (blockIdx) and those a
// grid's step after it; body(t0, t1, batch_offset, n0, n1, full) for each, n0 x n1 of it
// inside the tensor (full: all of it).
template <int T0, int T1, int kOps, typename Body>
__device__ __forceinline__ void ForEachTile(const TileArgs<kOps>& a, const Body& body) {
  for (int64_t b = blockIdx.z; b < a.batches; b += gridDim.z) {
    int64_t batch_offset[kOps];
    BatchOffsets(a, b, batch_offset);
    for (int64_t t1 = blockIdx.y * int64_t{T1}; t1 < a.size[1]; t1 += int64_t{gridDim.y} * T1) {
      const int64_t t0 = blockIdx.x * int64_t{T0};
      const int n0 = a.size[0] - t0 < T0 ? static_cast<int>(a.size[0] - t0) : T0;
      const int n1 = a.size[1] - t1 < T1 ? static_cast<int>(a.size[1] - t1) : T1;
      body(t0, t1, batch_offset, n0, n1, n0 == T0 && n1 == T1);
    }
  }
}

// Operand k's element at (t0, t1) of a tile in the batch at batch_offset.
template <int kOps>
__device__ __forceinline__ char* TileStart(const TileArgs<kOps>& a, int k, int64_t t0, int64_t t1,
                                           const int64_t (&batch_offset)[kOps]) {
  return a.base[k] + t0 * a.stride[k][0] + t1 * a.stride[k][1] + batch_offset[k];
}

// Offset of index i along tile dim j, operand k, in the fused kernel's terms.
template <typename A>
__device__ __forceinline__ int64_t FusedOffset(const A& a, int k, int j, int64_t i) {
  return (i & a.mask[j]) * a.stride[k][j] + (i >> a.bits[j]) * a.outer[k][j];
}
template <typename A>
__device__ __forceinline__ int32_t FusedOffset32(const A& a, int k, int j, int32_t i) {
  return (i & a.mask[j]) * a.stride32[k][j] + (i >> a.bits[j]) * a.outer32[k][j];
}

// A shared tile's row: T1 elements and a pad that keeps the reads down a column (a warp's
// T0 rows, or 32 of them, over 32 / T0 columns where T0 is shorter) on distinct 4-byte banks:
// 2 elements for float32 16-deep tiles (rows 258 words apart), and an odd number of words a
// row for 1- and 2-byte types as for 4-byte ones (a pad of one element put a float16 tile's
// rows 32.5 words apart; the H100 figures of the float16 and int8 permutations did not move
// with the fix, at 35% of copy either way).
template <typename S, int T0>
constexpr int TilePad() {
  const int words = T0 < 32 ? 32 / T0 : 1;
  const int elems = 4 * words / static_cast<int>(sizeof(S));
  return elems > 1 ? elems : 1;
}

// kSame: every input of S and the output of the functor's result type. Otherwise operands
// are converted from and to their dtypes (TileArgs::dtype), each visited once per loop of
// accesses; that kernel is built only where kConvertingTiles says (casts; float32 add, sub,
// mul and div), the build time of one more kernel for every op and type being what it is.
// kFused: tile dims fused from two plan dims each (TileArgs::bits), for tiles 16 x 256 and
// 128 x 32 of the op's own types only; T0 a multiple of dim 0's inner size, T1 of dim 1's or
// a divisor.
template <typename S, int N, int T0, int T1, bool kSame, bool kFused, typename F>
__global__ void __launch_bounds__(256, 4) TileKernel(F f, TileArgs<N + 1> a) {
  static_assert(!kFused || kSame);
  using C = OpMath<S>;
  using R = decltype(Call(f, static_cast<const C*>(nullptr), std::make_index_sequence<N>{}));
  using Out = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
  // Staging, the block's 256 threads cover kBand1 lines of dim 1 (T1 long) at a time,
  // kPasses1 times; computing, kBand0 lines of dim 0 (T0 long), kPasses0 times.
  constexpr int kBand1 = 256 / T1, kPasses1 = T0 / kBand1;
  constexpr int kBand0 = 256 / T0, kPasses0 = T1 / kBand0;
  static_assert(kPasses1 % 4 == 0 && kPasses0 >= 1);
  constexpr int kRow = T1 + TilePad<S, T0>();
  // One T0 x kRow tile per staged input.
  extern __shared__ __align__(16) unsigned char shared[];
  auto* tiles = reinterpret_cast<S(*)[T0][kRow]>(shared);
  const int lane1 = threadIdx.x % T1, band1 = threadIdx.x / T1;
  const int lane0 = threadIdx.x % T0, band0 = threadIdx.x / T0;
  ForEachTile<T0, T1>(a, [&](int64_t t0, int64_t t1, const int64_t(&batch_offset)[N + 1], int n0,
                             int n1, bool full) {
    char* at[N + 1];
#pragma unroll
    for (int k = 0; k <= N; ++k) {
      if constexpr (kFused) {
        at[k] = a.base[k] + FusedOffset(a, k, 0, t0) + FusedOffset(a, k, 1, t1) + batch_offset[k];
      } else {
        at[k] = TileStart(a, k, t0, t1, batch_offset);
      }
    }
    // Staged inputs: each thread reads down dim 0 at i1 = lane1, so that a warp reads
    // along dim 1, where they are dense. Offsets within a tile fit 32 bits (checked at
    // launch).
#pragma unroll
    for (int k = 1; k <= N; ++k) {
      if (a.staged[k] < 0) continue;
      S(*sh)[kRow] = tiles[a.staged[k]];
      const char* p = at[k] + lane1 * a.stride32[k][1] + band1 * a.stride32[k][0];
      const int32_t step = kBand1 * a.stride32[k][0];
      if constexpr (!kSame) {
        VisitDType(a.dtype[k], [&](auto tag) {
          using T = typename decltype(tag)::type;
#pragma unroll
          for (int g = 0; g < kPasses1; g += 4) {
            T q[4] = {};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              if (full || (lane1 < n1 && band1 + (g + i) * kBand1 < n0)) {
                q[i] = *reinterpret_cast<const T*>(p + (g + i) * step);
              }
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) sh[band1 + (g + i) * kBand1][lane1] = Convert<S>(q[i]);
          }
        });
      } else {
        // Four loads at a time; where fused, every load of the tile first (the rank-7
        // permutation of the GPU matrix went from 72% to 77% of copy on the H200; the
        // others lose 1-3% with it).
        constexpr int kGroup = kFused ? kPasses1 : 4;
#pragma unroll
        for (int g = 0; g < kPasses1; g += kGroup) {
          S q[kGroup] = {};
#pragma unroll
          for (int i = 0; i < kGroup; ++i) {
            if (full || (lane1 < n1 && band1 + (g + i) * kBand1 < n0)) {
              if constexpr (kFused) {
                q[i] =
                    *reinterpret_cast<const S*>(at[k] + FusedOffset32(a, k, 1, lane1) +
                                                FusedOffset32(a, k, 0, band1 + (g + i) * kBand1));
              } else {
                q[i] = *reinterpret_cast<const S*>(p + (g + i) * step);
              }
            }
          }
#pragma unroll
          for (int i = 0; i < kGroup; ++i) sh[band1 + (g + i) * kBand1][lane1] = q[i];
        }
      }
    }
    __syncthreads();
    // Every thread now walks dim 1 at i0 = lane0: a warp reads and writes along dim 0. All
    // of a thread's lines are loaded before the first is computed (a loop over halves of
    // them was slower: 92% of copy bandwidth against 94.5% on a transposed-output add).
    C x[N][kPasses0];
#pragma unroll
    for (int k = 1; k <= N; ++k) {
      const char* p = at[k] + lane0 * a.stride32[k][0] + band0 * a.stride32[k][1];
      const int32_t step = kBand0 * a.stride32[k][1];
      if constexpr (!kSame) {
        if (a.staged[k] < 0) {
          VisitDType(a.dtype[k], [&](auto tag) {
            using T = typename decltype(tag)::type;
#pragma unroll
            for (int i = 0; i < kPasses0; ++i) {
              x[k - 1][i] =
                  full || (lane0 < n0 && band0 + i * kBand0 < n1)
                      ? static_cast<C>(Convert<S>(*reinterpret_cast<const T*>(p + i * step)))
                      : C{};
            }
          });
          continue;
        }
      }
#pragma unroll
      for (int i = 0; i < kPasses0; ++i) {
        const int i1 = band0 + i * kBand0;
        if (a.staged[k] >= 0) {
          x[k - 1][i] = static_cast<C>(tiles[a.staged[k]][lane0][i1]);
        } else if (full || (lane0 < n0 && i1 < n1)) {
          if constexpr (kFused) {
            x[k - 1][i] = static_cast<C>(*reinterpret_cast<const S*>(
                at[k] + FusedOffset32(a, k, 0, lane0) + FusedOffset32(a, k, 1, i1)));
          } else {
            x[k - 1][i] = static_cast<C>(*reinterpret_cast<const S*>(p + i * step));
          }
        } else {
          x[k - 1][i] = C{};
        }
      }
    }
    char* out = at[0] + lane0 * a.stride32[0][0] + band0 * a.stride32[0][1];
    const int32_t out_step = kBand0 * a.stride32[0][1];
    if constexpr (!kSame) {
      // Four results at a time, their dtype visited once a group.
      constexpr int kGroup = kPasses0 < 4 ? kPasses0 : 4;
#pragma unroll
      for (int g = 0; g < kPasses0; g += kGroup) {
        Out y[kGroup];
#pragma unroll
        for (int i = 0; i < kGroup; ++i) {
          C v[N];
#pragma unroll
          for (int k = 0; k < N; ++k) v[k] = x[k][g + i];
          // (Elements past the tile's edge are not computed.)
          y[i] = full || (lane0 < n0 && band0 + (g + i) * kBand0 < n1)
                     ? Convert<Out>(Call(f, v, std::make_index_sequence<N>{}))
                     : Out{};
        }
        VisitDType(a.dtype[0], [&](auto tag) {
          using T = typename decltype(tag)::type;
#pragma unroll
          for (int i = 0; i < kGroup; ++i) {
            if (full || (lane0 < n0 && band0 + (g + i) * kBand0 < n1)) {
              *reinterpret_cast<T*>(out + (g + i) * out_step) = Convert<T>(y[i]);
            }
          }
        });
      }
    } else {
#pragma unroll
      for (int i = 0; i < kPasses0; ++i) {
        if (full || (lane0 < n0 && band0 + i * kBand0 < n1)) {
          C v[N];
#pragma unroll
          for (int k = 0; k < N; ++k) v[k] = x[k][i];
          char* to = out + i * out_step;
          if constexpr (kFused) {
            to = at[0] + FusedOffset32(a, 0, 0, lane0) + FusedOffset32(a, 0, 1, band0 + i * kBand0);
          }
          *reinterpret_cast<Out*>(to) = Convert<Out>(Call(f, v, std::make_index_sequence<N>{}));
        }
      }
    }
    __syncthreads();
  });
}

// A 4-byte word of 1- or 2-byte elements.
template <typename S>
union WordOf {
  uint32_t u;
  S e[4 / sizeof(S)];
};

// Tiles of 1- and 2-byte types, every operand of the op's own type, moved in 4-byte words on
// every side: the tile kernel moves them an element a thread (64 or 32 bytes a warp), and ran
// a float16 permutation at 27% of copy and an int8 one at 27% (H200); in words, 82-86% and
// 75% (tensorcompute-tile-kernel-bench). A tile is T0 = 32 * P lines of dim 0 (P elements a
// word) by T1 = kW1 * T0 of dim 1. Staged inputs are read in words along dim 1, P lines at a
// time, and transposed in registers into words of P dim-0 elements, which the shared tile
// holds (`words`: a word row per P lines, an odd number of words long, so that the computing
// warp's reads down a column meet 32 banks). Computing, a warp takes one column, a word a
// thread, and reads the other inputs and writes the output in words along dim 0. The
// launcher checks that every operand is dense along its side and starts every line and batch
// of a tile on a 4-byte boundary (WordTilesFit); partial words at a tile's edges go element
// by element.
template <typename S, int N, int kW1, int kMinBlocks, typename F>
__global__ void __launch_bounds__(256, kMinBlocks) WordTileKernel(F f, TileArgs<N + 1> a) {
  static_assert(sizeof(S) == 1 || sizeof(S) == 2);
  constexpr int P = 4 / sizeof(S), T0 = 32 * P, T1 = kW1 * T0;
  constexpr int kGroups = T0 / P, kRow = T1 + 1, kCols = T1 / 8;
  using C = OpMath<S>;
  extern __shared__ __align__(16) unsigned char shared[];
  uint32_t* words = reinterpret_cast<uint32_t*>(shared);
  // Staging, a warp reads a line's 32 words; computing, a warp takes a column's.
  const int lane = threadIdx.x % 32, band = threadIdx.x / 32;
  ForEachTile<T0, T1>(a, [&](int64_t t0, int64_t t1, const int64_t(&batch_offset)[N + 1], int n0,
                             int n1, bool full) {
    char* at[N + 1];
#pragma unroll
    for (int k = 0; k <= N; ++k) {
      at[k] = TileStart(a, k, t0, t1, batch_offset);
    }
#pragma unroll
    for (int k = 1; k <= N; ++k) {
      if (a.staged[k] < 0) continue;
      uint32_t* sh = words + a.staged[k] * kGroups * kRow;
      const int32_t line = a.stride32[k][0];  // (held in a register, as in CastTileKernel)
#pragma unroll
      for (int u = 0; u < kW1; ++u) {
        const int col = T0 * u + P * lane;
        // Lines P * g + h, g = band + 8 * i: every load of the pass issued first.
        WordOf<S> w[4][P];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
          for (int h = 0; h < P; ++h) {
            const int r = P * (band + 8 * i) + h;
            const char* p = at[k] + r * line + col * int{sizeof(S)};
            if (full || (r < n0 && col + P <= n1)) {
              w[i][h].u = *reinterpret_cast<const uint32_t*>(p);
            } else {
              w[i][h].u = 0;
#pragma unroll
              for (int e = 0; e < P; ++e) {
                if (r < n0 && col + e < n1) {
                  w[i][h].e[e] = *reinterpret_cast<const S*>(p + e * int{sizeof(S)});
                }
              }
            }
          }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
          for (int c = 0; c < P; ++c) {
            WordOf<S> t;
#pragma unroll
            for (int h = 0; h < P; ++h) t.e[h] = w[i][h].e[c];
            sh[(band + 8 * i) * kRow + col + c] = t.u;
          }
        }
      }
    }
    __syncthreads();
    // Column c = band + 8 * i, word `lane` of it (dim-0 elements P * lane and on).
    WordOf<S> x[N][kCols];
#pragma unroll
    for (int k = 1; k <= N; ++k) {
      const int32_t line = a.stride32[k][1];
#pragma unroll
      for (int i = 0; i < kCols; ++i) {
        const int c = band + 8 * i;
        if (a.staged[k] >= 0) {
          x[k - 1][i].u = words[a.staged[k] * kGroups * kRow + lane * kRow + c];
          continue;
        }
        const char* p = at[k] + 4 * lane + c * line;
        if (full || (P * lane + P <= n0 && c < n1)) {
          x[k - 1][i].u = *reinterpret_cast<const uint32_t*>(p);
        } else {
          x[k - 1][i].u = 0;
#pragma unroll
          for (int e = 0; e < P; ++e) {
            if (P * lane + e < n0 && c < n1) {
              x[k - 1][i].e[e] = *reinterpret_cast<const S*>(p + e * int{sizeof(S)});
            }
          }
        }
      }
    }
    const int32_t out_line = a.stride32[0][1];
#pragma unroll
    for (int i = 0; i < kCols; ++i) {
      const int c = band + 8 * i;
      WordOf<S> y;
#pragma unroll
      for (int e = 0; e < P; ++e) {
        C v[N];
#pragma unroll
        for (int k = 0; k < N; ++k) v[k] = static_cast<C>(x[k][i].e[e]);
        y.e[e] = Convert<S>(Call(f, v, std::make_index_sequence<N>{}));
      }
      char* p = at[0] + 4 * lane + c * out_line;
      if (full || (P * lane + P <= n0 && c < n1)) {
        *reinterpret_cast<uint32_t*>(p) = y.u;
      } else {
#pragma unroll
        for (int e = 0; e < P; ++e) {
          if (P * lane + e < n0 && c < n1) *reinterpret_cast<S*>(p + e * int{sizeof(S)}) = y.e[e];
        }
      }
    }
    __syncthreads();
  });
}

// Tiles whose one staged input is float16 or bfloat16 and whose output is float32 (a cast,
// or float32 add, sub, mul and div with a transposed 2-byte operand), typed for those dtypes:
// the kernel that converts by run-time dtype ran such a cast at 66% of copy and such an add
// at 78%; typed, 91% and 93% (H200, tensorcompute-tile-kernel-bench). The staged input
// (operand kStaged, dense along dim 1) is read two elements a thread in 4-byte words, every
// load of a tile issued first, into a tile of float pairs along dim 1 (pairs[i0][j]: dim-1
// elements 2j and 2j + 1 of line i0, rows an odd number of pairs long, so that the 8-byte
// accesses of a half warp meet 16 distinct bank pairs). The other input of a binary op (a
// float32 read in place along dim 0) is loaded while the tile fills; the output, dense along
// dim 0, is written a column pair at a time. The launcher checks that the staged input's
// lines and batches start on 4-byte boundaries (LinesOnWords).
template <typename TS, int N, int kStaged, typename F>
__global__ void __launch_bounds__(256, 4) PairedTileKernel(F f, TileArgs<N + 1> a) {
  static_assert(sizeof(TS) == 2 && (N == 1 || N == 2) && kStaged >= 1 && kStaged <= N);
  constexpr int T = 64, kPairs = T / 2, kOther = N == 2 ? 3 - kStaged : 0;
  __shared__ float2 pairs[T][kPairs + 1];
  const int tid = threadIdx.x;
  // Loading, 32 threads a line, a pair each, 8 lines at a time; computing, 64 threads a
  // column pair, 4 pairs at a time.
  const int pair = tid % kPairs, pair_band = tid / kPairs;
  const int lane = tid % T, band = tid / T;
  ForEachTile<T, T>(a, [&](int64_t t0, int64_t t1, const int64_t(&batch_offset)[N + 1], int n0,
                           int n1, bool full) {
    const char* in = TileStart(a, kStaged, t0, t1, batch_offset);
    char* out = TileStart(a, 0, t0, t1, batch_offset);
    // The strides held in registers (as in CastTileKernel).
    const int32_t in_line = a.stride32[kStaged][0];
    const int32_t out_step = a.stride32[0][0], out_line = a.stride32[0][1];
    uint32_t q[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int r = pair_band + 8 * i;
      const char* p = in + r * in_line + 4 * pair;
      q[i] = 0;
      if (full || (r < n0 && 2 * pair + 1 < n1)) {
        q[i] = *reinterpret_cast<const uint32_t*>(p);
      } else if (r < n0 && 2 * pair < n1) {
        q[i] = *reinterpret_cast<const uint16_t*>(p);
      }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      TS lo, hi;
      lo.bits = static_cast<uint16_t>(q[i]);
      hi.bits = static_cast<uint16_t>(q[i] >> 16);
      pairs[pair_band + 8 * i][pair] = make_float2(Convert<float>(lo), Convert<float>(hi));
    }
    // The other input of a binary op at line `lane`, columns 2j and 2j + 1 for the pairs
    // j = band + 4 * i this thread computes, read while the tile fills.
    float o[16];
    if constexpr (N == 2) {
      const char* other = TileStart(a, kOther, t0, t1, batch_offset);
      const int32_t other_step = a.stride32[kOther][0], other_line = a.stride32[kOther][1];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int j = band + 4 * i;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          o[2 * i + h] = full || (lane < n0 && 2 * j + h < n1)
                             ? *reinterpret_cast<const float*>(other + lane * other_step +
                                                               (2 * j + h) * other_line)
                             : 0.0f;
        }
      }
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int j = band + 4 * i;
      const float2 v = pairs[lane][j];
      const float staged[2] = {v.x, v.y};
      char* p = out + lane * out_step + 2 * j * out_line;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float y = staged[h];
        if constexpr (N == 2) {
          y = kStaged == 1 ? f(staged[h], o[2 * i + h]) : f(o[2 * i + h], staged[h]);
        } else {
          y = f(y);
        }
        if (full || (lane < n0 && 2 * j + h < n1)) *reinterpret_cast<float*>(p + h * out_line) = y;
      }
    }
    __syncthreads();
  });
}

// Casts through 64 x 64 tiles typed for the pair of dtypes: float32 to float16 or bfloat16,
// and between 4-byte types (int32 and float32). The kernel that converts by run-time dtype
// ran them at 71-84% of copy; typed, 90-92% (float32 to the 2-byte floats) and 97-100% (H200,
// tensorcompute-tile-kernel-bench). The input, dense along dim 1, is loaded with every load
// of a tile issued first; the output is dense along dim 0. A 2-byte output is written two
// elements a thread in 4-byte words, from a tile of float pairs along dim 0 (pairs[j][i1]:
// dim-0 elements 2j and 2j + 1 of column i1) that a thread fills two lines at a time; the
// launcher checks that its lines and batches start on 4-byte boundaries (LinesOnWords).
template <typename TI, typename TO>
__global__ void __launch_bounds__(256, 4) CastTileKernel(TileArgs<2> a) {
  static_assert(sizeof(TI) == 4 && (sizeof(TO) == 2 || sizeof(TO) == 4));
  constexpr int T = 64, kPairs = T / 2;
  constexpr bool kPairOut = sizeof(TO) == 2;
  using Tile = std::conditional_t<kPairOut, float2[kPairs][T + 1], TO[T][T + 1]>;
  __shared__ Tile tile;
  const int tid = threadIdx.x;
  // Loading, 64 threads a line, 4 lines (or line pairs) at a time; storing a 2-byte output,
  // 32 threads a column, a pair each, 8 columns at a time.
  const int lane = tid % T, band = tid / T;
  const int pair = tid % kPairs, pair_band = tid / kPairs;
  ForEachTile<T, T>(
      a, [&](int64_t t0, int64_t t1, const int64_t(&batch_offset)[2], int n0, int n1, bool full) {
        const char* in = TileStart(a, 1, t0, t1, batch_offset);
        char* out = TileStart(a, 0, t0, t1, batch_offset);
        // The strides held in registers: read from the arguments inside the loops, they made
        // these kernels 6-7% slower.
        const int32_t in_line = a.stride32[1][0], in_step = a.stride32[1][1];
        const int32_t out_step = a.stride32[0][0], out_line = a.stride32[0][1];
        // Line r = kPairOut ? 2 * (band + 4 * (i / 2)) + i % 2 : band + 4 * i.
        TI q[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          const int r = kPairOut ? 2 * (band + 4 * (i / 2)) + i % 2 : band + 4 * i;
          q[i] = full || (r < n0 && lane < n1)
                     ? *reinterpret_cast<const TI*>(in + r * in_line + lane * in_step)
                     : TI{};
        }
        if constexpr (kPairOut) {
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            tile[band + 4 * i][lane] =
                make_float2(Convert<float>(q[2 * i]), Convert<float>(q[2 * i + 1]));
          }
          __syncthreads();
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const int c = pair_band + 8 * i;
            const float2 v = tile[pair][c];
            const TO lo = Convert<TO>(v.x), hi = Convert<TO>(v.y);
            char* p = out + 4 * pair + c * out_line;
            if (full || (c < n1 && 2 * pair + 1 < n0)) {
              *reinterpret_cast<uint32_t*>(p) =
                  static_cast<uint32_t>(lo.bits) | (static_cast<uint32_t>(hi.bits) << 16);
            } else if (c < n1 && 2 * pair < n0) {
              *reinterpret_cast<TO*>(p) = lo;
            }
          }
        } else {
#pragma unroll
          for (int i = 0; i < 16; ++i) tile[band + 4 * i][lane] = Convert<TO>(q[i]);
          __syncthreads();
#pragma unroll
          for (int i = 0; i < 16; ++i) {
            const int c = band + 4 * i;
            if (full || (lane < n0 && c < n1)) {
              *reinterpret_cast<TO*>(out + lane * out_step + c * out_line) = tile[lane][c];
            }
          }
        }
        __syncthreads();
      });
}

}  // namespace tc::cuda
