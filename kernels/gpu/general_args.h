// The general kernel's arguments (kernels/cuda/general_kernel.cuh): one definition for the
// ahead-of-time kernels, the generated expression kernels (embedded for NVRTC), and the host
// that fills them from a piece of an iteration space (SplitForIndexing).
#pragma once

#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/gpu/fast_divisor.h"
#include "kernels/max_rank.h"

namespace tc::cuda {

// A piece of an iteration space of fewer than 2^31 elements whose every operand's offsets
// from its base fit in 32 bits, so that all index math is 32-bit.
template <int kOps>
struct KernelArgs {
  int ndim;
  uint32_t numel;
  int32_t strides[kOps][kMaxRank];
  char* base[kOps];
  DType dtypes[kOps];
  // Per-dim indices from the element index by fast division (every dim but the last).
  FastDivisor div[kMaxRank];
  // Every input of the kernel's compute type and the output of its result type: loads and
  // stores without a conversion chosen per element.
  bool same_types;
};

// Threads a block, and elements per thread per step.
inline constexpr int kGeneralThreads = 256;
inline constexpr int kGeneralUnroll = 4;

#if !defined(__CUDACC_RTC__)
// The arguments for a piece of `ndim` dims of sizes `sizes` and `numel` elements, which
// SplitForIndexing made to fit 32-bit index math; operand k's byte stride along dim d is
// strides[k * stride_rows + d], its element (0, ..., 0) at base[k]. `same_types` false.
template <int kOps>
KernelArgs<kOps> MakeKernelArgs(int ndim, const int64_t* sizes, int64_t numel,
                                const int64_t* strides, int stride_rows, const DType* dtypes,
                                char* const* base) {
  KernelArgs<kOps> a{};
  a.ndim = ndim;
  a.numel = static_cast<uint32_t>(numel);
  for (int d = 0; d < ndim; ++d) {
    a.div[d] = MakeFastDivisor(static_cast<uint32_t>(sizes[d]));
    // A dim of one element may keep a stride past 32 bits; its index is always 0.
    for (int k = 0; k < kOps; ++k) {
      a.strides[k][d] =
          sizes[d] > 1 ? static_cast<int32_t>(strides[k * stride_rows + d]) : int32_t{0};
    }
  }
  for (int k = 0; k < kOps; ++k) {
    a.base[k] = base[k];
    a.dtypes[k] = dtypes[k];
  }
  a.same_types = false;
  return a;
}

// Blocks for `numel` elements at `unroll` a thread: enough for every SM to hold its fill of
// threads a few times over; the kernel strides over the rest.
inline unsigned GeneralBlocks(int64_t numel, int multiprocessors, int unroll = kGeneralUnroll) {
  const int64_t per_block = int64_t{kGeneralThreads} * unroll;
  const int64_t needed = (numel + per_block - 1) / per_block;
  const int64_t most = int64_t{multiprocessors > 0 ? multiprocessors : 1} * 16;
  return static_cast<unsigned>(needed < most ? needed : most);
}
#endif

}  // namespace tc::cuda
