// CUDA kernels for any op of the catalog, and the launcher that runs the one the plan chose.
// Instantiated per op group in ops_*.cu so that the groups compile in parallel.
//
// Four kernel families per op and compute type (and `where`'s own rows kernel); the planner
// chooses one for each plan (Plan::kernel) and the launcher runs it, checking only the alignment of
// the pointers it is given:
// - tiles: two dims (and a batch dim) where an input is dense along the dim the output is
//   not (transposed input or output, channels-first against channels-last), every operand
//   of the op's own types, or for a cast any two (converted as they are read and written);
//   read and written coalesced through shared-memory tiles;
// - same-dtype rows, vectorized: rows of `cols` elements along dim 0, the rows themselves over the
//   other dims, the output dense along a row and each input dense along it or one element repeated
//   (stride 0), any row strides. That is contiguous data, a scalar tensor, row (bias) and column
//   broadcasts, per-channel NCHW and NHWC, outer products, and for binary ops broadcasts whose dims
//   alternate between the operands (rank 4 to 8, nothing coalesces; a kernel variant of their own,
//   aligned operands only). 16-byte accesses (two per operand per thread for 4- and 8-byte types)
//   when every row start is aligned for them (misaligned dense inputs of 1- and 2-byte types loaded
//   as the aligned blocks around them, shifted into place); bitwise and logical ops on whole 32-bit
//   words; short rows share a block;
// - rows with dynamic casting: the same rows (up to three dims) with any operand dtypes (mixed
//   inputs, casts, `where` with a bool condition) and any steps along a row (strided slices,
//   misaligned offsets), converted in registers; vector accesses for whichever operands allow them,
//   misaligned dense ones of 8- and 16-byte chunks shifted into place; `where` whose values have
//   the output's dtype takes a kernel of its own in these rows (WhereRowKernel: bits chosen by byte
//   masks, nothing converted);
// - general: any rank and strides (0 and negative included) and any operand dtypes,
//   offsets from the linear index per dimension by 32-bit multiply-and-shift division;
//   plans of 2^31 elements or more, or reaching past 2 GiB in an operand, run as pieces
//   that fit 32-bit index math (SplitForIndexing).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cast_row_kernel.cuh"
#include "kernels/gpu/fast_divisor.h"
#include "kernels/cuda/general_kernel.cuh"
#include "kernels/cuda/launch_env.h"
#include "kernels/cuda/row_kernel.cuh"
#include "kernels/cuda/tile_kernel.cuh"
#include "kernels/cuda/where_kernel.cuh"
#include "kernels/engine.h"
#include "kernels/ops/op_list.h"
#include "kernels/planner.h"

namespace tc::cuda {

inline constexpr int kThreads = 256;

template <typename F, typename C, size_t... I>
auto ResultOf(std::index_sequence<I...>)
    -> decltype(std::declval<const F&>()((static_cast<void>(I), std::declval<C>())...));

inline absl::Status CheckLaunch() {
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("CUDA kernel launch failed: ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

// The grid of T0 x T1 tiles over tile dims 0 (x) and 1 (y), the batches in z; a block
// loops over what y and z do not reach.
template <int kOps>
dim3 TileGrid(const TileArgs<kOps>& ta, int T0, int T1) {
  const int64_t gx = (ta.size[0] + T0 - 1) / T0;
  const int64_t gy = std::min<int64_t>((ta.size[1] + T1 - 1) / T1, 65535);
  const int64_t gz = std::min<int64_t>(ta.batches, 65535);
  return dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(gz));
}

// kTiles: T0 x T1 tiles, one block each, the batches in z. Square ones (64, 32 for 8-byte
// types) unless the output's dim 0 is at most half a square's side while dim 1 is long: then
// 16 along dim 0 and as many elements in all; those too where tile dims are fused (kFused).
template <typename S, int N, int T0, int T1, bool kSame, bool kFused = false, typename F>
absl::Status LaunchTileShape(const F& f, const TileArgs<N + 1>& ta, int num_staged,
                             cudaStream_t stream) {
  const size_t shared = static_cast<size_t>(num_staged) * T0 * (T1 + TilePad<S, T0>()) * sizeof(S);
  TileKernel<S, N, T0, T1, kSame, kFused><<<TileGrid(ta, T0, T1), 256, shared, stream>>>(f, ta);
  return CheckLaunch();
}

// The tile kernel's arguments for `plan` (kTiles): tile dims 0 and 1, fused as Plan::fused
// says (TileArgs::bits), and the batch dims left.
template <int kOps>
absl::Status MakeTileArgs(const Plan& plan, char* const* base, TileArgs<kOps>* out) {
  TileArgs<kOps>& ta = *out;
  ta = {};
  // Plan dims that are the outer parts of fused tile dims are no batch dims.
  const auto outer = [&plan](int d) { return d == plan.fused[0] || d == plan.fused[1]; };
  ta.size[0] = plan.sizes[0];
  ta.size[1] = plan.sizes[1];
  ta.batch_dims = 0;
  ta.batches = 1;
  for (int d = 2; d < plan.ndim; ++d) {
    if (outer(d)) continue;
    ta.batch_size[ta.batch_dims++] = plan.sizes[d];
    ta.batches *= plan.sizes[d];
  }
  if (ta.batches < (int64_t{1} << 31)) {
    for (int i = 0; i < ta.batch_dims; ++i) {
      ta.batch_div[i] = MakeFastDivisor(static_cast<uint32_t>(ta.batch_size[i]));
    }
  }
  for (int k = 0; k < kOps; ++k) {
    ta.base[k] = base[k];
    for (int d = 0; d < 2; ++d) {
      ta.stride[k][d] = plan.strides[k][d];
      // Within a tile, offsets fit 32 bits (the planner checked the strides).
      ta.stride32[k][d] = static_cast<int32_t>(plan.strides[k][d]);
    }
    int b = 0;
    for (int d = 2; d < plan.ndim; ++d) {
      if (!outer(d)) ta.batch_stride[k][b++] = plan.strides[k][d];
    }
    ta.staged[k] = plan.staged[k];
    ta.dtype[k] = plan.dtypes[k];
  }
  if (plan.fused[0] < 0) return absl::OkStatus();
  // Tiles 16 or 128 deep, dim 0 fused; dim 1 fused or alone (bits 30: never reached in a
  // tile).
  if (plan.fused[0] != 2 || (plan.fused[1] >= 0 && plan.fused[1] != 3)) {
    return absl::InternalError("fused tile dims the CUDA tile kernel does not take");
  }
  for (int j = 0; j < 2; ++j) {
    const int o = plan.fused[j];
    const int64_t inner = plan.sizes[j];
    if (o >= 0 && (inner & (inner - 1)) != 0) {
      return absl::InternalError("a fused tile dim's inner size is no power of two");
    }
    if (o >= 0 && j == 0 && 16 % inner != 0) {
      return absl::InternalError("a fused tile dim 0 longer than the tile");
    }
    ta.bits[j] = o >= 0 ? __builtin_ctzll(static_cast<uint64_t>(inner)) : 30;
    ta.mask[j] = static_cast<int32_t>((int64_t{1} << ta.bits[j]) - 1);
    ta.size[j] = o >= 0 ? inner * plan.sizes[o] : inner;
    for (int k = 0; k < kOps; ++k) {
      ta.outer[k][j] = o >= 0 ? plan.strides[k][o] : plan.strides[k][j] * (int64_t{1} << 30);
      ta.outer32[k][j] = o >= 0 ? static_cast<int32_t>(plan.strides[k][o]) : 0;
    }
  }
  return absl::OkStatus();
}

// Whether operand k, of `item`-byte elements, is dense along tile dim d and starts every
// line and batch of its tiles on a 4-byte boundary: the tiles that move 1- and 2-byte
// elements in words may take it (WordTileKernel, PairedTileKernel, CastTileKernel).
template <int kOps>
bool LinesOnWords(const TileArgs<kOps>& ta, int k, int d, int64_t item) {
  if (ta.stride[k][d] != item || ta.stride[k][1 - d] % 4 != 0) return false;
  if (reinterpret_cast<uintptr_t>(ta.base[k]) % 4 != 0) return false;
  for (int i = 0; i < ta.batch_dims; ++i) {
    if (ta.batch_stride[k][i] % 4 != 0) return false;
  }
  return true;
}

// Whether the word tiles take a plan of 1- or 2-byte operands (WordTileKernel): each input
// staged dense along dim 1, every other operand dense along dim 0, all on words.
template <int kOps>
bool WordTilesFit(const Plan& plan, const TileArgs<kOps>& ta, int64_t item) {
  if (plan.fused[0] >= 0) return false;
  for (int k = 0; k < kOps; ++k) {
    if (!LinesOnWords(ta, k, k > 0 && ta.staged[k] >= 0 ? 1 : 0, item)) return false;
  }
  return true;
}

// Word tiles of T0 = 32 * P lines by kW1 * T0 (WordTileKernel).
template <typename S, int N, int kW1, int kMinBlocks, typename F>
absl::Status LaunchWordTileShape(const F& f, const TileArgs<N + 1>& ta, int num_staged,
                                 cudaStream_t stream) {
  constexpr int P = 4 / sizeof(S), T0 = 32 * P;
  const size_t shared = static_cast<size_t>(num_staged) * (T0 / P) * (kW1 * T0 + 1) * 4;
  WordTileKernel<S, N, kW1, kMinBlocks><<<TileGrid(ta, T0, kW1 * T0), 256, shared, stream>>>(f, ta);
  return CheckLaunch();
}

// Tiles typed for the dtypes of a plan of mixed dtypes, where one applies: casts between
// float32 and float16/bfloat16 or between int32 and float32, and float32 add, sub, mul and div
// with a staged float16/bfloat16 operand (one staged input, no fused dims). False (nothing
// launched) for any other plan: those take the tiles that convert by run-time dtype.
template <typename S, int N, typename F>
bool LaunchTypedTiles(const F& f, const Plan& plan, const TileArgs<N + 1>& ta,
                      cudaStream_t stream) {
  if (plan.fused[0] >= 0 || plan.num_staged != 1) return false;
  const dim3 grid = TileGrid(ta, 64, 64);
  const DType out = plan.dtypes[0];
  const auto two_byte = [](DType t) { return t == DType::kBFloat16 || t == DType::kFloat16; };
  if constexpr (std::is_same_v<F, CastOp> && sizeof(S) == 4) {
    // (A cast computes in the wider dtype, the input's where both are 4 bytes.)
    const DType in = plan.dtypes[1];
    if constexpr (std::is_same_v<S, float>) {
      if (in == DType::kFloat32 && two_byte(out) && LinesOnWords(ta, 0, 0, 2)) {
        if (out == DType::kBFloat16) {
          CastTileKernel<float, BFloat16><<<grid, 256, 0, stream>>>(ta);
        } else {
          CastTileKernel<float, Half><<<grid, 256, 0, stream>>>(ta);
        }
        return true;
      }
      if (two_byte(in) && out == DType::kFloat32 && LinesOnWords(ta, 1, 1, 2)) {
        if (in == DType::kBFloat16) {
          PairedTileKernel<BFloat16, 1, 1><<<grid, 256, 0, stream>>>(f, ta);
        } else {
          PairedTileKernel<Half, 1, 1><<<grid, 256, 0, stream>>>(f, ta);
        }
        return true;
      }
      if (in == DType::kFloat32 && out == DType::kInt32) {
        CastTileKernel<float, int32_t><<<grid, 256, 0, stream>>>(ta);
        return true;
      }
    } else if constexpr (std::is_same_v<S, int32_t>) {
      if (in == DType::kInt32 && out == DType::kFloat32) {
        CastTileKernel<int32_t, float><<<grid, 256, 0, stream>>>(ta);
        return true;
      }
    }
  } else if constexpr (N == 2 && std::is_same_v<S, float> &&
                       (kConvertingTiles<F> & DTypeBit(DType::kFloat32)) != 0) {
    using R = decltype(ResultOf<F, float>(std::make_index_sequence<N>{}));
    if constexpr (std::is_same_v<R, float>) {
      // The staged input 2-byte, the other and the output float32.
      const int k = plan.staged[1] == 0 ? 1 : 2;
      if (out != DType::kFloat32 || plan.dtypes[3 - k] != DType::kFloat32 ||
          !two_byte(plan.dtypes[k]) || !LinesOnWords(ta, k, 1, 2)) {
        return false;
      }
      const bool bf16 = plan.dtypes[k] == DType::kBFloat16;
      if (k == 1 && bf16) PairedTileKernel<BFloat16, 2, 1><<<grid, 256, 0, stream>>>(f, ta);
      if (k == 1 && !bf16) PairedTileKernel<Half, 2, 1><<<grid, 256, 0, stream>>>(f, ta);
      if (k == 2 && bf16) PairedTileKernel<BFloat16, 2, 2><<<grid, 256, 0, stream>>>(f, ta);
      if (k == 2 && !bf16) PairedTileKernel<Half, 2, 2><<<grid, 256, 0, stream>>>(f, ta);
      return true;
    }
  }
  (void)f, (void)grid, (void)out, (void)two_byte;
  return false;
}

template <typename S, int N, typename F>
absl::Status LaunchTiles(const F& f, const Plan& plan, char* const* base, const LaunchEnv& env,
                         bool same_types) {
  TileArgs<N + 1> ta;
  if (absl::Status st = MakeTileArgs(plan, base, &ta); !st.ok()) return st;
  constexpr int kSide = sizeof(S) == 8 ? 32 : 64;
  constexpr int kLong = kSide * kSide / 16;
  if (plan.fused[0] >= 0) {
    if (!same_types) return absl::InternalError("fused tile dims for operands of other dtypes");
    // 4-byte types: 128 x 32 where the fused dim 0 fills such tiles (an eighth of their lines
    // empty at most): output lines 512 bytes long, the staged input's 128, where 16 x 256
    // writes pieces of 64 (H200, a rank-7 permutation of 2^26 float32 elements, its dim 0 8
    // x 16: 80.6-80.8% of copy against 79.7-79.9%; one of 2^21, its dim 0 4 x 8: 34% against
    // 64%; tensorcompute-tile-kernel-bench).
    if constexpr (sizeof(S) == 4) {
      const int64_t lines = (ta.size[0] + 127) / 128 * 128;
      if ((lines - ta.size[0]) * 8 <= lines) {
        return LaunchTileShape<S, N, 128, 32, true, true>(f, ta, plan.num_staged, env.stream);
      }
    }
    return LaunchTileShape<S, N, 16, kLong, true, true>(f, ta, plan.num_staged, env.stream);
  }
  if (!same_types) {
    if (LaunchTypedTiles<S, N>(f, plan, ta, env.stream)) return CheckLaunch();
    // Square tiles only: one more kernel per type, not two. 64 a side for 8-byte types too
    // where one input is staged (33 KiB of shared memory): a transposed float32 cast to
    // float64 ran at 72% of copy in tiles of 32, 95% in tiles of 64 (H200,
    // tensorcompute-tile-kernel-bench).
    constexpr int kConvertSide = sizeof(S) == 8 && N > 1 ? 32 : 64;
    if constexpr ((kConvertingTiles<F> & DTypeBit(DTypeOf<S>())) != 0) {
      return LaunchTileShape<S, N, kConvertSide, kConvertSide, false>(f, ta, plan.num_staged,
                                                                      env.stream);
    } else {
      return absl::InternalError("the plan chose tiles that convert for an op that has none");
    }
  }
  if constexpr (sizeof(S) <= 2) {
    using R = decltype(ResultOf<F, OpMath<S>>(std::make_index_sequence<N>{}));
    if constexpr (!std::is_same_v<R, bool>) {
      // (Where dim 0 fills at least half a word tile's T0 lines.)
      constexpr int64_t kHalfT0 = 16 * (4 / static_cast<int64_t>(sizeof(S)));
      if (ta.size[0] > kHalfT0 && WordTilesFit(plan, ta, int64_t{sizeof(S)})) {
        // 64 x 128 for 2-byte types, 128 x 128 for 1-byte ones (H200: a float16 permutation
        // at 80% of copy in 64 x 128, 69% in 64 x 64; int8 at 73% in 128 x 128, 47% in
        // 128 x 256). Four blocks an SM: asked for six, the 64 x 128 kernel ran at 60%.
        constexpr int kW1 = sizeof(S) == 2 ? 2 : 1;
        return LaunchWordTileShape<S, N, kW1, 4>(f, ta, plan.num_staged, env.stream);
      }
    }
  }
  if (ta.size[0] <= kSide / 2 && ta.size[1] >= kLong / 2) {
    return LaunchTileShape<S, N, 16, kLong, true>(f, ta, plan.num_staged, env.stream);
  }
  return LaunchTileShape<S, N, kSide, kSide, true>(f, ta, plan.num_staged, env.stream);
}

// The row kernels' arguments, with each operand's access for runs of `elems` elements: its
// row starts aligned for them (the plan knows the strides; the pointers are known here).
template <int kOps>
RowArgs<kOps> MakeRowArgs(const Plan& plan, char* const* base, int elems) {
  const RowGeometry& g = plan.rows;
  RowArgs<kOps> ra{};
  ra.cols = g.cols;
  ra.inner_rows = g.inner_rows;
  ra.rows = g.count;
  for (int k = 0; k < kOps; ++k) {
    ra.base[k] = base[k];
    ra.row_stride[k] = plan.ndim >= 2 ? plan.strides[k][1] : 0;
    ra.outer_stride[k] = plan.ndim == 3 ? plan.strides[k][2] : 0;
    ra.step[k] = plan.strides[k][0];
    ra.dtype[k] = plan.dtypes[k];
    const int64_t align = std::min<int64_t>(16, ItemSize(plan.dtypes[k]) * elems);
    if (g.repeated[k]) {
      ra.access[k] = Access::kBroadcast;
    } else if (g.dense[k] && g.stride_align[k] >= align &&
               reinterpret_cast<uintptr_t>(base[k]) % align == 0) {
      ra.access[k] = Access::kVector;
    } else {
      ra.access[k] = Access::kStrided;
    }
  }
  return ra;
}

// Rows over more than two dims: the divisors and strides of each. The planner takes such
// rows only where they number fewer than 2^31.
template <int kOps>
DeepRowArgs<kOps> MakeDeepRowArgs(const Plan& plan, const RowArgs<kOps>& rows) {
  static_assert(kMaxRank - 1 <= kMaxRowDims);
  DeepRowArgs<kOps> ra{};
  static_cast<RowArgs<kOps>&>(ra) = rows;
  ra.dims = plan.ndim - 1;
  for (int d = 1; d < plan.ndim; ++d) {
    ra.size[d - 1] = MakeFastDivisor(static_cast<uint32_t>(plan.sizes[d]));
    for (int k = 0; k < kOps; ++k) ra.stride[k][d - 1] = plan.strides[k][d];
  }
  return ra;
}

// Blocks of the row kernels: tx threads along a row (enough for its chunks at per_thread
// each, rounded up to a power of two, at most `threads`, at least `min_width`, a power of
// two), ty = threads / tx rows side by side;
// as many blocks as the data needs (rows past 65535 blocks are strided over).
inline void RowGrid(int64_t rows, int64_t chunks_per_row, int per_thread, dim3* grid, dim3* block,
                    int threads = 256, int min_width = 1) {
  const int64_t threads_per_row = (chunks_per_row + per_thread - 1) / per_thread;
  int tx = min_width;
  while (tx < threads && tx < threads_per_row) tx *= 2;
  const int ty = threads / tx;
  const int64_t bx =
      std::max<int64_t>(1, std::min<int64_t>((threads_per_row + tx - 1) / tx, INT32_MAX));
  const int64_t by =
      std::max<int64_t>(1, std::min<int64_t>({(rows + ty - 1) / ty, int64_t{65535}}));
  *grid = dim3(static_cast<unsigned>(bx), static_cast<unsigned>(by));
  *block = dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty));
}

// Fewer blocks, at most `blocks` (kernels that loop over their rows and columns in grid-sized
// steps): the grid along the rows shrinks first, then along each row.
inline void CapGrid(int64_t blocks, dim3* grid) {
  const int64_t y = std::min<int64_t>(grid->y, std::max<int64_t>(1, blocks / grid->x));
  const int64_t x = std::min<int64_t>(grid->x, std::max<int64_t>(1, blocks / y));
  *grid = dim3(static_cast<unsigned>(x), static_cast<unsigned>(y));
}

// Blocks of `threads` threads of `kernel` one SM holds at once (1 where that is not known).
template <typename Kernel>
int ResidentBlocks(Kernel kernel, int threads) {
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, 0) != cudaSuccess) {
    (void)cudaGetLastError();  // Not sticky: the grid is then capped lower.
  }
  return std::max(n, 1);
}

// The run lengths the row kernels are compiled for: a 16-byte pack of S in kRows; in
// kCastRows, 8 elements, 2 of 8-byte types (a chunk of 16 bytes of S; casts compute in the
// wider type, so a widening cast writes 16 bytes a chunk: with 8 float32 elements a chunk, a
// float32 -> float64 cast wrote 64 bytes a thread in four accesses, at 63% of copy bandwidth;
// for narrower types 8 elements a chunk measured faster than 16 bytes' worth). The planner
// states the same in Plan::rows (vector_elems, cast_elems), and CheckRowWidths holds the two
// to agreeing.
template <typename S>
inline constexpr int kRowVector = 16 / sizeof(S) > 0 ? static_cast<int>(16 / sizeof(S)) : 1;
template <typename S>
inline constexpr int kCastRun = sizeof(S) == 8 ? 2 : 8;

template <typename S>
absl::Status CheckRowWidths(const Plan& plan, bool rows) {
  if ((rows && plan.rows.vector_elems != kRowVector<S>) || plan.rows.cast_elems != kCastRun<S>) {
    return absl::InternalError(absl::StrCat("the plan's row widths (", plan.rows.vector_elems, ", ",
                                            plan.rows.cast_elems, ") are not the kernels' (",
                                            kRowVector<S>, ", ", kCastRun<S>, ")"));
  }
  return absl::OkStatus();
}

// kRows, where every operand's row start is aligned for 16-byte packs; false (nothing
// launched) where one is not.
// Inputs of 1- and 2-byte types that are dense but misaligned (a row slice, an offset view)
// are taken too by the kernel's shifted variant, for unary and binary ops: the output must be
// aligned. (H200, 2^26 elements: int8 add with one input 3 bytes off 40% -> 90% of copy,
// float16 multiply one element off 71% -> 92%; unary float16/bfloat16 long math one element
// off, against the casting row kernel: sin 56% -> 79%, exp 66% -> 97%, tanh 60% -> 83%,
// sigmoid 75% -> 100%; pow float16 / bfloat16 with x one element off 0.207 / 0.229 ms ->
// 0.175 / 0.184 in 8 rounds of resident blocks; float32 add one element off 100% -> 88%:
// wider types keep the casting row kernel.)
template <typename S, int N, typename F>
bool LaunchRows(const F& f, const Plan& plan, char* const* base, const LaunchEnv& env) {
  constexpr int kV = kRowVector<S>;
  constexpr bool kMayShift = sizeof(S) <= 2 && N <= 2;
  const RowArgs<N + 1> ra = MakeRowArgs<N + 1>(plan, base, kV);
  const bool deep = plan.ndim > 3;
  bool shifted = false;
  for (int k = 0; k <= N; ++k) {
    if (ra.access[k] != Access::kStrided) continue;
    if (!kMayShift || k == 0 || ra.step[k] != static_cast<int64_t>(sizeof(S)) || deep) {
      return false;
    }
    shifted = true;
  }
  // Rows over more than two dims: binary ops only (the planner's rule), every operand aligned.
  if (N != 2 && deep) return false;
  // One pass where the op's form states it (kRowOnePass) and the grid covers every row and
  // pack: rows of two dims, aligned operands; one row of dense operands without row
  // arithmetic.
  constexpr int kOnePassU = kRowOnePass<F>.For(sizeof(S), IsFloating(DTypeOf<S>()));
  if constexpr (kOnePassU > 0) {
    // One row of dense operands: from their bases (FlatRowKernel).
    bool flat = ra.rows == 1;
    for (int k = 1; k <= N; ++k) flat = flat && ra.access[k] == Access::kVector;
    const int64_t flat_blocks = (ra.cols / kV + 128 * kOnePassU - 1) / (128 * kOnePassU);
    flat = flat && flat_blocks <= std::numeric_limits<int32_t>::max();
    if (!shifted && !deep && RowOnePassTakes(f, sizeof(S), flat)) {
      if (flat) {
        FlatRowKernel<S, N, kV, kOnePassU>
            <<<static_cast<unsigned>(flat_blocks), 128, 0, env.stream>>>(f, ra);
        return true;
      }
      dim3 grid, block;
      RowGrid(ra.rows, ra.cols / kV, kOnePassU, &grid, &block, 128);
      if (int64_t{grid.y} * block.y >= ra.rows &&
          int64_t{grid.x} * block.x * kOnePassU >= ra.cols / kV) {
        OnePassRowKernel<S, N, kV, kOnePassU><<<grid, block, 0, env.stream>>>(f, ra);
        return true;
      }
    }
  }
  // Packs per thread: where an op states its own (kRowPacks) that; else two for 4- and
  // 8-byte types, four for float32 long math. Narrower types' 16-byte packs already carry 8
  // or 16 elements: one pack, but two for unary float16/bfloat16 ops, whose math per element
  // is float32 math behind two conversions (on the H200 erf, sin, log 67-69% of copy with one
  // pack, 74-80% with two; binary and integer ops lost 2-18 points with two, but binary
  // float16/bfloat16 math gains with two since packs are held as words: kRowPacks says so).
  constexpr bool kHalfUnary = N == 1 && sizeof(S) == 2 && IsFloating(DTypeOf<S>());
  constexpr int kStated = kRowPacks<F>.For(sizeof(S), IsFloating(DTypeOf<S>()));
  constexpr int kU = kStated > 0                      ? kStated
                     : sizeof(S) == 4 && kLongMath<F> ? 4
                     : sizeof(S) >= 4 || kHalfUnary   ? 2
                                                      : 1;
  // 128-thread blocks: the register file fits more of them than of 256 when the math holds
  // many registers (H200: sigmoid float64 at four packs, 70 registers, 0.287 -> 0.266 ms; log
  // float64 0.317 -> 0.292; float32 ops with fewer registers level).
  dim3 grid, block;
  RowGrid(ra.rows, ra.cols / kV, kU, &grid, &block, 128);
  constexpr int kWaves = kRowWaves<F>.For(sizeof(S), IsFloating(DTypeOf<S>()));
  if constexpr (kWaves > 0) {
    // Capped at kWaves rounds of the blocks the SMs hold at once; the kernel's loops over
    // rows and packs take the rest.
    static const int per_sm = ResidentBlocks(RowKernel<S, N, kV, kU, F>, 128);
    CapGrid(int64_t{kWaves} * per_sm * std::max(env.multiprocessors, 1), &grid);
  }
  if constexpr (kMayShift) {
    if (shifted) {
      RowKernel<S, N, kV, kU, F, kShiftedInputs><<<grid, block, 0, env.stream>>>(f, ra);
      return true;
    }
  }
  if constexpr (N == 2) {
    if (deep) {
      RowKernel<S, N, kV, kU, F, kDeepRows>
          <<<grid, block, 0, env.stream>>>(f, MakeDeepRowArgs(plan, ra));
      return true;
    }
  }
  RowKernel<S, N, kV, kU><<<grid, block, 0, env.stream>>>(f, ra);
  return true;
}

// Rows of 1- and 2-byte types whose output is dense but not aligned for packs (a row slice's
// sum into a contiguous output of odd cols, an output at an odd offset): PeeledRowKernel, for
// unary and binary ops without long math whose operands are all of the op's own dtype, dense
// or repeated along the row; false (nothing launched) for anything else. Two packs a thread
// in blocks of 128 (H200, int8 and float16 [8192, 8189] row slices: 0.0588 and 0.1112 ms;
// one pack 0.0699 and 0.1318, blocks of 256 0.0603 and 0.1140, four packs 0.0772 and 0.1614).
template <typename S, int N, typename F>
bool LaunchPeeledRows(const F& f, const Plan& plan, char* const* base, const LaunchEnv& env) {
  using R = decltype(ResultOf<F, OpMath<S>>(std::make_index_sequence<N>{}));
  if constexpr (N <= 2 && !kLongMath<F> && sizeof(S) <= 2 && !std::is_same_v<R, bool>) {
    constexpr int kV = kRowVector<S>;
    const RowArgs<N + 1> ra = MakeRowArgs<N + 1>(plan, base, kV);
    for (int k = 0; k <= N; ++k) {
      if (plan.dtypes[k] != DTypeOf<S>()) return false;
      if (ra.access[k] != Access::kBroadcast && ra.step[k] != static_cast<int64_t>(sizeof(S))) {
        return false;
      }
    }
    if (ra.access[0] == Access::kBroadcast) return false;
    dim3 grid, block;
    constexpr int kU = 2;
    RowGrid(ra.rows, std::max<int64_t>(1, ra.cols / kV), kU, &grid, &block, 128, 32);
    PeeledRowKernel<S, N, kV, kU, F><<<grid, block, 0, env.stream>>>(f, ra);
    return true;
  } else {
    (void)f, (void)plan, (void)base, (void)env;
    return false;
  }
}

// A float32 add, sub, mul or div over a float16/bfloat16 input and a float32 one, both dense
// along the row, into a float32 output dense along the row but not aligned for packs:
// PeeledPairRowKernel; false (nothing launched) for anything else.
template <typename S, int N, typename F>
bool LaunchPeeledPairRows(const F& f, const Plan& plan, const RowArgs<N + 1>& ra,
                          const LaunchEnv& env) {
  if constexpr (N == 2 && std::is_same_v<S, float> &&
                (kConvertingTiles<F> & DTypeBit(DType::kFloat32)) != 0) {
    using R = decltype(ResultOf<F, float>(std::make_index_sequence<N>{}));
    if constexpr (std::is_same_v<R, float>) {
      if (plan.dtypes[0] != DType::kFloat32 || ra.step[0] != 4) return false;
      for (int k = 1; k <= 2; ++k) {
        if (ra.access[k] == Access::kBroadcast || ra.step[k] != ItemSize(plan.dtypes[k])) {
          return false;
        }
      }
      constexpr int kE = 8, kU = 2;
      dim3 grid, block;
      RowGrid(ra.rows, std::max<int64_t>(1, ra.cols / kE), kU, &grid, &block, 128, 32);
      const DType a = plan.dtypes[1], b = plan.dtypes[2];
      const auto launch = [&](auto ta, auto tb) {
        using TA = typename decltype(ta)::type;
        using TB = typename decltype(tb)::type;
        PeeledPairRowKernel<TA, TB, kE, kU><<<grid, block, 0, env.stream>>>(f, ra);
      };
      if (b == DType::kFloat32 && a == DType::kBFloat16) {
        launch(TypeTag<BFloat16>{}, TypeTag<float>{});
      } else if (b == DType::kFloat32 && a == DType::kFloat16) {
        launch(TypeTag<Half>{}, TypeTag<float>{});
      } else if (a == DType::kFloat32 && b == DType::kBFloat16) {
        launch(TypeTag<float>{}, TypeTag<BFloat16>{});
      } else if (a == DType::kFloat32 && b == DType::kFloat16) {
        launch(TypeTag<float>{}, TypeTag<Half>{});
      } else {
        return false;
      }
      return true;
    }
  }
  (void)f, (void)plan, (void)ra, (void)env;
  return false;
}

// where with a bool condition and values of the output's dtype: WhereRowKernel, one chunk a
// thread (H200, 2^26 elements: 104-113% of copy with one, two or four for every element
// size; fewer registers with one).
template <typename S>
absl::Status LaunchWhereRows(const Plan& plan, char* const* base, const LaunchEnv& env) {
  constexpr int kV = kRowVector<S>;
  const RowArgs<4> ra = MakeRowArgs<4>(plan, base, kV);
  // What the operands need beyond whole aligned chunks: misaligned dense inputs whose chunks
  // shift into place, or element by element (strided operands, a misaligned condition of
  // chunks that do not shift, a misaligned output).
  int mode = kWholeChunks;
  for (int k = 0; k < 4; ++k) {
    if (ra.access[k] != Access::kStrided) continue;
    const bool shifts = k > 0 && ra.step[k] == ItemSize(plan.dtypes[k]) &&
                        (k == 1 ? kShiftable<bool, kV> : kShiftable<S, kV>);
    mode = std::max<int>(mode, shifts ? kShiftedChunks : kAnyStep);
  }
  dim3 grid, block;
  RowGrid(ra.rows, (ra.cols + kV - 1) / kV, 1, &grid, &block, 128);
  if (mode == kWholeChunks) {
    WhereRowKernel<S, kV, 1, kWholeChunks><<<grid, block, 0, env.stream>>>(ra);
  } else if (mode == kShiftedChunks) {
    WhereRowKernel<S, kV, 1, kShiftedChunks><<<grid, block, 0, env.stream>>>(ra);
  } else {
    WhereRowKernel<S, kV, 1, kAnyStep><<<grid, block, 0, env.stream>>>(ra);
  }
  return CheckLaunch();
}

template <typename S, int N, typename F>
absl::Status LaunchCastRows(const F& f, const Plan& plan, char* const* base, const LaunchEnv& env,
                            bool same_types) {
  if constexpr (std::is_same_v<F, WhereOp>) {
    if (plan.dtypes[1] == DType::kBool && plan.dtypes[0] == DTypeOf<S>() &&
        plan.dtypes[2] == DTypeOf<S>() && plan.dtypes[3] == DTypeOf<S>()) {
      return LaunchWhereRows<S>(plan, base, env);
    }
  }
  constexpr int kE = kCastRun<S>;
  // Chunks per thread in flight in SpreadRowKernel: four of 8-byte types (two elements
  // each), two for unary and binary ops of narrower types; ternary ops hold three operands'
  // chunks already (two made a float16 where 0.288 ms on the H200 against 0.194 with one,
  // when it took this kernel).
  constexpr int kU = sizeof(S) == 8 ? (N <= 2 ? 4 : 2) : N <= 2 ? 2 : 1;
  const RowArgs<N + 1> ra = MakeRowArgs<N + 1>(plan, base, kE);
  dim3 grid, block;
  RowGrid(ra.rows, (ra.cols + kE - 1) / kE, kU, &grid, &block);
  // Outputs whose rows are not aligned for vector stores: rows of 1- and 2-byte types that
  // PeeledRowKernel takes (LaunchPeeledRows), and float32 ops over a 2-byte float and a
  // float32 (LaunchPeeledPairRows), go there; the rest are written spread (coalesced
  // across a warp): for compute types of 4 and 8 bytes with any operand dtypes (a float32
  // row slice at 99% of copy instead of 36%), for narrower ones where every operand has the
  // op's own dtype (float16 row slices 31% -> 59% on the H100), which keeps their second
  // kernel small to build. Misaligned inputs beside an aligned output stay packed: a chunk's
  // elements share sectors that L1 keeps (float32 offset by one element at copy speed).
  // Inputs that step over elements along the row (a stride of two or three elements) are
  // read spread too where the compute type is 4 or 8 bytes wide: a warp's loads then share
  // sectors, where a thread's own chunk of strided elements touches a sector per element.
  if constexpr (sizeof(S) >= 4) {
    bool stepping = false;
    for (int k = 1; k <= N; ++k) {
      const int64_t item = ItemSize(plan.dtypes[k]);
      stepping = stepping ||
                 (ra.access[k] == Access::kStrided && ra.step[k] != item && ra.step[k] != -item);
    }
    if (stepping && ra.access[0] != Access::kStrided) {
      SpreadRowKernel<S, N, kE, kU, false><<<grid, block, 0, env.stream>>>(f, ra);
      return CheckLaunch();
    }
  }
  if (ra.access[0] == Access::kStrided) {
    if (same_types && LaunchPeeledRows<S, N>(f, plan, base, env)) return CheckLaunch();
    if (!same_types && LaunchPeeledPairRows<S, N>(f, plan, ra, env)) return CheckLaunch();
    if constexpr (sizeof(S) >= 4) {
      SpreadRowKernel<S, N, kE, kU, false><<<grid, block, 0, env.stream>>>(f, ra);
      return CheckLaunch();
    } else {
      if (same_types) {
        SpreadRowKernel<S, N, kE, kU, true><<<grid, block, 0, env.stream>>>(f, ra);
        return CheckLaunch();
      }
    }
  }
  // CastRowKernel's chunks a thread: fewer where the output is as wide as the compute type.
  // A thread's chunks are stored a block apart, and more of those stores in flight slowed
  // every such case (H200, 2^26 elements, one / two / four chunks a thread, ms): cast int32
  // -> int64 0.220 / 0.222 / 0.249, float16 -> float32 0.106 / 0.113 (two chunks of 8),
  // int8 -> int32 0.091 / 0.094, float32 one element off 0.132 / 0.139, float64 one element
  // off 0.280 / 0.287 / 0.313. Narrowing casts keep more loads in flight (float64 -> float32
  // 0.220 / 0.201 / 0.190), and binary ops of 8-byte types do best at two (add float32 +
  // float64 0.364 against 0.370 at four, float64 one element off 0.424 against 0.440, int32
  // + int64 0.392 against 0.404, float64 into a float32 output 0.306 against 0.335). Unary
  // ops' outputs are as wide as their compute type (bool results aside) but casts', which
  // are told apart at run time: two kernels for the cast op alone.
  using R = decltype(ResultOf<F, OpMath<S>>(std::make_index_sequence<N>{}));
  constexpr bool kCast = std::is_same_v<F, CastOp>;
  if constexpr (kCast) {
    if (ItemSize(plan.dtypes[0]) < static_cast<int64_t>(sizeof(S))) {
      CastRowKernel<S, N, kE, kU><<<grid, block, 0, env.stream>>>(f, ra);
      return CheckLaunch();
    }
  }
  constexpr int kCastRowU = N == 1 && !std::is_same_v<R, bool> ? 1
                            : sizeof(S) == 8 && N == 2         ? 2
                                                               : kU;
  RowGrid(ra.rows, (ra.cols + kE - 1) / kE, kCastRowU, &grid, &block);
  CastRowKernel<S, N, kE, kCastRowU><<<grid, block, 0, env.stream>>>(f, ra);
  return CheckLaunch();
}

// Any rank: the general kernel, one launch per piece of the plan whose indices fit 32 bits
// (one piece below 2^31 elements and 2 GiB of reach per operand).
template <typename S, int N, typename F>
absl::Status LaunchGeneral(const F& f, const Plan& plan, char* const* base, const LaunchEnv& env) {
  using R = decltype(ResultOf<F, OpMath<S>>(std::make_index_sequence<N>{}));
  using Out = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
  bool same_types = plan.dtypes[0] == DTypeOf<Out>();
  for (int k = 1; k <= N; ++k) same_types = same_types && plan.dtypes[k] == DTypeOf<S>();
  int64_t item[kMaxOperands];
  const IterationDims dims = DimsOf(plan, item);
  for (const IndexPiece& piece : SplitForIndexing(dims, plan.numel, item)) {
    const unsigned blocks = GeneralBlocks(piece.numel, env.multiprocessors);
    if (blocks == 0) continue;
    char* at[N + 1];
    for (int k = 0; k <= N; ++k) at[k] = base[k] + piece.offsets[k];
    KernelArgs<N + 1> a = MakeKernelArgs<N + 1>(plan.ndim, piece.sizes, piece.numel,
                                                &dims.strides[0][0], kMaxRank, plan.dtypes, at);
    a.same_types = same_types;
    GeneralKernel<S, N><<<blocks, kGeneralThreads, 0, env.stream>>>(f, a);
    if (absl::Status s = CheckLaunch(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Runs the kernel family the plan chose.
template <typename S, int N, typename F>
absl::Status LaunchTyped(const F& f, const Plan& plan, char* const* base, const LaunchEnv& env) {
  using C = OpMath<S>;
  using R = decltype(ResultOf<F, C>(std::make_index_sequence<N>{}));
  using Out = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
  const auto report = [&env](Kernel k) {
    if (env.ran != nullptr) *env.ran = k;
  };
  // Whether every operand is of the dtypes this functor has (its result type says whether the
  // output is bool). The vectorized rows hold values in S, and so do the tiles but a cast's:
  // the planner chose them only for those dtypes; the cast rows have a narrower kernel for it.
  bool same_types = plan.dtypes[0] == DTypeOf<Out>();
  for (int k = 1; k <= N; ++k) same_types = same_types && plan.dtypes[k] == DTypeOf<S>();
  switch (plan.kernel) {
    case Kernel::kTiles:
    case Kernel::kRows: {
      if (plan.kernel == Kernel::kTiles) {
        if (plan.num_staged < 1 || plan.num_staged > 2) {
          return absl::InternalError(
              "the plan's tiles are beyond the CUDA tile kernel (planned with another TileRule)");
        }
        report(Kernel::kTiles);
        return LaunchTiles<S, N>(f, plan, base, env, same_types);
      }
      if (!same_types) {
        return absl::InternalError(absl::StrCat("the plan chose the ", KernelName(plan.kernel),
                                                " kernel for dtypes it does not take"));
      }
      if (absl::Status st = CheckRowWidths<S>(plan, true); !st.ok()) return st;
      if (LaunchRows<S, N>(f, plan, base, env)) {
        report(Kernel::kRows);
        return CheckLaunch();
      }
      if (plan.ndim > 3) {  // rows over more than two dims whose operands are not aligned
        report(Kernel::kGeneral);
        return LaunchGeneral<S, N>(f, plan, base, env);
      }
      report(Kernel::kCastRows);
      return LaunchCastRows<S, N>(f, plan, base, env, /*same_types=*/true);
    }
    case Kernel::kCastRows: {
      if (absl::Status st = CheckRowWidths<S>(plan, false); !st.ok()) return st;
      report(Kernel::kCastRows);
      return LaunchCastRows<S, N>(f, plan, base, env, same_types);
    }
    case Kernel::kGeneral:
      report(Kernel::kGeneral);
      return LaunchGeneral<S, N>(f, plan, base, env);
  }
  return absl::InternalError("unknown kernel family");
}

template <typename F>
absl::Status LaunchFunctor(const F& f, const PreparedOp& op, char* const* base,
                           const LaunchEnv& env) {
  return VisitDType(op.plan.compute_dtype, [&](auto tag) -> absl::Status {
    using S = typename decltype(tag)::type;
    if constexpr ((F::kComputeTypes & DTypeBit(DTypeOf<S>())) != 0) {
      return LaunchTyped<S, F::kArity>(GpuMath<S>(f), op.plan, base, env);
    } else {
      return absl::InternalError(absl::StrCat("op '", op.op->spec.name, "' has no CUDA kernel for ",
                                              DTypeName(op.plan.compute_dtype)));
    }
  });
}

// A functor of several forms (kForms) runs in kernels built for the form it holds.
template <typename F, int K = 0>
absl::Status LaunchForm(const F& f, const PreparedOp& op, char* const* base, const LaunchEnv& env) {
  if constexpr (K + 1 < kForms<F>) {
    if (f.Form() != K) return LaunchForm<F, K + 1>(f, op, base, env);
  }
  return LaunchFunctor(FixedForm<F, K>{f}, op, base, env);
}

template <typename F>
absl::Status Launch(const PreparedOp& op, char* const* base, const LaunchEnv& env) {
  F f = F::Make(MakeArgs{op.attrs, op.result_type});
  if constexpr (kHasErrorFlag<F>) f.error = env.error;
  if constexpr (kForms < F >> 1) {
    return LaunchForm(f, op, base, env);
  } else {
    return LaunchFunctor(f, op, base, env);
  }
}

}  // namespace tc::cuda

#define TC_CUDA_INSTANTIATE(F) \
  template absl::Status tc::cuda::Launch<tc::F>(const PreparedOp&, char* const*, const LaunchEnv&);
