// One layout per (path, kernel family) the planner can choose, with the choice it must make,
// for the planner's tests (the one place that pins path and kernel choice) and for each
// backend's test that the family it ran is the family the plan named.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/engine.h"
#include "kernels/planner.h"
#include "tests/support/random_tensors.h"

namespace tc::testing {

struct KernelCase {
  std::string name;
  std::string op;
  std::vector<OwnedTensor> inputs;
  DimVector out_strides;  // empty: contiguous
  // Some operand moves faster along another dim than the output's fastest (a transposed
  // input or output): the CPU's tile rule tiles every such case.
  bool permuted;
  Kernel kernel;

  std::vector<TensorView> Views() const;
  // Planned with `tiles` (the CUDA rule by default; `kernel` is what that rule chooses).
  absl::StatusOr<PreparedOp> Prepare(TileRule tiles = TileRule::kDense) const;
};

// Random values (exactly representable, away from overflow) in every case.
std::vector<KernelCase> KernelCases(std::mt19937_64& rng);

// The case's output computed independently (double or 64-bit integer arithmetic per element),
// laid out as `op.plan` says; compared byte for byte with `got`. Empty when they agree, else
// the first element that differs.
std::string CheckKernelCase(const KernelCase& c, const PreparedOp& op,
                            const std::vector<std::byte>& got);

}  // namespace tc::testing
