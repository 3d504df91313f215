// What a CUDA launch needs besides the plan, and the one entry point into the CUDA kernels.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "kernels/engine.h"

namespace tc::cuda {

struct LaunchEnv {
  int multiprocessors;
  cudaStream_t stream;
  // Device int the functor sets on integer division by zero; zeroed by the caller.
  int* error;
  // Where to say which kernel family ran (the plan's, or kCastRows for a kRows plan whose
  // pointers are not aligned for its vectors); may be null.
  Kernel* ran = nullptr;
};

// Enqueues `op` on env.stream. base[0] is the output, base[1..] the inputs, each already
// advanced by op.plan.offsets. Errors of the launch itself come back; the kernels' own
// errors (division by zero) land in env.error.
absl::Status LaunchOp(const PreparedOp& op, char* const* base, const LaunchEnv& env);

}  // namespace tc::cuda
