// What a fused expression's rows and tiles kernels take after their evaluator (its literals
// and functors): where the operands are and how the kernel walks them. Plain data, one
// definition for the host that fills it and for NVRTC (kernels/rtc/prelude.cuh).
#pragma once

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

// Tiles (two or three dims): sizes and byte strides per operand (dim 0 fastest), the
// operands' elements (0, ..., 0) at base.
template <int kOps, int kDims>
struct StridedArgs {
  long long size[kDims];
  long long stride[kOps][kDims];
  char* base[kOps];
};

}  // namespace tc::rtc
