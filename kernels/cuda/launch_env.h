// What a CUDA launch needs besides the plan.
#pragma once

#include <cuda_runtime.h>

namespace tc::cuda {

struct LaunchEnv {
  int multiprocessors;
  cudaStream_t stream;
  // Device int the functor sets on integer division by zero; zeroed by the caller.
  int* error;
};

}  // namespace tc::cuda
