// CUDA kernels for any op of the catalog, and the launcher that picks one. Instantiated per op
// group in ops_*.cu so that the groups compile in parallel.
//
// Four kernels per op and compute type, tried in this order:
// - tiles: two dims (and a batch dim) where an input is dense along the dim the output is
//   not (transposed input or output, channels-first against channels-last), every operand
//   of the op's own types; read and written coalesced through shared-memory tiles;
// - same-dtype rows, vectorized: at most three dims (rows of `cols` elements, the rows
//   themselves in up to two dims), the output dense along a row and each input dense along
//   it or one element repeated (stride 0), any row strides. That is contiguous data, a
//   scalar tensor, row (bias) and column broadcasts, per-channel NCHW and NHWC, and outer
//   products. 16-byte accesses (two per operand per thread for 4- and 8-byte types) when
//   every row start is aligned for them; bitwise and logical ops on whole 32-bit words;
//   short rows share a block;
// - rows with dynamic casting: the same three dims with any operand dtypes (mixed inputs,
//   casts, `where` with a bool condition) and any steps along a row (strided slices,
//   misaligned offsets), converted in registers; vector accesses for whichever operands
//   allow them;
// - general: any rank and strides (0 and negative included) and any operand dtypes,
//   offsets from the linear index per dimension by 32-bit multiply-and-shift division;
//   plans of 2^31 elements or more, or reaching past 2 GiB in an operand, run as pieces
//   that fit 32-bit index math (SplitForIndexing).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/launch_env.h"
#include "kernels/engine.h"
#include "kernels/ops/op_list.h"
#include "kernels/planner.h"

namespace tc::cuda {

// Everything a kernel needs, passed by value as a kernel parameter.
// Division by a fixed 32-bit divisor as a multiply-high and a shift (Granlund and
// Montgomery's method, as PyTorch's IntDivider): for n, d < 2^31, n / d ==
// (umulhi(n, m) + n) >> s with s = ceil(log2 d), m = 2^32 (2^s - d) / d + 1.
struct FastDivisor {
  uint32_t d = 1, m = 0;
  uint32_t s = 0;
};

inline FastDivisor MakeFastDivisor(uint32_t d) {
  FastDivisor f;
  f.d = d;
  while ((uint64_t{1} << f.s) < d) ++f.s;
  f.m = static_cast<uint32_t>(((static_cast<unsigned __int128>(1) << 32) *
                               ((uint64_t{1} << f.s) - d)) / d + 1);
  return f;
}

__device__ __forceinline__ uint32_t FastDiv(uint32_t n, const FastDivisor& f) {
  return static_cast<uint32_t>((static_cast<uint64_t>(__umulhi(n, f.m)) + n) >> f.s);
}

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


// Loads element p of dtype t into compute type C through the compute dtype's storage type S
// (as if the input had been converted to the common dtype first).
template <typename S, typename C>
__device__ __forceinline__ C LoadAs(DType t, const char* p) {
  return VisitDType(t, [p](auto tag) {
    using T = typename decltype(tag)::type;
    return static_cast<C>(Convert<S>(*reinterpret_cast<const T*>(p)));
  });
}

// Stores a result as dtype t; half-precision results are rounded to S first.
template <typename S, typename R>
__device__ __forceinline__ void StoreAs(DType t, char* p, R r) {
  using V = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
  const V v = Convert<V>(r);
  VisitDType(t, [p, v](auto tag) {
    using T = typename decltype(tag)::type;
    *reinterpret_cast<T*>(p) = Convert<T>(v);
  });
}

template <typename F, typename C, size_t... I>
__device__ __forceinline__ auto Call(const F& f, const C* v, std::index_sequence<I...>) {
  return f(v[I]...);
}

// Rows of the row kernels: with r = r1 + inner_rows * r2, operand k's row r starts at
// base[k] + r1 * row_stride[k] + r2 * outer_stride[k] (two dims of rows cover per-channel
// NCHW: rows over channels within images); along the row, element e sits at e * step[k]
// bytes from the row start (0: one element repeated).
enum class Access : uint8_t {
  kBroadcast,  // one element for the whole row
  kVector,     // dense and aligned: whole chunks in 16-byte accesses
  kStrided,    // any step (dense but misaligned, strided, reversed): element by element
};

template <int kOps>
struct RowArgs {
  int64_t rows;
  int64_t inner_rows;
  int64_t cols;
  char* base[kOps];
  int64_t row_stride[kOps];
  int64_t outer_stride[kOps];
  int64_t step[kOps];
  DType dtype[kOps];
  Access access[kOps];
};

// V elements of T in one access (two or more 16-byte accesses past 16 bytes).
template <typename T, int V>
struct alignas(sizeof(T) * V > 16 ? 16 : sizeof(T) * V) Pack {
  T v[V];
};

// The row of operand k for row index r.
template <int kOps>
__device__ __forceinline__ void RowStarts(const RowArgs<kOps>& a, int64_t r, char* (&row)[kOps]) {
  int64_t r1 = r, r2 = 0;
  if (a.inner_rows != a.rows) {
    r2 = r / a.inner_rows;
    r1 = r - r2 * a.inner_rows;
  }
#pragma unroll
  for (int k = 0; k < kOps; ++k) row[k] = a.base[k] + r1 * a.row_stride[k] + r2 * a.outer_stride[k];
}

// Ops that act on every byte of a 32-bit word independently, for storage type S: bitwise
// and/or/xor on integers and bools, logical and/or/xor on bools (their bytes are 0 or 1;
// the server refuses other bool bytes). The row kernel applies them to whole words.
template <typename F, typename S>
struct Wordwise {
  static constexpr bool kOn = false;
};
#define TC_WORDWISE(Op, Types, expr)                                            \
  template <typename S>                                                         \
  struct Wordwise<Op, S> {                                                      \
    static constexpr bool kOn = (Types & DTypeBit(DTypeOf<S>())) != 0;          \
    static __device__ __forceinline__ uint32_t Apply(const Op&, uint32_t a, uint32_t b) { \
      return expr;                                                              \
    }                                                                           \
  };
TC_WORDWISE(BitwiseAndOp, kIntegralBoolTypes, a & b)
TC_WORDWISE(BitwiseOrOp, kIntegralBoolTypes, a | b)
TC_WORDWISE(BitwiseXorOp, kIntegralBoolTypes, a ^ b)
TC_WORDWISE(LogicalAndOp, DTypeBit(DType::kBool), a & b)
TC_WORDWISE(LogicalOrOp, DTypeBit(DType::kBool), a | b)
TC_WORDWISE(LogicalXorOp, DTypeBit(DType::kBool), a ^ b)
#undef TC_WORDWISE

// Same-dtype rows: every input of storage type S, each dense along the row (kVector) or
// repeated (kBroadcast), the output of its own type dense along the row; every row start
// aligned for V-element packs, cols a multiple of V. Each thread moves U packs per operand
// per step, all loads issued before the first use; only the last step of a row checks
// bounds.
template <typename S, int N, int V, int U, typename F>
__global__ void __launch_bounds__(256) RowKernel(F f, RowArgs<N + 1> a) {
  using C = OpMath<S>;
  using R = decltype(Call(f, static_cast<const C*>(nullptr), std::make_index_sequence<N>{}));
  using Out = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
  // Word ops take their operands as raw 16-byte words: a pack of bytes would be taken apart
  // and put together again byte by byte.
  constexpr bool kWords = N == 2 && Wordwise<F, S>::kOn && sizeof(Out) == sizeof(S);
  using Unit = std::conditional_t<kWords, uint4, Pack<S, V>>;
  static_assert(sizeof(Unit) == sizeof(Pack<S, V>));
  const int64_t packs = a.cols / V;
  const int64_t tile = static_cast<int64_t>(blockDim.x) * U;
  // Short rows: a block spans several rows (blockDim.y of them).
  for (int64_t r = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y; r < a.rows;
       r += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    char* row[N + 1];
    RowStarts(a, r, row);
    for (int64_t p0 = blockIdx.x * tile + threadIdx.x; p0 < packs; p0 += gridDim.x * tile) {
      const bool full = p0 + (U - 1) * static_cast<int64_t>(blockDim.x) < packs;
      Unit q[N][U];
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if (a.access[k + 1] == Access::kVector) {
          const auto* in = reinterpret_cast<const Unit*>(row[k + 1]);
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
            if (full || p < packs) q[k][u] = in[p];
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
        if constexpr (kWords) {
          const uint4 x = q[0][u], y = q[1][u];
          reinterpret_cast<uint4*>(row[0])[p] =
              make_uint4(Wordwise<F, S>::Apply(f, x.x, y.x), Wordwise<F, S>::Apply(f, x.y, y.y),
                         Wordwise<F, S>::Apply(f, x.z, y.z), Wordwise<F, S>::Apply(f, x.w, y.w));
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

// Two dims (and a batch dim) where some inputs are dense along dim 1 while the output is
// dense along dim 0 (a transposed input, or a transposed output with dense inputs, or
// channels-first against channels-last). A block takes a T x T tile: the inputs dense along
// dim 1 ("staged", at most two) are read along dim 1 into shared memory, then every thread
// walks the tile along dim 0, reading the staged inputs across the shared tile and the
// others from memory, so that every global access of a warp is coalesced.
template <int kOps>
struct TileArgs {
  int64_t size[3];
  char* base[kOps];
  int64_t stride[kOps][3];
  int32_t stride32[kOps][2];  // stride[k][0..1], which a tile's offsets keep within 32 bits
  int8_t staged[kOps];  // index into the shared tiles, -1 for an input read in place
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
  for (int64_t b = blockIdx.z; b < a.size[2]; b += gridDim.z) {
    for (int64_t t1 = blockIdx.y * int64_t{T}; t1 < a.size[1]; t1 += int64_t{gridDim.y} * T) {
      const int64_t t0 = blockIdx.x * int64_t{T};
      const int n0 = a.size[0] - t0 < T ? static_cast<int>(a.size[0] - t0) : T;
      const int n1 = a.size[1] - t1 < T ? static_cast<int>(a.size[1] - t1) : T;
      const bool full = n0 == T && n1 == T;
      char* at[N + 1];
#pragma unroll
      for (int k = 0; k <= N; ++k) {
        at[k] = a.base[k] + t0 * a.stride[k][0] + t1 * a.stride[k][1] + b * a.stride[k][2];
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

inline constexpr int kThreads = 256;

// Float ops whose row kernel runs faster with four 16-byte packs per thread than with two
// (H100, 2^26 float32 elements, back-to-back launches: pow 271.4 -> 268.1 us, sigmoid
// 186.8 -> 181.5, erf 183.3 -> 181.3). Others measured stayed with two: exp, log, sin and
// relu ran 0.2-0.8% slower with four, tanh 0.3% faster (within run-to-run spread), atan2 6%
// slower.
template <typename F>
inline constexpr bool kLongMath =
    std::is_same_v<F, PowOp> || std::is_same_v<F, SigmoidOp> || std::is_same_v<F, ErfOp>;

template <typename F, typename C, size_t... I>
auto ResultOf(std::index_sequence<I...>)
    -> decltype(std::declval<const F&>()((static_cast<void>(I), std::declval<C>())...));

inline absl::Status CheckLaunch() {
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("CUDA kernel launch failed: ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

template <typename S, int N, typename F>
absl::Status LaunchTyped(const F& f, const Plan& plan, char* const* base, const LaunchEnv& env) {
  using C = OpMath<S>;
  using R = decltype(ResultOf<F, C>(std::make_index_sequence<N>{}));
  constexpr DType kS = DTypeOf<S>();
  using Out = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
  constexpr DType kOut = DTypeOf<Out>();
  bool same_types = plan.dtypes[0] == kOut;
  for (int k = 1; k <= N; ++k) same_types = same_types && plan.dtypes[k] == kS;

  // Transposed operands: through shared-memory tiles.
  if (same_types && plan.ndim >= 2 && plan.ndim <= 3 &&
      plan.strides[0][0] == static_cast<int64_t>(sizeof(Out)) && plan.sizes[0] >= 16 &&
      plan.sizes[1] >= 16) {
    TileArgs<N + 1> ta{};
    int staged = 0;
    bool other_ok = true;
    ta.size[0] = plan.sizes[0];
    ta.size[1] = plan.sizes[1];
    ta.size[2] = plan.ndim == 3 ? plan.sizes[2] : 1;
    for (int k = 0; k <= N; ++k) {
      ta.base[k] = base[k];
      for (int d = 0; d < 3; ++d) ta.stride[k][d] = d < plan.ndim ? plan.strides[k][d] : 0;
      ta.staged[k] = -1;
      if (k > 0 && plan.strides[k][1] == static_cast<int64_t>(sizeof(S)) &&
          plan.strides[k][0] != static_cast<int64_t>(sizeof(S)) && plan.strides[k][0] != 0) {
        if (staged < 2) {
          ta.staged[k] = static_cast<int8_t>(staged++);
        } else {
          other_ok = false;
        }
      }
    }
    // Offsets within a tile as 32-bit numbers.
    for (int k = 0; k <= N; ++k) {
      for (int d = 0; d < 2; ++d) {
        const int64_t st = ta.stride[k][d];
        other_ok = other_ok && st > -(int64_t{1} << 23) && st < (int64_t{1} << 23);
        ta.stride32[k][d] = static_cast<int32_t>(st);
      }
    }
    if (staged > 0 && other_ok) {
      constexpr int kT = sizeof(S) == 8 ? 32 : 64;
      const int64_t gx = (ta.size[0] + kT - 1) / kT;
      const int64_t gy = std::min<int64_t>((ta.size[1] + kT - 1) / kT, 65535);
      const int64_t gz = std::min<int64_t>(ta.size[2], 65535);
      if (gx <= INT32_MAX) {
        const size_t shared = static_cast<size_t>(staged) * kT * (kT + 1) * sizeof(S);
        TileKernel<S, N, kT><<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy),
                                    static_cast<unsigned>(gz)),
                               256, shared, env.stream>>>(f, ta);
        return CheckLaunch();
      }
    }
  }

  if (plan.ndim <= 3) {
    RowArgs<N + 1> ra{};
    ra.cols = plan.sizes[0];
    ra.inner_rows = plan.ndim >= 2 ? plan.sizes[1] : 1;
    ra.rows = ra.inner_rows * (plan.ndim == 3 ? plan.sizes[2] : 1);
    for (int k = 0; k <= N; ++k) {
      ra.base[k] = base[k];
      ra.row_stride[k] = plan.ndim >= 2 ? plan.strides[k][1] : 0;
      ra.outer_stride[k] = plan.ndim == 3 ? plan.strides[k][2] : 0;
      ra.step[k] = plan.strides[k][0];
      ra.dtype[k] = plan.dtypes[k];
    }
    // Operand k's access for chunks of `elems` elements.
    const auto access = [&](int k, int64_t elems) {
      const int64_t item = ItemSize(plan.dtypes[k]);
      if (k > 0 && (ra.step[k] == 0 || ra.cols == 1)) return Access::kBroadcast;
      const int64_t align = std::min<int64_t>(16, item * elems);
      const bool aligned = reinterpret_cast<uintptr_t>(ra.base[k]) % align == 0 &&
                           ra.row_stride[k] % align == 0 && ra.outer_stride[k] % align == 0;
      return ra.step[k] == item && aligned ? Access::kVector : Access::kStrided;
    };
    // Same-dtype rows, every operand dense or repeated and aligned for 16-byte input packs.
    constexpr int kV = 16 / sizeof(S) > 0 ? static_cast<int>(16 / sizeof(S)) : 1;
    bool fast = same_types && ra.cols % kV == 0;
    for (int k = 0; k <= N && fast; ++k) {
      ra.access[k] = access(k, kV);
      fast = ra.access[k] != Access::kStrided;
    }
    // Blocks: tx threads along a row (enough for its chunks at per_thread each, rounded up to
    // a power of two, at most 256), ty = 256 / tx rows side by side; as many blocks as the
    // data needs (rows past 65535 blocks are strided over).
    const auto grid_for = [&](int64_t chunks_per_row, int per_thread, dim3* grid, dim3* block) {
      const int64_t threads_per_row = (chunks_per_row + per_thread - 1) / per_thread;
      int tx = 1;
      while (tx < 256 && tx < threads_per_row) tx *= 2;
      const int ty = 256 / tx;
      const int64_t bx = std::max<int64_t>(
          1, std::min<int64_t>((threads_per_row + tx - 1) / tx, INT32_MAX));
      const int64_t by = std::max<int64_t>(
          1, std::min<int64_t>({(ra.rows + ty - 1) / ty, int64_t{65535}}));
      *grid = dim3(static_cast<unsigned>(bx), static_cast<unsigned>(by));
      *block = dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty));
    };
    dim3 grid, block;
    if (fast) {
      // Two packs per thread for 4- and 8-byte types, four for the float ops whose long
      // dependent math needs more independent elements in flight; one for narrower types,
      // whose 16-byte packs already carry 8 or 16 elements.
      constexpr int kU = sizeof(S) == 4 && kLongMath<F> ? 4 : sizeof(S) >= 4 ? 2 : 1;
      grid_for(ra.cols / kV, kU, &grid, &block);
      RowKernel<S, N, kV, kU><<<grid, block, 0, env.stream>>>(f, ra);
    } else {
      constexpr int kE = sizeof(S) == 8 ? 4 : 8;
      for (int k = 0; k <= N; ++k) ra.access[k] = access(k, kE);
      grid_for((ra.cols + kE - 1) / kE, 1, &grid, &block);
      CastRowKernel<S, N, kE><<<grid, block, 0, env.stream>>>(f, ra);
    }
    return CheckLaunch();
  }

  // Any rank: the general kernel, one launch per piece of the plan whose indices fit 32 bits
  // (one piece below 2^31 elements and 2 GiB of reach per operand).
  for (const Plan& piece : SplitForIndexing(plan)) {
    KernelArgs<N + 1> a{};
    a.ndim = piece.ndim;
    a.numel = static_cast<uint32_t>(piece.numel);
    for (int d = 0; d < piece.ndim; ++d) {
      a.div[d] = MakeFastDivisor(static_cast<uint32_t>(piece.sizes[d]));
      // A dim of one element may keep a stride past 32 bits; its index is always 0.
      for (int k = 0; k <= N; ++k) {
        a.strides[k][d] = piece.sizes[d] > 1 ? static_cast<int32_t>(piece.strides[k][d]) : 0;
      }
    }
    for (int k = 0; k <= N; ++k) {
      a.base[k] = base[k] + (piece.offsets[k] - plan.offsets[k]);
      a.dtypes[k] = plan.dtypes[k];
    }
    // Blocks enough for every SM to hold its fill of threads a few times over; the kernel
    // strides over the rest.
    const int64_t max_blocks = int64_t{env.multiprocessors} * 16;
    const int64_t blocks_needed = (piece.numel + kThreads - 1) / kThreads;
    const int blocks = static_cast<int>(std::min(blocks_needed, max_blocks));
    if (blocks == 0) continue;
    GeneralKernel<S, N><<<blocks, kThreads, 0, env.stream>>>(f, a);
    if (absl::Status s = CheckLaunch(); !s.ok()) return s;
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
