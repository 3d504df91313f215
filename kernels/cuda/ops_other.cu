// CUDA kernels of the other ops.
#include "kernels/cuda/launch.cuh"

namespace tc {
TC_OTHER_OPS(TC_CUDA_INSTANTIATE)
}  // namespace tc
