// What a fused expression's kernel takes first, besides its literals and functors: where its
// operands are and how it walks them. Plain data, one definition for the host that fills it
// and for NVRTC, which compiles it into every expression kernel (kernels/rtc/prelude.cuh).
#pragma once

#include "kernels/gpu/fast_divisor.h"

namespace tc::rtc {

// Rows: at most two dims, `cols` elements along a row (dim 0), `rows` rows (dim 1). Operand
// k's row r starts at base[k] + r * row_stride[k]; its element c at c * step[k] bytes from
// there (0: one element for the whole row). Operand 0 is the output.
template <int kOps>
struct RowArgs {
  long long rows;
  long long cols;
  char* base[kOps];
  long long row_stride[kOps];
  long long step[kOps];
};

// Any rank: element i's index along dim d comes from i by division by the sizes of the dims
// before it (dim 0 fastest); `div` holds those sizes as divisors for 32-bit index math.
template <int kOps, int kDims>
struct StridedArgs {
  long long numel;
  long long size[kDims];
  long long stride[kOps][kDims];
  char* base[kOps];
  cuda::FastDivisor div[kDims];
};

}  // namespace tc::rtc
