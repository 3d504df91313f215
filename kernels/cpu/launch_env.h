// What a CPU launch needs besides the plan, and the one entry point into the CPU kernels: the
// same shape as the CUDA backend's (kernels/cuda/launch_env.h).
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "util/thread_pool.h"
#include "kernels/engine.h"

namespace tc::cpu {

struct LaunchEnv {
  // Workers that share the loops with the calling thread.
  ThreadPool* pool;
  // Where to say which kernel family ran (kTiles, or kRows for the row loop that runs every
  // other plan); may be null.
  Kernel* ran = nullptr;
  // The output is one piece of a larger one that will not stay in cache (a block of an
  // expression's output): written with non-temporal stores whatever its own size.
  bool stream_output = false;
  // Which compiled copy of the loops runs (an Isa, kernels/cpu/isa.h); -1: the process's
  // (ProcessIsa). Tests compare the copies; a level that is not available runs the baseline.
  int isa = -1;
};

// Runs `op` and returns when the result is in place. base[0] is the output, base[1..] the
// inputs, each already advanced by op.plan.offsets (OperandBases). Integer division by zero
// is INVALID_ARGUMENT, with the output undefined.
absl::Status LaunchOp(const PreparedOp& op, char* const* base, const LaunchEnv& env);

// The backend's one way in: runs a prepared op or expression into `out` (the output's
// storage) over `inputs` (each input's storage, in request order), and returns when the
// result is in place. Integer division by zero is INVALID_ARGUMENT naming the op, with the
// output undefined.
absl::Status Run(const PreparedOp& op, std::byte* out, absl::Span<const std::byte* const> inputs,
                 const LaunchEnv& env);
absl::Status Run(const PreparedOp& op, std::byte* out, absl::Span<const TensorView> inputs,
                 const LaunchEnv& env);

}  // namespace tc::cpu
