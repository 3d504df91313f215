// CPU loops over a Plan. Work is split into rows of the fastest-moving dim and handed to the
// thread pool in chunks; each row is processed in blocks of kBlock elements:
//   inputs whose dtype is the compute type and that are dense are read in place, others are
//   converted into a small buffer first (casting while loading, never through a temporary
//   tensor); the functor runs over plain arrays, which the compiler vectorizes; the result is
//   written in place or converted while storing.
// Plans the planner gave the tile kernel (Kernel::kTiles: a transposed operand) are walked in
// kTile0 x kTile1 tiles, the staged operands copied into a buffer along their own dense dim,
// so that both the operand read across its rows and the one read along them stay in cache.
// Every other kernel family (kRows, kCastRows, kGeneral) runs as rows.
// Compiled once per vector extension level (kernels/cpu/isa.h), each in its own namespace.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kernels/cpu/half_rows.h"
#include "kernels/cpu/store_path.h"
#include "util/thread_pool.h"
#include "kernels/ops/op_spec.h"
#include "kernels/planner.h"
#include "kernels/scalar_types.h"
#include "kernels/cpu/isa.h"

#include "kernels/cpu/isa_begin.inc"

namespace tc::cpu {
inline namespace TC_CPU_ISA_NS {

// Elements per chunk handed to one thread: below this, threading costs more than it saves.
inline constexpr int64_t kGrain = 32768;
// Elements per block of a row: buffers of this size stay in L1.
inline constexpr int64_t kBlock = 256;
// Tile for permuted layouts: kTile0 along the output's fast dim, kTile1 along the dim the
// permuted operand moves fastest in. Long rows keep the dense operands streaming; 16 steps of
// the permuted operand's fast dim cover a 64-byte line of float32. Measured on the 2-core
// machine against 64x64, 128x32, 256x16, 1024x8 and others (bench/results).
inline constexpr int64_t kTile0 = 512;
inline constexpr int64_t kTile1 = 16;

// Casting goes through the compute dtype's storage type S, as if every input had first been
// converted to the common dtype: an int32 input of a float16 computation becomes float16 (and
// may overflow to infinity) before it is widened to float for the arithmetic.
template <typename S, typename C, typename X>
C LoadAs(X x) {
  return static_cast<C>(Convert<S>(x));
}

// The result of a half-precision computation is rounded to the half type before any other
// output conversion; bool results are stored as they are.
template <typename S, typename Out, typename R>
Out StoreAs(R r) {
  if constexpr (std::is_same_v<R, bool>) {
    return Convert<Out>(r);
  } else {
    return Convert<Out>(Convert<S>(r));
  }
}

// HalfToFloatRow / FloatToHalfRow for T = float, behind a template so that the branches that
// never call them (other T, discarded by if constexpr inside generic lambdas) need not
// resolve them: clang checks such calls where GCC does not.
template <typename T>
void HalfRowToFloat(const uint16_t* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float>) HalfToFloatRow(src, dst, n);
}
template <typename T>
void FloatRowToHalf(const T* src, uint16_t* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float>) FloatToHalfRow(src, dst, n);
}

// dst[i] = element i of a row of dtype `src` in compute type C, for n elements `stride` bytes
// apart.
template <typename S, typename C>
void LoadRow(DType src, const char* p, int64_t stride, int64_t n, C* __restrict dst) {
  VisitDType(src, [&](auto tag) {
    using X = typename decltype(tag)::type;
    if (stride == 0) {
      std::fill(dst, dst + n, LoadAs<S, C>(*reinterpret_cast<const X*>(p)));
    } else if (stride == static_cast<int64_t>(sizeof(X))) {
      if constexpr (std::is_same_v<X, Half> && std::is_same_v<C, float> &&
                    (std::is_same_v<S, Half> || std::is_same_v<S, float>)) {
        // Exact either way: a float16 value widens to float without rounding.
        HalfRowToFloat(reinterpret_cast<const uint16_t*>(p), dst, n);
        return;
      }
      const X* __restrict s = reinterpret_cast<const X*>(p);
      for (int64_t i = 0; i < n; ++i) dst[i] = LoadAs<S, C>(s[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        dst[i] = LoadAs<S, C>(*reinterpret_cast<const X*>(p + i * stride));
    }
  });
}

// The inverse: stores n results of type R as dtype `dst`.
template <typename S, typename R>
void StoreRow(DType dst, const R* __restrict src, char* p, int64_t stride, int64_t n) {
  VisitDType(dst, [&](auto tag) {
    using X = typename decltype(tag)::type;
    if (stride == static_cast<int64_t>(sizeof(X))) {
      if constexpr (std::is_same_v<X, Half> && std::is_same_v<R, float> &&
                    (std::is_same_v<S, Half> || std::is_same_v<S, float>)) {
        // One rounding, float to float16, in both cases.
        FloatRowToHalf(src, reinterpret_cast<uint16_t*>(p), n);
        return;
      }
      X* __restrict d = reinterpret_cast<X*>(p);
      for (int64_t i = 0; i < n; ++i) d[i] = StoreAs<S, X>(src[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<X*>(p + i * stride) = StoreAs<S, X>(src[i]);
    }
  });
}

template <typename F, typename C, size_t... I>
auto ResultOf(std::index_sequence<I...>)
    -> decltype(std::declval<const F&>()((static_cast<void>(I), std::declval<C>())...));
template <typename F, typename C, int N>
using Result = decltype(ResultOf<F, C>(std::make_index_sequence<N>{}));

template <typename F, typename R, typename C>
void Apply(const F& f, R* __restrict out, const C* const* in, int64_t m,
           std::integral_constant<int, 1>) {
  if constexpr (kHasHostFloatRow<F> && std::is_same_v<C, float> && std::is_same_v<R, float>) {
    F::HostFloatRow(in[0], out, m);
    return;
  }
  const C* __restrict a = in[0];
  for (int64_t i = 0; i < m; ++i) out[i] = f(a[i]);
}
template <typename F, typename R, typename C>
void Apply(const F& f, R* __restrict out, const C* const* in, int64_t m,
           std::integral_constant<int, 2>) {
  if constexpr (kHasHostFloatRow<F> && std::is_same_v<C, float> && std::is_same_v<R, float>) {
    F::HostFloatRow(in[0], in[1], out, m);
    return;
  }
  const C* __restrict a = in[0];
  const C* __restrict b = in[1];
  for (int64_t i = 0; i < m; ++i) out[i] = f(a[i], b[i]);
}
template <typename F, typename R, typename C>
void Apply(const F& f, R* __restrict out, const C* const* in, int64_t m,
           std::integral_constant<int, 3>) {
  const C* __restrict a = in[0];
  const C* __restrict b = in[1];
  const C* __restrict c = in[2];
  for (int64_t i = 0; i < m; ++i) out[i] = f(a[i], b[i], c[i]);
}

// A row that needs no staging: every input dense in the compute type or one value repeated
// (stride 0), the output dense and written in place. One pass, a repeated value held in a
// register, instead of blocks through L1 buffers: the blocks' bookkeeping cost memory-bound
// rows about a sixth of their rate on the 2-core AMD machine. Returns false where the operand
// shapes are not covered (three inputs with one repeated), for the blocked loop to run.
template <typename F, typename R, typename C>
bool DirectRow(const F& f, R* __restrict out, const char* const* in, const bool* repeated,
               int64_t n, std::integral_constant<int, 1>) {
  const C* __restrict a = reinterpret_cast<const C*>(in[0]);
  if (repeated[0]) {
    std::fill(out, out + n, f(*a));
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i]);
  }
  return true;
}
template <typename F, typename R, typename C>
bool DirectRow(const F& f, R* __restrict out, const char* const* in, const bool* repeated,
               int64_t n, std::integral_constant<int, 2>) {
  const C* __restrict a = reinterpret_cast<const C*>(in[0]);
  const C* __restrict b = reinterpret_cast<const C*>(in[1]);
  if (!repeated[0] && !repeated[1]) {
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
  } else if (!repeated[0]) {
    const C y = *b;
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], y);
  } else if (!repeated[1]) {
    const C x = *a;
    for (int64_t i = 0; i < n; ++i) out[i] = f(x, b[i]);
  } else {
    std::fill(out, out + n, f(*a, *b));
  }
  return true;
}
template <typename F, typename R, typename C>
bool DirectRow(const F& f, R* __restrict out, const char* const* in, const bool* repeated,
               int64_t n, std::integral_constant<int, 3>) {
  if (repeated[0] || repeated[1] || repeated[2]) return false;
  const C* __restrict a = reinterpret_cast<const C*>(in[0]);
  const C* __restrict b = reinterpret_cast<const C*>(in[1]);
  const C* __restrict c = reinterpret_cast<const C*>(in[2]);
  for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i], c[i]);
  return true;
}

// Copies an n0 x n1 tile (byte strides s0, s1; s1 the smaller) into `dst` laid out with dim 0
// fastest: dst[i1][i0]. Reads walk dim 1, the source's fast dim.
template <typename T>
void StageTileTyped(const char* src, int64_t s0, int64_t s1, int64_t n0, int64_t n1, char* dst) {
  T* d = reinterpret_cast<T*>(dst);
  for (int64_t i0 = 0; i0 < n0; ++i0) {
    const char* p = src + i0 * s0;
    for (int64_t i1 = 0; i1 < n1; ++i1) d[i1 * n0 + i0] = *reinterpret_cast<const T*>(p + i1 * s1);
  }
}

inline void StageTile(const char* src, int64_t s0, int64_t s1, int64_t item, int64_t n0, int64_t n1,
                      char* dst) {
  switch (item) {
    case 1:
      return StageTileTyped<uint8_t>(src, s0, s1, n0, n1, dst);
    case 2:
      return StageTileTyped<uint16_t>(src, s0, s1, n0, n1, dst);
    case 4:
      return StageTileTyped<uint32_t>(src, s0, s1, n0, n1, dst);
    default:
      return StageTileTyped<uint64_t>(src, s0, s1, n0, n1, dst);
  }
}

// Outputs larger than this are written with non-temporal stores where the machine gains by it
// (LargeOutputStores): they would not stay in cache anyway, and streaming them saves reading
// every output line before writing it.
inline constexpr int64_t kStreamBytes = int64_t{8} << 20;

// Copies n bytes from an L1 buffer to `dst` bypassing the caches where both are 16-byte
// aligned; plain copy otherwise.
inline void StreamCopy(char* dst, const char* src, int64_t n) {
#if defined(__SSE2__)
  if (reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i),
                       _mm_load_si128(reinterpret_cast<const __m128i*>(src + i)));
    }
    std::memcpy(dst + i, src + i, n - i);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

inline void StreamFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// One row of n elements: operand k starts at ptrs[k] and steps strides[k] bytes. S is the
// compute dtype's storage type, C = OpMath<S> the type the functor computes in.
template <typename S, int N, typename F>
void Row(const F& f, char* const* ptrs, const int64_t* strides, const DType* dtypes, int64_t n,
         bool stream) {
  using C = OpMath<S>;
  using R = Result<F, C, N>;
  // In place only where no conversion is due: half types always convert (to float and back).
  constexpr bool kInPlace = std::is_same_v<S, C>;
  constexpr DType kS = DTypeOf<S>(), kR = DTypeOf<R>();
  constexpr bool kOutInPlace = std::is_same_v<R, bool> || kInPlace;
  if constexpr (kInPlace && !kHasHostFloatRow<F>) {
    const bool dense_out =
        kOutInPlace && dtypes[0] == kR && strides[0] == static_cast<int64_t>(sizeof(R));
    bool direct = dense_out && !stream;
    bool repeated[N];
    for (int k = 0; k < N && direct; ++k) {
      repeated[k] = strides[k + 1] == 0;
      direct =
          dtypes[k + 1] == kS && (repeated[k] || strides[k + 1] == static_cast<int64_t>(sizeof(C)));
    }
    if (direct && DirectRow<F, R, C>(f, reinterpret_cast<R*>(ptrs[0]), ptrs + 1, repeated, n,
                                     std::integral_constant<int, N>{})) {
      return;
    }
  }
  alignas(64) C buf[N][kBlock];
  alignas(64) R obuf[kBlock];
  const C* in[N] = {};
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t m = std::min(kBlock, n - start);
    for (int k = 0; k < N; ++k) {
      const char* p = ptrs[k + 1] + start * strides[k + 1];
      if (kInPlace && dtypes[k + 1] == kS && strides[k + 1] == static_cast<int64_t>(sizeof(C))) {
        in[k] = reinterpret_cast<const C*>(p);
      } else if (strides[k + 1] != 0 || start == 0) {  // a repeated value is loaded once
        LoadRow<S, C>(dtypes[k + 1], p, strides[k + 1], m, buf[k]);
        in[k] = buf[k];
      }
    }
    char* op = ptrs[0] + start * strides[0];
    const bool dense_out =
        kOutInPlace && dtypes[0] == kR && strides[0] == static_cast<int64_t>(sizeof(R));
    const bool direct = dense_out && !stream;
    R* out = direct ? reinterpret_cast<R*>(op) : obuf;
    Apply(f, out, in, m, std::integral_constant<int, N>{});
    if (dense_out && stream) {
      StreamCopy(op, reinterpret_cast<const char*>(obuf), m * static_cast<int64_t>(sizeof(R)));
    } else if (!direct) {
      StoreRow<S, R>(dtypes[0], obuf, op, strides[0], m);
    }
  }
}

// Applies f to every element of the plan, computing in OpMath<S>; `base[k]` points at operand
// k's element (0, ..., 0). Returns the kernel family it ran: kTiles, or kRows for the row loop.
// `stream_output`: stream the output whatever its size (LaunchEnv::stream_output).
template <typename S, int N, typename F>
Kernel Elementwise(const Plan& plan, char* const* base, const F& f, ThreadPool& pool,
                   bool stream_output = false) {
  const bool tiles = plan.kernel == Kernel::kTiles;
  if (plan.numel == 0) return tiles ? Kernel::kTiles : Kernel::kRows;
  const int nops = N + 1;
  const bool stream =
      !tiles && (stream_output || (plan.numel * ItemSize(plan.out_dtype) >= kStreamBytes &&
                                   LargeOutputStores().streaming));
  int64_t row_strides[kMaxOperands];
  for (int k = 0; k < nops; ++k) row_strides[k] = plan.strides[k][0];

  auto pointers = [&](const int64_t* idx, char** ptrs) {
    for (int k = 0; k < nops; ++k) {
      int64_t off = 0;
      for (int d = 0; d < plan.ndim; ++d) off += idx[d] * plan.strides[k][d];
      ptrs[k] = base[k] + off;
    }
  };

  if (tiles) {
    // Staged inputs (dense along dim 1, not along dim 0): each tile of them is copied into a
    // small buffer along their own dense dim, so both the copy and the rows that read the
    // buffer walk memory in order.
    bool staged[kMaxOperands] = {};
    for (int k = 1; k < nops; ++k) staged[k] = plan.staged[k] >= 0;
    const int64_t s0 = plan.sizes[0], s1 = plan.sizes[1];
    const int64_t t0 = (s0 + kTile0 - 1) / kTile0, t1 = (s1 + kTile1 - 1) / kTile1;
    const int64_t outer = plan.numel / (s0 * s1);
    const int64_t tiles = t0 * t1 * outer;
    pool.ParallelFor(
        tiles, std::max<int64_t>(1, kGrain / (kTile0 * kTile1)), [&](int64_t begin, int64_t end) {
          // Staging buffers, one per operand (64 KiB each at most): on the heap, not the stack.
          constexpr int64_t kStageBytes = kTile0 * kTile1 * 8;
          std::unique_ptr<char[]> stage_storage(new char[kMaxOperands * kStageBytes]);
          char* stage[kMaxOperands];
          for (int k = 0; k < kMaxOperands; ++k) stage[k] = stage_storage.get() + k * kStageBytes;
          int64_t strides[kMaxOperands];
          for (int k = 0; k < nops; ++k)
            strides[k] = staged[k] ? ItemSize(plan.dtypes[k]) : row_strides[k];
          for (int64_t t = begin; t < end; ++t) {
            int64_t idx[kMaxRank] = {};
            int64_t rest = t;
            const int64_t j0 = rest % t0 * kTile0;
            rest /= t0;
            const int64_t j1 = rest % t1 * kTile1;
            rest /= t1;
            for (int d = 2; d < plan.ndim; ++d) {
              idx[d] = rest % plan.sizes[d];
              rest /= plan.sizes[d];
            }
            const int64_t n0 = std::min(kTile0, s0 - j0), n1 = std::min(kTile1, s1 - j1);
            idx[0] = j0;
            idx[1] = j1;
            char* corner[kMaxOperands];
            pointers(idx, corner);
            for (int k = 1; k < nops; ++k) {
              if (staged[k])
                StageTile(corner[k], plan.strides[k][0], plan.strides[k][1],
                          ItemSize(plan.dtypes[k]), n0, n1, stage[k]);
            }
            for (int64_t i1 = 0; i1 < n1; ++i1) {
              char* ptrs[kMaxOperands];
              for (int k = 0; k < nops; ++k) {
                ptrs[k] = staged[k] ? stage[k] + i1 * n0 * strides[k]
                                    : corner[k] + i1 * plan.strides[k][1];
              }
              Row<S, N>(f, ptrs, strides, plan.dtypes, n0, false);
            }
          }
        });
    return Kernel::kTiles;
  }

  pool.ParallelFor(plan.numel, kGrain, [&](int64_t begin, int64_t end) {
    int64_t idx[kMaxRank] = {};
    int64_t rest = begin;
    for (int d = 0; d < plan.ndim; ++d) {
      idx[d] = rest % plan.sizes[d];
      rest /= plan.sizes[d];
    }
    for (int64_t pos = begin; pos < end;) {
      char* ptrs[kMaxOperands];
      pointers(idx, ptrs);
      const int64_t n = std::min(plan.sizes[0] - idx[0], end - pos);
      Row<S, N>(f, ptrs, row_strides, plan.dtypes, n, stream);
      pos += n;
      idx[0] += n;
      for (int d = 0; d + 1 < plan.ndim && idx[d] == plan.sizes[d]; ++d) {
        idx[d] = 0;
        ++idx[d + 1];
      }
    }
    if (stream) StreamFence();
  });
  return Kernel::kRows;
}

}  // namespace TC_CPU_ISA_NS
}  // namespace tc::cpu

#include "kernels/cpu/isa_end.inc"
