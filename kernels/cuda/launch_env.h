// What a CUDA launch needs besides the plan, and the one entry point into the CUDA kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
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

// A run made ready for its operands: what to enqueue on a stream (with the env of that
// stream, whose error flag the kernel sets), and the name a division-by-zero error gives.
// Keep it until the enqueued work completes: it holds the kernel it launches.
struct ReadyLaunch {
  std::function<absl::Status(const LaunchEnv&)> enqueue;
  std::string label;
  std::shared_ptr<const void> holds;
};
using OnReady = std::function<void(absl::StatusOr<ReadyLaunch>)>;

// The backend's one way in, for a prepared op or expression: makes it ready to run into `out`
// (the output's storage) over `inputs` (each input's storage, in request order), all device
// memory, on a device of `multiprocessors` and compute capability `arch` (90 for 9.0), and
// calls `ready` with it: at once on this thread when it can run at once (an op, an expression
// whose kernel is compiled); from the kernel cache's thread once a new expression's kernel is
// compiled (kernels/cuda/expr_kernels.h). `op`, `out` and the inputs outlive the launch.
void Prepare(const PreparedOp& op, std::byte* out, absl::Span<const std::byte* const> inputs,
             int multiprocessors, int arch, OnReady ready);

}  // namespace tc::cuda
