// Randomized conformance of `add` against a naive reference, for any backend.
#pragma once

#include <cstdint>

#include "kernels/engine.h"

namespace tc::testing {

// Runs `cases` random broadcast adds (ranks 0-6, random layouts, odd sizes) on `backend` and
// checks each element against per-element index math in double. Reports through gtest.
void CheckRandomAdds(Backend& backend, uint64_t seed, int cases, int64_t max_numel);

}  // namespace tc::testing
