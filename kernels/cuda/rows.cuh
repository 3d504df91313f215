// How the two row kernels (row_kernel.cuh, cast_row_kernel.cuh) address their rows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/gpu/fast_divisor.h"
#include "kernels/dtype.h"

namespace tc::cuda {

// Rows of the row kernels: with r = r1 + inner_rows * r2, operand k's row r starts at
// base[k] + r1 * row_stride[k] + r2 * outer_stride[k] (two dims of rows cover per-channel
// NCHW: rows over channels within images); along the row, element e sits at e * step[k]
// bytes from the row start (0: one element repeated). Rows over more dims (broadcasts whose
// dims alternate between the operands, where nothing coalesces) take their index along each
// from r by division (DeepRowArgs).
enum class Access : uint8_t {
  kBroadcast,  // one element for the whole row
  kVector,     // dense and aligned: whole chunks in 16-byte accesses
  kStrided,    // any step (dense but misaligned, strided, reversed): element by element
};

// Dims a row index may span: a plan's dims but the one along the rows.
inline constexpr int kMaxRowDims = 7;

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

// Rows over more than two dims (RowKernel's kDeepRows): row r's index along each of the
// plan's `dims` dims past dim 0, fastest first, from 32-bit division by `size` (fewer than
// 2^31 rows), times `stride` bytes per operand. A type of its own: these fields in every row
// kernel's arguments took a float64 gelu from 40 registers to 46.
template <int kOps>
struct DeepRowArgs : RowArgs<kOps> {
  int dims;
  FastDivisor size[kMaxRowDims];
  int64_t stride[kOps][kMaxRowDims];
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

// Over more dims: a loop of kMaxRowDims fixed steps (the arguments indexed by constants) that
// stops at `dims`, the last dim's index the quotient left (H200, rank 5-8 alternating
// broadcasts: 66-82% of copy so, 60-68% dividing by all seven).
template <int kOps>
__device__ __forceinline__ void RowStarts(const DeepRowArgs<kOps>& a, int64_t r,
                                          char* (&row)[kOps]) {
#pragma unroll
  for (int k = 0; k < kOps; ++k) row[k] = a.base[k];
  auto rest = static_cast<uint32_t>(r);
#pragma unroll
  for (int d = 0; d < kMaxRowDims; ++d) {
    uint32_t i = rest;
    if (d + 1 < a.dims) {
      const uint32_t q = FastDiv(rest, a.size[d]);
      i = rest - q * a.size[d].d;
      rest = q;
    }
#pragma unroll
    for (int k = 0; k < kOps; ++k) row[k] += static_cast<int64_t>(i) * a.stride[k][d];
    if (d + 1 == a.dims) break;
  }
}

// A row of the peeled row kernels (PeeledRowKernel, PeeledPairRowKernel), taken from its
// output's first 16-byte boundary on: `head` elements before it (the whole row where shorter),
// then `runs` whole runs of `run` elements, `body` in all, then the tail.
struct PeeledRow {
  int64_t head;
  int64_t runs;
  int64_t body;
  // Thread t's element outside the runs (for t < cols - body), counted from the boundary:
  // the head's before it, the tail's after the body.
  __device__ __forceinline__ int64_t Extra(int64_t t) const {
    return t < head ? t - head : body + (t - head);
  }
};

template <typename Out>
__device__ __forceinline__ PeeledRow PeelRow(const char* out_row, int64_t cols, int run) {
  const auto misaligned = static_cast<int>(reinterpret_cast<uintptr_t>(out_row) % 16);
  const int64_t to_boundary = ((16 - misaligned) % 16) / static_cast<int>(sizeof(Out));
  PeeledRow p;
  p.head = to_boundary < cols ? to_boundary : cols;
  p.runs = (cols - p.head) / run;
  p.body = p.runs * run;
  return p;
}

}  // namespace tc::cuda
