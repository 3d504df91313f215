// CUDA kernels of the comparison ops.
#include "kernels/cuda/launch.cuh"

namespace tc {
TC_COMPARISON_OPS(TC_CUDA_INSTANTIATE)
}  // namespace tc
