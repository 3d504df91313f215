// CUDA kernels for any op of the catalog, and the launcher that picks one. Instantiated per op
// group in ops_*.cu so that the groups compile in parallel.
//
// Three kernels per op and compute type:
// - fast, vectorized: at most three dims (rows of `cols` elements, the rows themselves in up
//   to two dims), every operand of the op's own storage type, the output dense along a row
//   and each input either dense along it or one element repeated (stride 0), any row
//   strides. That is contiguous data, a scalar tensor, row (bias) and column broadcasts,
//   per-channel NCHW and NHWC, and outer products. Each thread moves 16 bytes per operand per
//   step when every row start is 16-byte aligned; short rows share a block;
// - the same with one element per step, where alignment or the row length does not allow it
//   (a misaligned storage offset, odd rows);
// - general: any strides (0 and negative included) and any operand dtypes, converted while
//   loading and storing (dynamic casting), offsets from the linear index per dimension, split
//   with 32-bit multiply-and-shift division where the element count is under 2^31.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/launch_env.h"
#include "kernels/engine.h"
#include "kernels/ops/op_list.h"

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

template <int kOps>
struct KernelArgs {
  int ndim;
  int64_t numel;
  int64_t sizes[kMaxRank];
  int64_t strides[kOps][kMaxRank];
  char* base[kOps];
  DType dtypes[kOps];
  // Set when numel < 2^31: element indices split into per-dim indices with 32-bit fast
  // division (every dim but the last, which needs none).
  bool small;
  FastDivisor div[kMaxRank];
};


// Loads element p of dtype t into compute type C through the compute dtype's storage type S
// (as if the input had been converted to the common dtype first).
template <typename S, typename C>
__device__ __forceinline__ C LoadAs(DType t, const char* p) {
  switch (t) {
    case DType::kBool: return static_cast<C>(Convert<S>(*reinterpret_cast<const bool*>(p)));
    case DType::kUInt8: return static_cast<C>(Convert<S>(*reinterpret_cast<const uint8_t*>(p)));
    case DType::kInt8: return static_cast<C>(Convert<S>(*reinterpret_cast<const int8_t*>(p)));
    case DType::kInt16: return static_cast<C>(Convert<S>(*reinterpret_cast<const int16_t*>(p)));
    case DType::kInt32: return static_cast<C>(Convert<S>(*reinterpret_cast<const int32_t*>(p)));
    case DType::kInt64: return static_cast<C>(Convert<S>(*reinterpret_cast<const int64_t*>(p)));
    case DType::kFloat16: return static_cast<C>(Convert<S>(*reinterpret_cast<const Half*>(p)));
    case DType::kBFloat16: return static_cast<C>(Convert<S>(*reinterpret_cast<const BFloat16*>(p)));
    case DType::kFloat32: return static_cast<C>(Convert<S>(*reinterpret_cast<const float*>(p)));
    case DType::kFloat64: break;
  }
  return static_cast<C>(Convert<S>(*reinterpret_cast<const double*>(p)));
}

// Stores a result as dtype t; half-precision results are rounded to S first.
template <typename S, typename R>
__device__ __forceinline__ void StoreAs(DType t, char* p, R r) {
  using V = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
  const V v = Convert<V>(r);
  switch (t) {
    case DType::kBool: *reinterpret_cast<bool*>(p) = Convert<bool>(v); return;
    case DType::kUInt8: *reinterpret_cast<uint8_t*>(p) = Convert<uint8_t>(v); return;
    case DType::kInt8: *reinterpret_cast<int8_t*>(p) = Convert<int8_t>(v); return;
    case DType::kInt16: *reinterpret_cast<int16_t*>(p) = Convert<int16_t>(v); return;
    case DType::kInt32: *reinterpret_cast<int32_t*>(p) = Convert<int32_t>(v); return;
    case DType::kInt64: *reinterpret_cast<int64_t*>(p) = Convert<int64_t>(v); return;
    case DType::kFloat16: *reinterpret_cast<Half*>(p) = Convert<Half>(v); return;
    case DType::kBFloat16: *reinterpret_cast<BFloat16*>(p) = Convert<BFloat16>(v); return;
    case DType::kFloat32: *reinterpret_cast<float*>(p) = Convert<float>(v); return;
    case DType::kFloat64: *reinterpret_cast<double*>(p) = Convert<double>(v); return;
  }
}

template <typename F, typename C, size_t... I>
__device__ __forceinline__ auto Call(const F& f, const C* v, std::index_sequence<I...>) {
  return f(v[I]...);
}

// Rows of the fast kernel: with r = r1 + inner_rows * r2, operand k's row r starts at
// base[k] + r1 * row_stride[k] + r2 * outer_stride[k] (two dims of rows cover per-channel
// NCHW: rows over channels within images); along the row it is dense (inner[k]) or one
// repeated element.
template <int kOps>
struct RowArgs {
  int64_t rows;
  int64_t inner_rows;
  int64_t cols;
  char* base[kOps];
  int64_t row_stride[kOps];
  int64_t outer_stride[kOps];
  bool inner[kOps];
};

// V elements of T in one aligned access (16 bytes for the inputs, V output elements).
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <typename S, int N, int V, typename F>
__global__ void RowKernel(F f, RowArgs<N + 1> a) {
  using C = OpMath<S>;
  using R = decltype(Call(f, static_cast<const C*>(nullptr), std::make_index_sequence<N>{}));
  using Out = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
  const int64_t packs = a.cols / V;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  // Short rows: a block spans several rows (blockDim.y of them).
  for (int64_t r = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y; r < a.rows;
       r += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    int64_t r1 = r, r2 = 0;
    if (a.inner_rows != a.rows) {
      r2 = r / a.inner_rows;
      r1 = r - r2 * a.inner_rows;
    }
    const char* in[N];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      in[k] = a.base[k + 1] + r1 * a.row_stride[k + 1] + r2 * a.outer_stride[k + 1];
    }
    auto* out = reinterpret_cast<Pack<Out, V>*>(a.base[0] + r1 * a.row_stride[0] +
                                                 r2 * a.outer_stride[0]);
    for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < packs;
         p += step) {
      C x[N][V];
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if (a.inner[k + 1]) {
          const Pack<S, V> in_pack = reinterpret_cast<const Pack<S, V>*>(in[k])[p];
#pragma unroll
          for (int j = 0; j < V; ++j) x[k][j] = static_cast<C>(in_pack.v[j]);
        } else {
          const C one = static_cast<C>(*reinterpret_cast<const S*>(in[k]));
#pragma unroll
          for (int j = 0; j < V; ++j) x[k][j] = one;
        }
      }
      Pack<Out, V> y;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        C v[N];
#pragma unroll
        for (int k = 0; k < N; ++k) v[k] = x[k][j];
        y.v[j] = Convert<Out>(Call(f, v, std::make_index_sequence<N>{}));
      }
      out[p] = y;
    }
  }
}

template <typename S, int N, typename F>
__global__ void GeneralKernel(F f, KernelArgs<N + 1> a) {
  using C = OpMath<S>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < a.numel; i += step) {
    int64_t off[N + 1] = {};
    if (a.small) {
      uint32_t rest = static_cast<uint32_t>(i);
      for (int d = 0; d < a.ndim - 1; ++d) {
        const uint32_t q = FastDiv(rest, a.div[d]);
        const int64_t idx = rest - q * a.div[d].d;
        rest = q;
#pragma unroll
        for (int k = 0; k <= N; ++k) off[k] += idx * a.strides[k][d];
      }
#pragma unroll
      for (int k = 0; k <= N; ++k) off[k] += static_cast<int64_t>(rest) * a.strides[k][a.ndim - 1];
    } else {
      int64_t rest = i;
      for (int d = 0; d < a.ndim - 1; ++d) {
        const int64_t q = rest / a.sizes[d];
        const int64_t idx = rest - q * a.sizes[d];
        rest = q;
#pragma unroll
        for (int k = 0; k <= N; ++k) off[k] += idx * a.strides[k][d];
      }
#pragma unroll
      for (int k = 0; k <= N; ++k) off[k] += rest * a.strides[k][a.ndim - 1];
    }
    C v[N];
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = LoadAs<S, C>(a.dtypes[k + 1], a.base[k + 1] + off[k + 1]);
    StoreAs<S>(a.dtypes[0], a.base[0] + off[0], Call(f, v, std::make_index_sequence<N>{}));
  }
}

inline constexpr int kThreads = 256;

template <typename F, typename C, size_t... I>
auto ResultOf(std::index_sequence<I...>)
    -> decltype(std::declval<const F&>()((static_cast<void>(I), std::declval<C>())...));

template <typename S, int N, typename F>
absl::Status LaunchTyped(const F& f, const Plan& plan, char* const* base, const LaunchEnv& env) {
  using C = OpMath<S>;
  using R = decltype(ResultOf<F, C>(std::make_index_sequence<N>{}));
  KernelArgs<N + 1> a{};
  a.ndim = plan.ndim;
  a.numel = plan.numel;
  for (int d = 0; d < plan.ndim; ++d) {
    a.sizes[d] = plan.sizes[d];
    for (int k = 0; k <= N; ++k) a.strides[k][d] = plan.strides[k][d];
  }
  for (int k = 0; k <= N; ++k) {
    a.base[k] = base[k];
    a.dtypes[k] = plan.dtypes[k];
  }
  a.small = plan.numel < (int64_t{1} << 31);
  if (a.small) {
    for (int d = 0; d < plan.ndim; ++d) a.div[d] = MakeFastDivisor(static_cast<uint32_t>(plan.sizes[d]));
  }
  // Blocks enough for every SM to hold its fill of threads a few times over; the kernels
  // stride over the rest.
  const int64_t max_blocks = int64_t{env.multiprocessors} * 16;
  constexpr DType kS = DTypeOf<S>();
  using Out = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
  constexpr DType kOut = DTypeOf<Out>();
  // The fast kernel's shape: rows of plan.sizes[0] elements, plan.sizes[1] rows.
  bool rows_ok = plan.ndim <= 3 && plan.dtypes[0] == kOut &&
                 plan.strides[0][0] == static_cast<int64_t>(sizeof(Out));
  for (int k = 1; k <= N; ++k) {
    rows_ok = rows_ok && plan.dtypes[k] == kS &&
              (plan.strides[k][0] == 0 || plan.strides[k][0] == static_cast<int64_t>(sizeof(S)));
  }
  if (rows_ok) {
    RowArgs<N + 1> ra{};
    ra.cols = plan.sizes[0];
    ra.inner_rows = plan.ndim >= 2 ? plan.sizes[1] : 1;
    ra.rows = ra.inner_rows * (plan.ndim == 3 ? plan.sizes[2] : 1);
    for (int k = 0; k <= N; ++k) {
      ra.base[k] = base[k];
      ra.row_stride[k] = plan.ndim >= 2 ? plan.strides[k][1] : 0;
      ra.outer_stride[k] = plan.ndim == 3 ? plan.strides[k][2] : 0;
      ra.inner[k] = plan.strides[k][0] != 0;
    }
    // 16 bytes per input access, where every row of every operand starts aligned for it.
    constexpr int kV = 16 / sizeof(S) > 0 ? static_cast<int>(16 / sizeof(S)) : 1;
    bool vec = ra.cols % kV == 0;
    for (int k = 0; k <= N; ++k) {
      const int64_t align = k == 0 ? static_cast<int64_t>(sizeof(Out)) * kV : 16;
      if (k > 0 && !ra.inner[k]) continue;
      vec = vec && reinterpret_cast<uintptr_t>(ra.base[k]) % align == 0 &&
            ra.row_stride[k] % align == 0 && ra.outer_stride[k] % align == 0;
    }
    const int v = vec ? kV : 1;
    // A block is kThreads threads: tx along a row (the packs of a row, rounded up to a power
    // of two, at most kThreads), ty = kThreads / tx rows side by side.
    const int64_t packs = ra.cols / v;
    int tx = 1;
    while (tx < kThreads && tx < packs) tx *= 2;
    const int ty = kThreads / tx;
    const int64_t bx = std::max<int64_t>(1, std::min((packs + tx - 1) / tx, max_blocks));
    const int64_t row_blocks = (ra.rows + ty - 1) / ty;
    const int64_t by =
        std::max<int64_t>(1, std::min({row_blocks, max_blocks / bx, int64_t{65535}}));
    const dim3 grid(static_cast<unsigned>(bx), static_cast<unsigned>(by));
    const dim3 block(static_cast<unsigned>(tx), static_cast<unsigned>(ty));
    if (vec) {
      RowKernel<S, N, kV><<<grid, block, 0, env.stream>>>(f, ra);
    } else {
      RowKernel<S, N, 1><<<grid, block, 0, env.stream>>>(f, ra);
    }
  } else {
    const int64_t blocks_needed = (plan.numel + kThreads - 1) / kThreads;
    const int blocks = static_cast<int>(std::min(blocks_needed, max_blocks));
    GeneralKernel<S, N><<<blocks, kThreads, 0, env.stream>>>(f, a);
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("CUDA kernel launch failed: ", cudaGetErrorString(e)));
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
