// A blocking way to run a prepared op on host buffers, which the conformance checks and the
// benchmarks drive every backend through (tests/support/cpu_backend.h, device_backend.h).
// The server does not use it: it calls the devices directly.
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/engine.h"

namespace tc {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual absl::string_view name() const = 0;
  // The rule its plans are made with (PrepareOp's `tiles`).
  virtual TileRule tile_rule() const = 0;
  // Runs a prepared op. `inputs` are the views it was prepared from; `out` holds
  // op.plan.out_storage_bytes bytes laid out as op.plan.out_strides. Blocks until the result
  // is in `out`. Integer division by zero is INVALID_ARGUMENT, with `out` undefined.
  virtual absl::Status Run(const PreparedOp& op, absl::Span<const TensorView> inputs,
                           std::byte* out) = 0;
};

}  // namespace tc
