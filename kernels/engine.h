// The engine's entry points: check and plan a request once (PrepareOp), then run the plan on
// a backend.
#pragma once

#include <cstddef>
#include <memory>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/catalog.h"
#include "kernels/ops/attributes.h"
#include "kernels/planner.h"
#include "kernels/tensor_view.h"

namespace tc {

struct PreparedOp {
  const CatalogEntry* op = nullptr;
  Attrs attrs;
  Plan plan;
};

// The catalog entry of `name`, or INVALID_ARGUMENT listing the ops there are.
absl::StatusOr<const CatalogEntry*> LookupOp(absl::string_view name);

// Finds the op, checks arity, every input view (ValidateView), dtypes and attributes, and
// plans the iteration. Every failure is INVALID_ARGUMENT with a message for the client.
absl::StatusOr<PreparedOp> PrepareOp(absl::string_view op, absl::Span<const TensorView> inputs,
                                     const AttrMap& attrs);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual absl::string_view name() const = 0;
  // Runs a prepared op. `inputs` are the views it was prepared from; `out` holds
  // op.plan.out_bytes() bytes, C-contiguous. Blocks until the result is in `out`.
  virtual absl::Status Run(const PreparedOp& op, absl::Span<const TensorView> inputs,
                           std::byte* out) = 0;
};

}  // namespace tc
