// The CPU's evaluator of expressions (kernels/expr/program.h), the way numexpr evaluates
// strings: the iteration space is cut into blocks of a few thousand elements, and each block
// goes through the tree node by node, every node running its op's own CPU loop over the block
// (the same functors, vector rows and conversions as a single op), its result in a small
// buffer that its one consumer reads while it is still in cache. No full-size temporary
// exists; threads take blocks.
#pragma once

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/cpu/launch_env.h"
#include "kernels/expr/program.h"

namespace tc::cpu {

// Elements per block: a buffer of float64 for each value live at once stays in L2. On the
// 2-core machine (AMD EPYC, 1 MiB of L2 per core) 16384 ran `sigmoid(a * b + c) * d` over
// 2^24 float32 about 4% faster than 8192 and 6% faster than 4096 (best of 40 runs each).
inline constexpr int64_t kExprBlock = 16384;

// Evaluates `program` over `inputs` (each input's storage) into `out` (laid
// out as the program's output). Integer division by zero is INVALID_ARGUMENT naming the op,
// with the output undefined.
absl::Status RunExpression(const expr::Program& program, std::byte* out,
                           absl::Span<const std::byte* const> inputs, const LaunchEnv& env);

}  // namespace tc::cpu
