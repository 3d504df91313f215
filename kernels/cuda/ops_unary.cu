// CUDA kernels of the unary ops.
#include "kernels/cuda/launch.cuh"

namespace tc {
TC_UNARY_OPS(TC_CUDA_INSTANTIATE)
}  // namespace tc
