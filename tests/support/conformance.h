// Randomized conformance of every op against the independent reference (reference.h), for any
// backend: every op, dtype combination it accepts, broadcast pattern, layout (permuted, zero
// and negative strides, offsets), odd sizes, NaN and infinities.
#pragma once

#include <cstdint>

#include "kernels/engine.h"
#include "tests/support/backend.h"

namespace tc::testing {

struct ConformanceOptions {
  int cases_per_op = 64;
  int64_t max_numel = 16384;
  int max_rank = 6;
  // Instead of random dtypes: every combination of input dtypes for unary and binary ops (one
  // case each, for the combinations whose result type the op accepts).
  bool every_dtype_combination = false;
};

// Reports mismatches through gtest, with the seed and the case to replay them.
void CheckConformance(Backend& backend, uint64_t seed, const ConformanceOptions& options);

}  // namespace tc::testing
