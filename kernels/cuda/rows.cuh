// How the two row kernels (row_kernel.cuh, cast_row_kernel.cuh) address their rows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/dtype.h"

namespace tc::cuda {

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

}  // namespace tc::cuda
