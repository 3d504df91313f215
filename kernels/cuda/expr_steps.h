// An expression run as its ops, one launch each (kernels/expr/steps.h), on a CUDA stream:
// what answers a new expression's requests while its fused kernel compiles (about 100-400 ms
// of NVRTC), in well under a millisecond of launches. Each value between two ops is a dense
// temporary over the iteration space, in device memory from the stream's current pool taken
// for the run and given back after it; a space whose temporaries would pass a bound is cut
// into slabs along its outermost dim, each slab run through every step. The result is the
// fused kernel's, bit for bit: both compute what the ops compute alone.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cuda/launch_env.h"
#include "kernels/engine.h"
#include "kernels/expr/program.h"
#include "kernels/expr/steps.h"

namespace tc::cuda {

// Temporaries one run takes at most by default.
inline constexpr int64_t kStepScratchBytes = int64_t{64} << 20;

// A program planned as steps over its operands' addresses.
struct StepRun {
  expr::Steps steps;
  // Operand k's element (0, ..., 0), operand 0 the output.
  std::vector<char*> base;
  // Byte stride of each operand along the space's outermost dim (the one slabs cut).
  std::vector<int64_t> outer_stride;
  int64_t slab = 0;        // elements of the outermost dim per slab
  int64_t outer = 0;       // the outermost dim's size
  int64_t slab_numel = 0;  // elements of a whole slab
  // The plan of each step for a whole slab, and for the last, shorter one where there is one.
  std::vector<PreparedOp> whole;
  std::vector<PreparedOp> last;
  // Scratch layout: the constants, then each buffer (256-byte aligned).
  int64_t scratch_bytes = 0;
  std::vector<int64_t> buffer_offset;
};

// Plans `program` over `base` (operand k's element (0, ..., 0)) as steps whose temporaries
// take at most `max_scratch` bytes at once; null where even a slab of one index along the
// outermost dim would take more (the fused kernel is the way then), or the space is empty.
std::shared_ptr<const StepRun> PrepareSteps(const expr::Program& program, char* const* base,
                                            int64_t max_scratch = kStepScratchBytes);

// Enqueues the run on env.stream: temporaries allocated from the stream's device's current
// memory pool (RESOURCE_EXHAUSTED where it has no room), every step of every slab, the
// temporaries freed in stream order. Integer division by zero sets env.error, as the ops do.
absl::Status LaunchSteps(const StepRun& run, const LaunchEnv& env);

}  // namespace tc::cuda
