// CUDA kernels of the arithmetic ops.
#include "kernels/cuda/launch.cuh"

namespace tc {
TC_ARITHMETIC_OPS(TC_CUDA_INSTANTIATE)
}  // namespace tc
